//! Attacks on the cohort tree (issue 28): a tenant of a borrowing tier naming the lender's queue, picking a priority
//! that would make its borrowed workloads un-reclaimable, or reaching another division's queue through the tree;
//! and policy mistakes in the tree, which are refused (the daemon keeps the last good state), never applied.
//!
//! The tenant is in tier silver of `samples/org-tree` (namespace `ml-training`), which borrows gold's H100s.
#![cfg(test)]

use crate::tenant::tenant_review;
use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{load_cluster_view, parse_policy};
use tiergate::plan::desired;
use tiergate::policy::TierPolicy;
use tiergate::validation::validate_policy;

const SILVER: &str = "ml-training";

fn org_tree_text() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/org-tree/policy.yaml")).unwrap()
}

fn org_tree() -> TierPolicy {
    parse_policy(&org_tree_text(), "org-tree").unwrap()
}

fn view() -> tiergate::view::ClusterView {
    load_cluster_view(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/org-tree/cluster.yaml")))
        .unwrap()
}

/// A one-GPU Job in silver's namespace with `labels`, as the webhook patches it (failing on anything but allow).
fn admitted_silver_job(labels: Value) -> Value {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": SILVER, "labels": labels},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "img",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let request = tenant_review("CREATE", &job, None, false, &["tenant-silver"]);
    let snapshot = build_static_snapshot(org_tree(), view(), Some("tiergate-system".into()));
    let decision = mutate(&request, &snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let mut object = job;
    json_patch::patch(&mut object, &decision.patch).unwrap();
    object
}

#[test]
fn a_silver_job_naming_gold_s_queue_is_put_back_in_silver_s_queue() {
    let job = admitted_silver_job(json!({"kueue.x-k8s.io/queue-name": "tiergate-gold"}));
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-silver");
    assert_eq!(job["spec"]["suspend"], true);
}

#[test]
fn a_silver_job_labelled_with_the_top_priority_is_clamped_so_gold_can_still_reclaim_it() {
    // In the sample gold reclaims Always; were it LowerPriority, a borrower at the top bucket would be out of reach,
    // which validation refuses (see below). The webhook keeps silver under its ceiling either way.
    let mut policy = org_tree();
    for tier in policy.spec.tiers.iter_mut().filter(|tier| tier.name != "gold") {
        tier.max_priority_class = Some("gpu-high".into());
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": SILVER, "labels": {"kueue.x-k8s.io/priority-class": "gpu-ultra"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "img",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let request = tenant_review("CREATE", &job, None, false, &["tenant-silver"]);
    let snapshot = build_static_snapshot(policy, view(), Some("tiergate-system".into()));
    let decision = mutate(&request, &snapshot, &AdmissionInputs::default());
    let mut object = job;
    json_patch::patch(&mut object, &decision.patch).unwrap();
    assert_eq!(object["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
}

#[test]
fn sharing_a_cohort_tree_never_lets_a_namespace_into_another_tier_s_cluster_queue() {
    let policy = org_tree();
    let desired = desired(&policy, &view());
    for queue in &desired.cluster_queues {
        let name = queue.metadata.name.clone().unwrap_or_default();
        let tier = name.strip_prefix("tiergate-").unwrap();
        let selector = queue.spec.namespace_selector.as_ref().unwrap();
        assert_eq!(selector.match_expressions, None, "{name}");
        let labels = selector.match_labels.clone().unwrap();
        assert_eq!(labels.len(), 1, "{name}: {labels:?}");
        assert_eq!(labels.get("tiergate.io/tier").map(String::as_str), Some(tier), "{name}");
    }
    // Each namespace's LocalQueue leads to its own tier's ClusterQueue only.
    for queue in &desired.local_queues {
        let namespace = queue.metadata.namespace.clone().unwrap();
        let tier = view()
            .namespaces
            .iter()
            .find(|view| view.name == namespace)
            .unwrap()
            .labels
            .get("tiergate.io/tier")
            .unwrap()
            .to_owned();
        assert_eq!(queue.spec.cluster_queue, format!("tiergate-{tier}"), "{namespace}");
    }
}

/// The sample with `from` replaced by `to` (exactly once), validated: the refusal's messages.
fn refused(from: &str, to: &str) -> String {
    let text = org_tree_text();
    assert_eq!(text.matches(from).count(), 1, "{from:?} must occur once in the sample");
    let policy = parse_policy(&text.replacen(from, to, 1), "policy.yaml").unwrap();
    validate_policy(&policy).expect_err("the policy should be refused").to_string()
}

#[test]
fn a_cycle_in_the_tree_is_refused_not_applied() {
    let message = refused("    - name: org\n", "    - name: org\n      parent: batch\n");
    assert!(message.contains("spec.cohorts[0].parent: cohort \"org\" is its own ancestor"), "{message}");
}

#[test]
fn a_typo_in_a_tier_s_cohort_is_refused_naming_the_declared_ones() {
    let message = refused("      cohort: batch\n", "      cohort: bacth\n");
    assert!(message.contains("cohort \"bacth\" is not declared under spec.cohorts"), "{message}");
    assert!(message.contains("use one of [\"org\", \"research\", \"batch\"]"), "{message}");
}

#[test]
fn a_floor_above_gold_s_quota_is_refused_not_lent_as_zero() {
    let message = refused("floor: {nvidia.com/gpu: \"4\"", "floor: {nvidia.com/gpu: \"40\"");
    assert!(message.contains("floor \"40\" is above the nominal quota \"16\""), "{message}");
}

#[test]
fn a_tree_whose_lender_never_reclaims_is_refused_naming_the_borrowers() {
    let message = refused("        reclaim: Always\n", "        reclaim: Never\n");
    assert!(message.contains("tier \"silver\" borrows in the tree of cohort \"org\""), "{message}");
    assert!(message.contains("tier \"bronze\" borrows"), "{message}");
}

#[test]
fn a_weight_of_zero_is_refused() {
    let message = refused("      parent: org\n      weight: \"2\"\n", "      parent: org\n      weight: \"0\"\n");
    assert!(message.contains("spec.cohorts[1].weight: weight \"0\" is not above 0"), "{message}");
}
