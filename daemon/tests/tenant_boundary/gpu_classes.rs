//! GPU classes and priorities: foreign class labels by any field, unrecognised GPU resources, self-service priority.
//!
//! Every test is an attack by a tenant of tier bronze (namespace `ml-team-dev`, GPU class l4, priority ceiling
//! gpu-high in the sample policy) and asserts the refusal with its message, or the final object after the patch.
#![cfg(test)]

use std::sync::Arc;

use crate::tenant::{denied, parse_tenant_body, tenant_review, tenant_review_body};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, decide_review, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::metrics::Metrics;
use tiergate::placement::PlacementLedger;
use tiergate::policy::{CeilingAction, DraClaimAction, TierPolicy};
use tiergate::scoring::{ScoreOutcome, ScoreSource, Scorer};
use tiergate::view::Snapshot;

const BRONZE: &str = "ml-team-dev";
const GOLD: &str = "ml-research";
const L4: &str = "gpu.nvidia.com/class";

// ---- builders ----

fn policy() -> TierPolicy {
    load_policy(None).unwrap()
}

fn snapshot_with(policy: TierPolicy) -> Snapshot {
    build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), Some("tiergate-system".into()))
}

fn container(resources: Value) -> Value {
    json!({"name": "main", "image": "img", "resources": resources})
}

fn cpu() -> Value {
    container(json!({"requests": {"cpu": "1"}}))
}

fn gpus(name: &str, count: &str) -> Value {
    container(json!({"limits": {name: count}}))
}

fn pod(namespace: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": spec})
}

fn with_template(kind: &str, namespace: &str, spec: Value) -> Value {
    let template = json!({"metadata": {"labels": {"app": "x"}}, "spec": spec});
    match kind {
        "Job" => json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": namespace},
            "spec": {"template": template}}),
        "Deployment" | "StatefulSet" => json!({"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "d", "namespace": namespace}, "spec": {"template": template}}),
        "JobSet" => json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": template}}}]}}),
        other => panic!("no builder for {other}"),
    }
}

fn review(operation: &str, object: &Value, old: Option<&Value>) -> Request {
    tenant_review(operation, object, old, false, &["tenant-bronze"])
}

fn create(object: &Value) -> Request {
    review("CREATE", object, None)
}

fn decide_with(policy: TierPolicy, request: &Request, score: Option<ScoreOutcome>) -> Decision {
    mutate(request, &snapshot_with(policy), &AdmissionInputs { score, ..AdmissionInputs::default() })
}

fn decide(request: &Request) -> Decision {
    decide_with(policy(), request, None)
}

/// The webhook under `podsNamingNodes: CheckNodeClass`, where it looks up the node a pod names.
fn decide_checking_node_class(request: &Request) -> Decision {
    let mut policy = policy();
    policy.spec.admission.pods_naming_nodes = tiergate::policy::NodeNameAction::CheckNodeClass;
    decide_with(policy, request, None)
}

/// The whole webhook path: real placement ledger and built-in scorer, as the server runs it.
fn decide_pipeline(request: &Request) -> Decision {
    let metrics = Arc::new(Metrics::default());
    let snapshot = snapshot_with(policy());
    let ledger = PlacementLedger::new(metrics.clone());
    let scorer = Scorer::new(None, metrics);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(decide_review(request, &snapshot, &ledger, &scorer))
}

fn patched(request: &Request, decision: &Decision) -> Value {
    let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
    json_patch::patch(&mut object, &decision.patch).unwrap();
    object
}

/// The pod spec of the admitted object (the Pod's spec or the first template's), failing on anything but allow.
fn admitted_spec(request: &Request, decision: &Decision) -> Value {
    assert_eq!(decision.verdict, Verdict::Allow, "{:?} {:?}", decision.reasons, decision.warnings);
    let object = patched(request, decision);
    let spec = match object["kind"].as_str().unwrap() {
        "Pod" => &object["spec"],
        "JobSet" => &object["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
        _ => &object["spec"]["template"]["spec"],
    };
    spec.clone()
}

/// The spec is held to the l4 class: its selector and the l4 toleration.
fn assert_confined_to_l4(spec: &Value) {
    assert_eq!(spec["nodeSelector"][L4], "l4", "{spec}");
    let toleration = json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"});
    assert!(spec["tolerations"].as_array().unwrap().contains(&toleration), "{spec}");
}

fn gpu_toleration() -> Value {
    json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
}

fn required(expression: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}})
}

fn score(priority_class: &str) -> ScoreOutcome {
    ScoreOutcome {
        priority_class: priority_class.into(),
        score: Some(95),
        chosen_gpu_class: None,
        avoid_job_types: Vec::new(),
        source: ScoreSource::Agent,
        warnings: Vec::new(),
        decided_at_unix: 1,
    }
}

// ---- class 1: a GPU class by any field ----

#[test]
fn bronze_pod_without_gpu_request_selecting_h100_is_refused() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "nodeSelector": {L4: "h100"}})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(message.contains("selects GPU class h100") && message.contains("tier bronze"), "{message}");
    assert!(message.contains("Fix: remove the nodeSelector gpu.nvidia.com/class"), "{message}");
}

#[test]
fn bronze_pod_tolerating_gpu_taint_without_selector_is_confined_to_l4() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": gpu_toleration()})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_tolerating_every_taint_with_an_empty_key_is_confined_to_l4() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": [{"operator": "Exists"}]})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_requesting_a_mig_slice_is_confined_to_l4() {
    let request = create(&pod(BRONZE, json!({"containers": [gpus("nvidia.com/mig-1g.5gb", "1")]})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_job_requesting_a_mig_slice_its_tier_has_no_quota_for_is_refused() {
    let job = with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/mig-1g.5gb", "1")]}));
    let message = denied(&decide(&create(&job)), "gpu_resource_without_quota");
    assert!(message.contains("nvidia.com/mig-1g.5gb, which tier bronze has no quota for"), "{message}");
}

#[test]
fn bronze_job_requesting_a_mig_slice_is_queued_and_confined_once_the_tier_has_quota_for_it() {
    let mut policy = policy();
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    let quota = bronze.quotas["nvidia.com/gpu"].clone();
    bronze.quotas.insert("nvidia.com/mig-1g.5gb".into(), quota);
    let request = create(&with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/mig-1g.5gb", "1")]})));
    let decision = decide_with(policy, &request, None);
    assert_confined_to_l4(&admitted_spec(&request, &decision));
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
    assert_eq!(job["spec"]["suspend"], true);
}

#[test]
fn bronze_pod_requesting_amd_gpu_is_refused() {
    let request = create(&pod(BRONZE, json!({"containers": [gpus("amd.com/gpu", "1")]})));
    let message = denied(&decide(&request), "unprovided_gpu_resource");
    assert!(message.contains("requests amd.com/gpu, a GPU resource no class of the tier provides"), "{message}");
    assert!(message.contains("Fix: request one of [nvidia.com/gpu, nvidia.com/mig-*]"), "{message}");
}

#[test]
fn bronze_pod_requesting_intel_gpu_is_refused() {
    let request = create(&pod(BRONZE, json!({"containers": [gpus("gpu.intel.com/i915", "1")]})));
    let message = denied(&decide(&request), "unprovided_gpu_resource");
    assert!(message.contains("gpu.intel.com/i915"), "{message}");
}

#[test]
fn bronze_pod_requesting_a_gpu_through_pod_level_resources_is_confined_to_l4() {
    let spec = json!({"containers": [cpu()], "resources": {"limits": {"nvidia.com/gpu": "1"}}});
    let request = create(&pod(BRONZE, spec));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_requesting_a_gpu_only_in_an_init_container_is_confined_to_l4() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "initContainers": [gpus("nvidia.com/gpu", "1")]})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_with_a_direct_dra_resource_claim_is_refused() {
    let spec = json!({"containers": [cpu()], "resourceClaims": [{"name": "gpu", "resourceClaimName": "h100"}]});
    let message = denied(&decide(&create(&pod(BRONZE, spec))), "dra_direct_claim");
    assert!(
        message.contains("spec.resourceClaims[0].resourceClaimName") && message.contains("resourceClaimTemplateName"),
        "{message}"
    );
}

#[test]
fn bronze_pod_with_a_dra_resource_claim_is_confined_to_l4_when_the_policy_says_confine() {
    let mut policy = policy();
    policy.spec.admission.dra_claims = DraClaimAction::Confine;
    let spec = json!({"containers": [cpu()], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "h100"}]});
    let request = create(&pod(BRONZE, spec));
    assert_confined_to_l4(&admitted_spec(&request, &decide_with(policy, &request, None)));
}

#[test]
fn bronze_pod_with_required_affinity_in_h100_is_refused() {
    let affinity = required(json!({"key": L4, "operator": "In", "values": ["l4", "h100"]}));
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(
        message.contains("affinity.nodeAffinity (required) gpu.nvidia.com/class In [h100] reaches GPU class h100"),
        "{message}"
    );
}

#[test]
fn bronze_gpu_pod_with_required_affinity_in_an_unknown_class_value_is_refused() {
    let affinity = required(json!({"key": L4, "operator": "In", "values": ["h200"]}));
    let request = create(&pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")], "affinity": affinity})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(message.contains("gpu.nvidia.com/class=h200, which is no GPU class of the policy"), "{message}");
}

#[test]
fn bronze_pod_with_required_affinity_exists_on_the_class_label_is_confined_to_l4() {
    let affinity = required(json!({"key": L4, "operator": "Exists"}));
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity.clone()})));
    let spec = admitted_spec(&request, &decide(&request));
    assert_confined_to_l4(&spec);
    assert_eq!(spec["affinity"], affinity, "the user's affinity is kept and ANDed with the selector");
}

#[test]
fn bronze_pod_with_required_affinity_not_in_l4_is_confined_to_l4() {
    let affinity = required(json!({"key": L4, "operator": "NotIn", "values": ["l4"]}));
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    // NotIn [l4] AND the l4 selector matches no node: the pod stays pending instead of landing on h100.
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_preferring_h100_by_affinity_is_confined_to_l4() {
    let affinity = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": L4, "operator": "In", "values": ["h100"]}]}}]}});
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_with_node_name_of_an_h100_node_is_refused_and_checking_the_node_names_its_class() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "nodeName": "gpu-h100-node-1"})));
    denied(&decide(&request), "pod_names_node");
    let message = denied(&decide_checking_node_class(&request), "foreign_gpu_class");
    assert!(message.contains("nodeName gpu-h100-node-1 reaches node gpu-h100-node-1 of GPU class h100"), "{message}");
}

#[test]
fn bronze_pod_with_node_name_of_its_own_l4_node_is_refused_or_under_check_node_class_confined_to_l4() {
    let request =
        create(&pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")], "nodeName": "gpu-l4-node-1"})));
    denied(&decide(&request), "pod_names_node");
    assert_confined_to_l4(&admitted_spec(&request, &decide_checking_node_class(&request)));
}

#[test]
fn bronze_pod_with_hostname_affinity_onto_an_h100_node_is_refused() {
    let affinity = required(json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-h100-node-1"]}));
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(message.contains("of GPU class h100"), "{message}");
}

#[test]
fn bronze_pod_with_match_fields_onto_an_h100_node_is_refused() {
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-h100-node-1"]}]}]}}});
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(message.contains("matchFields metadata.name gpu-h100-node-1"), "{message}");
}

#[test]
fn bronze_pod_with_a_hostname_node_selector_of_an_h100_node_is_refused() {
    let selector = json!({"kubernetes.io/hostname": "gpu-h100-node-1"});
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "nodeSelector": selector})));
    let message = denied(&decide(&request), "foreign_gpu_class");
    assert!(message.contains("nodeSelector gpu-h100-node-1 reaches node gpu-h100-node-1"), "{message}");
}

/// The API server keeps the last of repeated JSON members (Go's decoder). A body that repeats the template's
/// `nodeSelector` or the object's `annotations`, an empty one first, must be judged on the last ones: in the
/// typed pass and in the member-by-member reading a repeated request member forces.
#[test]
fn bronze_job_hiding_h100_behind_an_empty_repeated_member_is_refused() {
    let job = with_template(
        "Job",
        BRONZE,
        json!({"containers": [gpus("nvidia.com/gpu", "1")],
        "nodeSelector": {L4: "h100"}}),
    );
    let mut annotated = with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    annotated["metadata"]["annotations"] =
        json!({"smart-scheduler.io/schedule-strategy": "base=1,weight=1,nodeSelector=gpu.nvidia.com/class:h100"});
    let hidden = |object: &Value, member: &str| {
        let body = tenant_review_body("CREATE", object, None, false, &["tenant-bronze"]);
        let repeated = format!(r#""{member}":{{}},"{member}":{{"#);
        let body = body.replacen(&format!(r#""{member}":{{"#), &repeated, 1);
        assert!(body.contains(&repeated), "{body}");
        // The same body with a repeated request `uid`, which the typed pass refuses: read member by member.
        let by_member = body.replacen(r#""uid":"u1""#, r#""uid":"u0","uid":"u1""#, 1);
        [body, by_member]
    };
    for body in hidden(&job, "nodeSelector") {
        let request = parse_tenant_body(body.as_bytes());
        assert_eq!(request.uid, "u1");
        let message = denied(&decide(&request), "foreign_gpu_class");
        assert!(message.contains("GPU class h100"), "{message}");
    }
    for body in hidden(&annotated, "annotations") {
        let message = denied(&decide(&parse_tenant_body(body.as_bytes())), "foreign_gpu_class");
        assert!(message.contains("of smart-scheduler.io/schedule-strategy selects GPU class h100"), "{message}");
    }
}

#[test]
fn bronze_cpu_pod_with_a_strategy_annotation_naming_h100_labels_is_refused_not_given_the_h100_selector() {
    let mut object = pod(BRONZE, json!({"containers": [cpu()]}));
    object["metadata"]["annotations"] =
        json!({"smart-scheduler.io/schedule-strategy": "base=1,weight=1,nodeSelector=gpu.nvidia.com/class:h100"});
    let decision = decide_pipeline(&create(&object));
    let message = denied(&decision, "foreign_gpu_class");
    assert!(message.contains("of smart-scheduler.io/schedule-strategy selects GPU class h100"), "{message}");
    assert!(decision.patch.0.is_empty(), "tiergate wrote nothing");
}

#[test]
fn bronze_pod_pinned_by_a_gpu_scheduling_map_onto_an_h100_node_is_refused() {
    let mut object = pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    object["metadata"]["labels"] = json!({"apps.kubernetes.io/pod-index": "0"});
    object["metadata"]["annotations"] = json!({"gpu-scheduling-map": "0=gpu-h100-node-1:0\n"});
    let decision = decide_pipeline(&create(&object));
    let message = denied(&decision, "foreign_gpu_class");
    assert!(message.contains("kubernetes.io/hostname") || message.contains("gpu-h100-node-1"), "{message}");
    assert!(message.contains("of GPU class h100"), "{message}");
    assert!(message.contains("written by tiergate"), "{message}");
}

#[test]
fn bronze_job_template_selecting_h100_without_gpu_request_is_refused() {
    let job = with_template("Job", BRONZE, json!({"containers": [cpu()], "nodeSelector": {L4: "h100"}}));
    denied(&decide(&create(&job)), "foreign_gpu_class");
}

#[test]
fn bronze_job_template_tolerating_the_gpu_taint_is_queued_and_confined_to_l4() {
    let request =
        create(&with_template("Job", BRONZE, json!({"containers": [cpu()], "tolerations": gpu_toleration()})));
    let decision = decide(&request);
    assert_confined_to_l4(&admitted_spec(&request, &decision));
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
    assert_eq!(job["spec"]["suspend"], true);
}

#[test]
fn bronze_deployment_template_tolerating_the_gpu_taint_is_confined_to_l4() {
    let spec = json!({"containers": [cpu()], "tolerations": gpu_toleration()});
    let request = create(&with_template("Deployment", BRONZE, spec));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_statefulset_template_with_required_affinity_in_h100_is_refused() {
    let affinity = required(json!({"key": L4, "operator": "In", "values": ["h100"]}));
    let spec = json!({"containers": [gpus("nvidia.com/gpu", "1")], "affinity": affinity});
    denied(&decide(&create(&with_template("StatefulSet", BRONZE, spec))), "foreign_gpu_class");
}

#[test]
fn bronze_jobset_template_requesting_amd_gpu_is_refused() {
    let jobset = with_template("JobSet", BRONZE, json!({"containers": [gpus("amd.com/gpu", "2")]}));
    denied(&decide(&create(&jobset)), "unprovided_gpu_resource");
}

#[test]
fn bronze_jobset_template_with_pod_level_gpu_resources_is_confined_to_l4() {
    let spec = json!({"containers": [cpu()], "resources": {"requests": {"nvidia.com/gpu": "1"}}});
    let request = create(&with_template("JobSet", BRONZE, spec));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_deployment_update_adding_required_affinity_in_h100_is_refused() {
    let old = with_template("Deployment", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["affinity"] = required(json!({"key": L4, "operator": "In", "values": ["h100"]}));
    denied(&decide(&review("UPDATE", &new, Some(&old))), "foreign_gpu_class");
}

#[test]
fn bronze_deployment_update_adding_a_gpu_toleration_is_confined_to_l4() {
    let old = with_template("Deployment", BRONZE, json!({"containers": [cpu()]}));
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["tolerations"] = gpu_toleration();
    let request = review("UPDATE", &new, Some(&old));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn gold_pod_selecting_its_own_h100_without_gpu_request_is_allowed_on_h100() {
    let request = create(&pod(GOLD, json!({"containers": [cpu()], "nodeSelector": {L4: "h100"}})));
    let spec = admitted_spec(&request, &decide(&request));
    assert_eq!(spec["nodeSelector"], json!({L4: "h100"}));
}

#[test]
fn bronze_cpu_pod_with_no_route_to_gpu_nodes_is_left_alone() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "nodeSelector": {"zone": "a"}})));
    let decision = decide(&request);
    assert_eq!(decision.verdict, Verdict::Skip { reason: "no_gpu_request" });
    assert!(decision.patch.0.is_empty());
}

// ---- class 4: priority is tied to the tier ----

fn job_with_priority(label: &str) -> Value {
    let mut job = with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    job["metadata"]["labels"] = json!({"kueue.x-k8s.io/priority-class": label});
    job
}

#[test]
fn bronze_job_with_user_priority_label_gpu_ultra_is_clamped_to_gpu_high() {
    let request = create(&job_with_priority("gpu-ultra"));
    let decision = decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
    assert!(decision.warnings.iter().any(|warning| warning.contains("gpu-ultra replaced by gpu-high")), "{decision:?}");
}

#[test]
fn bronze_cpu_job_with_user_priority_label_gpu_ultra_is_clamped_too() {
    let mut job = with_template("Job", BRONZE, json!({"containers": [cpu()]}));
    job["metadata"]["labels"] = json!({"kueue.x-k8s.io/priority-class": "gpu-ultra"});
    let request = create(&job);
    let job = patched(&request, &decide(&request));
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
}

#[test]
fn bronze_job_with_user_priority_label_gpu_ultra_is_refused_when_the_policy_says_deny() {
    let mut policy = policy();
    policy.spec.admission.priority_above_ceiling = CeilingAction::Deny;
    let message =
        denied(&decide_with(policy, &create(&job_with_priority("gpu-ultra")), None), "priority_above_ceiling");
    assert!(message.contains("metadata.labels[\"kueue.x-k8s.io/priority-class\"] is gpu-ultra"), "{message}");
    assert!(message.contains("tier bronze may use gpu-high or below"), "{message}");
}

#[test]
fn bronze_job_with_a_priority_label_naming_no_bucket_is_clamped_to_gpu_high() {
    let request = create(&job_with_priority("system-critical-batch"));
    let decision = decide(&request);
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
    assert!(decision.warnings.iter().any(|warning| warning.contains("is not a priority bucket")), "{decision:?}");
}

#[test]
fn bronze_pod_with_a_priority_label_gpu_ultra_is_clamped_for_kueue_pod_integration() {
    let mut object = pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    object["metadata"]["labels"] = json!({"kueue.x-k8s.io/priority-class": "gpu-ultra"});
    let request = create(&object);
    let pod = patched(&request, &decide(&request));
    assert_eq!(pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
}

#[test]
fn agent_score_in_the_top_bucket_is_clamped_to_the_bronze_ceiling() {
    let job = with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    let request = create(&job);
    let decision = decide_with(policy(), &request, Some(score("gpu-ultra")));
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
    assert!(decision.warnings.iter().any(|warning| warning.contains("clamped to gpu-high")), "{decision:?}");
}

#[test]
fn gold_job_keeps_a_top_bucket_score() {
    let request = create(&with_template("Job", GOLD, json!({"containers": [gpus("nvidia.com/gpu", "1")]})));
    let job = patched(&request, &decide_with(policy(), &request, Some(score("gpu-ultra"))));
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-ultra");
}

#[test]
fn builtin_scorer_gpu_mem_gi_24_on_bronze_is_clamped_to_gpu_high() {
    let mut job = with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]}));
    job["metadata"]["annotations"] = json!({"app.kubernetes.io/job-type": "train-bert", "gpu.mem.gi": "24"});
    let request = create(&job);
    let decision = decide_pipeline(&request);
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high", "{:?}", decision.warnings);
    let clamped = "maps to priority class gpu-ultra, above tier bronze's ceiling; clamped to gpu-high";
    assert!(decision.warnings.iter().any(|warning| warning.contains(clamped)), "{:?}", decision.warnings);
}

#[test]
fn bronze_job_with_a_pod_priority_class_name_gets_the_tier_default_priority_label() {
    let spec = json!({"containers": [gpus("nvidia.com/gpu", "1")], "priorityClassName": "team-urgent"});
    let request = create(&with_template("Job", BRONZE, spec));
    let job = patched(&request, &decide(&request));
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-default");
}

#[test]
fn bronze_job_update_raising_its_priority_label_to_gpu_ultra_is_undone() {
    // Priority is decided at creation: an UPDATE cannot raise it, not even up to the ceiling (UPDATE sequences).
    let old = job_with_priority("gpu-default");
    let mut new = old.clone();
    new["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = json!("gpu-ultra");
    let request = review("UPDATE", &new, Some(&old));
    let decision = decide(&request);
    let job = patched(&request, &decision);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-default");
    assert!(decision.warnings.iter().any(|warning| warning.contains("was undone")), "{:?}", decision.warnings);
}

#[test]
fn an_admin_group_may_keep_a_priority_label_above_the_tier_ceiling() {
    let mut policy = policy();
    policy.spec.admission.admin_groups = vec!["tenant-bronze".into()];
    let request = create(&job_with_priority("gpu-ultra"));
    let job = patched(&request, &decide_with(policy, &request, None));
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-ultra");
}

#[test]
fn bronze_pod_preferring_an_h100_node_by_hostname_is_confined_to_l4_not_refused() {
    let affinity = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
        "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-h100-node-1"]}]}}]}});
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "affinity": affinity})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_with_a_second_required_term_naming_an_h100_node_is_refused() {
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": L4, "operator": "In", "values": ["l4"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-h100-node-1"]}]}]}}});
    let request = create(&pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")], "affinity": affinity})));
    denied(&decide(&request), "foreign_gpu_class");
}

#[test]
fn bronze_pod_requesting_time_sliced_shared_gpus_of_no_class_is_refused() {
    let request = create(&pod(BRONZE, json!({"containers": [gpus("nvidia.com/gpu.shared", "1")]})));
    let message = denied(&decide(&request), "unprovided_gpu_resource");
    assert!(message.contains("nvidia.com/gpu.shared"), "{message}");
}

#[test]
fn bronze_pod_requesting_a_zero_quantity_of_amd_gpu_is_not_refused_for_it() {
    let request = create(&pod(BRONZE, json!({"containers": [gpus("amd.com/gpu", "0")]})));
    assert_eq!(decide(&request).verdict, Verdict::Skip { reason: "no_gpu_request" });
}

#[test]
fn bronze_pod_tolerating_only_a_no_execute_gpu_taint_is_not_a_gpu_pod() {
    let toleration = json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]);
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": toleration})));
    // The class taint is NoSchedule: this toleration does not let the pod onto GPU nodes.
    assert_eq!(decide(&request).verdict, Verdict::Skip { reason: "no_gpu_request" });
}

#[test]
fn bronze_pod_with_a_toleration_of_the_gpu_taint_value_present_is_confined_to_l4() {
    let toleration = json!([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]);
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": toleration})));
    assert_confined_to_l4(&admitted_spec(&request, &decide(&request)));
}

#[test]
fn bronze_pod_with_node_name_of_a_node_tiergate_does_not_know_is_refused_or_under_check_node_class_confined() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "nodeName": "node-added-later"})));
    denied(&decide(&request), "pod_names_node");
    // The kubelet enforces the nodeSelector on a pod bound by nodeName: an unknown node must carry the l4 labels.
    assert_confined_to_l4(&admitted_spec(&request, &decide_checking_node_class(&request)));
}

#[test]
fn bronze_job_with_both_a_gold_selector_and_a_priority_label_is_refused_and_not_patched() {
    let mut job = job_with_priority("gpu-ultra");
    job["spec"]["template"]["spec"]["nodeSelector"] = json!({L4: "h100"});
    let decision = decide(&create(&job));
    denied(&decision, "foreign_gpu_class");
    assert!(decision.patch.0.is_empty());
}

#[test]
fn the_webhook_is_idempotent_on_a_confined_bronze_pod() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": gpu_toleration()})));
    let once = patched(&request, &decide(&request));
    let again = create(&once);
    let decision = decide(&again);
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.patch.0, Vec::new(), "the confined pod needs no second patch");
}

#[test]
fn bronze_pod_update_adding_a_gpu_toleration_to_a_pending_cpu_pod_is_refused() {
    let old = pod(BRONZE, json!({"containers": [cpu()]}));
    let mut new = old.clone();
    new["spec"]["tolerations"] = gpu_toleration();
    let message = denied(&decide(&review("UPDATE", &new, Some(&old))), "unconfinable_update");
    assert!(message.contains("tolerates the GPU taint nvidia.com/gpu"), "{message}");
    assert!(message.contains("Fix: create a new Pod"), "{message}");
}

#[test]
fn bronze_suspended_cpu_job_update_adding_a_gpu_toleration_is_refused() {
    let mut old = with_template("Job", BRONZE, json!({"containers": [cpu()]}));
    old["spec"]["suspend"] = json!(true);
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["tolerations"] = gpu_toleration();
    denied(&decide(&review("UPDATE", &new, Some(&old))), "unconfinable_update");
}

#[test]
fn bronze_suspended_job_update_switching_its_selector_to_h100_is_refused() {
    let old_request = create(&with_template("Job", BRONZE, json!({"containers": [gpus("nvidia.com/gpu", "1")]})));
    let old = patched(&old_request, &decide(&old_request));
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["nodeSelector"] = json!({L4: "h100"});
    denied(&decide(&review("UPDATE", &new, Some(&old))), "foreign_gpu_class");
}

#[test]
fn bronze_confined_pod_update_changing_nothing_is_allowed() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "tolerations": gpu_toleration()})));
    let confined = patched(&request, &decide(&request));
    let mut new = confined.clone();
    new["metadata"]["annotations"]["note"] = json!("x");
    let decision = decide(&review("UPDATE", &new, Some(&confined)));
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
}

#[test]
fn bronze_cpu_deployment_whose_strategy_has_an_h100_rule_is_refused_at_creation() {
    let mut deployment = with_template("Deployment", BRONZE, json!({"containers": [cpu()]}));
    deployment["metadata"]["annotations"] = json!({"smart-scheduler.io/schedule-strategy":
        "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=gpu.nvidia.com/class:h100"});
    let message = denied(&decide_pipeline(&create(&deployment)), "foreign_gpu_class");
    assert!(message.contains("of smart-scheduler.io/schedule-strategy selects GPU class h100"), "{message}");
}

#[test]
fn bronze_pod_whose_strategy_base_rule_is_harmless_but_second_rule_is_h100_is_refused() {
    let mut object = pod(BRONZE, json!({"containers": [cpu()]}));
    object["metadata"]["annotations"] = json!({"smart-scheduler.io/schedule-strategy":
        "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=gpu.nvidia.com/class:h100"});
    denied(&decide_pipeline(&create(&object)), "foreign_gpu_class");
}

#[test]
fn bronze_pod_with_a_custom_pod_strategy_naming_an_unknown_gpu_class_is_refused() {
    let mut object = pod(BRONZE, json!({"containers": [cpu()]}));
    object["metadata"]["annotations"] = json!({"UseCustomKubeScheduler": "true",
        "CustomPodScheduleStrategy": "gpu.nvidia.com/class=h200,base=1,weight=1"});
    let message = denied(&decide_pipeline(&create(&object)), "foreign_gpu_class");
    assert!(message.contains("of CustomPodScheduleStrategy selects gpu.nvidia.com/class=h200, which is no GPU class"));
}

#[test]
fn a_seed_deployment_strategy_on_cpu_node_types_is_still_admitted_in_bronze() {
    let mut deployment = with_template("Deployment", BRONZE, json!({"containers": [cpu()]}));
    deployment["metadata"]["annotations"] = json!({"smart-scheduler.io/schedule-strategy":
        "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot"});
    let decision = decide_pipeline(&create(&deployment));
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
}

#[test]
fn bronze_pod_queued_by_kueue_pod_integration_with_a_high_priority_class_name_gets_the_tier_default_label() {
    let mut object = pod(BRONZE, json!({"containers": [cpu()], "priorityClassName": "team-urgent"}));
    object["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"});
    let request = create(&object);
    let decision = decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let pod = patched(&request, &decision);
    assert_eq!(pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-default");
}

#[test]
fn bronze_pod_not_queued_with_a_priority_class_name_is_left_to_resource_quota_scopes() {
    let request = create(&pod(BRONZE, json!({"containers": [cpu()], "priorityClassName": "team-urgent"})));
    assert_eq!(decide(&request).verdict, Verdict::Skip { reason: "no_gpu_request" });
}
