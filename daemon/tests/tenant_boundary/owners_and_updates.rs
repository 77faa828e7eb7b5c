//! Owners and UPDATE sequences: forged owner references, leaving the queue, dropping the selector or priority by update.
//!
//! Every test is one attack by a bronze tenant (namespace ml-team-dev of the sample policy: GPU class l4, queue
//! tiergate-bronze) and asserts the allowed, patched object or the denial and its message.

use support::*;

/// Builders and the decision helper (a `cfg(test)` module so the test lints apply).
#[cfg(test)]
mod support {
    pub use crate::tenant::tenant_review;
    pub use std::sync::Arc;

    pub use serde_json::{Value, json};
    pub use tiergate::admission::Request;
    pub use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate};
    pub use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    pub use tiergate::owners::{OwnerIndex, OwnerKind, OwnerRecord};
    pub use tiergate::view::Snapshot;

    pub const BRONZE: &str = "ml-team-dev";
    pub const CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";
    pub const QUEUE: &str = "kueue.x-k8s.io/queue-name";
    pub const PRIORITY: &str = "kueue.x-k8s.io/priority-class";
    pub const CLASS: &str = "gpu.nvidia.com/class";

    pub const JOB: OwnerKind = OwnerKind { group: "batch", version: "v1", kind: "Job" };
    pub const JOBSET: OwnerKind = OwnerKind { group: "jobset.x-k8s.io", version: "v1alpha2", kind: "JobSet" };
    pub const STATEFULSET: OwnerKind = OwnerKind { group: "apps", version: "v1", kind: "StatefulSet" };
    pub const DEPLOYMENT: OwnerKind = OwnerKind { group: "apps", version: "v1", kind: "Deployment" };
    pub const REPLICASET: OwnerKind = OwnerKind { group: "apps", version: "v1", kind: "ReplicaSet" };
    pub const POD: OwnerKind = OwnerKind { group: "", version: "v1", kind: "Pod" };

    /// The sample snapshot as `webhook --offline` and `explain` build it: no caches, so no owner index.
    pub fn offline() -> Snapshot {
        build_static_snapshot(load_policy(None).unwrap(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None)
    }

    /// The sample snapshot with an owner index holding `records`, as the daemon's caches build it.
    pub fn live(records: &[OwnerRecord]) -> Snapshot {
        let mut snapshot = offline();
        snapshot.owners = Some(Arc::new(OwnerIndex::build(records.iter().cloned().map(Arc::new))));
        snapshot
    }

    pub fn record(kind: OwnerKind, namespace: &str, name: &str, uid: &str) -> OwnerRecord {
        OwnerRecord { kind, namespace: namespace.into(), name: name.into(), uid: uid.into(), controller_uid: None }
    }

    pub fn gpu() -> Value {
        json!({"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    }

    pub fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": BRONZE},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [gpu()]}}}})
    }

    pub fn h100_pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
            "spec": {"nodeSelector": {CLASS: "h100"}, "containers": [gpu()]}})
    }

    pub fn with(mut object: Value, pointer: &str, value: Value) -> Value {
        assert!(tiergate_workloads::set_pointer(&mut object, pointer, Some(value)));
        object
    }

    pub fn without(mut object: Value, pointer: &str) -> Value {
        assert!(tiergate_workloads::set_pointer(&mut object, pointer, None));
        object
    }

    pub fn owned_by(object: Value, kind: OwnerKind, name: &str, uid: &str) -> Value {
        let reference = json!([{"apiVersion": kind.api_version(), "kind": kind.kind, "name": name, "uid": uid,
                                "controller": true}]);
        with(object, "/metadata/ownerReferences", reference)
    }

    pub fn review(operation: &str, object: &Value, old: Option<&Value>, dry_run: bool) -> Request {
        tenant_review(operation, object, old, dry_run, &["team-dev"])
    }

    pub fn create(object: &Value, snapshot: &Snapshot) -> (Decision, Value) {
        decide(&review("CREATE", object, None, false), snapshot)
    }

    /// The CREATE as a controller sends it (the Job controller's service account in kube-system).
    pub fn create_by_controller(object: &Value, snapshot: &Snapshot) -> (Decision, Value) {
        let mut request = review("CREATE", object, None, false);
        request.user_info.username = Some(CONTROLLER.to_owned());
        decide(&request, snapshot)
    }

    pub fn update(old: &Value, new: &Value, snapshot: &Snapshot) -> (Decision, Value) {
        decide(&review("UPDATE", new, Some(old), false), snapshot)
    }

    /// The decision and the object after its patch is applied (the request object when nothing is patched).
    pub fn decide(request: &Request, snapshot: &Snapshot) -> (Decision, Value) {
        let decision = mutate(request, snapshot, &AdmissionInputs::default());
        let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
        json_patch::patch(&mut object, &decision.patch).unwrap();
        (decision, object)
    }

    pub fn assert_denied(decision: &Decision, reason: &str, needles: &[&str]) {
        let Verdict::Deny { reason: got, message } = &decision.verdict else {
            panic!("expected a denial, got {:?} ({:?})", decision.verdict, decision.reasons);
        };
        assert_eq!(*got, reason, "{message}");
        for needle in needles {
            assert!(message.contains(needle), "{needle:?} missing from: {message}");
        }
    }

    pub fn assert_allowed(decision: &Decision) {
        assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    }

    pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
        object["metadata"]["labels"][key].as_str()
    }
}

// Class 2: forged owner references.

#[test]
fn h100_pod_claiming_a_job_that_does_not_exist_is_denied() {
    let pod = owned_by(h100_pod(), JOB, "train", "forged-uid");
    let (decision, _) = create_by_controller(&pod, &live(&[]));
    assert_denied(&decision, "foreign_gpu_class", &["h100", "tier bronze"]);
}

#[test]
fn h100_pod_with_an_owner_reference_the_decision_cannot_read_is_refused_naming_the_field() {
    // A uid that is not a string: the webhook reads the objects as JSON and the owner references typed only
    // where the decision needs them, so an unreadable list must answer `invalid`, never pass as "no owner" (nor
    // as a verified one). A reference missing fields reads them empty, as Go does, and is unverified.
    let pod = with(
        h100_pod(),
        "/metadata/ownerReferences",
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": 7, "controller": true}]),
    );
    let (decision, _) = create_by_controller(&pod, &live(&[]));
    let Verdict::Invalid { message } = &decision.verdict else {
        panic!("expected invalid, got {:?}", decision.verdict)
    };
    assert!(message.contains("request.object.metadata.ownerReferences"), "{message}");
    assert!(decision.patch.0.is_empty());
}

#[test]
fn h100_pod_claiming_a_statefulset_that_does_not_exist_is_denied() {
    let pod = owned_by(h100_pod(), STATEFULSET, "db", "forged-uid");
    assert_denied(&create_by_controller(&pod, &live(&[])).0, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_a_jobset_that_does_not_exist_is_denied() {
    let pod = owned_by(h100_pod(), JOBSET, "js", "forged-uid");
    assert_denied(&create_by_controller(&pod, &live(&[])).0, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_a_replicaset_that_does_not_exist_is_denied() {
    let pod = owned_by(h100_pod(), REPLICASET, "web-123", "forged-uid");
    assert_denied(&create_by_controller(&pod, &live(&[])).0, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_another_pod_as_controller_is_denied_even_when_that_pod_exists() {
    let pod = owned_by(h100_pod(), POD, "other", "pod-uid");
    let snapshot = live(&[record(POD, BRONZE, "other", "pod-uid")]);
    let (decision, _) = create_by_controller(&pod, &snapshot);
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_naming_a_real_job_with_a_wrong_uid_is_denied() {
    let pod = owned_by(h100_pod(), JOB, "train", "guessed-uid");
    let snapshot = live(&[record(JOB, BRONZE, "train", "real-uid")]);
    assert_denied(&create_by_controller(&pod, &snapshot).0, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_a_gold_namespace_job_by_its_real_uid_is_denied() {
    let pod = owned_by(h100_pod(), JOB, "train", "gold-uid");
    let snapshot = live(&[record(JOB, "ml-research", "train", "gold-uid")]);
    let (decision, _) = create_by_controller(&pod, &snapshot);
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_a_deployment_uid_as_a_job_is_denied() {
    let pod = owned_by(h100_pod(), JOB, "web", "deploy-uid");
    let snapshot = live(&[record(DEPLOYMENT, BRONZE, "web", "deploy-uid")]);
    assert_denied(&create_by_controller(&pod, &snapshot).0, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_of_a_tenant_made_replicaset_without_a_deployment_is_denied() {
    let pod = owned_by(h100_pod(), REPLICASET, "rs", "rs-uid");
    let snapshot = live(&[record(REPLICASET, BRONZE, "rs", "rs-uid")]);
    let (decision, _) = create_by_controller(&pod, &snapshot);
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_claiming_a_job_offline_is_denied_and_explain_says_the_owner_is_unverified() {
    let pod = owned_by(h100_pod(), JOB, "train", "any");
    assert_denied(&create_by_controller(&pod, &offline()).0, "foreign_gpu_class", &["h100"]);
    let (decision, _) = create(
        &owned_by(
            json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": BRONZE}, "spec": {"containers": [gpu()]}}),
            JOB,
            "train",
            "any",
        ),
        &offline(),
    );
    assert_allowed(&decision);
    assert!(decision.reasons.iter().any(|reason| reason.contains("not verified") && reason.contains("offline")));
}

#[test]
fn pod_of_a_verified_job_keeps_the_class_its_job_was_admitted_with() {
    let pod = owned_by(h100_pod(), JOB, "train", "job-uid");
    let (decision, object) = create_by_controller(&pod, &live(&[record(JOB, BRONZE, "train", "job-uid")]));
    assert_allowed(&decision);
    assert_eq!(object["spec"]["nodeSelector"][CLASS], "h100");
}

#[test]
fn pod_of_a_verified_deployment_through_its_replicaset_is_trusted() {
    let pod = owned_by(h100_pod(), REPLICASET, "web-123", "rs-uid");
    let replica_set =
        OwnerRecord { controller_uid: Some("deploy-uid".into()), ..record(REPLICASET, BRONZE, "web-123", "rs-uid") };
    let snapshot = live(&[replica_set, record(DEPLOYMENT, BRONZE, "web", "deploy-uid")]);
    let (decision, _) = create_by_controller(&pod, &snapshot);
    assert_allowed(&decision);
    assert!(decision.reasons.iter().any(|reason| reason.contains("Deployment ml-team-dev/web")));
}

#[test]
fn h100_pod_pointing_at_the_tenants_own_real_job_is_denied() {
    // The Job exists with that uid, but the tenant wrote the Pod itself: its template was never the Job's.
    let pod = owned_by(h100_pod(), JOB, "train", "job-uid");
    let (decision, _) = create(&pod, &live(&[record(JOB, BRONZE, "train", "job-uid")]));
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
}

#[test]
fn h100_pod_written_by_a_service_account_of_the_tenant_namespace_is_denied() {
    let pod = owned_by(h100_pod(), JOB, "train", "job-uid");
    let mut request = review("CREATE", &pod, None, false);
    request.user_info.username = Some(format!("system:serviceaccount:{BRONZE}:builder"));
    let (decision, _) = decide(&request, &live(&[record(JOB, BRONZE, "train", "job-uid")]));
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
    assert!(!decision.reasons.is_empty());
}

// Class 6: children of Kueue-managed parents.

#[test]
fn job_of_a_verified_jobset_is_left_unqueued_and_unsuspended_but_gets_the_tier_class() {
    let child = owned_by(job(), JOBSET, "js", "js-uid");
    let (decision, object) = create_by_controller(&child, &live(&[record(JOBSET, BRONZE, "js", "js-uid")]));
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), None);
    assert_eq!(object["spec"].get("suspend"), None);
    assert_eq!(object["spec"]["template"]["spec"]["nodeSelector"][CLASS], "l4");
    assert!(decision.reasons.iter().any(|reason| reason.contains("left to its owner JobSet")));
    assert!(!decision.reasons.iter().any(|reason| reason.contains("queued in")), "{:?}", decision.reasons);
}

#[test]
fn job_claiming_a_jobset_that_does_not_exist_is_still_queued_and_suspended() {
    let child = owned_by(job(), JOBSET, "js", "forged");
    for snapshot in [live(&[]), offline()] {
        let (decision, object) = create_by_controller(&child, &snapshot);
        assert_allowed(&decision);
        assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
        assert_eq!(object["spec"]["suspend"], true);
    }
}

#[test]
fn job_pointing_at_the_tenants_own_real_jobset_is_still_queued_and_suspended() {
    // The tenant's own JobSet exists, but the tenant (not the JobSet controller) wrote this Job: leaving it to
    // the JobSet would let it run outside the tier's quota.
    let child = owned_by(job(), JOBSET, "js", "js-uid");
    let (decision, object) = create(&child, &live(&[record(JOBSET, BRONZE, "js", "js-uid")]));
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
    assert_eq!(object["spec"]["suspend"], true);
    assert!(
        decision.reasons.iter().any(|reason| reason.contains("not by a trusted controller")),
        "{:?}",
        decision.reasons
    );
}

#[test]
fn job_of_a_verified_jobset_selecting_h100_is_still_denied() {
    let child =
        with(owned_by(job(), JOBSET, "js", "js-uid"), "/spec/template/spec/nodeSelector", json!({CLASS: "h100"}));
    let (decision, _) = create_by_controller(&child, &live(&[record(JOBSET, BRONZE, "js", "js-uid")]));
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
}

// Class 3: UPDATE sequences.

fn admitted_suspended_job() -> Value {
    let (decision, object) = create(&job(), &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
    object
}

#[test]
fn removing_the_queue_label_by_update_is_restored() {
    let old = admitted_suspended_job();
    let new = without(old.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name");
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
    assert!(decision.reasons.iter().any(|reason| reason.contains("queued in LocalQueue tiergate-bronze")));
}

#[test]
fn emptying_the_queue_label_by_update_is_restored() {
    let old = admitted_suspended_job();
    let new = with(old.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name", json!(""));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
}

#[test]
fn changing_the_queue_to_the_gold_local_queue_by_update_is_restored() {
    let old = admitted_suspended_job();
    let new = with(old.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name", json!("tiergate-gold"));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
    assert!(decision.warnings.iter().any(|warning| warning.contains("tier gold")), "{:?}", decision.warnings);
}

#[test]
fn creating_with_an_empty_queue_name_gets_the_tier_queue() {
    let (decision, object) = create(&with(job(), "/metadata/labels", json!({QUEUE: ""})), &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
    assert_eq!(object["spec"]["suspend"], true);
}

#[test]
fn creating_with_the_gold_local_queue_name_gets_the_tier_queue() {
    let (decision, object) = create(&with(job(), "/metadata/labels", json!({QUEUE: "tiergate-gold"})), &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
}

#[test]
fn unsuspending_a_job_that_has_no_tier_queue_is_refused() {
    // A suspended Job without a queue (created before the namespace was tiered, say).
    let old = with(job(), "/spec/suspend", json!(true));
    let new = with(old.clone(), "/spec/suspend", json!(false));
    let (decision, _) = update(&old, &new, &offline());
    assert_denied(&decision, "unsuspended_without_queue", &["spec.suspend: false", QUEUE, "tiergate-bronze", "Fix"]);
}

#[test]
fn unsuspending_a_job_whose_queue_is_the_gold_local_queue_is_refused() {
    let old = with(with(job(), "/spec/suspend", json!(true)), "/metadata/labels", json!({QUEUE: "tiergate-gold"}));
    let new = with(old.clone(), "/spec/suspend", json!(false));
    assert_denied(&update(&old, &new, &offline()).0, "unsuspended_without_queue", &["tier gold"]);
}

#[test]
fn removing_the_queue_and_unsuspending_in_one_update_keeps_the_queue() {
    let old = admitted_suspended_job();
    let new = with(without(old.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name"), "/spec/suspend", json!(false));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"), "Kueue re-suspends a queued Job it has not admitted");
}

#[test]
fn create_suspended_then_remove_queue_then_unsuspend_never_leaves_the_queue() {
    let created = admitted_suspended_job();
    let dropped = without(created.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name");
    let (decision, after_drop) = update(&created, &dropped, &offline());
    assert_allowed(&decision);
    let unsuspended =
        with(without(after_drop.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name"), "/spec/suspend", json!(false));
    let (decision, end) = update(&after_drop, &unsuspended, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&end, QUEUE), Some("tiergate-bronze"));
}

#[test]
fn a_dry_run_update_removing_the_queue_gets_the_same_restore() {
    let old = admitted_suspended_job();
    let new = without(old.clone(), "/metadata/labels/kueue.x-k8s.io~1queue-name");
    let (decision, object) = decide(&review("UPDATE", &new, Some(&old), true), &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
}

#[test]
fn raising_the_priority_label_by_update_is_restored() {
    let old = with(admitted_suspended_job(), "/metadata/labels/kueue.x-k8s.io~1priority-class", json!("gpu-low"));
    let new = with(old.clone(), "/metadata/labels/kueue.x-k8s.io~1priority-class", json!("gpu-ultra"));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, PRIORITY), Some("gpu-low"));
    assert!(decision.warnings.iter().any(|warning| warning.contains("gpu-ultra")));
}

#[test]
fn adding_a_priority_label_by_update_is_undone() {
    let old = admitted_suspended_job();
    let new = with(old.clone(), "/metadata/labels/kueue.x-k8s.io~1priority-class", json!("gpu-ultra"));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, PRIORITY), None);
}

#[test]
fn removing_the_priority_label_by_update_is_restored() {
    let old = with(admitted_suspended_job(), "/metadata/labels/kueue.x-k8s.io~1priority-class", json!("gpu-low"));
    let new = without(old.clone(), "/metadata/labels/kueue.x-k8s.io~1priority-class");
    assert_eq!(label(&update(&old, &new, &offline()).1, PRIORITY), Some("gpu-low"));
}

#[test]
fn removing_the_selector_and_tolerations_of_a_suspended_job_by_update_restores_them() {
    let old = admitted_suspended_job();
    assert_eq!(old["spec"]["template"]["spec"]["nodeSelector"][CLASS], "l4");
    let new = without(without(old.clone(), "/spec/template/spec/nodeSelector"), "/spec/template/spec/tolerations");
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(object["spec"]["template"]["spec"]["nodeSelector"], old["spec"]["template"]["spec"]["nodeSelector"]);
    assert_eq!(object["spec"]["template"]["spec"]["tolerations"], old["spec"]["template"]["spec"]["tolerations"]);
}

#[test]
fn removing_the_selector_while_unsuspending_a_never_started_job_restores_it() {
    let old = admitted_suspended_job();
    let new = with(without(old.clone(), "/spec/template/spec/nodeSelector"), "/spec/suspend", json!(false));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(object["spec"]["template"]["spec"]["nodeSelector"][CLASS], "l4");
    assert_eq!(label(&object, QUEUE), Some("tiergate-bronze"));
}

#[test]
fn removing_the_selector_of_a_started_job_is_not_patched_back_into_an_immutable_template() {
    // Started once (status.startTime): Kubernetes refuses any template change, so a patch there would fail the
    // update; the API server itself keeps the template as it was.
    let old = with(admitted_suspended_job(), "/status/startTime", json!("2026-01-01T00:00:00Z"));
    let new = without(old.clone(), "/spec/template/spec/nodeSelector");
    let (decision, _) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert!(decision.patch.0.iter().all(|operation| !operation.path().as_str().starts_with("/spec/template")));
    assert!(!decision.reasons.iter().any(|reason| reason.starts_with("GPU class")), "{:?}", decision.reasons);
}

#[test]
fn switching_a_started_jobs_template_to_h100_by_update_is_denied_though_the_template_is_left_as_sent() {
    // The template tiergate would edit is immutable here and left as sent (not copied back): the check must still
    // judge the template the tenant sent, and the summary must not report the class tiergate did not write.
    let old = with(admitted_suspended_job(), "/status/startTime", json!("2026-01-01T00:00:00Z"));
    let new = with(old.clone(), "/spec/template/spec/nodeSelector", json!({CLASS: "h100"}));
    let (decision, _) = update(&old, &new, &offline());
    assert_denied(&decision, "foreign_gpu_class", &["h100"]);
    let unchanged = with(old.clone(), "/metadata/annotations/note", json!("x"));
    let (decision, object) = update(&old, &unchanged, &offline());
    assert_allowed(&decision);
    assert!(decision.patch.0.iter().all(|operation| !operation.path().as_str().starts_with("/spec/template")));
    assert_eq!(object["spec"]["template"], old["spec"]["template"]);
    let summary = object["metadata"]["annotations"]["tiergate.io/decision"].as_str().unwrap_or_default();
    assert!(summary.starts_with("gpu-class: l4"), "{summary}");
}

#[test]
fn removing_the_selector_of_a_deployment_by_update_restores_it() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": BRONZE},
        "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [gpu()]}}}});
    let (_, old) = create(&deployment, &offline());
    let new = without(without(old.clone(), "/spec/template/spec/nodeSelector"), "/spec/template/spec/tolerations");
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(object["spec"]["template"]["spec"]["nodeSelector"][CLASS], "l4");
    assert_eq!(object["spec"]["template"]["spec"]["tolerations"], old["spec"]["template"]["spec"]["tolerations"]);
}

#[test]
fn explain_of_a_running_job_without_a_queue_does_not_claim_a_queue() {
    let old = job();
    let new = with(job(), "/metadata/annotations", json!({"note": "x"}));
    let (decision, object) = update(&old, &new, &offline());
    assert_allowed(&decision);
    assert_eq!(label(&object, QUEUE), None);
    assert!(!decision.reasons.iter().any(|reason| reason.contains("queued in")), "{:?}", decision.reasons);
    assert!(decision.reasons.iter().any(|reason| reason.starts_with("not queued")));
    assert!(decision.warnings.iter().any(|warning| warning.contains("outside the tier's quota")));
}
