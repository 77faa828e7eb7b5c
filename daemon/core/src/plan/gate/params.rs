//! The in-server gate's parameter object: a cluster-scoped `TierGateParameters` (`tiergate.io/v1alpha1`) holding
//! the tier facts the gate's fixed CEL programs read (`paramKind`), derived from the TierPolicy by the functions the
//! webhook decides with; pure.
//!
//! The policies never restate a class, queue or ceiling: they read them here, so they stay the same size whatever
//! the policy holds and the API server compiles them once. Every fact is derived, not copied: resource patterns
//! from `GpuClass::resource_patterns`, the vendor prefixes of `admission::boundary`, queues from
//! `Tier::local_queue`, the priorities a tier may keep from `check_priority_ceiling`, its default from
//! `default_priority_class`, tolerations from `GpuClass::pod_tolerations`, run-time limits from
//! `Tier::run_time_limits`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admission::VENDOR_GPU_RESOURCE_PREFIXES;
use crate::policy::{CeilingAction, DraClaimAction, ForeignClassAction, NodeNameAction, Tier, TierPolicySpec};
use crate::scoring::buckets::{CeilingCheck, check_priority_ceiling, default_priority_class, priority_ceiling};

/// What the gate's policies read about the tiers, written by tiergate from the served TierPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    group = "tiergate.io",
    version = "v1alpha1",
    kind = "TierGateParameters",
    plural = "tiergateparameters",
    shortname = "tgp",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct TierGateParametersSpec {
    /// The namespace label naming a namespace's tier.
    pub tier_label: String,
    /// Users the gate leaves alone entirely (the policy's admin users and MultiKueue users).
    #[serde(default)]
    pub exempt_users: Vec<String>,
    /// Groups whose members the gate leaves alone entirely (the policy's admin groups).
    #[serde(default)]
    pub exempt_groups: Vec<String>,
    /// Users that create workloads' children from templates already checked (`trustedControllers`): workload kinds
    /// they write are not gated; pods are gated whoever writes them.
    #[serde(default)]
    pub trusted_controllers: Vec<String>,
    /// GPU resource names matched exactly.
    #[serde(default)]
    pub gpu_resource_names: Vec<String>,
    /// GPU resource name prefixes (vendor prefixes, and class patterns ending in `*`).
    #[serde(default)]
    pub gpu_resource_prefixes: Vec<String>,
    /// Every node-label key a GPU class is selected by.
    #[serde(default)]
    pub class_label_keys: Vec<String>,
    /// Every GPU class's node taints.
    #[serde(default)]
    pub gpu_taints: Vec<GateTaint>,
    /// `foreignGpuClass: Allow`: any class may be selected.
    #[serde(default)]
    pub foreign_classes_allowed: bool,
    /// `draClaims: Deny`: a pod may not name a ResourceClaim directly, and a claim may not name a DeviceClass
    /// tiergate does not know (`knownDeviceClasses`).
    #[serde(default)]
    pub claims_denied: bool,
    /// Every DeviceClass tiergate knows: each DRA class's, each driver's generic one and the shared ones; a claim
    /// naming one outside its tier's `deviceClasses` is refused whatever `claimsDenied` says.
    #[serde(default)]
    pub known_device_classes: Vec<String>,
    /// `podsNamingNodes: Deny`: a pod or pod template that names its node in `spec.nodeName` is refused at CREATE.
    #[serde(default)]
    pub node_names_denied: bool,
    /// `priorityAboveCeiling: Clamp`: a priority above the ceiling is lowered (else it is refused).
    #[serde(default)]
    pub priority_clamped: bool,
    /// Every tier's LocalQueue name.
    #[serde(default)]
    pub tier_queues: Vec<String>,
    /// Every priority bucket's name (a label naming one above a tier's ceiling is clamped; naming none, refused).
    #[serde(default)]
    pub priority_buckets: Vec<String>,
    /// The facts of the tier whose binding names this object.
    pub tier: TierFacts,
}

/// A GPU class's node taint, as tolerations are matched against it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateTaint {
    /// The taint key.
    pub key: String,
    /// The taint value (empty when it has none).
    #[serde(default)]
    pub value: String,
    /// The taint effect.
    pub effect: String,
}

/// One map entry for a JSON patch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchEntry {
    /// The key as a JSON-pointer token.
    pub token: String,
    /// The value.
    pub value: String,
}

/// What one tier may use.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierFacts {
    /// The tier's name.
    pub name: String,
    /// The tier's LocalQueue name.
    pub queue: String,
    /// The node labels of each GPU class of the tier (its `gpuClass` and fallbacks).
    #[serde(default)]
    pub classes: Vec<BTreeMap<String, String>>,
    /// For every class label key of the policy, the values that select a class of the tier (empty for none).
    #[serde(default)]
    pub class_values: BTreeMap<String, Vec<String>>,
    /// GPU resources the tier's classes count, matched exactly.
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// GPU resource prefixes the tier's classes count.
    #[serde(default)]
    pub resource_prefixes: Vec<String>,
    /// The resources the tier has quota for (a queued workload may ask only these).
    #[serde(default)]
    pub quota_resources: Vec<String>,
    /// The tier has fallback classes: a queued workload may leave the class to Kueue.
    #[serde(default)]
    pub class_left_to_kueue: bool,
    /// The priority buckets the tier may use.
    #[serde(default)]
    pub allowed_priorities: Vec<String>,
    /// The bucket a priority above the ceiling is clamped to (empty: removed).
    #[serde(default)]
    pub priority_ceiling: String,
    /// The DeviceClasses the tier's claims may name: its DRA classes' and the shared ones.
    #[serde(default)]
    pub device_classes: Vec<String>,
    /// The tier's default bucket, given to a queued workload whose pods name a `priorityClassName` (empty: none).
    #[serde(default)]
    pub default_priority: String,
    /// The node labels the mutating half adds to an unconfined GPU template (the tier's `gpuClass`; empty when the
    /// class is left to Kueue or foreign classes are allowed).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// `nodeSelector` as JSON-patch entries: each label's key as a JSON-pointer token (`/` and `~` escaped), and
    /// its value.
    #[serde(default)]
    pub node_selector_entries: Vec<PatchEntry>,
    /// The tolerations that go with `nodeSelector`.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// For messages: the tier's class selectors (`key=value,...`), joined by ` or `.
    #[serde(default)]
    pub class_selectors_text: String,
    /// For messages: the tier's class names, comma-separated.
    #[serde(default)]
    pub class_names_text: String,
    /// For messages: `allowedPriorities`, comma-separated (`nothing` when empty).
    #[serde(default)]
    pub allowed_priorities_text: String,
    /// The tier's run-time limit (`maxRunTime`); absent: the tier has none, and the gate leaves the label alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_time: Option<RunTimeFacts>,
}

/// A tier's run-time limit as the gate holds `kueue.x-k8s.io/max-exec-time-seconds` to it (`admission::run_time`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunTimeFacts {
    /// The label value the mutating half sets where a workload has none: the default, else the ceiling, in seconds.
    pub when_missing: String,
    /// The highest label value a workload may carry, in seconds: the ceiling, else Kueue's largest (2147483647).
    pub highest_seconds: i64,
    /// For people: the ceiling as the policy states it (`4h`), empty without one.
    #[serde(default)]
    pub ceiling: String,
    /// For people: the default as the policy states it, empty without one.
    #[serde(default)]
    pub default: String,
}

/// The parameter objects of `spec`, one per tier (tier order, each named [`super::gate_name`] of its tier), labelled
/// with `labels`.
pub fn build_gate_parameters(spec: &TierPolicySpec, labels: &BTreeMap<String, String>) -> Vec<TierGateParameters> {
    let admission = &spec.admission;
    let mut names = Vec::new();
    let mut prefixes: Vec<String> = VENDOR_GPU_RESOURCE_PREFIXES.iter().map(|prefix| (*prefix).to_owned()).collect();
    for class in &spec.gpu_classes {
        split_patterns(class.resource_patterns(), &mut names, &mut prefixes);
    }
    let mut taints: Vec<GateTaint> = spec
        .gpu_classes
        .iter()
        .flat_map(|class| &class.node_taints)
        .map(|taint| GateTaint {
            key: taint.key.clone(),
            value: taint.value.clone().unwrap_or_default(),
            effect: taint.effect.clone(),
        })
        .collect();
    taints.sort();
    taints.dedup();
    let class_keys = sorted(spec.gpu_classes.iter().flat_map(|class| class.node_labels.keys().cloned()));
    let shared = TierGateParametersSpec {
        tier_label: spec.tier_label.clone(),
        exempt_users: sorted(admission.admin_users.iter().chain(&admission.multi_kueue_users).cloned()),
        exempt_groups: sorted(admission.admin_groups.iter().cloned()),
        trusted_controllers: sorted(admission.trusted_controllers().into_iter().map(str::to_owned)),
        gpu_resource_names: sorted(names),
        gpu_resource_prefixes: sorted(prefixes),
        class_label_keys: class_keys.clone(),
        gpu_taints: taints,
        foreign_classes_allowed: admission.foreign_gpu_class == ForeignClassAction::Allow,
        claims_denied: admission.dra_claims == DraClaimAction::Deny,
        known_device_classes: sorted(
            spec.gpu_classes
                .iter()
                .flat_map(|class| {
                    class
                        .device_class_name()
                        .into_iter()
                        .chain(class.generic_device_classes().into_iter().map(str::to_owned))
                })
                .chain(admission.shared_device_classes.iter().cloned()),
        ),
        node_names_denied: admission.pods_naming_nodes == NodeNameAction::Deny,
        priority_clamped: admission.priority_above_ceiling == CeilingAction::Clamp,
        tier_queues: sorted(spec.tiers.iter().map(Tier::local_queue)),
        priority_buckets: sorted(spec.priority_buckets.iter().map(|bucket| bucket.name.clone())),
        tier: TierFacts::default(),
    };
    spec.tiers
        .iter()
        .map(|tier| {
            let mut parameters = TierGateParameters::new(
                &super::gate_name(&tier.name),
                TierGateParametersSpec { tier: build_tier_facts(spec, tier, &class_keys), ..shared.clone() },
            );
            parameters.metadata.labels = Some(labels.clone());
            parameters
        })
        .collect()
}

fn build_tier_facts(spec: &TierPolicySpec, tier: &Tier, class_keys: &[String]) -> TierFacts {
    let classes: Vec<_> = tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)).collect();
    let (mut names, mut prefixes) = (Vec::new(), Vec::new());
    for class in &classes {
        split_patterns(class.resource_patterns(), &mut names, &mut prefixes);
    }
    let class_values = class_keys
        .iter()
        .map(|key| (key.clone(), sorted(classes.iter().filter_map(|class| class.node_labels.get(key).cloned()))))
        .collect();
    let buckets = &spec.priority_buckets;
    let allowed: Vec<String> = buckets
        .iter()
        .filter(|bucket| check_priority_ceiling(&bucket.name, tier, buckets) == CeilingCheck::Within)
        .map(|bucket| bucket.name.clone())
        .collect();
    let class_left_to_kueue = !tier.fallback_gpu_classes.is_empty();
    let primary = (spec.admission.foreign_gpu_class != ForeignClassAction::Allow)
        .then(|| spec.gpu_class(&tier.gpu_class))
        .flatten();
    let allowed_priorities_text = if allowed.is_empty() { "nothing".to_owned() } else { allowed.join(", ") };
    TierFacts {
        name: tier.name.clone(),
        queue: tier.local_queue(),
        class_selectors_text: classes
            .iter()
            .map(|class| {
                class.node_labels.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(",")
            })
            .collect::<Vec<_>>()
            .join(" or "),
        class_names_text: classes.iter().map(|class| class.name.as_str()).collect::<Vec<_>>().join(", "),
        allowed_priorities_text,
        classes: classes.iter().map(|class| class.node_labels.clone()).collect(),
        class_values,
        resource_names: sorted(names),
        resource_prefixes: sorted(prefixes),
        quota_resources: sorted(tier.quotas.keys().cloned()),
        class_left_to_kueue,
        allowed_priorities: allowed,
        priority_ceiling: priority_ceiling(tier, buckets).map(|bucket| bucket.name.clone()).unwrap_or_default(),
        default_priority: default_priority_class(tier, buckets).unwrap_or_default(),
        device_classes: sorted(crate::plan::dra::allowed_device_classes(spec, &classes)),
        node_selector: primary.map(|class| class.node_labels.clone()).unwrap_or_default(),
        node_selector_entries: primary
            .iter()
            .flat_map(|class| &class.node_labels)
            .map(|(key, value)| PatchEntry { token: key.replace('~', "~0").replace('/', "~1"), value: value.clone() })
            .collect(),
        tolerations: primary.map(|class| class.pod_tolerations()).unwrap_or_default(),
        max_run_time: build_run_time_facts(tier),
    }
}

/// The run-time facts of `tier`, from the limits the webhook decides with.
fn build_run_time_facts(tier: &Tier) -> Option<RunTimeFacts> {
    let limits = tier.run_time_limits()?;
    let stated = tier.max_run_time.as_ref();
    Some(RunTimeFacts {
        when_missing: limits.when_missing().to_string(),
        highest_seconds: i64::from(limits.highest()),
        ceiling: stated.and_then(|stated| stated.ceiling.clone()).unwrap_or_default(),
        default: stated.and_then(|stated| stated.default.clone()).unwrap_or_default(),
    })
}

/// Splits resource patterns (`policy::resource_matches`: exact, or a prefix before a trailing `*`) into names and
/// prefixes.
fn split_patterns(patterns: Vec<&str>, names: &mut Vec<String>, prefixes: &mut Vec<String>) {
    for pattern in patterns {
        match pattern.strip_suffix('*') {
            Some(prefix) => prefixes.push(prefix.to_owned()),
            None => names.push(pattern.to_owned()),
        }
    }
}

fn sorted(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut items: Vec<String> = items.into_iter().collect();
    items.sort();
    items.dedup();
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    #[test]
    fn every_tier_gets_its_queue_classes_and_priorities_from_the_policy() {
        let policy = load_policy(None).unwrap();
        let parameters = build_gate_parameters(&policy.spec, &BTreeMap::new());
        assert_eq!(parameters.len(), policy.spec.tiers.len());
        for (tier, parameters) in policy.spec.tiers.iter().zip(&parameters) {
            let spec = &parameters.spec;
            let facts = &spec.tier;
            assert_eq!(facts.name, tier.name);
            assert_eq!(facts.queue, tier.local_queue());
            assert!(spec.tier_queues.contains(&facts.queue));
            assert_eq!(facts.classes.len(), tier.gpu_class_names().count());
            for key in &spec.class_label_keys {
                assert!(facts.class_values.contains_key(key), "every class key has an entry for {}", tier.name);
            }
            for name in &facts.allowed_priorities {
                assert_eq!(check_priority_ceiling(name, tier, &policy.spec.priority_buckets), CeilingCheck::Within);
            }
            assert!(spec.gpu_resource_prefixes.iter().any(|prefix| prefix == "nvidia.com/gpu"));
        }
    }

    #[test]
    fn a_tiers_run_time_facts_are_its_limits_in_seconds_and_absent_without_a_limit() {
        let mut policy = load_policy(None).unwrap();
        policy.spec.tiers[0].max_run_time = None;
        policy.spec.tiers[1].max_run_time =
            Some(crate::policy::MaxRunTime { default: Some("90m".into()), ceiling: Some("4h".into()) });
        policy.spec.tiers[2].max_run_time =
            Some(crate::policy::MaxRunTime { default: Some("2h".into()), ceiling: None });
        let parameters = build_gate_parameters(&policy.spec, &BTreeMap::new());
        assert_eq!(parameters[0].spec.tier.max_run_time, None);
        assert_eq!(
            parameters[1].spec.tier.max_run_time,
            Some(RunTimeFacts {
                when_missing: "5400".into(),
                highest_seconds: 14_400,
                ceiling: "4h".into(),
                default: "90m".into()
            })
        );
        let no_ceiling = parameters[2].spec.tier.max_run_time.clone().unwrap();
        assert_eq!((no_ceiling.when_missing.as_str(), no_ceiling.highest_seconds), ("7200", i64::from(i32::MAX)));
        let yaml = serde_saphyr::to_string(&parameters[0]).unwrap();
        assert!(!yaml.contains("maxRunTime"), "a tier without a limit carries no run-time facts: {yaml}");
    }
}
