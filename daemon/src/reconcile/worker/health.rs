//! What one worker's last reconcile pass found, and the per-cluster `WorkerReachable-<cluster>` condition the
//! management side can put in the TierPolicy status; no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::reconcile::status::build_condition_reason;

/// Prefix of the per-cluster condition type: `WorkerReachable-<cluster>` (one condition per worker, since a
/// condition list holds each type once).
pub const WORKER_REACHABLE: &str = "WorkerReachable";

/// The outcome of one worker's last reconcile pass.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerState {
    /// No pass has run yet.
    Pending,
    /// This replica does not hold the Lease: nothing was read or written.
    NotLeading,
    /// The worker's watches fail (API server down, credentials refused): nothing was written or pruned.
    Unreachable {
        /// The failing watches, e.g. `Namespace`, `ClusterQueue`.
        failing_watches: Vec<&'static str>,
    },
    /// The worker answers but its caches have not listed everything yet: nothing was decided.
    NotSynced,
    /// No engine runs for the worker: its kubeconfig Secret is missing, unreadable or not a kubeconfig (set by
    /// the fleet supervisor, never by a pass).
    NoCredentials {
        /// Why, naming the Secret and the fix.
        message: String,
    },
    /// The plan refused this worker's inputs: its last applied state stays.
    Invalid {
        /// Why, naming the field and the fix.
        message: String,
    },
    /// A write failed; the pass is retried with backoff.
    Failed {
        /// Fixed reason (the error's `reason()`).
        reason: &'static str,
        /// The error.
        message: String,
        /// Whether the worker's API server answered (an HTTP status) rather than the connection failing.
        answered: bool,
    },
    /// The worker holds what the plan wants.
    Converged {
        /// Objects applied in this pass (`Kind name`, `Namespace name`); empty in a steady state.
        applied: Vec<String>,
        /// Objects deleted and namespaces whose tier label was released in this pass.
        retired: Vec<String>,
        /// LocalQueues still draining before they can be deleted.
        draining: usize,
        /// Flavors a ClusterQueue keeps until the workloads admitted on them finish (reconcile.md, "Flavor
        /// migrations").
        draining_flavors: usize,
    },
}

/// One worker's health, for status and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerHealth {
    /// The worker's name (its MultiKueueCluster name).
    pub cluster: String,
    /// What the last pass found.
    pub state: WorkerState,
}

impl WorkerHealth {
    /// Whether the worker's API server answered in the last pass (`None`: not known yet).
    pub fn reachable(&self) -> Option<bool> {
        match &self.state {
            WorkerState::Pending | WorkerState::NotLeading => None,
            WorkerState::Unreachable { .. } | WorkerState::NoCredentials { .. } => Some(false),
            WorkerState::Failed { answered, .. } => Some(*answered),
            WorkerState::NotSynced | WorkerState::Invalid { .. } | WorkerState::Converged { .. } => Some(true),
        }
    }

    /// Fixed reason for metrics and the condition.
    pub fn reason(&self) -> &'static str {
        match &self.state {
            WorkerState::Pending => "pending",
            WorkerState::NotLeading => "not_leading",
            WorkerState::Unreachable { .. } => "unreachable",
            WorkerState::NotSynced => "not_synced",
            WorkerState::NoCredentials { .. } => "kubeconfig_secret",
            WorkerState::Invalid { .. } => "invalid_plan",
            WorkerState::Failed { reason, .. } => reason,
            WorkerState::Converged { draining, draining_flavors, .. } if *draining + *draining_flavors > 0 => {
                "draining"
            }
            WorkerState::Converged { .. } => "converged",
        }
    }

    /// A sentence saying what the last pass found.
    pub fn message(&self) -> String {
        let cluster = &self.cluster;
        match &self.state {
            WorkerState::Pending => format!("worker {cluster} has not been reconciled yet"),
            WorkerState::NotLeading => format!("worker {cluster} is reconciled only by the replica holding the Lease"),
            WorkerState::Unreachable { failing_watches } => format!(
                "failed to reach worker {cluster}: its watches fail ({}); nothing is applied or pruned there until \
                 it answers (check its kubeconfig Secret and network)",
                failing_watches.join(", ")
            ),
            WorkerState::NotSynced => format!("worker {cluster} answers; waiting for its caches to list everything"),
            WorkerState::Invalid { message } => format!("worker {cluster} keeps its last applied state: {message}"),
            WorkerState::NoCredentials { message } => message.clone(),
            WorkerState::Failed { message, .. } => format!("worker {cluster}: {message}"),
            WorkerState::Converged { draining, draining_flavors, .. } if *draining + *draining_flavors > 0 => {
                format!(
                    "worker {cluster} holds the tiers' objects; {draining} LocalQueue(s) and {draining_flavors} \
                     flavor(s) still draining"
                )
            }
            WorkerState::Converged { .. } => format!("worker {cluster} holds the tiers' objects"),
        }
    }
}

/// The `WorkerReachable-<cluster>` condition for `health`: `True` when the worker answered, `False` when it did
/// not, `Unknown` before the first pass; the reason is the pass's outcome in CamelCase. The transition time is
/// kept from `previous` while the status does not change.
pub fn build_worker_condition(
    health: &WorkerHealth,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let type_ = format!("{WORKER_REACHABLE}-{}", health.cluster);
    let status = match health.reachable() {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    };
    let last_transition_time = match previous.iter().find(|condition| condition.type_ == type_) {
        Some(earlier) if earlier.status == status => earlier.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_,
        status: status.to_owned(),
        reason: build_condition_reason(health.reason()),
        message: health.message(),
        observed_generation: generation,
        last_transition_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn health(state: WorkerState) -> WorkerHealth {
        WorkerHealth { cluster: "gpu-east".to_owned(), state }
    }

    #[test]
    fn an_unreachable_worker_gets_a_false_condition_of_its_own_naming_the_failing_watches() {
        let down = health(WorkerState::Unreachable { failing_watches: vec!["Namespace", "ClusterQueue"] });
        let condition = build_worker_condition(&down, Some(3), &[], &at(100));
        assert_eq!(condition.type_, "WorkerReachable-gpu-east");
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "Unreachable"));
        assert!(condition.message.contains("Namespace, ClusterQueue"), "{}", condition.message);
        assert_eq!(condition.observed_generation, Some(3));
    }

    #[test]
    fn a_converged_worker_is_true_and_keeps_its_transition_time_while_it_stays_reachable() {
        let converged =
            health(WorkerState::Converged { applied: vec![], retired: vec![], draining: 0, draining_flavors: 0 });
        let first = build_worker_condition(&converged, Some(1), &[], &at(100));
        assert_eq!((first.status.as_str(), first.reason.as_str()), ("True", "Converged"));
        let draining =
            health(WorkerState::Converged { applied: vec![], retired: vec![], draining: 2, draining_flavors: 0 });
        let second = build_worker_condition(&draining, Some(1), std::slice::from_ref(&first), &at(200));
        assert_eq!((second.reason.as_str(), second.last_transition_time.clone()), ("Draining", at(100)));
        let flavors =
            health(WorkerState::Converged { applied: vec![], retired: vec![], draining: 0, draining_flavors: 1 });
        let third = build_worker_condition(&flavors, Some(1), std::slice::from_ref(&second), &at(250));
        assert_eq!(third.reason, "Draining");
        assert!(third.message.contains("0 LocalQueue(s) and 1 flavor(s) still draining"), "{}", third.message);
        let down = health(WorkerState::Unreachable { failing_watches: vec!["Node"] });
        assert_eq!(build_worker_condition(&down, Some(1), &[second], &at(300)).last_transition_time, at(300));
    }

    #[test]
    fn a_failed_write_is_reachable_only_if_the_server_answered() {
        let refused = health(WorkerState::Failed { reason: "apply_object", message: "x".to_owned(), answered: true });
        let cut = health(WorkerState::Failed { reason: "apply_object", message: "x".to_owned(), answered: false });
        assert_eq!(build_worker_condition(&refused, None, &[], &at(1)).status, "True");
        assert_eq!(build_worker_condition(&cut, None, &[], &at(1)).status, "False");
        assert_eq!(build_worker_condition(&health(WorkerState::Pending), None, &[], &at(1)).status, "Unknown");
    }
}
