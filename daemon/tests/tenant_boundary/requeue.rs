//! The daemon's requeue after a tier change (issue 42): it relabels the suspended objects whose Workloads wait in a
//! namespace's retired LocalQueue. Every test is an attack a tenant could try through that write: making the daemon
//! patch an object it should not, change more than the queue label, override the tenant's own change, or gain by
//! its identity what the tenant's own update would not get.
//!
//! The scene: namespace ml-team-dev of the sample policy was gold (class h100, queue tiergate-gold) and is bronze
//! now (class l4, queue tiergate-bronze); its Job `train` waits, suspended, in the retired gold queue.
#![cfg(test)]

use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate};
use tiergate::answers::kueue::KueueWorkload;
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::reconcile::requeue::{build_move_patch, find_pending_owners};

use crate::gate_support::GateOutcome;
use crate::tenant::{gate_in, parse_tenant_body};

const BRONZE: &str = "ml-team-dev";
const OLD_QUEUE: &str = "tiergate-gold";
const NEW_QUEUE: &str = "tiergate-bronze";
const QUEUE: &str = "kueue.x-k8s.io/queue-name";
const JOB_UID: &str = "5a0e9c1d-7b2f-4e3a-9c8d-1f2e3d4c5b6a";
/// The identity the chart runs the daemon as.
const DAEMON: &str = "system:serviceaccount:tiergate-system:tiergate";

/// The pending Job as gold admitted it: gold's queue and class, suspended.
fn pending_job(class: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE, "uid": JOB_UID, "labels": {QUEUE: OLD_QUEUE},
            "annotations": {"tiergate.io/tier": "gold"}},
        "spec": {"suspend": true, "parallelism": 1, "template": {"spec": {"restartPolicy": "Never",
            "nodeSelector": {"gpu.nvidia.com/class": class},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
}

/// A Workload in the retired queue whose controller is `owner` (name, uid).
fn workload(name: &str, owner: (&str, &str)) -> KueueWorkload {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": BRONZE, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
            "name": owner.0, "uid": owner.1, "controller": true}]},
        "spec": {"queueName": OLD_QUEUE},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "m"}]},
    }))
    .unwrap()
}

/// The object after the daemon's patch for the owners `workloads` name, or the patch's error.
fn relabelled(object: &Value, workloads: &[KueueWorkload]) -> Result<Value, String> {
    let (owners, not_moved) = find_pending_owners(workloads, OLD_QUEUE);
    assert!(not_moved.is_empty(), "{not_moved:?}");
    let mut patched = object.clone();
    for owner in owners {
        if owner.name == object["metadata"]["name"] {
            json_patch::patch(&mut patched, &build_move_patch(&owner.uid, OLD_QUEUE, NEW_QUEUE))
                .map_err(|error| error.to_string())?;
        }
    }
    Ok(patched)
}

/// The AdmissionRequest (as JSON) of the UPDATE from `old` to `new` by `username`.
fn update_by(username: &str, new: &Value, old: &Value) -> Value {
    json!({"uid": "u1", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "name": "train", "namespace": BRONZE, "operation": "UPDATE",
        "userInfo": {"username": username, "groups": ["system:serviceaccounts"]},
        "object": new, "oldObject": old, "dryRun": false})
}

#[test]
fn a_forged_workload_naming_a_job_it_does_not_own_cannot_make_the_daemon_patch_that_job() {
    // A tenant creates a Workload in the retired queue whose owner reference names a Job by name with a made-up
    // uid (or the uid of an object elsewhere): the daemon's patch tests the uid first, so the real Job is untouched.
    let forged = workload("forged", ("train", "00000000-0000-4000-8000-000000000000"));
    let error = relabelled(&pending_job("h100"), &[forged]).unwrap_err();
    assert!(error.contains("did not match"), "{error}");
}

#[test]
fn the_daemons_write_changes_the_queue_label_and_nothing_else() {
    let job = pending_job("h100");
    let moved = relabelled(&job, &[workload("train-1", ("train", JOB_UID))]).unwrap();
    let mut expected = job;
    expected["metadata"]["labels"][QUEUE] = json!(NEW_QUEUE);
    assert_eq!(moved, expected);
}

#[test]
fn a_tenants_own_relabel_racing_the_daemon_is_never_overwritten() {
    // Between the daemon's list and its patch the tenant relabels the Job (to anything): the patch's test of the
    // old label fails, and the tenant's update stands, decided by admission like any update.
    let mut job = pending_job("h100");
    job["metadata"]["labels"][QUEUE] = json!("team-own-queue");
    let error = relabelled(&job, &[workload("train-1", ("train", JOB_UID))]).unwrap_err();
    assert!(error.contains("did not match"), "{error}");
}

#[test]
fn the_daemons_relabel_gets_exactly_the_decision_a_tenants_identical_update_gets() {
    // The daemon's identity is not trusted by the webhook or the gate: its update is judged as the tenant's. The Job
    // keeps the h100 selector gold gave it (an update never fails for what it did not introduce), and is queued in
    // bronze, whose ClusterQueue has no h100 flavor: Kueue cannot admit it there, so the move gains no h100 quota.
    let old = pending_job("h100");
    let new = relabelled(&old, &[workload("train-1", ("train", JOB_UID))]).unwrap();
    let policy = load_policy(None).unwrap();
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    let snapshot = build_static_snapshot(policy.clone(), view.clone(), None);
    let decide = |username: &str| {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": update_by(username, &new, &old)});
        let request = parse_tenant_body(body.to_string().as_bytes());
        let decision = mutate(&request, &snapshot, &AdmissionInputs::default());
        let mut object = new.clone();
        json_patch::patch(&mut object, &decision.patch).unwrap();
        (decision.verdict.outcome(), object)
    };
    let (by_daemon, object) = decide(DAEMON);
    assert_eq!((by_daemon.clone(), object.clone()), decide("mallory"));
    assert!(matches!(by_daemon.as_str(), "mutate" | "allow"), "{by_daemon}");
    assert_eq!(object["metadata"]["labels"][QUEUE], NEW_QUEUE, "the new tier's queue stays");
    let gate = |username: &str| gate_in(policy.clone(), view.clone(), update_by(username, &new, &old));
    let by_daemon = gate(DAEMON);
    assert!(matches!(by_daemon, GateOutcome::Admitted), "{by_daemon:?}");
    assert_eq!(by_daemon, gate("mallory"));
}

#[test]
fn the_relabel_of_a_job_that_unsuspended_in_between_is_refused_like_the_tenants() {
    // Kueue admitted the Job (unsuspended) between the daemon's list and its patch: the update would move a running
    // workload. The webhook restores the queue label on such an update, for the daemon as for the tenant, and Kueue's
    // own validation refuses a queue change while a Job runs.
    let mut old = pending_job("l4");
    old["spec"]["suspend"] = json!(false);
    let mut new = old.clone();
    new["metadata"]["labels"][QUEUE] = json!(NEW_QUEUE);
    let snapshot =
        build_static_snapshot(load_policy(None).unwrap(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None);
    let outcome = |username: &str| {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": update_by(username, &new, &old)});
        let decision = mutate(&parse_tenant_body(body.to_string().as_bytes()), &snapshot, &AdmissionInputs::default());
        assert!(!matches!(decision.verdict, Verdict::Failed { .. }), "{:?}", decision.verdict);
        let mut object = new.clone();
        json_patch::patch(&mut object, &decision.patch).unwrap();
        (decision.verdict.outcome(), object["metadata"]["labels"][QUEUE].clone())
    };
    assert_eq!(outcome(DAEMON), outcome("mallory"));
}
