//! Every NodePool tiergate renders is one Karpenter's v1 NodePool CRD accepts (`adapters/karpenter/crds/`): the
//! structural `openAPIV3Schema` (strict, as `kubectl apply` is) with `jsonschema`, and its CEL rules with
//! `kube-cel`; and the CRD refuses what policy validation refuses, so neither check is a no-op.

#![cfg(test)]

mod crd_schema_support;

use std::path::Path;

use crd_schema_support::strict;
use serde_json::{Value, json};
use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::validation::validate_policy;

fn nodepool_schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/karpenter/crds/karpenter.sh_nodepools.yaml");
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let version = crd["spec"]["versions"].as_array().unwrap().iter().find(|version| version["name"] == "v1").unwrap();
    version["schema"]["openAPIV3Schema"].clone()
}

fn crd_errors(object: &Value) -> Vec<String> {
    let schema = nodepool_schema();
    let structural = jsonschema::validator_for(&strict(&schema)).unwrap();
    let mut errors: Vec<String> =
        structural.iter_errors(object).map(|error| format!("{}: {error}", error.instance_path())).collect();
    if let Err(cel) = kube_cel::Validator::new().validate(&schema, object, None) {
        errors.extend(cel.iter().map(ToString::to_string));
    }
    errors
}

/// The NodePools `samples/<name>` renders.
fn sample_pools(name: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(name);
    let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    validate_policy(&policy).unwrap();
    let view = load_cluster_view(&dir.join("cluster.yaml")).unwrap();
    let values = desired(&policy, &view).to_values().unwrap();
    values.into_iter().filter(|object| object["kind"] == "NodePool").collect()
}

fn pool<'a>(pools: &'a [Value], name: &str) -> &'a Value {
    pools.iter().find(|pool| pool["metadata"]["name"] == name).unwrap()
}

#[test]
fn the_karpenter_samples_pools_are_accepted_by_karpenters_crd() {
    let pools = sample_pools("karpenter");
    assert_eq!(pools.len(), 2, "one NodePool per class with a template");
    for pool in &pools {
        let errors = crd_errors(pool);
        assert!(errors.is_empty(), "{}: {errors:#?}", pool["metadata"]["name"]);
        assert_eq!(pool["apiVersion"], "karpenter.sh/v1");
    }
}

#[test]
fn each_pools_gpu_limit_is_what_its_tiers_quota_can_admit_on_the_class() {
    let pools = sample_pools("karpenter");
    // h100: gold's 16 (silver's fallback flavor has no nominal quota, it borrows gold's).
    assert_eq!(pool(&pools, "tiergate-h100")["spec"]["limits"]["nvidia.com/gpu"], "16");
    // l4: silver's 8 and bronze's 4.
    assert_eq!(pool(&pools, "tiergate-l4")["spec"]["limits"]["nvidia.com/gpu"], "12");
    assert_eq!(pool(&pools, "tiergate-h100")["spec"]["limits"]["cpu"], "1536", "the template's own limits stay");
}

#[test]
fn class_labels_become_template_labels_or_requirements_and_taints_are_copied() {
    let pools = sample_pools("karpenter");
    let h100 = pool(&pools, "tiergate-h100");
    assert_eq!(h100["spec"]["template"]["metadata"]["labels"], json!({"gpu.nvidia.com/class": "h100"}));
    let requirements = h100["spec"]["template"]["spec"]["requirements"].as_array().unwrap();
    assert!(
        requirements.contains(&json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p5"]})),
        "a label of a provider's domain is a requirement: {requirements:?}"
    );
    assert_eq!(
        h100["spec"]["template"]["spec"]["taints"],
        json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    );
    assert_eq!(h100["spec"]["weight"], 60);
    assert_eq!(pool(&pools, "tiergate-l4")["spec"]["weight"], 50, "the default weight");
}

#[test]
fn the_disruption_settings_never_interrupt_admitted_work() {
    for pool in sample_pools("karpenter") {
        let disruption = &pool["spec"]["disruption"];
        assert_eq!(disruption["consolidationPolicy"], "WhenEmpty");
        assert_eq!(disruption["budgets"], json!([{"nodes": "0", "reasons": ["Drifted", "Underutilized"]}]));
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "Never");
    }
}

#[test]
fn the_crd_refuses_what_policy_validation_refuses() {
    let base = sample_pools("karpenter").remove(0);
    let with_requirement = |requirement: Value| {
        let mut pool = base.clone();
        pool["spec"]["template"]["spec"]["requirements"].as_array_mut().unwrap().push(requirement);
        pool
    };
    let reserved = with_requirement(json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}));
    assert!(!crd_errors(&reserved).is_empty(), "karpenter.sh/nodepool in a requirement");
    let no_values = with_requirement(json!({"key": "example.com/x", "operator": "In", "values": []}));
    assert!(!crd_errors(&no_values).is_empty(), "In without values");
    let mut restricted_label = base.clone();
    restricted_label["spec"]["template"]["metadata"]["labels"]["karpenter.sh/custom"] = json!("x");
    assert!(!crd_errors(&restricted_label).is_empty(), "a karpenter.sh label in the template");
    let mut heavy = base.clone();
    heavy["spec"]["weight"] = json!(101);
    assert!(!crd_errors(&heavy).is_empty(), "weight above 100");
    let mut never = base;
    never["spec"]["disruption"]["consolidateAfter"] = json!("5 minutes");
    assert!(!crd_errors(&never).is_empty(), "a duration Karpenter cannot read");
}
