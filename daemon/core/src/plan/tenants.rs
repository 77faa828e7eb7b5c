//! Fair sharing among a tier's tenants (issue 50): each tenant's LocalQueue weight, the tier's ClusterQueue
//! `admissionScope`, and the `admissionFairSharing` block Kueue's Configuration needs; pure.
//!
//! Kueue v0.19 (`AdmissionFairSharing`, beta, on by default) orders a ClusterQueue's pending workloads with
//! `admissionScope.admissionMode: UsageBasedAdmissionFairSharing` by each LocalQueue's decayed past usage divided
//! by its `fairSharing.weight`; the half-life, sampling interval and resource weights are one block of Kueue's
//! Configuration for the whole cluster. A tenant's weight comes only from what the platform controls: the policy and
//! its namespace's labels, never a field a tenant writes. docs/guides/fair-sharing.md "Fair sharing among a tier's
//! tenants".

use std::borrow::Cow;
use std::collections::BTreeMap;

use tiergate_kueue::{AdmissionScope, FairSharing};

use crate::labels::Labels;
use crate::policy::{TenantFairSharing, Tier, TierPolicySpec};
use crate::syntax::go_duration_nanos;

/// Kueue's admission mode for a tier whose tenants share it fairly.
pub const USAGE_BASED: &str = "UsageBasedAdmissionFairSharing";
/// What one CPU core counts towards usage when the policy sets no `resourceWeights` (a GPU counts 1).
pub const DEFAULT_CPU_WEIGHT: f64 = 0.01;
/// The weight of a tenant nothing names.
pub const DEFAULT_TENANT_WEIGHT: &str = "1";

/// The tier's ClusterQueue `admissionScope`: usage-based where its tenants share it fairly.
pub fn admission_scope(tier: &Tier) -> Option<AdmissionScope> {
    tier.tenant_fair_sharing.then(|| AdmissionScope { admission_mode: USAGE_BASED.to_owned() })
}

/// The settings in force: the policy's (borrowed: the LocalQueue of each of 10,000 namespaces reads them), or the
/// defaults.
pub fn settings(spec: &TierPolicySpec) -> Cow<'_, TenantFairSharing> {
    spec.tenant_fair_sharing.as_ref().map_or_else(|| Cow::Owned(TenantFairSharing::default()), Cow::Borrowed)
}

/// The LocalQueue `fairSharing` of a namespace with `labels` in `tier` (`None` where the tier does not share
/// fairly), and a note when the weight label is there but unusable.
pub fn local_queue_fair_sharing(
    spec: &TierPolicySpec,
    tier: &Tier,
    namespace: &str,
    labels: &Labels,
) -> (Option<FairSharing>, Option<String>) {
    if !tier.tenant_fair_sharing {
        return (None, None);
    }
    let (weight, note) = tenant_weight(&settings(spec), namespace, labels);
    (Some(FairSharing { weight: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(weight)) }), note)
}

/// A tenant's weight: its namespace's `weightLabel` value when that is a positive decimal, else the first entry of
/// `weights` whose labels the namespace carries, else 1.
pub fn tenant_weight(sharing: &TenantFairSharing, namespace: &str, labels: &Labels) -> (String, Option<String>) {
    let mut note = None;
    if let Some(key) = &sharing.weight_label
        && let Some(value) = labels.get(key)
    {
        if is_positive_decimal(value) {
            return (value.to_owned(), None);
        }
        note = Some(format!(
            "namespace {namespace}'s label {key}={value:?} is not a positive decimal weight (e.g. 2 or 0.5), so the \
             policy's weights decide it; fix the label"
        ));
    }
    let matched = sharing.weights.iter().find(|entry| {
        entry.namespace_labels.iter().all(|(key, value)| labels.get(key).is_some_and(|found| found == value))
    });
    let weight = matched.map_or_else(|| DEFAULT_TENANT_WEIGHT.to_owned(), |entry| entry.weight.clone());
    (weight, note)
}

/// Whether `text` is a positive decimal (`2`, `0.5`, `10.25`): what a tenant weight may be.
pub fn is_positive_decimal(text: &str) -> bool {
    let mut parts = text.splitn(2, '.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next();
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    let shaped = digits(whole) && fraction.is_none_or(digits);
    shaped && text.bytes().any(|byte| (b'1'..=b'9').contains(&byte))
}

/// What each resource counts towards usage: every GPU resource of the policy's classes 1, `cpu`
/// [`DEFAULT_CPU_WEIGHT`], `memory` and `ephemeral-storage` 0, each overridden (or joined) by the policy's
/// `resourceWeights`. Kueue weighs a resource it is given no weight for 1 per unit, and a unit of memory is a
/// byte: unweighed, memory would outweigh every GPU, so tiergate always writes its weight.
pub fn resource_weights(spec: &TierPolicySpec) -> BTreeMap<String, f64> {
    let mut weights: BTreeMap<String, f64> =
        spec.gpu_classes.iter().map(|class| (class.primary_resource().to_owned(), 1.0)).collect();
    weights.insert("cpu".to_owned(), DEFAULT_CPU_WEIGHT);
    for bytes in UNWEIGHED_BYTE_RESOURCES {
        weights.insert(bytes.to_owned(), 0.0);
    }
    weights.extend(settings(spec).resource_weights.iter().map(|(resource, weight)| (resource.clone(), *weight)));
    weights
}

/// Resources counted in bytes, which weigh nothing unless the policy says otherwise.
pub const UNWEIGHED_BYTE_RESOURCES: [&str; 2] = ["memory", "ephemeral-storage"];

/// Whether any tier shares fairly among its tenants.
pub fn any_tier_shares(spec: &TierPolicySpec) -> bool {
    spec.tiers.iter().any(|tier| tier.tenant_fair_sharing)
}

/// The `admissionFairSharing` block of Kueue's Configuration the policy needs, as YAML lines at the top level of
/// the Configuration; `None` when no tier shares fairly.
pub fn kueue_admission_fair_sharing(spec: &TierPolicySpec) -> Option<String> {
    if !any_tier_shares(spec) {
        return None;
    }
    let sharing = settings(spec);
    let mut text = format!(
        "admissionFairSharing:\n  usageHalfLifeTime: {}\n  usageSamplingInterval: {}\n  resourceWeights:\n",
        sharing.usage_half_life, sharing.usage_sampling_interval
    );
    for (resource, weight) in resource_weights(spec) {
        text.push_str(&format!("    {resource}: {weight}\n"));
    }
    Some(text)
}

/// The most sampling intervals a half-life may span for Kueue before v0.18.5 to count a one-unit sample: those
/// releases truncate each usage sample and entry penalty below one milli-unit (fixed in v0.18.5, kueue#13763), and
/// one unit's share of a sample is about ln 2 / (half-life / sampling interval).
pub const KUEUE_TRUNCATION_RATIO: u128 = 693;

/// Why Kueue before v0.18.5 would order the policy's tenants first come, first served: its half-life spans more than
/// [`KUEUE_TRUNCATION_RATIO`] sampling intervals, so a one-GPU workload's usage rounds to zero there. `None` when
/// no tier shares fairly or the ratio is within it.
pub fn kueue_usage_truncation_warning(spec: &TierPolicySpec) -> Option<String> {
    if !any_tier_shares(spec) {
        return None;
    }
    let sharing = settings(spec);
    let half_life = go_duration_nanos(&sharing.usage_half_life)?;
    let interval = go_duration_nanos(&sharing.usage_sampling_interval).filter(|nanos| *nanos > 0)?;
    let ratio = half_life / interval;
    (ratio > KUEUE_TRUNCATION_RATIO).then(|| {
        format!(
            "usageHalfLife {} is {ratio} sampling intervals of {}: Kueue before v0.18.5 (all of 0.17) rounds a one-GPU \
             workload's usage to zero at more than {KUEUE_TRUNCATION_RATIO}, and orders the tenants first come, first \
             served; on those releases set spec.tenantFairSharing.usageHalfLife to at most {KUEUE_TRUNCATION_RATIO} \
             intervals, or upgrade Kueue",
            sharing.usage_half_life, sharing.usage_sampling_interval
        )
    })
}

/// The `admissionFairSharing` block of a live Kueue Configuration, as Kueue reads it.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveFairSharing {
    /// `usageHalfLifeTime`.
    #[serde(default)]
    pub usage_half_life_time: String,
    /// `usageSamplingInterval`.
    #[serde(default)]
    pub usage_sampling_interval: String,
    /// `resourceWeights` (Kueue weighs a resource missing here 1 per unit).
    #[serde(default)]
    pub resource_weights: BTreeMap<String, f64>,
}

/// The `admissionFairSharing` block of Kueue's Configuration document `configuration` (`None`: it has none, and
/// Kueue orders every queue first come, first served); `Err` with the YAML problem when it is not a Configuration.
pub fn parse_kueue_admission_fair_sharing(configuration: &str) -> Result<Option<LiveFairSharing>, String> {
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Configuration {
        #[serde(default)]
        admission_fair_sharing: Option<LiveFairSharing>,
    }
    let parsed: Configuration = serde_saphyr::from_str(configuration).map_err(|error| error.to_string())?;
    Ok(parsed.admission_fair_sharing)
}

/// How Kueue's live `admissionFairSharing` (`live`) differs from what the policy's sharing tiers need: one line each
/// (empty: they share as the policy says, or no tier shares).
pub fn fair_sharing_differences(spec: &TierPolicySpec, live: Option<&LiveFairSharing>) -> Vec<String> {
    let sharing_tiers: Vec<&str> =
        spec.tiers.iter().filter(|tier| tier.tenant_fair_sharing).map(|tier| tier.name.as_str()).collect();
    if sharing_tiers.is_empty() {
        return Vec::new();
    }
    let Some(live) = live else {
        return vec![format!(
            "Kueue's Configuration has no admissionFairSharing, so tiers {} are first come, first served",
            sharing_tiers.join(", ")
        )];
    };
    let wanted = settings(spec);
    let mut differences = Vec::new();
    for (field, have, want) in [
        ("usageHalfLifeTime", &live.usage_half_life_time, &wanted.usage_half_life),
        ("usageSamplingInterval", &live.usage_sampling_interval, &wanted.usage_sampling_interval),
    ] {
        let same = match (go_duration_nanos(have), go_duration_nanos(want)) {
            (Some(have), Some(want)) => have == want,
            _ => have == want,
        };
        if !same {
            differences.push(format!("admissionFairSharing.{field} is {have:?}, the policy says {want:?}"));
        }
    }
    for (resource, want) in resource_weights(spec) {
        let have = live.resource_weights.get(&resource).copied();
        if have != Some(want) {
            let shown = have.map_or_else(|| "unset (Kueue weighs it 1 per unit)".to_owned(), |have| have.to_string());
            differences
                .push(format!("admissionFairSharing.resourceWeights[{resource}] is {shown}, the policy says {want}"));
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::TenantWeight;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect::<BTreeMap<_, _>>().into()
    }

    fn sharing() -> TenantFairSharing {
        TenantFairSharing {
            weight_label: Some("tiergate.io/tenant-weight".to_owned()),
            weights: vec![
                TenantWeight {
                    namespace_labels: [("team".to_owned(), "research".to_owned())].into(),
                    weight: "3".to_owned(),
                },
                TenantWeight { namespace_labels: [("org".to_owned(), "ml".to_owned())].into(), weight: "2".to_owned() },
            ],
            ..settings(&load_policy(None).unwrap().spec).into_owned()
        }
    }

    #[test]
    fn the_label_weighs_first_then_the_first_matching_entry_then_one() {
        let sharing = sharing();
        let weight = |pairs: &[(&str, &str)]| tenant_weight(&sharing, "ns", &labels(pairs)).0;
        assert_eq!(weight(&[("tiergate.io/tenant-weight", "0.5"), ("team", "research")]), "0.5");
        assert_eq!(weight(&[("team", "research"), ("org", "ml")]), "3", "the first entry that matches wins");
        assert_eq!(weight(&[("org", "ml")]), "2");
        assert_eq!(weight(&[("org", "other")]), DEFAULT_TENANT_WEIGHT);
    }

    #[test]
    fn an_unusable_weight_label_falls_back_and_says_so() {
        let (weight, note) = tenant_weight(&sharing(), "team-a", &labels(&[("tiergate.io/tenant-weight", "-4")]));
        assert_eq!(weight, DEFAULT_TENANT_WEIGHT);
        assert!(note.unwrap().contains("team-a's label tiergate.io/tenant-weight=\"-4\" is not a positive decimal"));
    }

    #[test]
    fn positive_decimals_only() {
        for good in ["1", "2", "0.5", "10.25", "007"] {
            assert!(is_positive_decimal(good), "{good}");
        }
        for bad in ["0", "0.0", "-1", "1e3", "", ".5", "5.", "1/2", "2x", "+2"] {
            assert!(!is_positive_decimal(bad), "{bad}");
        }
    }

    #[test]
    fn a_tier_without_fair_sharing_gets_no_scope_and_no_weights() {
        let policy = load_policy(None).unwrap();
        let tier = &policy.spec.tiers[0];
        assert_eq!(admission_scope(tier), None);
        assert_eq!(local_queue_fair_sharing(&policy.spec, tier, "ns", &Labels::default()), (None, None));
        assert_eq!(kueue_admission_fair_sharing(&policy.spec), None, "Kueue needs no block while no tier shares");
    }

    #[test]
    fn a_sharing_tier_gets_the_usage_based_scope_its_tenants_weights_and_kueue_its_block() {
        let mut policy = load_policy(None).unwrap();
        policy.spec.tiers[2].tenant_fair_sharing = true;
        let tier = &policy.spec.tiers[2];
        assert_eq!(admission_scope(tier).unwrap().admission_mode, USAGE_BASED);
        let (sharing, note) = local_queue_fair_sharing(&policy.spec, tier, "ns", &Labels::default());
        assert_eq!(sharing.unwrap().weight.unwrap().0, "1");
        assert_eq!(note, None);
        let block = kueue_admission_fair_sharing(&policy.spec).unwrap();
        assert!(block.starts_with("admissionFairSharing:\n  usageHalfLifeTime: 168h\n  usageSamplingInterval: 5m\n"));
        assert!(block.contains("    nvidia.com/gpu: 1\n") && block.contains("    cpu: 0.01\n"), "{block}");
        assert!(block.contains("    memory: 0\n"), "unweighed, bytes of memory would outweigh every GPU: {block}");
        assert!(block.contains("    ephemeral-storage: 0\n"), "{block}");
    }

    #[test]
    fn kueues_live_block_is_compared_field_by_field() {
        let mut policy = load_policy(None).unwrap();
        assert_eq!(fair_sharing_differences(&policy.spec, None), Vec::<String>::new(), "no tier shares: no concern");
        policy.spec.tiers[2].tenant_fair_sharing = true;
        let missing = fair_sharing_differences(&policy.spec, None);
        assert_eq!(
            missing,
            ["Kueue's Configuration has no admissionFairSharing, so tiers bronze are first come, first served"]
        );
        let printed = kueue_admission_fair_sharing(&policy.spec).unwrap();
        let live = parse_kueue_admission_fair_sharing(&printed).unwrap().unwrap();
        assert_eq!(
            fair_sharing_differences(&policy.spec, Some(&live)),
            Vec::<String>::new(),
            "what render prints fits"
        );
        let same_time = LiveFairSharing { usage_half_life_time: "10080m".to_owned(), ..live.clone() };
        assert_eq!(fair_sharing_differences(&policy.spec, Some(&same_time)), Vec::<String>::new(), "168h is 10080m");
        let mut off = live;
        off.usage_sampling_interval = "1m".to_owned();
        off.resource_weights.remove("memory");
        let differences = fair_sharing_differences(&policy.spec, Some(&off)).join("\n");
        assert!(differences.contains("usageSamplingInterval is \"1m\", the policy says \"5m\""), "{differences}");
        assert!(differences.contains("resourceWeights[memory] is unset (Kueue weighs it 1 per unit)"), "{differences}");
        assert_eq!(parse_kueue_admission_fair_sharing("apiVersion: v1\n").unwrap(), None);
        assert!(parse_kueue_admission_fair_sharing("admissionFairSharing: [").is_err());
    }

    #[test]
    fn a_half_life_of_more_than_693_sampling_intervals_is_flagged_for_kueue_before_0_18_5() {
        let mut spec = crate::inputs::load_policy(None).unwrap().spec;
        spec.tiers[0].tenant_fair_sharing = true;
        let mut sharing = crate::policy::TenantFairSharing::default();
        let warning = |spec: &TierPolicySpec| kueue_usage_truncation_warning(spec);
        spec.tenant_fair_sharing = Some(sharing.clone());
        let text = warning(&spec).expect("168h over 5m is 2016 intervals");
        assert!(text.contains("2016 sampling intervals of 5m") && text.contains("v0.18.5"), "{text}");
        sharing.usage_half_life = "57h".to_owned();
        spec.tenant_fair_sharing = Some(sharing);
        assert_eq!(warning(&spec), None, "57h is 684 intervals of 5m");
        spec.tiers[0].tenant_fair_sharing = false;
        spec.tenant_fair_sharing = None;
        assert_eq!(warning(&spec), None, "no tier shares");
    }
}
