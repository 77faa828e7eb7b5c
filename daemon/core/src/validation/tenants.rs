//! Policy checks of fair sharing among a tier's tenants (`spec.tenantFairSharing`): the durations Kueue reads,
//! the resource weights and each tenant weight; pure, no I/O.
//!
//! Kueue's Configuration takes `usageHalfLifeTime` and `usageSamplingInterval` as Go durations and refuses to start
//! with a bad one, so tiergate refuses the policy first, naming the field; a zero half-life would forget all usage
//! at once and a zero weight would starve a tenant forever.

use super::Problems;
use super::names::{QUALIFIED_NAME_RULE, go_duration_nanos, is_qualified_name};
use crate::plan::tenants::is_positive_decimal;
use crate::policy::TierPolicySpec;

/// Every problem of `spec.tenantFairSharing`.
pub(super) fn check_tenant_fair_sharing(spec: &TierPolicySpec, problems: &mut Problems) {
    let Some(sharing) = &spec.tenant_fair_sharing else { return };
    let path = "spec.tenantFairSharing";
    for (field, value, example) in [
        ("usageHalfLife", &sharing.usage_half_life, "168h (a week)"),
        ("usageSamplingInterval", &sharing.usage_sampling_interval, "5m"),
    ] {
        match go_duration_nanos(value) {
            None => problems.push(
                format!("{path}.{field}"),
                format!("{value:?} is not a Go duration"),
                format!("write a number and a unit (h, m, s, ms), e.g. {example}"),
            ),
            Some(0) => problems.push(
                format!("{path}.{field}"),
                format!(
                    "{value:?} is zero: Kueue would {}",
                    if field == "usageHalfLife" {
                        "forget all past usage at once, and tenants would be ordered as if none had run"
                    } else {
                        "never sample usage"
                    }
                ),
                format!("set a positive duration, e.g. {example}"),
            ),
            Some(_) => {}
        }
    }
    for (resource, weight) in &sharing.resource_weights {
        if !weight.is_finite() || *weight < 0.0 {
            problems.push(
                format!("{path}.resourceWeights[{resource}]"),
                format!("{weight} is not a weight Kueue can use"),
                "give a number of 0 or more (per GPU 1, per CPU core 0.01, per byte of memory 0)",
            );
        }
    }
    if crate::plan::tenants::resource_weights(spec).values().all(|weight| *weight <= 0.0) {
        problems.push(
            format!("{path}.resourceWeights"),
            "every resource weighs 0, so no tenant ever has usage and fair sharing orders nothing",
            "weigh the GPU resources of the tiers' classes, e.g. nvidia.com/gpu: 1",
        );
    }
    if let Some(key) = &sharing.weight_label
        && !is_qualified_name(key)
    {
        problems.push(
            format!("{path}.weightLabel"),
            format!("{key:?} is not a valid label key ({QUALIFIED_NAME_RULE})"),
            "name a namespace label the platform sets and tenants cannot edit, e.g. tiergate.io/tenant-weight",
        );
    }
    for (index, entry) in sharing.weights.iter().enumerate() {
        let entry_path = format!("{path}.weights[{index}]");
        if !is_positive_decimal(&entry.weight) {
            problems.push(
                format!("{entry_path}.weight"),
                format!("{:?} is not a positive decimal", entry.weight),
                "give a weight above 0, such as 2 or 0.5 (1 is every other tenant's)",
            );
        }
        if entry.namespace_labels.is_empty() {
            problems.push(
                format!("{entry_path}.namespaceLabels"),
                "no label: the entry would weigh every tenant of every sharing tier",
                "name the labels of the namespaces it weighs, e.g. team: research",
            );
        }
        for key in entry.namespace_labels.keys().filter(|key| !is_qualified_name(key)) {
            problems.push(
                format!("{entry_path}.namespaceLabels"),
                format!("{key:?} is not a valid label key ({QUALIFIED_NAME_RULE})"),
                "use a namespace label key, e.g. team",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::{TenantFairSharing, TenantWeight};

    fn problems_of(sharing: TenantFairSharing) -> Vec<String> {
        let mut spec = load_policy(None).unwrap().spec;
        spec.tenant_fair_sharing = Some(sharing);
        let mut problems = Problems::default();
        check_tenant_fair_sharing(&spec, &mut problems);
        problems.0.iter().map(|problem| format!("{}: {} ({})", problem.path, problem.problem, problem.fix)).collect()
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(problems_of(TenantFairSharing::default()), Vec::<String>::new());
    }

    #[test]
    fn nonsense_is_refused_naming_the_field_and_the_fix() {
        let sharing = TenantFairSharing {
            usage_half_life: "0s".to_owned(),
            usage_sampling_interval: "every minute".to_owned(),
            resource_weights: [("nvidia.com/gpu".to_owned(), -1.0), ("cpu".to_owned(), 0.0)].into(),
            weight_label: Some("not a key!".to_owned()),
            weights: vec![TenantWeight { namespace_labels: Default::default(), weight: "0".to_owned() }],
        };
        let problems = problems_of(sharing).join("\n");
        for expected in [
            "spec.tenantFairSharing.usageHalfLife: \"0s\" is zero",
            "spec.tenantFairSharing.usageSamplingInterval: \"every minute\" is not a Go duration",
            "spec.tenantFairSharing.resourceWeights[nvidia.com/gpu]: -1 is not a weight",
            "spec.tenantFairSharing.resourceWeights: every resource weighs 0",
            "spec.tenantFairSharing.weightLabel: \"not a key!\" is not a valid label key",
            "spec.tenantFairSharing.weights[0].weight: \"0\" is not a positive decimal (give a weight above 0",
            "spec.tenantFairSharing.weights[0].namespaceLabels: no label",
        ] {
            assert!(problems.contains(expected), "missing {expected:?} in\n{problems}");
        }
    }
}
