//! The tier-change rule for LocalQueues no longer desired (their `spec.clusterQueue` is immutable): stop the
//! old queue with `stopPolicy: Hold`, delete it once it holds no pending, reserving or admitted workloads; no I/O.

use kube::core::DynamicObject;
use serde_json::json;

use super::desired::build_body_hash;
use super::kinds::APPLIED_HASH_LABEL;
use super::live::LiveObject;
use crate::policy::QueueMigration;

/// The `stopPolicy` a retiring LocalQueue gets. `Hold` (not `HoldAndDrain`): admitted workloads run to
/// completion instead of being evicted back into a queue that will never admit them again.
pub const RETIRE_STOP_POLICY: &str = "Hold";

/// What a retiring LocalQueue reports in its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueOccupancy {
    /// `spec.stopPolicy`, if set.
    pub stop_policy: Option<String>,
    /// `status.pendingWorkloads`.
    pub pending: i32,
    /// `status.reservingWorkloads`.
    pub reserving: i32,
    /// `status.admittedWorkloads`.
    pub admitted: i32,
}

impl QueueOccupancy {
    /// Reads the occupancy of a live LocalQueue (missing counts are zero).
    pub fn of(queue: &LiveObject) -> Self {
        Self {
            stop_policy: queue.stop_policy(),
            pending: queue.workloads.pending,
            reserving: queue.workloads.reserving,
            admitted: queue.workloads.admitted,
        }
    }

    /// Workloads still in the queue (a workload may be both reserving and admitted; the larger counts).
    pub fn remaining(&self) -> i32 {
        self.pending.saturating_add(self.reserving.max(self.admitted))
    }

    fn is_stopped(&self) -> bool {
        self.stop_policy.as_deref().is_some_and(|policy| policy != "None")
    }
}

/// What to do with one LocalQueue that is owned but no longer desired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetireAction {
    /// Empty: delete it now.
    Delete,
    /// Still holds workloads and still admits: set `stopPolicy: Hold`.
    Stop {
        /// Workloads still in it.
        remaining: i32,
    },
    /// Already stopped, still holds workloads: wait (the watch re-runs the reconcile when counts change).
    Wait {
        /// Workloads still in it.
        remaining: i32,
    },
}

/// The rule: empty queues go, occupied ones are stopped first and wait until empty.
pub fn build_retire_action(occupancy: &QueueOccupancy) -> RetireAction {
    let remaining = occupancy.remaining();
    if remaining == 0 {
        RetireAction::Delete
    } else if occupancy.is_stopped() {
        RetireAction::Wait { remaining }
    } else {
        RetireAction::Stop { remaining }
    }
}

/// The status entry for a queue replaced by `to_queue` in the same namespace.
pub fn build_migration(queue: &LiveObject, to_queue: &str, remaining: i32) -> QueueMigration {
    QueueMigration {
        namespace: queue.namespace.clone().unwrap_or_default(),
        from_queue: queue.name.clone(),
        to_queue: to_queue.to_owned(),
        remaining_workloads: remaining,
        not_requeued: Vec::new(),
    }
}

/// The server-side-apply body that stops `live`: what tiergate applied before (labels, owner, the immutable
/// `clusterQueue`) plus `stopPolicy`, so no field we own is dropped.
pub fn build_stop_body(live: &LiveObject) -> DynamicObject {
    let resource = super::kinds::KueueKind::LocalQueue.api_resource();
    let mut labels: std::collections::BTreeMap<String, String> =
        live.labels().map(|(key, value)| (key.to_owned(), value.to_owned())).collect();
    labels.remove(APPLIED_HASH_LABEL);
    let mut spec = live.body_value().get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["stopPolicy"] = json!(RETIRE_STOP_POLICY);
    let mut body = DynamicObject {
        types: Some(kube::core::TypeMeta { api_version: resource.api_version, kind: resource.kind }),
        metadata: kube::core::ObjectMeta {
            name: Some(live.name.clone()),
            namespace: live.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(live.owner_references()).filter(|owners| !owners.is_empty()),
            ..Default::default()
        },
        data: json!({ "spec": spec }),
    };
    let hash = build_body_hash(&body);
    body.metadata.labels.get_or_insert_default().insert(APPLIED_HASH_LABEL.to_owned(), hash);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occupancy(stop_policy: Option<&str>, pending: i32, reserving: i32, admitted: i32) -> QueueOccupancy {
        QueueOccupancy { stop_policy: stop_policy.map(str::to_owned), pending, reserving, admitted }
    }

    #[test]
    fn empty_queue_is_deleted_at_once() {
        assert_eq!(build_retire_action(&occupancy(None, 0, 0, 0)), RetireAction::Delete);
        assert_eq!(build_retire_action(&occupancy(Some("Hold"), 0, 0, 0)), RetireAction::Delete);
    }

    #[test]
    fn occupied_admitting_queue_is_stopped_first() {
        assert_eq!(build_retire_action(&occupancy(None, 2, 1, 1)), RetireAction::Stop { remaining: 3 });
        assert_eq!(build_retire_action(&occupancy(Some("None"), 0, 0, 4)), RetireAction::Stop { remaining: 4 });
    }

    #[test]
    fn stopped_queue_waits_until_its_workloads_are_gone() {
        assert_eq!(build_retire_action(&occupancy(Some("Hold"), 1, 0, 0)), RetireAction::Wait { remaining: 1 });
        assert_eq!(build_retire_action(&occupancy(Some("HoldAndDrain"), 0, 2, 0)), RetireAction::Wait { remaining: 2 });
    }

    #[test]
    fn occupancy_is_read_from_the_live_status() {
        let queue: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "tiergate-gold", "namespace": "team-a"},
            "spec": {"clusterQueue": "tiergate-gold", "stopPolicy": "Hold"},
            "status": {"pendingWorkloads": 1, "reservingWorkloads": 2, "admittedWorkloads": 2},
        }))
        .unwrap();
        let queue = LiveObject::from_dynamic(super::super::kinds::KueueKind::LocalQueue, queue);
        assert_eq!(QueueOccupancy::of(&queue), occupancy(Some("Hold"), 1, 2, 2));
        let stop = build_stop_body(&queue);
        assert_eq!(stop.data["spec"]["clusterQueue"], "tiergate-gold");
        assert_eq!(stop.data["spec"]["stopPolicy"], RETIRE_STOP_POLICY);
        assert!(stop.data.get("status").is_none());
        assert_eq!(stop.types.as_ref().map(|types| types.kind.as_str()), Some("LocalQueue"), "apply needs kind");
    }
}
