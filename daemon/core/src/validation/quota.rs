//! Validation of how a tier's quota is shared by its flavors (`quotaShares`, the split, the rule flavors' labels);
//! pure, no I/O. Called from [`super::validate`]; the arithmetic itself is [`crate::plan::quota`].

use std::collections::BTreeSet;

use tiergate_kueue as kueue;

use super::PolicyError;
use crate::plan::quota::{FlavorRole, MAX_SPLIT_GPUS, MAX_SPLIT_WEIGHT_SUM, parse_millis, whole_units};
use crate::plan::tier_flavor_sources;
use crate::policy::{DEFAULT_GPU_RESOURCE, PlacementStrategy, Tier, TierPolicySpec};

/// Every problem with the quota shares and rule flavors of every tier.
pub fn quota_problems(spec: &TierPolicySpec) -> Vec<PolicyError> {
    let mut problems = Vec::new();
    for (index, tier) in spec.tiers.iter().enumerate() {
        check_tier(spec, &format!("spec.tiers[{index}]"), tier, &mut problems);
    }
    problems
}

fn push(problems: &mut Vec<PolicyError>, path: String, problem: String, fix: String) {
    problems.push(PolicyError { path, problem, fix });
}

fn check_tier(spec: &TierPolicySpec, path: &str, tier: &Tier, problems: &mut Vec<PolicyError>) {
    let flavors = tier_flavor_sources(spec, tier);
    let names: Vec<&str> = flavors.iter().map(|flavor| flavor.source.as_str()).collect();
    for name in tier.quota_shares.keys() {
        if !names.contains(&name.as_str()) {
            push(
                problems,
                format!("{path}.quotaShares[{name:?}]"),
                format!("{name:?} is neither a GPU class of this tier nor a rule of its placement strategy"),
                format!("key the share by one of {names:?}"),
            );
        }
    }
    let gpu_resource =
        spec.gpu_class(&tier.gpu_class).map_or(DEFAULT_GPU_RESOURCE, |class| class.resource_name.as_str());
    let Some(quota) = tier.quotas.get(gpu_resource) else { return };
    let shared = flavors.len() > 1 || !tier.quota_shares.is_empty();
    let nominal_path = format!("{path}.quotas[{gpu_resource:?}].nominal");
    let total = whole_units(&quota.nominal.0);
    match total {
        Some(total) if total <= MAX_SPLIT_GPUS => {
            let sum: u64 = tier.quota_shares.values().map(|share| u64::from(*share)).sum();
            if sum > total {
                push(
                    problems,
                    format!("{path}.quotaShares"),
                    format!(
                        "the shares add up to {sum} GPUs, more than the tier's {gpu_resource} quota of {total}: the \
                         tier's flavors together never offer more than its quota"
                    ),
                    format!("lower the shares to {total} in total, or raise {nominal_path}"),
                );
            }
        }
        _ if shared => push(
            problems,
            nominal_path,
            format!(
                "{:?} is not a whole number of GPUs from 0 to {MAX_SPLIT_GPUS}, so it cannot be shared by the tier's \
                 {} flavors",
                quota.nominal.0,
                flavors.len()
            ),
            "write a whole number of GPUs, e.g. \"16\"".to_owned(),
        ),
        _ => {}
    }
    if shared
        && let Some(lending) = &quota.lending_limit
        && whole_units(&lending.0).is_none()
    {
        push(
            problems,
            format!("{path}.quotas[{gpu_resource:?}].lendingLimit"),
            format!("{:?} is not a whole number of GPUs, so it cannot be split over the tier's flavors", lending.0),
            "write a whole number of GPUs, e.g. \"4\"".to_owned(),
        );
    }
    if shared {
        for (resource, quota) in tier.quotas.iter().filter(|(resource, _)| resource.as_str() != gpu_resource) {
            for (field, value) in [("nominal", Some(&quota.nominal)), ("lendingLimit", quota.lending_limit.as_ref())] {
                if let Some(value) = value
                    && parse_millis(&value.0).is_none()
                {
                    push(
                        problems,
                        format!("{path}.quotas[{resource:?}].{field}"),
                        format!(
                            "{:?} is not a whole number of milli-units, so it cannot be split over flavors",
                            value.0
                        ),
                        "write it in whole units or with the m, Ki, Mi or Gi suffix, e.g. \"500m\" or \"512Gi\""
                            .to_owned(),
                    );
                }
            }
        }
    }
    if let Some(strategy) = tier.placement.as_deref().and_then(|name| spec.placement_strategy(name)) {
        check_rule_flavors(spec, tier, strategy, problems);
    }
    let rule_flavors: BTreeSet<&str> = flavors
        .iter()
        .filter(|flavor| flavor.role == FlavorRole::Rule)
        .map(|flavor| flavor.selector.flavor.as_str())
        .collect();
    for class in spec.gpu_classes.iter().filter(|class| rule_flavors.contains(class.name.as_str())) {
        push(
            problems,
            format!("{path}.placement"),
            format!("a rule flavor of this tier would be named {:?}, like the GPU class", class.name),
            "rename the GPU class, strategy or rule".to_owned(),
        );
    }
}

/// The rule flavors of a tier (class labels plus rule labels) must stay within Kueue's limits, select only the
/// tier's class, and be told apart by Kueue's per-flavor label matching.
fn check_rule_flavors(
    spec: &TierPolicySpec,
    tier: &Tier,
    strategy: &PlacementStrategy,
    problems: &mut Vec<PolicyError>,
) {
    let Some(strategy_index) = spec.placement_strategies.iter().position(|known| known.name == strategy.name) else {
        return;
    };
    let strategy_path = format!("spec.placementStrategies[{strategy_index}]");
    let weight_sum: u64 = strategy.rules.iter().map(|rule| u64::from(rule.weight)).sum();
    if weight_sum > MAX_SPLIT_WEIGHT_SUM {
        push(
            problems,
            format!("{strategy_path}.rules"),
            format!("the weights add up to {weight_sum}; a tier's quota is split by them up to {MAX_SPLIT_WEIGHT_SUM}"),
            "use smaller weights with the same ratio, e.g. 1 and 2".to_owned(),
        );
    }
    let Some(class) = spec.gpu_class(&tier.gpu_class) else { return };
    for (rule_index, rule) in strategy.rules.iter().enumerate() {
        let rule_path = format!("{strategy_path}.rules[{rule_index}]");
        for (key, value) in &rule.node_selector {
            if let Some(class_value) = class.node_labels.get(key)
                && class_value != value
            {
                push(
                    problems,
                    format!("{rule_path}.nodeSelector[{key:?}]"),
                    format!(
                        "tier {} (GPU class {}) uses this strategy, whose nodes carry {key}={class_value}; the rule \
                         selects {key}={value}, nodes of another class",
                        tier.name, class.name
                    ),
                    format!(
                        "select node types with labels other than {key}, or use another strategy for {}",
                        tier.name
                    ),
                );
            }
        }
        let labels: BTreeSet<&String> = class.node_labels.keys().chain(rule.node_selector.keys()).collect();
        if labels.len() > kueue::MAX_FLAVOR_ENTRIES {
            push(
                problems,
                format!("{rule_path}.nodeSelector"),
                format!(
                    "with the labels of tier {}'s class {} its ResourceFlavor has {} labels (Kueue allows 8)",
                    tier.name,
                    class.name,
                    labels.len()
                ),
                "drop labels from the rule or the class".to_owned(),
            );
        }
        for (other_index, other) in strategy.rules.iter().enumerate().skip(rule_index + 1) {
            let apart =
                rule.node_selector.iter().any(|(key, value)| other.node_selector.get(key).is_some_and(|v| v != value));
            if !apart {
                push(
                    problems,
                    format!("{strategy_path}.rules[{other_index}].nodeSelector"),
                    format!(
                        "rules {:?} and {:?} share no label key with different values: Kueue v0.19.2 matches a pod \
                         against each flavor's own label keys only, so a pod of one rule would also match the other \
                         rule's flavor and be charged to it",
                        rule.name, other.name
                    ),
                    "give both rules the same key with different values, e.g. node-type: ondemand / node-type: spot"
                        .to_owned(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;
    use crate::policy::TierPolicy;

    fn spot_mix() -> TierPolicy {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/spot-mix/policy.yaml"));
        parse_policy(&text.unwrap(), "spot-mix").unwrap()
    }

    fn problems_of(policy: &TierPolicy) -> Vec<PolicyError> {
        quota_problems(&policy.spec)
    }

    fn bronze(policy: &mut TierPolicy) -> &mut Tier {
        policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap()
    }

    #[test]
    fn the_sample_policies_share_their_quotas_without_a_problem() {
        assert_eq!(problems_of(&spot_mix()), []);
    }

    #[test]
    fn a_share_for_a_class_or_rule_the_tier_does_not_have_is_refused_listing_the_valid_keys() {
        let mut policy = spot_mix();
        bronze(&mut policy).quota_shares.insert("h100".into(), 2);
        let problems = problems_of(&policy);
        assert_eq!(problems[0].path, "spec.tiers[2].quotaShares[\"h100\"]");
        assert!(problems[0].fix.contains(r#"["l4", "ondemand", "spot"]"#), "{}", problems[0].fix);
    }

    #[test]
    fn a_fractional_gpu_quota_shared_by_several_flavors_is_refused_at_the_nominal_field() {
        let mut policy = spot_mix();
        let quota = bronze(&mut policy).quotas.get_mut("nvidia.com/gpu").unwrap();
        quota.nominal.0 = "1.5".into();
        let problems = problems_of(&policy);
        assert_eq!(problems[0].path, "spec.tiers[2].quotas[\"nvidia.com/gpu\"].nominal");
        assert!(problems[0].problem.contains("not a whole number of GPUs"), "{}", problems[0].problem);
    }

    #[test]
    fn rules_kueue_cannot_tell_apart_are_refused() {
        let mut policy = spot_mix();
        let strategy = policy.spec.placement_strategies.iter_mut().find(|s| s.name == "od-spot").unwrap();
        strategy.rules[0].node_selector = [("zone".to_owned(), "a".to_owned())].into();
        let problems = problems_of(&policy);
        assert_eq!(problems[0].path, "spec.placementStrategies[0].rules[1].nodeSelector");
        assert!(problems[0].problem.contains("share no label key with different values"), "{}", problems[0].problem);
    }

    #[test]
    fn a_rule_selecting_another_class_for_a_tier_using_it_is_refused() {
        let mut policy = spot_mix();
        let strategy = policy.spec.placement_strategies.iter_mut().find(|s| s.name == "od-spot").unwrap();
        strategy.rules[1].node_selector.insert("gpu.nvidia.com/class".into(), "h100".into());
        let problems = problems_of(&policy);
        assert!(
            problems
                .iter()
                .any(|p| p.path == "spec.placementStrategies[0].rules[1].nodeSelector[\"gpu.nvidia.com/class\"]"),
            "{problems:?}"
        );
    }
}
