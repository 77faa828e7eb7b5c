//! Fair sharing among a tier's tenants (issue 50): a tenant cannot raise its own weight. The weight lives on the
//! LocalQueue tiergate owns, derived from the policy and the namespace's labels only; a workload's labels and
//! annotations never reach it, and a tenant's edit of the LocalQueue is drift the daemon applies back.
#![cfg(test)]

use std::path::Path;

use kube::core::DynamicObject;
use serde_json::json;
use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::reconcile::desired::{build_desired_set, build_dynamic_object};
use tiergate::reconcile::diff::{ApplyNeed, build_apply_need};
use tiergate::reconcile::kinds::KueueKind;
use tiergate::reconcile::live::LiveObject;

fn sample(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/tenant-sharing").join(file)
}

/// The LocalQueues of the sample, stamped as the daemon applies them, by namespace.
fn applied_local_queues() -> Vec<DynamicObject> {
    let mut policy = load_policy(Some(&sample("policy.yaml"))).unwrap();
    policy.metadata.uid = Some("uid-1".to_owned());
    let view = load_cluster_view(&sample("cluster.yaml")).unwrap();
    let objects =
        desired(&policy, &view).local_queues.iter().map(|queue| build_dynamic_object(queue).unwrap()).collect();
    build_desired_set(&policy, objects, None).unwrap().objects.into_iter().map(|desired| desired.object).collect()
}

fn weight_of(queues: &[DynamicObject], namespace: &str) -> Option<String> {
    let queue = queues.iter().find(|queue| queue.metadata.namespace.as_deref() == Some(namespace))?;
    queue.data["spec"]["fairSharing"]["weight"].as_str().map(str::to_owned)
}

#[test]
fn weights_come_from_the_namespaces_label_and_the_policy_only() {
    let queues = applied_local_queues();
    assert_eq!(weight_of(&queues, "team-a").as_deref(), Some("1"));
    assert_eq!(weight_of(&queues, "team-b").as_deref(), Some("2"), "the platform's namespace label");
    assert_eq!(weight_of(&queues, "team-research").as_deref(), Some("2"), "the policy's team: research entry");
    assert_eq!(weight_of(&queues, "ml-prod"), None, "gold does not share among its tenants");
}

#[test]
fn a_tenant_raising_its_weight_on_the_local_queue_is_drift_the_daemon_applies_back() {
    let queues = applied_local_queues();
    let desired = queues.iter().find(|queue| queue.metadata.namespace.as_deref() == Some("team-a")).unwrap();
    let mut edited = desired.clone();
    edited.data["spec"]["fairSharing"] = json!({"weight": "1000"});
    let live = LiveObject::from_dynamic(KueueKind::LocalQueue, edited);
    assert_eq!(build_apply_need(desired, Some(&live)), ApplyNeed::Drifted);
    let mut removed = desired.clone();
    removed.data["spec"].as_object_mut().unwrap().remove("fairSharing");
    let live = LiveObject::from_dynamic(KueueKind::LocalQueue, removed);
    assert_eq!(build_apply_need(desired, Some(&live)), ApplyNeed::Drifted, "a dropped weight is put back too");
    let live = LiveObject::from_dynamic(KueueKind::LocalQueue, desired.clone());
    assert_eq!(build_apply_need(desired, Some(&live)), ApplyNeed::UpToDate);
}
