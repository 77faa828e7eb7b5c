//! Property tests of the quota cap (issue 19): for random policies, a tier's flavors together never offer more
//! than its quota, and the plan splits GPUs over placement rules exactly as the webhook's ledger splits pods.
#![cfg(test)]

mod placement_support;

use std::collections::BTreeMap;

use placement_support::{another, burst, rule_counts, snapshot_with_policy, with_annotations};
use proptest::prelude::*;
use serde_json::{Value, json};
use tiergate::placement::split::Split;
use tiergate::placement::{PLACEMENT_ANNOTATION, PlacementLedger};
use tiergate::plan::desired;
use tiergate::plan::quota::parse_millis;
use tiergate::policy::TierPolicy;
use tiergate::validation::validate_policy;
use tiergate::view::ClusterView;

/// A random tier: fallbacks, a strategy, quotas and shares.
#[derive(Clone, Debug)]
struct RandomTier {
    fallbacks: usize,
    base: u32,
    weights: Vec<u32>,
    gpus: u32,
    cpu_millis: u32,
    memory_mi: u32,
    lending: Option<u32>,
    /// Shares by flavor index (classes first, then rules); `None` leaves the flavor to the split.
    shares: Vec<Option<u32>>,
}

impl RandomTier {
    fn class_names(&self) -> Vec<String> {
        (0..=self.fallbacks).map(|index| format!("c{index}")).collect()
    }

    fn rule_names(&self) -> Vec<String> {
        (0..self.weights.len()).map(|index| format!("r{index}")).collect()
    }

    fn policy(&self) -> TierPolicy {
        let classes: Vec<Value> = self
            .class_names()
            .iter()
            .map(|name| json!({"name": name, "nodeLabels": {"gpu.example.com/class": name}}))
            .collect();
        let rules: Vec<Value> = self
            .weights
            .iter()
            .enumerate()
            .map(|(index, weight)| {
                let base = if index == 0 { self.base } else { 0 };
                json!({"name": format!("r{index}"), "base": base, "weight": weight,
                       "nodeSelector": {"node-type": format!("t{index}")}})
            })
            .collect();
        let names: Vec<String> = self.class_names().into_iter().chain(self.rule_names()).collect();
        let shares: BTreeMap<String, u32> = names
            .iter()
            .zip(&self.shares)
            .filter_map(|(name, share)| share.map(|share| (name.clone(), share)))
            .collect();
        let mut gpu = json!({"nominal": self.gpus.to_string()});
        if let Some(lending) = self.lending {
            gpu["lendingLimit"] = json!(lending.min(self.gpus).to_string());
        }
        serde_json::from_value(json!({
            "apiVersion": "tiergate.io/v1alpha1",
            "kind": "TierPolicy",
            "metadata": {"name": "random"},
            "spec": {
                "gpuClasses": classes,
                "placementStrategies": [{"name": "mix", "rules": rules}],
                "tiers": [{
                    "name": "t",
                    "gpuClass": "c0",
                    "fallbackGpuClasses": self.class_names()[1..].to_vec(),
                    "placement": "mix",
                    "cohort": "gpu",
                    "quotas": {
                        "nvidia.com/gpu": gpu,
                        "cpu": {"nominal": format!("{}m", self.cpu_millis)},
                        "memory": {"nominal": format!("{}Mi", self.memory_mi)},
                    },
                    "quotaShares": shares,
                }],
            }
        }))
        .unwrap()
    }
}

fn arb_tier() -> impl Strategy<Value = RandomTier> {
    (
        0usize..3,
        0u32..4,
        proptest::collection::vec(0u32..6, 1..5).prop_filter("a weight above 0", |w| w.iter().any(|w| *w > 0)),
        0u32..120,
        0u32..100_000,
        0u32..50_000,
        proptest::option::of(0u32..120),
        proptest::collection::vec(proptest::option::weighted(0.3, 0u32..40), 8),
    )
        .prop_map(|(fallbacks, base, weights, gpus, cpu_millis, memory_mi, lending, shares)| RandomTier {
            fallbacks,
            base,
            weights,
            gpus,
            cpu_millis,
            memory_mi,
            lending,
            shares,
        })
}

/// Per resource: (sum of the flavors' nominal quotas, the tier's total), in milli-units; and the lending sums.
fn offered(policy: &TierPolicy) -> Vec<(String, i128, i128)> {
    let desired = desired(policy, &ClusterView::default());
    let group = &desired.cluster_queues[0].spec.resource_groups[0];
    let tier = &policy.spec.tiers[0];
    let mut sums = Vec::new();
    for (resource, quota) in &tier.quotas {
        let entries = group.flavors.iter().map(|flavor| flavor.resources.iter().find(|e| &e.name == resource).unwrap());
        let entries: Vec<_> = entries.collect();
        let nominal: i128 = entries.iter().map(|entry| parse_millis(&entry.nominal_quota.0).unwrap()).sum();
        sums.push((resource.clone(), nominal, parse_millis(&quota.nominal.0).unwrap()));
        for entry in &entries {
            if let Some(lending) = &entry.lending_limit {
                let lending = parse_millis(&lending.0).unwrap();
                assert!(lending <= parse_millis(&entry.nominal_quota.0).unwrap(), "lending above nominal: {entry:?}");
            }
        }
        if let Some(limit) = &quota.lending_limit {
            let lent: i128 =
                entries.iter().filter_map(|e| e.lending_limit.as_ref()).map(|l| parse_millis(&l.0).unwrap()).sum();
            sums.push((format!("{resource} lendingLimit"), lent, parse_millis(&limit.0).unwrap()));
        }
    }
    sums
}

/// The rules the webhook's ledger gives `pods` pods of one owner naming strategy `mix`, one after the other.
fn ledger_counts(policy: &TierPolicy, pods: usize) -> BTreeMap<String, usize> {
    let snapshot = snapshot_with_policy(policy.clone());
    let ledger = PlacementLedger::default();
    let annotations = BTreeMap::from([(PLACEMENT_ANNOTATION.to_owned(), "mix".to_owned())]);
    let pod = with_annotations(burst("web-app", 1).remove(0), &annotations);
    let outcomes: Vec<_> =
        (0..pods).map(|index| ledger.assign_for(&another(&pod, &format!("uid-{index}")), &snapshot).unwrap()).collect();
    rule_counts(&outcomes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_tier_s_flavors_never_offer_more_than_its_quota_and_a_valid_policy_offers_all_of_it_unless_shares_hold_back(
        tier in arb_tier()
    ) {
        let policy = tier.policy();
        let explicit: u32 = tier.shares.iter().take(tier.fallbacks + 1 + tier.weights.len()).flatten().sum();
        match validate_policy(&policy) {
            Err(errors) => {
                prop_assert!(explicit > tier.gpus, "refused although the shares fit: {errors}");
                prop_assert!(errors.paths().contains(&"spec.tiers[0].quotaShares"), "{errors}");
            }
            Ok(()) => {
                prop_assert!(explicit <= tier.gpus);
                for (resource, sum, total) in offered(&policy) {
                    prop_assert!(sum <= total, "{resource}: flavors offer {sum} of {total}");
                }
            }
        }
    }

    #[test]
    fn the_plan_splits_gpus_over_rules_exactly_as_the_webhook_splits_pods(
        base in 0u32..4,
        weights in proptest::collection::vec(0u32..6, 1..5).prop_filter("a weight above 0", |w| w.iter().any(|w| *w > 0)),
        gpus in 0u32..40,
    ) {
        let tier = RandomTier {
            fallbacks: 0, base, weights: weights.clone(), gpus, cpu_millis: 1000, memory_mi: 1024, lending: None,
            shares: vec![None; 8],
        };
        let policy = tier.policy();
        prop_assert!(validate_policy(&policy).is_ok());
        let desired = desired(&policy, &ClusterView::default());
        let flavors = &desired.cluster_queues[0].spec.resource_groups[0].flavors;
        let from_ledger = ledger_counts(&policy, gpus as usize);
        for (index, name) in tier.rule_names().iter().enumerate() {
            let flavor = flavors.iter().find(|flavor| flavor.name == format!("c0-mix-{name}")).unwrap();
            let gpu = flavor.resources.iter().find(|entry| entry.name == "nvidia.com/gpu").unwrap();
            let pods = from_ledger.get(name).copied().unwrap_or(0);
            prop_assert_eq!(&gpu.nominal_quota.0, &pods.to_string(), "rule {} ({})", index, name);
        }
        for (resource, sum, total) in offered(&policy) {
            prop_assert_eq!(sum, total, "{}", resource);
        }
    }

    #[test]
    fn split_shares_equal_the_pod_by_pod_split_for_any_total(
        base in 0u32..6,
        weights in proptest::collection::vec(0u32..9, 1..6),
        total in 0u32..400,
    ) {
        let split = Split::new(base, weights);
        let by_pod: Vec<u64> = split.counts_for(total).into_iter().map(u64::from).collect();
        prop_assert_eq!(split.shares(u64::from(total)), by_pod);
    }
}
