//! The recorded ReplicaSet bursts (6 web-app pods, 10 alpine pods) admitted concurrently through one ledger split
//! exactly as seeds 003 and 004 promise; plus owner admission, dry-run, reinvocation and malformed input.
#![cfg(test)]

mod placement_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use placement_support::*;
use pretty_assertions::assert_eq;
use tiergate::admission::Request;
use tiergate::metrics::Metrics;
use tiergate::placement::{
    OWNER_ANNOTATION, PlacementLedger, PlacementOutcome, REQUEST_ANNOTATION, RULE_LABEL, STRATEGY_ANNOTATION,
};
use tiergate::view::Snapshot;

/// Admits every request at once from its own thread.
fn admit_concurrently(ledger: &PlacementLedger, requests: &[Request], snapshot: &Snapshot) -> Vec<PlacementOutcome> {
    concurrently(requests, |request| ledger.assign_for(request, snapshot).unwrap())
}

#[test]
fn deployment_with_smart_scheduler_strategy_gets_the_canonical_strategy_on_its_pod_template() {
    let deployment = fixture("deployment-create-smart-scheduler-strategy.json");
    let outcome = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap();
    assert_eq!(
        outcome.template_annotations,
        BTreeMap::from([(
            STRATEGY_ANNOTATION.to_owned(),
            "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot".to_owned()
        )])
    );
    assert!(outcome.assignment.is_none() && outcome.warnings.is_empty(), "{outcome:?}");
}

#[test]
fn deployment_whose_template_carries_custom_pod_strategy_is_admitted_without_changes() {
    let deployment = fixture("deployment-create-custom-pod-strategy.json");
    let outcome = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}

#[test]
fn web_app_burst_of_six_admitted_concurrently_splits_three_ondemand_three_spot() {
    let requests = web_app_burst();
    for _ in 0..25 {
        let ledger = PlacementLedger::default();
        let outcomes = admit_concurrently(&ledger, &requests, &Snapshot::default());
        assert_eq!(rule_counts(&outcomes), expected(&[("ondemand", 3), ("spot", 3)]));
        for outcome in &outcomes {
            let assignment = outcome.assignment.as_ref().unwrap();
            assert_eq!(assignment.owner, "Deployment/ml-team-dev/web-app");
            assert_eq!(
                assignment.node_selector,
                BTreeMap::from([("node-type".to_owned(), assignment.rule.clone())]),
                "the selector is exactly the rule's"
            );
            assert_eq!(outcome.metadata_labels[RULE_LABEL], assignment.rule);
            assert_eq!(outcome.metadata_annotations[OWNER_ANNOTATION], assignment.owner);
        }
        assert_eq!(ledger.in_flight_len(), 6);
    }
}

#[test]
fn alpine_burst_of_ten_admitted_concurrently_splits_one_four_five() {
    let requests = burst("alpine", 10);
    for _ in 0..25 {
        let ledger = PlacementLedger::default();
        let outcomes = admit_concurrently(&ledger, &requests, &Snapshot::default());
        assert_eq!(rule_counts(&outcomes), expected(&[("od4vcpu16gb", 1), ("spot4vcpu16gb", 4), ("spot8vcpu32gb", 5)]));
        for outcome in &outcomes {
            assert_eq!(outcome.assignment.as_ref().unwrap().owner, "Deployment/ml-team-dev/alpine");
        }
    }
}

#[test]
fn alpine_burst_admitted_in_order_follows_the_split_pod_by_pod() {
    let ledger = PlacementLedger::default();
    let rules: Vec<String> = burst("alpine", 10)
        .iter()
        .map(|request| rule_of(&ledger.assign_for(request, &Snapshot::default()).unwrap()))
        .collect();
    let short: Vec<&str> = rules
        .iter()
        .map(|rule| match rule.as_str() {
            "od4vcpu16gb" => "od",
            "spot4vcpu16gb" => "s4",
            _ => "s8",
        })
        .collect();
    assert_eq!(short, ["od", "s8", "s4", "s8", "s4", "s8", "s4", "s8", "s4", "s8"]);
}

#[test]
fn placement_assignments_metric_counts_each_assigned_pod() {
    let metrics = Arc::new(Metrics::new());
    let ledger = PlacementLedger::new(Arc::clone(&metrics));
    admit_concurrently(&ledger, &web_app_burst(), &Snapshot::default());
    let text = metrics.encode().unwrap();
    assert!(text.contains("tiergate_placement_assignments_total{reason=\"assigned\"} 6"), "{text}");
}

#[test]
fn dry_run_pod_is_decided_but_not_recorded() {
    let ledger = PlacementLedger::default();
    let mut first = web_app_burst().remove(0);
    first.dry_run = true;
    let dry = ledger.assign_for(&first, &Snapshot::default()).unwrap();
    assert_eq!(rule_of(&dry), "ondemand");
    assert_eq!(ledger.in_flight_len(), 0);
    first.dry_run = false;
    assert_eq!(rule_of(&ledger.assign_for(&first, &Snapshot::default()).unwrap()), "ondemand");
    assert_eq!(ledger.in_flight_len(), 1);
}

#[test]
fn reinvocation_on_the_webhooks_own_output_keeps_the_rule_and_records_nothing_new() {
    let ledger = PlacementLedger::default();
    let first = web_app_burst().remove(0);
    let outcome = ledger.assign_for(&first, &Snapshot::default()).unwrap();
    let mut mutated = with_annotations(first, &outcome.metadata_annotations);
    if let Some(object) = mutated.object.as_mut() {
        edit_metadata(object, |meta| {
            meta.labels.get_or_insert_with(BTreeMap::new).extend(outcome.metadata_labels.clone());
        });
    }
    let again = ledger.assign_for(&mutated, &Snapshot::default()).unwrap();
    assert_eq!(again, outcome);
    assert_eq!(ledger.in_flight_len(), 1);
}

#[test]
fn request_annotation_records_the_admission_request_uid() {
    let request = web_app_burst().remove(0);
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome.metadata_annotations[REQUEST_ANNOTATION], request.uid);
}

fn deployment_with_strategy(strategy: &str) -> Request {
    let mut deployment = fixture("deployment-create-smart-scheduler-strategy.json");
    let object = deployment.object.as_mut().unwrap();
    edit_metadata(object, |meta| {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("smart-scheduler.io/schedule-strategy".to_owned(), strategy.to_owned());
    });
    deployment
}

#[test]
fn deployment_with_malformed_strategy_is_denied_quoting_the_bad_rule() {
    let deployment = deployment_with_strategy(
        "base=1,weight=1,nodeSelector=node-type:ondemand;weight=two,nodeSelector=node-type:spot",
    );
    let error = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap_err();
    let message = error.to_string();
    assert!(message.starts_with("failed to parse placement annotation smart-scheduler.io/schedule-strategy"));
    assert!(message.contains("rule 2 `weight=two,nodeSelector=node-type:spot`: weight `two`"), "{message}");
    assert_eq!(error.reason(), "parse_placement_annotation");
}

#[test]
fn deployment_update_that_drops_the_strategy_removes_the_canonical_template_annotation() {
    let mut deployment = fixture("deployment-create-smart-scheduler-strategy.json");
    deployment.operation = kube::core::admission::Operation::Update;
    let object = deployment.object.as_mut().unwrap();
    edit_metadata(object, |meta| {
        meta.annotations = None;
    });
    object["spec"]["template"]["metadata"]["annotations"] =
        serde_json::json!({ STRATEGY_ANNOTATION: "weight=1,nodeSelector=node-type:spot" });
    let outcome = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap();
    assert_eq!(outcome.removed_template_annotations, [STRATEGY_ANNOTATION]);
    assert!(outcome.template_annotations.is_empty());
}

#[test]
fn custom_pod_strategy_deployment_with_malformed_template_is_denied() {
    let mut deployment = fixture("deployment-create-custom-pod-strategy.json");
    let object = deployment.object.as_mut().unwrap();
    object["spec"]["template"]["metadata"]["annotations"]["CustomPodScheduleStrategy"] =
        serde_json::json!("nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb");
    let error = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap_err();
    assert_eq!(error.annotation, "CustomPodScheduleStrategy");
    assert!(error.message.contains("rule 2 `nodesize=spot4vcpu16gb`: weight is missing"), "{error}");
}

#[test]
fn pod_with_malformed_strategy_is_admitted_unchanged_with_a_warning() {
    let annotations = BTreeMap::from([(STRATEGY_ANNOTATION.to_owned(), "weight=1,nodeSelector=node-type".to_owned())]);
    let pod = with_annotations(burst("web-app", 1).remove(0), &annotations);
    let outcome = PlacementLedger::default().assign_for(&pod, &Snapshot::default()).unwrap();
    assert!(outcome.assignment.is_none() && outcome.metadata_labels.is_empty());
    assert_eq!(outcome.warnings.len(), 1);
    assert!(outcome.warnings[0].contains("admitted without placement"), "{:?}", outcome.warnings);
    assert!(outcome.warnings[0].contains("`node-type` has no `:`"), "{:?}", outcome.warnings);
}

#[test]
fn pod_without_any_strategy_gets_no_placement() {
    let outcome = PlacementLedger::default().assign_for(&burst("web-app", 1).remove(0), &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}

#[test]
fn blocklisted_namespace_is_left_alone() {
    let blocklist = tiergate_compat::namespaces::parse_namespace_blocklist("kube-system,ml-team-dev").unwrap();
    let ledger = PlacementLedger::default().with_excluded_namespaces(blocklist);
    let outcome = ledger.assign_for(&web_app_burst().remove(0), &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
    let deployment = deployment_with_strategy("garbage");
    assert_eq!(ledger.assign_for(&deployment, &Snapshot::default()).unwrap(), PlacementOutcome::default());
}

#[test]
fn kube_system_pod_is_left_alone_even_with_a_strategy() {
    let annotations = BTreeMap::from([(STRATEGY_ANNOTATION.to_owned(), "weight=1,nodeSelector=a:b".to_owned())]);
    let pod = with_annotations(fixture("pod-create-kube-system.json"), &annotations);
    assert_eq!(PlacementLedger::default().assign_for(&pod, &Snapshot::default()).unwrap(), PlacementOutcome::default());
}

/// The web-app Deployment's fixture turned into an object of `kind` controlled by a `controller`.
fn controlled(kind: &str, controller: &str) -> Request {
    let mut request = fixture("deployment-create-smart-scheduler-strategy.json");
    request.kind.kind = kind.to_owned();
    let object = request.object.as_mut().unwrap();
    object["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1", "kind": controller,
        "name": "web-app", "uid": "owner-uid", "controller": true, "blockOwnerDeletion": true}]);
    request
}

#[test]
fn replica_set_of_a_placed_deployment_is_validated_but_its_template_is_left_alone() {
    let mut request = controlled("ReplicaSet", "Deployment");
    request.object.as_mut().unwrap()["spec"]["template"]["metadata"]["annotations"] = serde_json::json!({
        STRATEGY_ANNOTATION: "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot"
    });
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}

#[test]
fn job_stamped_out_by_a_cron_job_keeps_the_canonical_strategy_its_template_carries() {
    let mut request = controlled("Job", "CronJob");
    let object = request.object.as_mut().unwrap();
    edit_metadata(object, |meta| {
        meta.annotations = None;
    });
    object["spec"]["template"]["metadata"]["annotations"] =
        serde_json::json!({ STRATEGY_ANNOTATION: "weight=1,nodeSelector=node-type:spot" });
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert_eq!(outcome, PlacementOutcome::default());
}

#[test]
fn smart_scheduler_strategy_on_a_controlled_replica_set_is_not_copied_and_says_where_it_belongs() {
    let request = controlled("ReplicaSet", "Deployment");
    let outcome = PlacementLedger::default().assign_for(&request, &Snapshot::default()).unwrap();
    assert!(outcome.template_annotations.is_empty());
    assert_eq!(outcome.warnings.len(), 1);
    assert!(outcome.warnings[0].contains("put it on the Deployment"), "{:?}", outcome.warnings);
}
