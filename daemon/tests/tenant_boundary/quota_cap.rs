//! Attacks on a tier's quota through Kueue's flavor assignment (issue 19): more flavors, another rule's flavor,
//! the class flavor, or another class's rule flavor. Kueue v0.19.2's per-flavor matching
//! (`pkg/scheduler/flavorassigner/flavorassigner.go`, `checkFlavorForPodSets`) is modelled for nodeSelectors:
//! only the flavor's own label keys are read from the pod, and they must equal the flavor's labels.
#![cfg(test)]

use std::collections::BTreeMap;

use tiergate::inputs::{SAMPLE_CLUSTER, parse_cluster_view, parse_policy};
use tiergate::plan::quota::parse_millis;
use tiergate::plan::{Desired, desired, flavor_for_gpu_class};
use tiergate::policy::TierPolicy;

fn spot_mix() -> TierPolicy {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/spot-mix/policy.yaml");
    parse_policy(&std::fs::read_to_string(path).unwrap(), "spot-mix").unwrap()
}

fn render(policy: &TierPolicy) -> Desired {
    desired(policy, &parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap())
}

/// Kueue v0.19.2: does a pod with `selector` match the flavor with `labels`?
fn kueue_matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    labels.iter().all(|(key, value)| selector.get(key).is_none_or(|wanted| wanted == value))
}

/// The flavors of `tier`'s ClusterQueue a pod with `selector` may be charged to: it matches the flavor's labels
/// and the flavor offers GPUs (nominal quota; bronze has no cohort, so nothing is borrowed).
fn chargeable(desired: &Desired, tier: &str, selector: &BTreeMap<String, String>) -> Vec<String> {
    let queue = desired.cluster_queues.iter().find(|q| q.metadata.name.as_deref() == Some(&format!("tiergate-{tier}")));
    let group = &queue.unwrap().spec.resource_groups[0];
    group
        .flavors
        .iter()
        .filter(|flavor| {
            let gpus = flavor.resources.iter().find(|r| r.name == "nvidia.com/gpu").unwrap();
            parse_millis(&gpus.nominal_quota.0).unwrap() > 0
        })
        .filter(|flavor| {
            let object = desired.resource_flavors.iter().find(|f| f.metadata.name.as_deref() == Some(&flavor.name));
            kueue_matches(selector, &object.unwrap().spec.node_labels.clone().unwrap_or_default())
        })
        .map(|flavor| flavor.name.clone())
        .collect()
}

/// What the webhook writes on a bronze pod placed on rule `rule` of od-spot: the class's labels and the rule's.
fn bronze_pod_on_rule(policy: &TierPolicy, rule: &str) -> BTreeMap<String, String> {
    let mut selector = flavor_for_gpu_class(&policy.spec, "l4").unwrap().node_labels;
    let strategy = policy.spec.placement_strategy("od-spot").unwrap();
    selector.extend(strategy.rules.iter().find(|candidate| candidate.name == rule).unwrap().node_selector.clone());
    selector
}

#[test]
fn a_tier_with_fallbacks_and_rules_cannot_be_admitted_more_than_its_quota_over_all_its_flavors() {
    let policy = spot_mix();
    let desired = render(&policy);
    for tier in &policy.spec.tiers {
        let queue = desired
            .cluster_queues
            .iter()
            .find(|q| q.metadata.name.as_deref() == Some(&format!("tiergate-{}", tier.name)));
        let flavors = &queue.unwrap().spec.resource_groups[0].flavors;
        for (resource, quota) in &tier.quotas {
            let offered: i128 = flavors
                .iter()
                .map(|flavor| flavor.resources.iter().find(|r| &r.name == resource).unwrap())
                .map(|entry| parse_millis(&entry.nominal_quota.0).unwrap())
                .sum();
            assert!(offered <= parse_millis(&quota.nominal.0).unwrap(), "tier {} {resource}: {offered}", tier.name);
        }
    }
}

#[test]
fn a_spot_pod_can_only_be_charged_to_the_spot_rule_flavor_not_the_class_or_on_demand_one() {
    let policy = spot_mix();
    let desired = render(&policy);
    assert_eq!(chargeable(&desired, "bronze", &bronze_pod_on_rule(&policy, "spot")), ["l4-od-spot-spot"]);
    assert_eq!(chargeable(&desired, "bronze", &bronze_pod_on_rule(&policy, "ondemand")), ["l4-od-spot-ondemand"]);
}

#[test]
fn a_pod_naming_only_a_rule_node_type_without_the_class_gets_no_extra_quota_beyond_the_tier() {
    let policy = spot_mix();
    let desired = render(&policy);
    let selector = BTreeMap::from([("node-type".to_owned(), "spot".to_owned())]);
    // It may use the spot flavor (Kueue then puts the l4 labels on it), never a flavor outside its tier's 16 GPUs.
    assert_eq!(chargeable(&desired, "bronze", &selector), ["l4-od-spot-spot"]);
}

#[test]
fn a_pod_of_another_class_with_a_rule_node_type_cannot_be_charged_to_the_rule_flavor() {
    let policy = spot_mix();
    let desired = render(&policy);
    let selector = BTreeMap::from([
        ("gpu.nvidia.com/class".to_owned(), "h100".to_owned()),
        ("node-type".to_owned(), "spot".to_owned()),
    ]);
    assert!(chargeable(&desired, "bronze", &selector).is_empty());
}

#[test]
fn quota_shares_above_the_tier_quota_are_refused_naming_the_field() {
    let mut policy = spot_mix();
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.quota_shares = BTreeMap::from([("ondemand".to_owned(), 10), ("spot".to_owned(), 10)]);
    let errors = tiergate::validation::validate_policy(&policy).unwrap_err();
    assert!(errors.paths().contains(&"spec.tiers[2].quotaShares"), "{errors}");
    assert!(
        errors.to_string().contains("add up to 20 GPUs, more than the tier's nvidia.com/gpu quota of 16"),
        "{errors}"
    );
}
