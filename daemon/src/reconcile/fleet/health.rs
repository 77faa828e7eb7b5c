//! The fleet's health as the management side sees it: the last outcome of every worker engine (or why a worker
//! has none), shared between the fleet supervisor and the status writer, and the per-cluster
//! `WorkerReachable-<cluster>` conditions merged into the TierPolicy status; no I/O.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tokio::sync::watch;

use crate::policy::TierPolicyStatus;
use crate::reconcile::worker::health::{WORKER_REACHABLE, WorkerHealth, build_worker_condition};

/// One worker's entry: its health and how many passes its engine has finished (for tests and metrics).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    health: WorkerHealth,
    passes: u64,
}

/// The health of every worker the supervisor knows, and a counter bumped whenever a worker's condition would
/// change (so the management reconcile rewrites the status only then).
#[derive(Debug)]
pub struct FleetHealth {
    workers: Mutex<BTreeMap<String, Entry>>,
    changes: watch::Sender<u64>,
}

impl Default for FleetHealth {
    fn default() -> Self {
        Self { workers: Mutex::new(BTreeMap::new()), changes: watch::channel(0).0 }
    }
}

impl FleetHealth {
    /// Every worker's health, by cluster name.
    pub fn workers(&self) -> Vec<WorkerHealth> {
        self.workers
            .lock()
            .map(|workers| workers.values().map(|entry| entry.health.clone()).collect())
            .unwrap_or_default()
    }

    /// The health of `cluster`, if the supervisor knows it.
    pub fn worker(&self, cluster: &str) -> Option<WorkerHealth> {
        self.workers.lock().ok()?.get(cluster).map(|entry| entry.health.clone())
    }

    /// How many passes `cluster`'s current engine has finished (0 when it has none).
    pub fn passes(&self, cluster: &str) -> u64 {
        self.workers.lock().ok().and_then(|workers| workers.get(cluster).map(|entry| entry.passes)).unwrap_or(0)
    }

    /// Bumped whenever a worker's condition (status, reason or message) changes or a worker is removed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Records `health` after `passes` passes; wakes the status writer only if the condition changes.
    pub fn set(&self, health: WorkerHealth, passes: u64) {
        let Ok(mut workers) = self.workers.lock() else { return };
        let changed = workers.get(&health.cluster).is_none_or(|entry| !same_condition(&entry.health, &health));
        workers.insert(health.cluster.clone(), Entry { health, passes });
        drop(workers);
        if changed {
            self.changes.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// Forgets `cluster` (it left the policy and its engine stopped): its condition leaves the status.
    pub fn remove(&self, cluster: &str) {
        let removed = self.workers.lock().is_ok_and(|mut workers| workers.remove(cluster).is_some());
        if removed {
            self.changes.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// Forgets every worker (this replica lost the Lease).
    pub fn clear(&self) {
        let cleared = self.workers.lock().is_ok_and(|mut workers| {
            let had = !workers.is_empty();
            workers.clear();
            had
        });
        if cleared {
            self.changes.send_modify(|version| *version = version.wrapping_add(1));
        }
    }
}

fn same_condition(left: &WorkerHealth, right: &WorkerHealth) -> bool {
    left.reachable() == right.reachable() && left.reason() == right.reason() && left.message() == right.message()
}

/// Replaces the `WorkerReachable-*` conditions of `status` with one per worker in `workers` (transition times
/// kept from `previous` while unchanged), so the same fleet health later yields an identical status.
pub fn merge_worker_conditions(
    status: &mut TierPolicyStatus,
    workers: &[WorkerHealth],
    previous: &[Condition],
    generation: Option<i64>,
    now: &Time,
) {
    let prefix = format!("{WORKER_REACHABLE}-");
    status.conditions.retain(|condition| !condition.type_.starts_with(&prefix));
    status.conditions.extend(workers.iter().map(|health| build_worker_condition(health, generation, previous, now)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::status::{READY, StatusInput, build_status};
    use crate::reconcile::worker::WorkerState;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn health(cluster: &str, state: WorkerState) -> WorkerHealth {
        WorkerHealth { cluster: cluster.to_owned(), state }
    }

    fn converged() -> WorkerState {
        WorkerState::Converged { applied: vec![], retired: vec![], draining: 0, draining_flavors: 0 }
    }

    fn status_with(workers: &[WorkerHealth], previous: Option<&TierPolicyStatus>, now: i64) -> TierPolicyStatus {
        let input = StatusInput::Applied {
            tier_count: 3,
            object_counts: BTreeMap::new(),
            migrations: vec![],
            flavor_migrations: Vec::new(),
            shrunk_tiers: vec![],
            mutating_policies_served: None,
            validating_policies_served: None,
            quota_windows: Vec::new(),
        };
        let mut status = build_status(previous, Some(2), &input, &at(now));
        let earlier = previous.map(|status| status.conditions.as_slice()).unwrap_or_default();
        merge_worker_conditions(&mut status, workers, earlier, Some(2), &at(now));
        status
    }

    #[test]
    fn each_worker_gets_its_own_condition_next_to_ready_and_the_same_fleet_later_yields_an_identical_status() {
        let workers = [
            health("us-east", converged()),
            health("eu-west", WorkerState::Unreachable { failing_watches: vec!["Namespace"] }),
        ];
        let first = status_with(&workers, None, 100);
        let types: Vec<&str> = first.conditions.iter().map(|condition| condition.type_.as_str()).collect();
        assert!(types.contains(&READY));
        assert!(types.contains(&"WorkerReachable-us-east") && types.contains(&"WorkerReachable-eu-west"), "{types:?}");
        let second = status_with(&workers, Some(&first), 200);
        assert_eq!(first, second, "an unchanged fleet must not cause a status write");
    }

    #[test]
    fn a_worker_that_left_the_fleet_loses_its_condition() {
        let first = status_with(&[health("us-east", converged()), health("eu-west", converged())], None, 100);
        let second = status_with(&[health("us-east", converged())], Some(&first), 200);
        let types: Vec<&str> = second.conditions.iter().map(|condition| condition.type_.as_str()).collect();
        assert!(!types.contains(&"WorkerReachable-eu-west"), "{types:?}");
        assert!(types.contains(&"WorkerReachable-us-east"));
    }

    #[test]
    fn only_a_changed_condition_wakes_the_status_writer() {
        let fleet = FleetHealth::default();
        let mut changes = fleet.subscribe();
        fleet.set(health("us-east", converged()), 1);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        let applied = WorkerState::Converged {
            applied: vec!["ClusterQueue gold".to_owned()],
            retired: vec![],
            draining: 0,
            draining_flavors: 0,
        };
        fleet.set(health("us-east", applied), 2);
        assert!(!changes.has_changed().unwrap(), "a pass that applied something reads the same as a steady one");
        assert_eq!(fleet.passes("us-east"), 2);
        fleet.set(health("us-east", WorkerState::NotSynced), 3);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        fleet.remove("us-east");
        assert!(changes.has_changed().unwrap());
        assert!(fleet.workers().is_empty());
    }
}
