//! The chart ships exactly the CRD `tiergate crd` prints, and the sample policies are valid against it.
//! After changing `policy.rs`, regenerate the chart copy with
//! `TIERGATE_BLESS=1 cargo test -p tiergate --test crd_chart` (or `cargo run -q -p tiergate -- crd > FILE`).

#![cfg(test)]

use std::path::{Path, PathBuf};

use kube::CustomResourceExt;
use serde_json::Value;
use tiergate::policy::TierPolicy;

fn chart_crd_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tiergate/crds/tierpolicies.tiergate.io.yaml")
}

#[test]
fn the_chart_crd_is_identical_to_the_generated_one() {
    let generated = serde_saphyr::to_string(&TierPolicy::crd()).unwrap();
    if std::env::var_os("TIERGATE_BLESS").is_some_and(|value| value == "1") {
        std::fs::write(chart_crd_path(), &generated).unwrap();
    }
    let chart = std::fs::read_to_string(chart_crd_path()).unwrap();
    pretty_assertions::assert_eq!(chart, generated, "regenerate with TIERGATE_BLESS=1");
}

#[test]
fn the_chart_ships_the_gate_parameters_crd_as_generated() {
    use tiergate::plan::gate::params::TierGateParameters;
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tiergate/crds/tiergateparameters.tiergate.io.yaml");
    let generated = serde_saphyr::to_string(&TierGateParameters::crd()).unwrap();
    if std::env::var_os("TIERGATE_BLESS").is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).unwrap();
    }
    let chart = std::fs::read_to_string(&path).unwrap();
    pretty_assertions::assert_eq!(chart, generated, "regenerate with TIERGATE_BLESS=1");
}

#[test]
fn every_sample_policy_is_valid_against_the_tierpolicy_crd_schema() {
    let crd = serde_json::to_value(TierPolicy::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::validator_for(schema).unwrap();
    for sample in ["kubenexus", "spot-mix", "shared-quota", "fleet", "topology", "org-tree"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(sample).join("policy.yaml");
        let policy: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let errors: Vec<String> = validator.iter_errors(&policy).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    }
}

#[test]
fn the_crd_schema_refuses_an_out_of_range_bucket() {
    let crd = serde_json::to_value(TierPolicy::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::validator_for(schema).unwrap();
    let mut policy: Value = serde_saphyr::from_str(tiergate::inputs::SAMPLE_POLICY).unwrap();
    policy["spec"]["priorityBuckets"] = serde_json::json!([{"name": "all", "minScore": 101, "value": 1}]);
    assert!(!validator.is_valid(&policy));
}

#[test]
fn the_crd_schema_refuses_a_dispatch_without_workers_and_an_unknown_field_under_clusters() {
    let crd = serde_json::to_value(TierPolicy::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::validator_for(schema).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/fleet/policy.yaml");
    let mut policy: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(validator.is_valid(&policy));
    policy["spec"]["tiers"][0]["dispatch"]["clusters"] = serde_json::json!([]);
    assert!(!validator.is_valid(&policy), "minItems 1");
    policy["spec"]["tiers"][0]["dispatch"]["clusters"] = serde_json::json!(["us-east"]);
    policy["spec"]["clusters"][0]["kubeconfig"] = serde_json::json!("x");
    let unknown = tiergate::validation::fields::unknown_fields(&policy);
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert_eq!(unknown[0].path, "spec.clusters[0].kubeconfig");
}
