//! Pending workloads a tier change left in a retired LocalQueue, moved to the namespace's new queue: which
//! Workloads still wait there, the object Kueue made each one from (Kueue follows that object's
//! `kueue.x-k8s.io/queue-name` while it is suspended and not admitted: `jobframework.QueueNameChange`), and the
//! JSON Patch that relabels it; no I/O (`prune` lists and sends).

use std::collections::HashMap;
use std::time::Instant;

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, ReplaceOperation, TestOperation};
use serde_json::json;
use tiergate_workloads::{ADAPTERS, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter};

use tiergate_kueue::read::{FINISHED, KueueWorkload, QUOTA_RESERVED};

/// Most entries of `notRequeued` one migration reports (the rest are counted).
pub const MAX_NOT_REQUEUED: usize = 8;

/// How often a retired LocalQueue is listed again for pending workloads once a pass found what it could move, and
/// how long a refused move waits before it is tried again (a chart upgrade granting the write, a tenant's fix).
pub const REQUEUE_RECHECK: std::time::Duration = std::time::Duration::from_secs(600);

/// What the daemon remembers between requeue passes, so a retired LocalQueue is listed and a refused owner patched
/// at most every [`REQUEUE_RECHECK`], not on every reconcile. Times are given, so the rules are tested without
/// waiting.
#[derive(Debug, Default)]
pub struct RequeueMemory {
    /// Refused owners by uid: the `notRequeued` message and when.
    refused: HashMap<String, (String, Instant)>,
    /// The last pass over each retired queue (namespace, queue, new queue): when, and its `notRequeued` entries.
    passes: HashMap<(String, String, String), (Instant, Vec<String>)>,
}

impl RequeueMemory {
    /// The `notRequeued` message of the owner with `uid`, refused less than [`REQUEUE_RECHECK`] before `now`.
    pub fn refusal(&mut self, uid: &str, now: Instant) -> Option<String> {
        self.refused.retain(|_, (_, when)| now.duration_since(*when) < REQUEUE_RECHECK);
        self.refused.get(uid).map(|(message, _)| message.clone())
    }

    /// Records that moving the owner with `uid` was refused at `now`, with its `notRequeued` message.
    pub fn refuse(&mut self, uid: &str, message: String, now: Instant) {
        self.refused.insert(uid.to_owned(), (message, now));
    }

    /// What the last pass over `(namespace, queue, new queue)` reported, when it ran less than
    /// [`REQUEUE_RECHECK`] before `now` (no pass is due then).
    pub fn recent_pass(&self, key: &(String, String, String), now: Instant) -> Option<Vec<String>> {
        let (when, not_requeued) = self.passes.get(key)?;
        (now.duration_since(*when) < REQUEUE_RECHECK).then(|| not_requeued.clone())
    }

    /// Records a pass over `key` at `now` that reported `not_requeued`.
    pub fn record_pass(&mut self, key: (String, String, String), not_requeued: Vec<String>, now: Instant) {
        self.passes.retain(|_, (when, _)| now.duration_since(*when) < REQUEUE_RECHECK);
        self.passes.insert(key, (now, not_requeued));
    }
}

/// The object a pending Workload was made from, to be relabelled to the new queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingOwner {
    /// The object's kind.
    pub adapter: &'static WorkloadAdapter,
    /// Its name (in the queue's namespace).
    pub name: String,
    /// Its uid, tested by the patch so a re-created object of that name is never touched.
    pub uid: String,
}

impl PendingOwner {
    /// `Job ns/name`, for logs and status.
    pub fn display(&self, namespace: &str) -> String {
        format!("{} {namespace}/{}", self.adapter.kind, self.name)
    }
}

/// A pending Workload tiergate cannot move, and why (its owner is resubmitted by hand).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotMoved {
    /// The Workload's name.
    pub workload: String,
    /// Why, with what the user does instead.
    pub reason: String,
}

impl NotMoved {
    /// The `status.queueMigrations[].notRequeued` entry.
    pub fn entry(&self) -> String {
        format!("Workload {}: {}", self.workload, self.reason)
    }
}

/// The owners of the Workloads in `workloads` (one namespace) that wait in `from_queue` without a quota
/// reservation, and the pending ones that cannot be moved by relabelling their owner.
pub fn find_pending_owners(workloads: &[KueueWorkload], from_queue: &str) -> (Vec<PendingOwner>, Vec<NotMoved>) {
    let mut owners: Vec<PendingOwner> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut not_moved = Vec::new();
    let pending = workloads.iter().filter(|workload| {
        workload.spec.queue_name.as_deref() == Some(from_queue)
            && !workload.is_true(QUOTA_RESERVED)
            && !workload.is_true(FINISHED)
            && workload.metadata.deletion_timestamp.is_none()
    });
    for workload in pending {
        let name = workload.metadata.name.clone().unwrap_or_default();
        match owner_of(workload) {
            Ok(owner) if seen.insert(owner.uid.clone()) => owners.push(owner),
            Ok(_) => {}
            Err(reason) => not_moved.push(NotMoved { workload: name, reason }),
        }
    }
    (owners, not_moved)
}

/// The Workload's controller, when it is an object Kueue suspends and queues by its own queue label.
fn owner_of(workload: &KueueWorkload) -> Result<PendingOwner, String> {
    let owner =
        workload.metadata.owner_references.iter().flatten().find(|owner| owner.controller == Some(true)).ok_or_else(
            || "it has no owner object (made by hand): set its spec.queueName, or recreate it".to_owned(),
        )?;
    let group = owner.api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let adapter =
        ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.kind == owner.kind).ok_or_else(|| {
            format!("its owner {} {} is a kind tiergate does not move; resubmit it", owner.kind, owner.name)
        })?;
    match movable_kinds().find(|movable| *movable == adapter) {
        Some(adapter) => Ok(PendingOwner { adapter, name: owner.name.clone(), uid: owner.uid.clone() }),
        None => Err(format!(
            "its owner {} {} is queued as a pod group, whose pods keep their queue label; delete and resubmit it",
            owner.kind, owner.name
        )),
    }
}

/// The kinds whose pending workloads tiergate moves: Kueue suspends them and reads their own queue label (the
/// chart grants `patch` on exactly these, `requeue.movable_kinds_match_the_charts_patch_rule`).
pub fn movable_kinds() -> impl Iterator<Item = &'static WorkloadAdapter> {
    ADAPTERS.iter().filter(|adapter| {
        matches!(adapter.queueing, Queueing::SuspendedWithQueueLabel { .. }) && adapter.queue_labels_at == "/metadata"
    })
}

/// The patch moving an owner from `from_queue` to `to_queue`: it applies only to the object with `uid` that still
/// names `from_queue` (a tenant's own change in between wins, and is decided by admission like any update).
pub fn build_move_patch(uid: &str, from_queue: &str, to_queue: &str) -> Patch {
    let label = PointerBuf::from_tokens(["metadata", "labels", QUEUE_NAME_LABEL]);
    Patch(vec![
        PatchOperation::Test(TestOperation { path: PointerBuf::from_tokens(["metadata", "uid"]), value: json!(uid) }),
        PatchOperation::Test(TestOperation { path: label.clone(), value: json!(from_queue) }),
        PatchOperation::Replace(ReplaceOperation { path: label, value: json!(to_queue) }),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn workload(name: &str, queue: &str, owner: Option<(&str, &str)>, conditions: Value) -> KueueWorkload {
        let owners = owner.map_or_else(Vec::new, |(api_version, kind)| {
            vec![json!({"apiVersion": api_version, "kind": kind, "name": format!("{name}-owner"),
                "uid": format!("{name}-uid"), "controller": true})]
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team", "ownerReferences": owners},
            "spec": {"queueName": queue},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str) -> Value {
        json!({"type": type_, "status": status, "reason": "R", "message": "m"})
    }

    #[test]
    fn only_unreserved_unfinished_workloads_of_the_old_queue_move_through_their_owner() {
        let job = Some(("batch/v1", "Job"));
        let workloads = [
            workload("pending", "tiergate-gold", job, json!([condition(QUOTA_RESERVED, "False")])),
            workload("fresh", "tiergate-gold", Some(("jobset.x-k8s.io/v1alpha2", "JobSet")), json!([])),
            workload("admitted", "tiergate-gold", job, json!([condition(QUOTA_RESERVED, "True")])),
            workload("done", "tiergate-gold", job, json!([condition(FINISHED, "True")])),
            workload("elsewhere", "tiergate-silver", job, json!([])),
        ];
        let (owners, not_moved) = find_pending_owners(&workloads, "tiergate-gold");
        let moved: Vec<(&str, &str, &str)> =
            owners.iter().map(|owner| (owner.adapter.kind, owner.name.as_str(), owner.uid.as_str())).collect();
        assert_eq!(moved, [("Job", "pending-owner", "pending-uid"), ("JobSet", "fresh-owner", "fresh-uid")]);
        assert!(not_moved.is_empty(), "{not_moved:?}");
    }

    #[test]
    fn pod_groups_unknown_kinds_and_ownerless_workloads_are_reported_not_moved() {
        let workloads = [
            workload("lws", "q", Some(("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")), json!([])),
            workload("pod", "q", Some(("v1", "Pod")), json!([])),
            workload("custom", "q", Some(("example.com/v1", "Widget")), json!([])),
            workload("orphan", "q", None, json!([])),
        ];
        let (owners, not_moved) = find_pending_owners(&workloads, "q");
        assert!(owners.is_empty(), "{owners:?}");
        let reasons: Vec<String> = not_moved.iter().map(NotMoved::entry).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons[0].contains("LeaderWorkerSet lws-owner is queued as a pod group"), "{reasons:?}");
        assert!(reasons[1].contains("Pod pod-owner"), "{reasons:?}");
        assert!(reasons[2].contains("Widget custom-owner is a kind tiergate does not move"), "{reasons:?}");
        assert!(reasons[3].starts_with("Workload orphan: it has no owner object"), "{reasons:?}");
    }

    #[test]
    fn movable_kinds_match_the_charts_patch_rule() {
        let rbac = include_str!("../../../charts/tiergate/templates/rbac.yaml");
        let (_, rule) = rbac.split_once("# Requeue: ").expect("the chart's requeue rule");
        let (rule, _) = rule.split_once("{{- end }}").unwrap();
        let list = |line: &str, key: &str| -> Option<Vec<String>> {
            let inner = line.trim().trim_start_matches("- ").strip_prefix(key)?.trim().strip_prefix('[')?;
            Some(inner.trim_end_matches(']').split(',').map(|item| item.trim().to_owned()).collect())
        };
        let mut granted = Vec::new();
        let mut group = Vec::new();
        for line in rule.lines() {
            if let Some(groups) = list(line, "apiGroups:") {
                group = groups;
            } else if let Some(resources) = list(line, "resources:") {
                granted.extend(
                    group.iter().flat_map(|group| resources.iter().map(move |plural| format!("{group}/{plural}"))),
                );
            } else if let Some(verbs) = list(line, "verbs:") {
                assert_eq!(verbs, ["patch"], "{line}");
            }
        }
        granted.sort();
        let mut wanted: Vec<String> =
            movable_kinds().map(|adapter| format!("{}/{}s", adapter.group, adapter.kind.to_lowercase())).collect();
        wanted.sort();
        assert_eq!(granted, wanted);
    }

    #[test]
    fn passes_and_refusals_are_remembered_for_the_recheck_period_only() {
        let start = Instant::now();
        let later = start + REQUEUE_RECHECK;
        let mut memory = RequeueMemory::default();
        let key = ("team".to_owned(), "tiergate-gold".to_owned(), "tiergate-bronze".to_owned());
        assert_eq!(memory.recent_pass(&key, start), None, "the first pass is due");
        memory.record_pass(key.clone(), vec!["Job team/a: refused".to_owned()], start);
        assert_eq!(memory.recent_pass(&key, start).unwrap(), ["Job team/a: refused"]);
        assert_eq!(memory.recent_pass(&key, later), None, "due again after the recheck period");
        memory.refuse("uid-a", "refused: no".to_owned(), start);
        assert_eq!(memory.refusal("uid-a", start).as_deref(), Some("refused: no"));
        assert_eq!(memory.refusal("uid-b", start), None);
        assert_eq!(memory.refusal("uid-a", later), None, "tried again after the recheck period");
    }

    #[test]
    fn the_patch_tests_uid_and_old_queue_before_replacing_the_label() {
        let patch = serde_json::to_value(build_move_patch("u-1", "tiergate-gold", "tiergate-gold2")).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-gold"},
                {"op": "replace", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-gold2"},
            ])
        );
        let mut job = json!({"metadata": {"uid": "u-1", "labels": {"kueue.x-k8s.io/queue-name": "tiergate-gold"}}});
        json_patch::patch(&mut job, &build_move_patch("u-1", "tiergate-gold", "tiergate-gold2")).unwrap();
        assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-gold2");
        let mut recreated =
            json!({"metadata": {"uid": "u-2", "labels": {"kueue.x-k8s.io/queue-name": "tiergate-gold"}}});
        assert!(json_patch::patch(&mut recreated, &build_move_patch("u-1", "tiergate-gold", "x")).is_err());
    }
}
