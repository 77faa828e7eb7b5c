//! Karpenter NodePools tiergate renders (issue 51): a tenant of bronze (namespace `team-dev`, class l4 in
//! `samples/karpenter`) tries to make Karpenter buy another class's nodes by naming the pool itself
//! (`karpenter.sh/nodepool: tiergate-h100`) or its instance type, with the webhook up and down. Each attack ends in
//! a pod no rendered pool can launch a node for, or a refusal: the pools' taints fence them (validation requires
//! one), and a pod tolerating them is confined to its own tier's class.
#![cfg(test)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Value, json};
use tiergate::admission::{Verdict, build_static_snapshot, mutate};
use tiergate::check::{NodePool, parse_nodepools, pool_rejection};
use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::policy::TierPolicy;
use tiergate::view::ClusterView;

use crate::tenant::{denial, gate_in, tenant_review};

const BRONZE: &str = "team-dev";

fn sample(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/karpenter").join(file)
}

fn policy() -> TierPolicy {
    load_policy(Some(&sample("policy.yaml"))).unwrap()
}

fn view() -> ClusterView {
    load_cluster_view(&sample("cluster.yaml")).unwrap()
}

/// The NodePools tiergate renders for the sample, read the way `tiergate check` reads NodePools.
fn rendered_pools() -> Vec<NodePool> {
    let values = desired(&policy(), &view()).to_values().unwrap();
    let pools: Vec<Value> = values.into_iter().filter(|object| object["kind"] == "NodePool").collect();
    let text = pools.iter().map(|pool| serde_saphyr::to_string(pool).unwrap()).collect::<Vec<_>>().join("---\n");
    parse_nodepools(&text, "rendered").unwrap()
}

/// The rendered pools that could launch a node for a pod with `spec` (its nodeSelector and tolerations).
fn pools_that_fit(spec: &Value) -> Vec<String> {
    let selector: BTreeMap<String, String> = serde_json::from_value(spec["nodeSelector"].clone()).unwrap_or_default();
    let tolerations: Vec<Toleration> = serde_json::from_value(spec["tolerations"].clone()).unwrap_or_default();
    rendered_pools()
        .into_iter()
        .filter(|pool| pool_rejection(pool, &selector, &tolerations).is_none())
        .map(|pool| pool.name)
        .collect()
}

fn cpu_pod(spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "main", "image": "img", "resources": {"requests": {"cpu": "1"}}}]});
    for (key, value) in spec_extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE}, "spec": spec})
}

/// The pod spec the webhook lets through: patched when allowed, as sent when skipped (it reaches no GPU node).
fn admitted_spec(object: &Value) -> Value {
    let request = tenant_review("CREATE", object, None, false, &["tenant-bronze"]);
    let snapshot = build_static_snapshot(policy(), view(), Some("tiergate-system".into()));
    let decision = mutate(&request, &snapshot, &Default::default());
    assert!(
        matches!(decision.verdict, Verdict::Allow | Verdict::Skip { .. }),
        "{:?} {:?}",
        decision.verdict,
        decision.reasons
    );
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &decision.patch).unwrap();
    patched["spec"].clone()
}

#[test]
fn naming_the_h100_pool_and_tolerating_its_taint_is_confined_to_l4_so_no_pool_fits() {
    let pod = cpu_pod(json!({
        "nodeSelector": {"karpenter.sh/nodepool": "tiergate-h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }));
    assert_eq!(pools_that_fit(&pod["spec"]), ["tiergate-h100"], "as sent, the pod would buy an H100 node");
    let spec = admitted_spec(&pod);
    assert_eq!(spec["nodeSelector"]["gpu.nvidia.com/class"], "l4", "{spec}");
    assert!(pools_that_fit(&spec).is_empty(), "the confined pod still fits {:?}", pools_that_fit(&spec));
}

#[test]
fn naming_the_h100_pool_without_tolerating_its_taint_fits_no_pool() {
    let pod = cpu_pod(json!({"nodeSelector": {"karpenter.sh/nodepool": "tiergate-h100"}}));
    let spec = admitted_spec(&pod);
    assert!(pools_that_fit(&spec).is_empty(), "an untolerated taint must fence the pool: {:?}", pools_that_fit(&spec));
}

#[test]
fn naming_the_h100_instance_type_on_a_gpu_job_is_confined_to_l4_so_no_pool_fits() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": BRONZE},
        "spec": {"template": {"spec": {
            "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "containers": [{"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let request = tenant_review("CREATE", &job, None, false, &["tenant-bronze"]);
    let snapshot = build_static_snapshot(policy(), view(), Some("tiergate-system".into()));
    let decision = mutate(&request, &snapshot, &Default::default());
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let mut patched = job.clone();
    json_patch::patch(&mut patched, &decision.patch).unwrap();
    let spec = &patched["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"]["gpu.nvidia.com/class"], "l4", "{spec}");
    assert!(pools_that_fit(spec).is_empty(), "fits {:?}", pools_that_fit(spec));
}

#[test]
fn with_the_webhook_down_the_gate_refuses_a_pod_naming_the_h100_pool_and_tolerating_its_taint() {
    let pod = cpu_pod(json!({
        "nodeSelector": {"karpenter.sh/nodepool": "tiergate-h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }));
    let request = json!({"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": BRONZE, "name": "p",
        "operation": "CREATE", "userInfo": {"username": "mallory", "groups": ["tenant-bronze"]}, "object": pod});
    let message = denial(&gate_in(policy(), view(), request));
    assert!(message.contains("GPU pods must select a GPU class of this tier"), "{message}");
}
