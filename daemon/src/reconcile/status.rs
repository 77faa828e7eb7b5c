//! The TierPolicy status a reconcile outcome implies: Ready/Degraded conditions with reasons, counts, the last
//! error and queue migrations; built so an unchanged outcome yields an identical status (no write); no I/O.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::blockers::Blocker;
use crate::plan::gate::GateMode;
use crate::policy::{FlavorMigration, QueueMigration, TierPolicyStatus, TierQuotaWindowStatus};

/// Condition type: the policy is applied as written.
pub const READY: &str = "Ready";
/// Condition type: something keeps the cluster from matching the policy.
pub const DEGRADED: &str = "Degraded";
/// Condition type: applying this generation shrank the effective quota of the tiers it names.
pub const QUOTA_REDUCED: &str = "QuotaReduced";
/// Condition type: a tiergate instance serves this policy (its `--policy-name`). Only the serving instance writes
/// a policy's status, so a policy without it is served by nobody (`kubectl tiergate status` says so).
pub const SERVED: &str = "Served";
/// Condition type: present while something keeps tiergate from doing its job (the active blockers, each with its
/// fix); absent otherwise.
pub const BLOCKED: &str = "Blocked";

/// `Degraded` and `InServerGate` reason: the API server serves no ValidatingAdmissionPolicy.
const GATE_NOT_SERVED: &str = "InServerGateNotServed";
/// What is lost then, and the fix.
const GATE_NOT_SERVED_MESSAGE: &str = "the API server does not serve ValidatingAdmissionPolicy \
    (admissionregistration.k8s.io/v1, Kubernetes 1.30+), so the in-server gate is not applied: while the webhook does \
    not answer (a crash, a hang, an upgrade), GPU workloads are stored without their tier's queue, class and \
    priority; run Kubernetes 1.33 or newer, or register the webhook with failurePolicy Fail";

/// Condition type: whether the in-server gate (admission policies run by the API server itself) is installed,
/// and in which mode (`ValidateOnly`, or `ValidateAndMutate` where MutatingAdmissionPolicies are applied).
pub const IN_SERVER_GATE: &str = "InServerGate";

/// What the last reconcile achieved.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusInput {
    /// Every desired object is applied and orphans pruned.
    Applied {
        /// Tiers in the policy.
        tier_count: i32,
        /// Desired (= applied) objects per kind.
        object_counts: BTreeMap<String, i32>,
        /// LocalQueues still draining after a tier change.
        migrations: Vec<QueueMigration>,
        /// Flavors still draining from a ClusterQueue after a policy edit.
        flavor_migrations: Vec<FlavorMigration>,
        /// Tiers whose ClusterQueue offered more than the policy now gives it, before this apply
        /// ([`crate::plan::quota::shrunk_tiers`]).
        shrunk_tiers: Vec<String>,
        /// Whether the API server serves MutatingAdmissionPolicy (`None`: unknown).
        mutating_policies_served: Option<bool>,
        /// Whether it serves ValidatingAdmissionPolicy (`None`: unknown); `Some(false)` leaves the policy without
        /// its gate, and says so in `Degraded` and `InServerGate`.
        validating_policies_served: Option<bool>,
        /// Per tier with quota windows, the window in force and the next change (`status.quotaWindows`).
        quota_windows: Vec<TierQuotaWindowStatus>,
    },
    /// The policy is invalid; the last applied state stays in the cluster.
    Invalid {
        /// Every problem, one per line.
        message: String,
    },
    /// The reconcile failed; it is retried with backoff.
    Failed {
        /// Fixed reason (an error's `reason()`).
        reason: &'static str,
        /// The error text.
        message: String,
    },
}

/// The status for `input`, carrying over `previous` counts on failure and condition times when unchanged.
pub fn build_status(
    previous: Option<&TierPolicyStatus>,
    generation: Option<i64>,
    input: &StatusInput,
    now: &Time,
) -> TierPolicyStatus {
    // `usage` is the usage checkpoint's (its own field manager): never sent here, so neither write removes the other's.
    let kept = TierPolicyStatus { usage: None, ..previous.cloned().unwrap_or_default() };
    let (ready, degraded, mut status) = match input {
        StatusInput::Applied {
            tier_count,
            object_counts,
            migrations,
            flavor_migrations,
            validating_policies_served,
            quota_windows,
            ..
        } => {
            let ready = ("True", "Applied".to_owned(), format!("{tier_count} tiers applied"));
            let degraded = match (migrations.is_empty(), flavor_migrations.is_empty()) {
                _ if *validating_policies_served == Some(false) => {
                    ("True", GATE_NOT_SERVED.to_owned(), GATE_NOT_SERVED_MESSAGE.to_owned())
                }
                (true, true) => ("False", "AsExpected".to_owned(), "the cluster matches the policy".to_owned()),
                (false, _) => (
                    "False",
                    "QueueMigrationInProgress".to_owned(),
                    format!("{} LocalQueues drain after a tier change", migrations.len()),
                ),
                (true, false) => (
                    "False",
                    "FlavorMigrationInProgress".to_owned(),
                    format!(
                        "{} flavors drain from ClusterQueues after a policy edit, frozen at what their running \
                         workloads hold (status.flavorMigrations)",
                        flavor_migrations.len()
                    ),
                ),
            };
            let status = TierPolicyStatus {
                tier_count: Some(*tier_count),
                object_counts: object_counts.clone(),
                queue_migrations: migrations.clone(),
                flavor_migrations: flavor_migrations.clone(),
                quota_windows: quota_windows.clone(),
                last_error: None,
                ..TierPolicyStatus::default()
            };
            (ready, degraded, status)
        }
        StatusInput::Invalid { message } => {
            let ready = ("False", "InvalidPolicy".to_owned(), format!("policy not applied: {message}"));
            let degraded = ("True", "InvalidPolicy".to_owned(), "the last valid policy stays applied".to_owned());
            (ready, degraded, TierPolicyStatus { last_error: Some(message.clone()), ..kept })
        }
        StatusInput::Failed { reason, message } => {
            let reason = build_condition_reason(reason);
            let ready = ("False", reason.clone(), message.clone());
            let degraded = ("True", reason, "retrying with backoff".to_owned());
            (ready, degraded, TierPolicyStatus { last_error: Some(message.clone()), ..kept })
        }
    };
    status.observed_generation = generation;
    let previous_conditions = previous.map(|status| status.conditions.as_slice()).unwrap_or_default();
    status.conditions = vec![
        build_condition(READY, ready, generation, previous_conditions, now),
        build_condition(DEGRADED, degraded, generation, previous_conditions, now),
        build_condition(
            SERVED,
            (
                "True",
                "PolicyName".to_owned(),
                "a tiergate instance serves this TierPolicy (its --policy-name)".to_owned(),
            ),
            generation,
            previous_conditions,
            now,
        ),
    ];
    let earlier_quota = previous_conditions.iter().find(|condition| condition.type_ == QUOTA_REDUCED);
    match input {
        StatusInput::Applied {
            shrunk_tiers,
            object_counts,
            mutating_policies_served,
            validating_policies_served,
            ..
        } => {
            let quota = build_quota_reduced(shrunk_tiers, earlier_quota, generation);
            status.conditions.push(build_condition(QUOTA_REDUCED, quota, generation, previous_conditions, now));
            let gate = if *validating_policies_served == Some(false) {
                ("False", GATE_NOT_SERVED.to_owned(), GATE_NOT_SERVED_MESSAGE.to_owned())
            } else {
                build_in_server_gate(object_counts, *mutating_policies_served)
            };
            status.conditions.push(build_condition(IN_SERVER_GATE, gate, generation, previous_conditions, now));
        }
        _ => {
            status.conditions.extend(earlier_quota.cloned());
            let earlier_gate = previous_conditions.iter().find(|condition| condition.type_ == IN_SERVER_GATE);
            status.conditions.extend(earlier_gate.cloned());
        }
    }
    status
}

/// Sets the `Blocked` condition of `status` from the active blockers (True, the first one's reason, every one's
/// description), or removes it when none is active, so an unblocked steady state writes nothing.
pub fn merge_blocked_condition(
    status: &mut TierPolicyStatus,
    blockers: &[Blocker],
    previous: &[Condition],
    generation: Option<i64>,
    now: &Time,
) {
    status.conditions.retain(|condition| condition.type_ != BLOCKED);
    let Some(first) = blockers.first() else { return };
    let message = blockers.iter().map(Blocker::describe).collect::<Vec<_>>().join("; ");
    status.conditions.push(build_condition(
        BLOCKED,
        ("True", first.reason.condition_reason(), message),
        generation,
        previous,
        now,
    ));
}

/// `InServerGate`: True when the applied objects include the gate's ValidatingAdmissionPolicies and their
/// bindings, with the mode as the reason: `ValidateAndMutate` when MutatingAdmissionPolicies and bindings were
/// applied too, else `ValidateOnly` (the message says why: the API server does not serve them, or discovery failed).
fn build_in_server_gate(
    object_counts: &BTreeMap<String, i32>,
    mutating_policies_served: Option<bool>,
) -> (&'static str, String, String) {
    let count = |kind: &str| object_counts.get(kind).copied().unwrap_or(0);
    let (policies, bindings) = (count("ValidatingAdmissionPolicy"), count("ValidatingAdmissionPolicyBinding"));
    let (mutating, mutating_bindings) = (count("MutatingAdmissionPolicy"), count("MutatingAdmissionPolicyBinding"));
    if policies == 0 || bindings == 0 {
        return (
            "False",
            "NotInstalled".to_owned(),
            "the policy generated no admission policies (no tiers)".to_owned(),
        );
    }
    if mutating > 0 && mutating_bindings == bindings {
        let message = format!(
            "the validating and mutating admission policies, bound to {bindings} tiers with their TierGateParameters \
             (tiergate-gate-<tier>), hold the tier boundary inside the API server: when the webhook does not answer, \
             a GPU workload gets its tier's queue, class and priority ceiling there, and one still not confined to \
             its tier is refused, never stored unconstrained"
        );
        return ("True", GateMode::ValidateAndMutate.reason().to_owned(), message);
    }
    let message = format!(
        "the validating admission policy, bound to {bindings} tiers with their TierGateParameters \
         (tiergate-gate-<tier>), holds the tier boundary inside the API server: a GPU workload the webhook does not \
         answer for is refused, never stored unconstrained; {}",
        match mutating_policies_served {
            Some(true) =>
                "the mutating half is off (the default; `tiergate run --mutating-gate` turns it on), so the webhook \
                 alone edits workloads",
            Some(false) =>
                "the API server does not serve MutatingAdmissionPolicy (before Kubernetes 1.36), so the \
                            webhook alone edits workloads",
            None =>
                "whether the API server serves MutatingAdmissionPolicy is unknown (discovery failed), so the \
                     webhook alone edits workloads",
        }
    );
    ("True", GateMode::ValidateOnly.reason().to_owned(), message)
}

/// `QuotaReduced`: True naming the tiers whose quota this generation shrank. The second reconcile sees the
/// shrunk queues as live, so the condition stays True until the policy's generation changes.
fn build_quota_reduced(
    shrunk_tiers: &[String],
    earlier: Option<&Condition>,
    generation: Option<i64>,
) -> (&'static str, String, String) {
    if !shrunk_tiers.is_empty() {
        let message = format!(
            "the ClusterQueues of tiers {} now offer less nominal quota than before: a tier's quota is a cap its              flavors share (fallback classes and placement rules no longer get the full quota each); see              docs/operations.md, upgrade notes",
            shrunk_tiers.join(", ")
        );
        return ("True", "EffectiveQuotaShrank".to_owned(), message);
    }
    match earlier {
        Some(earlier) if earlier.status == "True" && earlier.observed_generation == generation => {
            ("True", earlier.reason.clone(), earlier.message.clone())
        }
        _ => ("False", "AsExpected".to_owned(), "no tier's quota shrank when this generation was applied".to_owned()),
    }
}

fn build_condition(
    type_: &str,
    (status, reason, message): (&str, String, String),
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let earlier = previous.iter().find(|condition| condition.type_ == type_);
    let last_transition_time = match earlier {
        Some(earlier) if earlier.status == status => earlier.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason,
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// `apply_object` -> `ApplyObject`: fixed snake_case reasons as Kubernetes condition reasons.
pub fn build_condition_reason(reason: &str) -> String {
    tiergate_core::syntax::condition_reason(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn applied() -> StatusInput {
        StatusInput::Applied {
            tier_count: 3,
            object_counts: BTreeMap::from([("LocalQueue".to_owned(), 2)]),
            migrations: vec![],
            flavor_migrations: Vec::new(),
            shrunk_tiers: vec![],
            mutating_policies_served: None,
            validating_policies_served: None,
            quota_windows: Vec::new(),
        }
    }

    fn shrinking(tiers: &[&str]) -> StatusInput {
        StatusInput::Applied {
            tier_count: 3,
            object_counts: BTreeMap::new(),
            migrations: vec![],
            flavor_migrations: Vec::new(),
            shrunk_tiers: tiers.iter().map(|tier| (*tier).to_owned()).collect(),
            mutating_policies_served: None,
            validating_policies_served: None,
            quota_windows: Vec::new(),
        }
    }

    #[test]
    fn the_quota_reduced_condition_names_the_shrunk_tiers_until_the_policy_changes() {
        let first = build_status(None, Some(4), &shrinking(&["silver", "bronze"]), &at(100));
        let quota = condition(&first, QUOTA_REDUCED);
        assert_eq!((quota.status.as_str(), quota.reason.as_str()), ("True", "EffectiveQuotaShrank"));
        assert!(quota.message.contains("tiers silver, bronze"), "{}", quota.message);
        // The next reconcile sees the shrunk queues live: nothing shrinks any more, the condition stays.
        let second = build_status(Some(&first), Some(4), &shrinking(&[]), &at(200));
        assert_eq!(condition(&second, QUOTA_REDUCED), quota);
        let failed = StatusInput::Failed { reason: "apply_object", message: "failed to apply".to_owned() };
        let third = build_status(Some(&second), Some(4), &failed, &at(250));
        assert_eq!(condition(&third, QUOTA_REDUCED), quota);
        let edited = build_status(Some(&third), Some(5), &shrinking(&[]), &at(300));
        assert_eq!(condition(&edited, QUOTA_REDUCED).status, "False");
        assert_eq!(condition(&edited, QUOTA_REDUCED).last_transition_time, at(300));
    }

    #[test]
    fn draining_flavors_are_listed_and_degrade_the_policy_until_they_are_gone() {
        let drain = FlavorMigration {
            cluster_queue: "tiergate-gold".to_owned(),
            flavor: "h100".to_owned(),
            held: BTreeMap::from([("nvidia.com/gpu".to_owned(), "3".to_owned())]),
        };
        let StatusInput::Applied { tier_count, object_counts, .. } = applied() else { unreachable!() };
        let draining = StatusInput::Applied {
            tier_count,
            object_counts,
            migrations: Vec::new(),
            flavor_migrations: vec![drain.clone()],
            shrunk_tiers: Vec::new(),
            mutating_policies_served: None,
            validating_policies_served: None,
            quota_windows: Vec::new(),
        };
        let status = build_status(None, Some(2), &draining, &at(0));
        assert_eq!(status.flavor_migrations, vec![drain]);
        let degraded = condition(&status, DEGRADED);
        assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("False", "FlavorMigrationInProgress"));
        let done = build_status(Some(&status), Some(2), &applied(), &at(10));
        assert!(done.flavor_migrations.is_empty());
        assert_eq!(condition(&done, DEGRADED).reason, "AsExpected");
    }

    fn condition<'a>(status: &'a TierPolicyStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|condition| condition.type_ == type_).unwrap()
    }

    #[test]
    fn an_applied_gate_reports_the_in_server_gate_in_validate_only_mode() {
        let input = StatusInput::Applied {
            tier_count: 3,
            object_counts: BTreeMap::from([
                ("ValidatingAdmissionPolicy".to_owned(), 1),
                ("ValidatingAdmissionPolicyBinding".to_owned(), 3),
            ]),
            migrations: Vec::new(),
            flavor_migrations: Vec::new(),
            shrunk_tiers: Vec::new(),
            mutating_policies_served: Some(false),
            validating_policies_served: Some(true),
            quota_windows: Vec::new(),
        };
        let status = build_status(None, Some(1), &input, &at(0));
        let gate = condition(&status, IN_SERVER_GATE);
        assert_eq!((gate.status.as_str(), gate.reason.as_str()), ("True", "ValidateOnly"));
        assert!(gate.message.contains("does not serve MutatingAdmissionPolicy"), "{}", gate.message);
        let without = build_status(None, Some(1), &applied(), &at(0));
        assert_eq!(condition(&without, IN_SERVER_GATE).reason, "NotInstalled");
    }

    #[test]
    fn the_sample_policys_gate_reports_installed_with_one_program_and_a_binding_per_tier() {
        let policy = crate::inputs::load_policy(None).unwrap();
        let mut object_counts = BTreeMap::new();
        let desired = crate::plan::desired_cluster_scoped(&policy);
        for object in desired.objects() {
            *object_counts.entry(object.kind().to_owned()).or_insert(0) += 1;
        }
        let input = StatusInput::Applied {
            tier_count: 3,
            object_counts,
            migrations: Vec::new(),
            flavor_migrations: Vec::new(),
            shrunk_tiers: Vec::new(),
            mutating_policies_served: Some(true),
            validating_policies_served: Some(true),
            quota_windows: Vec::new(),
        };
        let status = build_status(None, Some(1), &input, &at(0));
        let gate = condition(&status, IN_SERVER_GATE);
        assert_eq!((gate.status.as_str(), gate.reason.as_str()), ("True", "ValidateAndMutate"), "{}", gate.message);
    }

    #[test]
    fn an_applied_gate_with_mutating_policies_reports_validate_and_mutate() {
        let input = StatusInput::Applied {
            tier_count: 3,
            object_counts: BTreeMap::from([
                ("ValidatingAdmissionPolicy".to_owned(), 1),
                ("ValidatingAdmissionPolicyBinding".to_owned(), 3),
                ("MutatingAdmissionPolicy".to_owned(), 1),
                ("MutatingAdmissionPolicyBinding".to_owned(), 3),
            ]),
            migrations: Vec::new(),
            flavor_migrations: Vec::new(),
            shrunk_tiers: Vec::new(),
            mutating_policies_served: Some(true),
            validating_policies_served: Some(true),
            quota_windows: Vec::new(),
        };
        let status = build_status(None, Some(1), &input, &at(0));
        let gate = condition(&status, IN_SERVER_GATE);
        assert_eq!((gate.status.as_str(), gate.reason.as_str()), ("True", "ValidateAndMutate"));
        assert!(
            gate.message.contains("validating and mutating admission policies, bound to 3 tiers"),
            "{}",
            gate.message
        );
    }

    #[test]
    fn same_outcome_later_yields_an_identical_status() {
        let first = build_status(None, Some(4), &applied(), &at(100));
        let second = build_status(Some(&first), Some(4), &applied(), &at(200));
        assert_eq!(first, second);
        assert_eq!(condition(&second, READY).status, "True");
    }

    #[test]
    fn invalid_policy_keeps_the_last_applied_counts_and_says_why() {
        let applied = build_status(None, Some(4), &applied(), &at(100));
        let input = StatusInput::Invalid { message: "spec.tiers[0].gpuClass: unknown".to_owned() };
        let invalid = build_status(Some(&applied), Some(5), &input, &at(200));
        assert_eq!(invalid.tier_count, Some(3));
        assert_eq!(invalid.object_counts, applied.object_counts);
        assert_eq!(invalid.observed_generation, Some(5));
        assert_eq!(condition(&invalid, READY).reason, "InvalidPolicy");
        assert_eq!(condition(&invalid, READY).last_transition_time, at(200));
        assert_eq!(condition(&invalid, DEGRADED).status, "True");
        assert!(invalid.last_error.unwrap().contains("gpuClass"));
    }

    #[test]
    fn every_status_says_the_policy_is_served_and_a_blocker_adds_a_blocked_condition_with_its_fix() {
        use crate::blockers::BlockedReason;
        let mut status = build_status(None, Some(1), &applied(), &at(1));
        assert_eq!(condition(&status, SERVED).status, "True");
        let blockers = [Blocker { reason: BlockedReason::WorkerUnreachable, detail: "worker us-east".to_owned() }];
        let previous = status.conditions.clone();
        merge_blocked_condition(&mut status, &blockers, &previous, Some(1), &at(2));
        let blocked = condition(&status, BLOCKED);
        assert_eq!((blocked.status.as_str(), blocked.reason.as_str()), ("True", "WorkerUnreachable"));
        assert!(blocked.message.contains("worker us-east") && blocked.message.contains("Fix:"), "{}", blocked.message);
        let previous = status.conditions.clone();
        merge_blocked_condition(&mut status, &[], &previous, Some(1), &at(3));
        assert!(status.conditions.iter().all(|condition| condition.type_ != BLOCKED));
    }

    #[test]
    fn failures_use_camel_case_reasons() {
        let input = StatusInput::Failed { reason: "kueue_too_old", message: "failed to find v1beta2".to_owned() };
        let failed = build_status(None, Some(1), &input, &at(1));
        assert_eq!(condition(&failed, READY).reason, "KueueTooOld");
    }
}
