//! Seed 002 GPU pinning (the recorded StatefulSet and its ordinal-0 pod) and TierPolicy placement strategies
//! referenced by `tiergate.io/placement`.
#![cfg(test)]

mod placement_support;

use std::collections::BTreeMap;

use placement_support::*;
use pretty_assertions::assert_eq;
use serde_json::json;
use tiergate::admission::Request;
use tiergate::placement::{GpuPinning, PLACEMENT_ANNOTATION, PlacementLedger, PlacementOutcome};
use tiergate::policy::TierPolicy;
use tiergate::view::Snapshot;

fn statefulset_with_map(map: &str, replicas: i64) -> Request {
    let mut request = fixture("statefulset-create-gpu-scheduling-map.json");
    let object = request.object.as_mut().unwrap();
    object["spec"]["template"]["metadata"]["annotations"]["gpu-scheduling-map"] = json!(map);
    object["spec"]["replicas"] = json!(replicas);
    request
}

fn ordinal_pod(ordinal: u32) -> Request {
    let mut request = fixture("pod-create-from-statefulset-ordinal-0.json");
    let object = request.object.as_mut().unwrap();
    edit_metadata(object, |meta| {
        meta.name = Some(format!("gpu-workload-{ordinal}"));
    });
    edit_metadata(object, |meta| {
        meta.labels.as_mut().unwrap().insert("apps.kubernetes.io/pod-index".to_owned(), ordinal.to_string());
    });
    request
}

#[test]
fn statefulset_with_a_valid_map_for_every_replica_is_admitted_without_warnings() {
    let request = fixture("statefulset-create-gpu-scheduling-map.json");
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}

#[test]
fn statefulset_with_a_malformed_map_is_denied_naming_the_bad_line() {
    let request = statefulset_with_map("0=node1:0,1\n1=node2\n2=node3:0,1,2\n", 3);
    let error = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap_err();
    assert_eq!(error.annotation, "gpu-scheduling-map");
    assert!(error.message.starts_with("line 2 `1=node2`: `node2` has no `:`"), "{error}");
    assert!(error.message.contains("ORDINAL=NODE:GPU"), "{error}");
}

#[test]
fn statefulset_with_more_replicas_than_mapped_ordinals_gets_a_warning() {
    let request = statefulset_with_map("0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n", 5);
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome.warnings.len(), 1);
    assert!(outcome.warnings[0].contains("no line for ordinal(s) 3, 4"), "{:?}", outcome.warnings);
}

#[test]
fn statefulset_ordinal_0_is_pinned_to_node1_with_gpus_0_and_1() {
    let request = fixture("pod-create-from-statefulset-ordinal-0.json");
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome.pinning, Some(GpuPinning { node: "node1".to_owned(), cuda_visible_devices: "0,1".to_owned() }));
    assert!(outcome.warnings.is_empty() && outcome.assignment.is_none(), "{outcome:?}");
}

#[test]
fn statefulset_ordinal_2_is_pinned_to_node3_with_three_gpus() {
    let outcome = PlacementLedger::default().assign_for(&ordinal_pod(2), &Snapshot::default()).unwrap();
    assert_eq!(
        outcome.pinning,
        Some(GpuPinning { node: "node3".to_owned(), cuda_visible_devices: "0,1,2".to_owned() })
    );
}

#[test]
fn ordinal_missing_from_the_map_is_admitted_unpinned_with_a_warning() {
    let outcome = PlacementLedger::default().assign_for(&ordinal_pod(7), &Snapshot::default()).unwrap();
    assert_eq!(outcome.pinning, None);
    assert!(
        outcome.warnings[0].contains("ordinal 7 is not in gpu-scheduling-map (mapped: 0, 1, 2)"),
        "{:?}",
        outcome.warnings
    );
}

#[test]
fn a_container_that_sets_its_own_cuda_visible_devices_keeps_it_with_a_warning() {
    let mut request = fixture("pod-create-from-statefulset-ordinal-0.json");
    request.object.as_mut().unwrap()["spec"]["containers"][0]["env"] =
        json!([{ "name": "CUDA_VISIBLE_DEVICES", "value": "3" }]);
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert!(outcome.pinning.is_some());
    assert_eq!(outcome.warnings.len(), 1);
    assert!(
        outcome.warnings[0].contains("container worker keeps its own CUDA_VISIBLE_DEVICES=3"),
        "{:?}",
        outcome.warnings
    );
}

#[test]
fn a_container_already_carrying_the_pinned_value_gets_no_warning() {
    let mut request = fixture("pod-create-from-statefulset-ordinal-0.json");
    request.object.as_mut().unwrap()["spec"]["containers"][0]["env"] =
        json!([{ "name": "CUDA_VISIBLE_DEVICES", "value": "0,1" }]);
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert!(outcome.pinning.is_some() && outcome.warnings.is_empty(), "{outcome:?}");
}

#[test]
fn a_pod_with_a_malformed_map_is_admitted_unpinned_with_a_warning() {
    let mut request = fixture("pod-create-from-statefulset-ordinal-0.json");
    request.object.as_mut().unwrap()["metadata"]["annotations"]["gpu-scheduling-map"] = json!("0=node1:zero");
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome.pinning, None);
    assert!(outcome.warnings[0].contains("GPU `zero`"), "{:?}", outcome.warnings);
}

#[test]
fn a_deployment_carrying_a_map_is_warned_that_only_statefulsets_have_ordinals() {
    let mut request = fixture("deployment-create-custom-pod-strategy.json");
    request.object.as_mut().unwrap()["spec"]["template"]["metadata"]["annotations"]["gpu-scheduling-map"] =
        json!("0=node1:0");
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert!(outcome.warnings.iter().any(|warning| warning.contains("only StatefulSet pods have ordinals")));
}

fn policy_with_serving_strategy() -> TierPolicy {
    serde_json::from_value(json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": { "name": "default" },
        "spec": {
            "gpuClasses": [],
            "tiers": [],
            "placementStrategies": [{
                "name": "serving",
                "rules": [
                    { "name": "ondemand", "base": 1, "weight": 1,
                      "nodeSelector": { "karpenter.sh/capacity-type": "on-demand" } },
                    { "name": "spot", "weight": 2,
                      "nodeSelector": { "karpenter.sh/capacity-type": "spot" },
                      "tolerations": [{ "key": "spot", "operator": "Exists", "effect": "NoSchedule" }] }
                ]
            }]
        }
    }))
    .unwrap()
}

fn referencing(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(PLACEMENT_ANNOTATION.to_owned(), name.to_owned())])
}

#[test]
fn pods_naming_a_policy_strategy_get_exactly_its_rules_selectors_and_tolerations() {
    let policy = policy_with_serving_strategy();
    let rules = &policy.spec.placement_strategies[0].rules;
    let snapshot = snapshot_with_policy(policy.clone());
    let ledger = PlacementLedger::default();
    let outcomes: Vec<PlacementOutcome> = burst("web-app", 6)
        .into_iter()
        .map(|pod| ledger.assign_for(&with_annotations(pod, &referencing("serving")), &snapshot).unwrap())
        .collect();
    assert_eq!(rule_counts(&outcomes), expected(&[("ondemand", 3), ("spot", 3)]));
    for outcome in &outcomes {
        let assignment = outcome.assignment.as_ref().unwrap();
        let rule = rules.iter().find(|rule| rule.name == assignment.rule).unwrap();
        assert_eq!(assignment.node_selector, rule.node_selector);
        assert_eq!(assignment.tolerations, rule.tolerations);
    }
}

#[test]
fn deployment_naming_an_unknown_policy_strategy_is_denied_listing_the_known_ones() {
    let mut request = fixture("deployment-create-custom-pod-strategy.json");
    request.object.as_mut().unwrap()["spec"]["template"]["metadata"]["annotations"] =
        json!({ PLACEMENT_ANNOTATION: "batch" });
    let snapshot = snapshot_with_policy(policy_with_serving_strategy());
    let error = PlacementLedger::default().assign_for(&request, &snapshot).unwrap_err();
    assert_eq!(error.annotation, PLACEMENT_ANNOTATION);
    assert!(error.message.contains("no placement strategy `batch` in the TierPolicy (known: serving)"), "{error}");
}

#[test]
fn a_policy_excluded_namespace_gets_no_placement() {
    let mut policy = policy_with_serving_strategy();
    policy.spec.excluded_namespaces = vec!["ml-team-dev".to_owned()];
    let pod = with_annotations(burst("web-app", 1).remove(0), &referencing("serving"));
    let outcome = PlacementLedger::default().assign_for(&pod, &snapshot_with_policy(policy)).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}
