//! Fleets (issue 17): on a worker cluster, Kueue MultiKueue's marks on a Job (`kueue.x-k8s.io/multikueue-origin`,
//! `kueue.x-k8s.io/prebuilt-workload-name`) are trusted only from the user MultiKueue writes as there
//! (`spec.admission.multiKueueUsers`); a tenant adding them to walk around the webhook is refused.
//!
//! The worker runs the sample policy with `multiKueueUsers` set; the tenant is bronze (namespace ml-team-dev, GPU
//! class l4, queue tiergate-bronze) and asks for H100s.
#![cfg(test)]

use support::*;

#[cfg(test)]
mod support {
    pub use crate::tenant::tenant_review;
    pub use serde_json::{Value, json};
    pub use tiergate::admission::Request;
    pub use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate};
    pub use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    pub use tiergate::view::Snapshot;

    pub const BRONZE: &str = "ml-team-dev";
    pub const MULTIKUEUE: &str = "system:serviceaccount:kueue-system:multikueue";
    pub const ORIGIN: &str = "kueue.x-k8s.io/multikueue-origin";
    pub const PREBUILT: &str = "kueue.x-k8s.io/prebuilt-workload-name";

    /// The worker's snapshot: the sample policy, trusting MultiKueue's identity.
    pub fn worker() -> Snapshot {
        let mut policy = load_policy(None).unwrap();
        policy.spec.admission.multi_kueue_users = vec![MULTIKUEUE.to_owned()];
        build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None)
    }

    /// A bronze Job asking for an H100, with `labels`.
    pub fn h100_job(labels: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": BRONZE, "labels": labels},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "nodeSelector": {"gpu.nvidia.com/class": "h100"},
                "containers": [{"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}})
    }

    pub fn decide(request: &Request) -> Decision {
        mutate(request, &worker(), &AdmissionInputs::default())
    }

    /// `review` as user `user` instead of the tenant.
    pub fn as_user(mut review: Request, user: &str) -> Request {
        review.user_info.username = Some(user.to_owned());
        review
    }

    pub fn denial(decision: &Decision) -> &str {
        match &decision.verdict {
            Verdict::Deny { reason, message } => {
                assert_eq!(*reason, "multikueue_mark_forged");
                message
            }
            other => panic!("expected a denial, got {other:?}"),
        }
    }
}

#[test]
fn a_tenant_adding_the_multikueue_origin_label_to_skip_the_webhook_is_denied() {
    let job = h100_job(json!({ORIGIN: "multikueue"}));
    let decision = decide(&tenant_review("CREATE", &job, None, false, &[]));
    let message = denial(&decision);
    assert!(message.contains("kueue.x-k8s.io/multikueue-origin"), "{message}");
    assert!(message.contains("mallory is not one of spec.admission.multiKueueUsers"), "{message}");
}

#[test]
fn a_tenant_adding_a_prebuilt_workload_label_to_borrow_a_workload_is_denied() {
    let job = h100_job(json!({PREBUILT: "job-someone-else-1a2b"}));
    let message = denial(&decide(&tenant_review("CREATE", &job, None, false, &[]))).to_owned();
    assert!(message.contains(PREBUILT), "{message}");
}

#[test]
fn a_tenant_service_account_listed_as_multikueue_still_cannot_mark_its_own_jobs() {
    let mut snapshot = worker();
    let mut policy = (**snapshot.policy.as_ref().unwrap()).clone();
    let own = format!("system:serviceaccount:{BRONZE}:default");
    policy.spec.admission.multi_kueue_users.push(own.clone());
    snapshot.policy = Some(std::sync::Arc::new(policy));
    let job = h100_job(json!({ORIGIN: "multikueue"}));
    let review = as_user(tenant_review("CREATE", &job, None, false, &[]), &own);
    let decision = mutate(&review, &snapshot, &AdmissionInputs::default());
    assert!(denial(&decision).contains(&own));
}

#[test]
fn a_tenant_adding_the_mark_by_update_is_denied() {
    let old = h100_job(json!({}));
    let new = h100_job(json!({ORIGIN: "multikueue"}));
    let decision = decide(&tenant_review("UPDATE", &new, Some(&old), false, &[]));
    denial(&decision);
}

#[test]
fn a_copy_multikueue_dispatched_passes_unchanged_with_no_second_queue_or_suspension() {
    let copy = h100_job(json!({ORIGIN: "multikueue", PREBUILT: "job-train-3f2a",
                               "kueue.x-k8s.io/queue-name": "tiergate-gold"}));
    let decision = decide(&as_user(tenant_review("CREATE", &copy, None, false, &[]), MULTIKUEUE));
    assert_eq!(decision.verdict, Verdict::Skip { reason: "multikueue_copy" });
    assert!(decision.patch.is_empty(), "{:?}", decision.patch);
}

#[test]
fn without_the_mark_the_same_job_from_the_multikueue_user_is_confined_like_any_other() {
    let job = h100_job(json!({}));
    let decision = decide(&as_user(tenant_review("CREATE", &job, None, false, &[]), MULTIKUEUE));
    assert!(
        matches!(decision.verdict, Verdict::Deny { reason: "foreign_gpu_class", .. }),
        "an unmarked Job is decided by the tier rules, whoever writes it: {:?}",
        decision.verdict
    );
}

/// The management cluster's snapshot: the sample policy with bronze dispatching to worker `us-east`.
fn management_dispatching_bronze() -> Snapshot {
    let mut policy = load_policy(None).unwrap();
    policy.spec.clusters = vec![
        serde_json::from_value(json!({"name": "us-east",
            "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "us-east-kubeconfig"}}}))
        .unwrap(),
    ];
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.dispatch = Some(serde_json::from_value(json!({"clusters": ["us-east"]})).unwrap());
    build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None)
}

/// A bronze Job on its own class, with `spec` merged in.
fn bronze_job(spec: Value) -> Value {
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    for (key, value) in spec.as_object().unwrap() {
        job["spec"][key] = value.clone();
    }
    job
}

fn managed_by_after(snapshot: &Snapshot, operation: &str, job: &Value, old: Option<&Value>) -> Option<String> {
    let decision = mutate(&tenant_review(operation, job, old, false, &[]), snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    let object = decision.final_object(job).unwrap_or_else(|| job.clone());
    object.pointer("/spec/managedBy").and_then(Value::as_str).map(str::to_owned)
}

#[test]
fn a_job_of_a_dispatching_tier_is_handed_to_multikueue_as_kueues_webhook_would_if_it_saw_the_queue() {
    let snapshot = management_dispatching_bronze();
    assert_eq!(
        managed_by_after(&snapshot, "CREATE", &bronze_job(json!({})), None).as_deref(),
        Some("kueue.x-k8s.io/multikueue")
    );
    let own_controller = bronze_job(json!({"managedBy": "kubernetes.io/job-controller"}));
    assert_eq!(
        managed_by_after(&snapshot, "CREATE", &own_controller, None).as_deref(),
        Some("kueue.x-k8s.io/multikueue"),
        "the kind's own controller is replaced, as Kueue's CanDefaultManagedBy allows"
    );
}

#[test]
fn a_tier_that_does_not_dispatch_never_gets_multikueue_as_its_controller() {
    let worker = worker();
    assert_eq!(managed_by_after(&worker, "CREATE", &bronze_job(json!({})), None), None);
}

#[test]
fn a_tenants_own_controller_is_kept_and_an_update_never_changes_managed_by() {
    let snapshot = management_dispatching_bronze();
    let custom = bronze_job(json!({"managedBy": "example.com/my-controller"}));
    assert_eq!(
        managed_by_after(&snapshot, "CREATE", &custom, None).as_deref(),
        Some("example.com/my-controller"),
        "a controller other than the kind's own is the user's choice (Kueue then refuses to dispatch it; it stays \
         suspended in the tier's queue, never outside it)"
    );
    let stored = bronze_job(json!({"suspend": true}));
    assert_eq!(managed_by_after(&snapshot, "UPDATE", &stored, Some(&stored)), None, "spec.managedBy is immutable");
}
