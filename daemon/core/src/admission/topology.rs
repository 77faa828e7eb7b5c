//! The tier's topology rule on a workload's pod sets: which Kueue topology annotations each pod template gets,
//! which a tenant's own keeps, replaces or is denied for; pure, no I/O.
//!
//! The pod sets come from the adapter table ([`tiergate_workloads::PodSetAt`]), as Kueue v0.19.2 counts them.
//! The rule applies when the workload has at least the rule's `minPods` pods, to every pod set of two or more
//! pods (a single pod fits one domain of any level). A pod set gets `podset-required-topology` (or
//! `podset-preferred-topology`) with the level's node label; a LeaderWorkerSet group (Kueue makes one workload per
//! group) gets the slice form, `podset-slice-required-topology` with `podset-slice-size` = the group's workers,
//! so each group lands in one domain. The leader is a pod set of one.
//!
//! A tenant's own annotation is kept when at least as strict as the rule: required at the rule's level or a
//! narrower one beats anything preferred; preferred at the rule's level or narrower satisfies a preferred rule.
//! A weaker one (broader level, preferred against required, unconstrained) is replaced, with a warning. Any
//! topology annotation naming a node label that is no level of the tier's classes is denied, listing the levels.

use serde_json::Value;
use tiergate_kueue::{
    PODSET_PREFERRED_TOPOLOGY_ANNOTATION, PODSET_REQUIRED_TOPOLOGY_ANNOTATION,
    PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, PODSET_SLICE_SIZE_ANNOTATION, PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION,
};
use tiergate_workloads::PodSet;

use crate::policy::{Tier, TierPolicySpec, TopologyLevel};
use crate::topology::{ResolvedRule, TopologyMode, describe_levels, resolve_rule, tier_levels};

/// The annotations that name a level, checked against the tier's levels.
const LEVEL_ANNOTATIONS: [&str; 3] = [
    PODSET_REQUIRED_TOPOLOGY_ANNOTATION,
    PODSET_PREFERRED_TOPOLOGY_ANNOTATION,
    PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
];

/// The annotations that state a pod set's own constraint, removed when the rule replaces a weaker one.
const CONSTRAINT_ANNOTATIONS: [&str; 3] = [
    PODSET_REQUIRED_TOPOLOGY_ANNOTATION,
    PODSET_PREFERRED_TOPOLOGY_ANNOTATION,
    PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION,
];

/// The annotation changes of one pod template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateEdit {
    /// Pointer to the template's metadata.
    pub metadata: String,
    /// Annotations to set.
    pub set: Vec<(&'static str, String)>,
    /// Annotations to remove.
    pub remove: Vec<&'static str>,
}

/// What the rule does to a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyOutcome {
    /// Per template, only where something changes.
    pub edits: Vec<TemplateEdit>,
    /// Warnings for the tenant (a weaker annotation replaced).
    pub warnings: Vec<String>,
    /// What was decided, for `explain`.
    pub reasons: Vec<String>,
}

/// A topology annotation naming no level of the tier's classes (the message lists the levels and the fix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyDenial {
    /// Message for the tenant.
    pub message: String,
}

/// The constraint a pod template states for its whole pod set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stated {
    mode: TopologyMode,
    depth: usize,
}

/// The rule's changes to `pod_sets` of `object` in `tier`, or a denial.
pub fn build_topology_outcome(
    spec: &TierPolicySpec,
    tier: &Tier,
    pod_sets: &[PodSet],
    object: &Value,
) -> Result<TopologyOutcome, TopologyDenial> {
    let levels = tier_levels(spec, tier);
    for pod_set in pod_sets {
        check_levels(tier, &levels, pod_set, object)?;
    }
    let mut outcome = TopologyOutcome::default();
    let Some(rule) = resolve_rule(spec, tier) else {
        return Ok(outcome);
    };
    let total: u64 = pod_sets.iter().map(|pod_set| pod_set.count).sum();
    if total < u64::from(rule.min_pods) {
        if total > 1 {
            outcome.reasons.push(format!(
                "topology: tier {}'s rule ({} {}) starts at {} pods; this workload has {total}",
                tier.name,
                rule.mode.as_str(),
                rule.level,
                rule.min_pods
            ));
        }
        return Ok(outcome);
    }
    let depth_of = |label: &str| levels.iter().position(|level| level.node_label == label);
    let rule_depth = depth_of(&rule.node_label).unwrap_or(rule.depth);
    for pod_set in pod_sets.iter().filter(|pod_set| pod_set.count > 1) {
        let annotations = object.pointer(&format!("{}/annotations", pod_set.template.metadata));
        let annotation = |key: &str| annotations.and_then(|map| map.get(key)).and_then(Value::as_str);
        let stated = stated_constraint(pod_set, &annotation, &depth_of);
        let wanted = wanted_annotations(&rule, pod_set);
        let at = display_at(&pod_set.template.metadata);
        let satisfied = stated.is_some_and(|stated| stated.mode >= rule.mode && stated.depth >= rule_depth);
        if satisfied {
            let (key, value) = own_annotation(&annotation).unwrap_or((wanted[0].0, wanted[0].1.as_str()));
            outcome.reasons.push(format!(
                "topology: pod set {at} ({} pods) {key}={value} (tier {}'s rule: {} {})",
                pod_set.count,
                tier.name,
                rule.mode.as_str(),
                rule.level
            ));
            continue;
        }
        let present: Vec<&'static str> =
            replaced_annotations(pod_set).into_iter().filter(|key| annotation(key).is_some()).collect();
        if !present.is_empty() {
            let written: Vec<String> =
                present.iter().map(|key| format!("{key}={}", annotation(key).unwrap_or_default())).collect();
            outcome.warnings.push(format!(
                "pod set {at}: {} is weaker than tier {}'s topology rule ({} {}) and was replaced",
                written.join(", "),
                tier.name,
                rule.mode.as_str(),
                rule.level
            ));
        }
        let set_text: Vec<String> = wanted.iter().map(|(key, value)| format!("{key}={value}")).collect();
        outcome.reasons.push(format!(
            "topology: pod set {at} ({} pods) gets {} (tier {}'s rule: {} {})",
            pod_set.count,
            set_text.join(", "),
            tier.name,
            rule.mode.as_str(),
            rule.level
        ));
        let wanted_keys: Vec<&str> = wanted.iter().map(|(key, _)| *key).collect();
        outcome.edits.push(TemplateEdit {
            metadata: pod_set.template.metadata.clone(),
            remove: present.into_iter().filter(|key| !wanted_keys.contains(key)).collect(),
            set: wanted,
        });
    }
    Ok(outcome)
}

/// Denies a level annotation naming no level of the tier's classes.
fn check_levels(
    tier: &Tier,
    levels: &[&TopologyLevel],
    pod_set: &PodSet,
    object: &Value,
) -> Result<(), TopologyDenial> {
    let annotations = object.pointer(&format!("{}/annotations", pod_set.template.metadata));
    for key in LEVEL_ANNOTATIONS {
        let Some(value) = annotations.and_then(|map| map.get(key)) else { continue };
        let named = value.as_str().unwrap_or_default();
        if levels.iter().any(|level| level.node_label == named) {
            continue;
        }
        let fix = match levels.is_empty() {
            true => format!(
                "remove the annotation: tier {}'s GPU classes declare no topology levels, so Kueue cannot place by \
                 topology there",
                tier.name
            ),
            false => format!("name one of these node labels, or remove the annotation: {}", describe_levels(levels)),
        };
        return Err(TopologyDenial {
            message: format!(
                "pod set {}: {key}={value} names no topology level of tier {}'s GPU classes; fix: {fix}",
                display_at(&pod_set.template.metadata),
                tier.name
            ),
        });
    }
    Ok(())
}

/// The strongest constraint the template's own annotations state for the whole pod set: required, preferred, or
/// (a group's slice covering every worker) the slice's level.
fn stated_constraint<'a>(
    pod_set: &PodSet,
    annotation: &impl Fn(&str) -> Option<&'a str>,
    depth_of: &impl Fn(&str) -> Option<usize>,
) -> Option<Stated> {
    let at = |key: &str, mode| annotation(key).and_then(depth_of).map(|depth| Stated { mode, depth });
    let whole_slice = annotation(PODSET_SLICE_SIZE_ANNOTATION)
        .and_then(|size| size.parse::<u64>().ok())
        .is_some_and(|size| size >= pod_set.count);
    let slice = whole_slice.then(|| at(PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, TopologyMode::Required)).flatten();
    [
        at(PODSET_REQUIRED_TOPOLOGY_ANNOTATION, TopologyMode::Required),
        slice,
        at(PODSET_PREFERRED_TOPOLOGY_ANNOTATION, TopologyMode::Preferred),
    ]
    .into_iter()
    .flatten()
    .max_by_key(|stated| (stated.mode, stated.depth))
}

/// The first of the template's own constraint annotations, as `(key, value)`.
fn own_annotation<'a>(annotation: &impl Fn(&str) -> Option<&'a str>) -> Option<(&'static str, &'a str)> {
    [
        PODSET_REQUIRED_TOPOLOGY_ANNOTATION,
        PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
        PODSET_PREFERRED_TOPOLOGY_ANNOTATION,
    ]
    .into_iter()
    .find_map(|key| annotation(key).map(|value| (key, value)))
}

/// What the rule writes on `pod_set`.
fn wanted_annotations(rule: &ResolvedRule, pod_set: &PodSet) -> Vec<(&'static str, String)> {
    match (rule.mode, pod_set.group) {
        (TopologyMode::Required, true) => vec![
            (PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, rule.node_label.clone()),
            (PODSET_SLICE_SIZE_ANNOTATION, pod_set.count.to_string()),
        ],
        (TopologyMode::Required, false) => vec![(PODSET_REQUIRED_TOPOLOGY_ANNOTATION, rule.node_label.clone())],
        (TopologyMode::Preferred, _) => vec![(PODSET_PREFERRED_TOPOLOGY_ANNOTATION, rule.node_label.clone())],
    }
}

/// The tenant annotations the rule takes the place of: the pod set's constraint (Kueue allows one of required,
/// preferred, unconstrained) and, for a group, its slice.
fn replaced_annotations(pod_set: &PodSet) -> Vec<&'static str> {
    let mut keys = CONSTRAINT_ANNOTATIONS.to_vec();
    if pod_set.group {
        keys.extend([PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, PODSET_SLICE_SIZE_ANNOTATION]);
    }
    keys
}

/// `spec.template` for `/spec/template/metadata`: how a pod set is named to people.
fn display_at(metadata: &str) -> String {
    let template = metadata.strip_suffix("/metadata").unwrap_or(metadata);
    template.trim_start_matches('/').replace('/', ".").replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tiergate_workloads::adapter_for;

    use super::*;
    use crate::policy::TopologyRule;

    fn policy(rule: TopologyRule) -> TierPolicySpec {
        let mut spec = crate::inputs::load_policy(None).unwrap().spec;
        for class in &mut spec.gpu_classes {
            class.topology_levels = vec![
                TopologyLevel { name: "block".into(), node_label: "example.com/block".into() },
                TopologyLevel { name: "rack".into(), node_label: "example.com/rack".into() },
                TopologyLevel { name: "host".into(), node_label: "kubernetes.io/hostname".into() },
            ];
        }
        spec.tiers[0].topology = Some(rule);
        spec
    }

    fn required(level: &str) -> TopologyRule {
        TopologyRule { required: Some(level.into()), preferred: None, min_pods: 4 }
    }

    fn job(parallelism: u64, annotations: Value) -> Value {
        json!({"spec": {"parallelism": parallelism, "template": {"metadata": {"annotations": annotations}, "spec": {}}}})
    }

    fn outcome(
        spec: &TierPolicySpec,
        group: &str,
        kind: &str,
        object: &Value,
    ) -> Result<TopologyOutcome, TopologyDenial> {
        let adapter = adapter_for(group, "v1", kind).unwrap();
        build_topology_outcome(spec, &spec.tiers[0], &adapter.pod_sets(object), object)
    }

    #[test]
    fn a_four_pod_job_without_annotations_gets_the_required_rack() {
        let spec = policy(required("rack"));
        let result = outcome(&spec, "batch", "Job", &job(4, json!({}))).unwrap();
        assert_eq!(result.edits.len(), 1);
        assert_eq!(result.edits[0].set, vec![(PODSET_REQUIRED_TOPOLOGY_ANNOTATION, "example.com/rack".to_owned())]);
        assert!(result.warnings.is_empty());
    }

    #[test]
    fn a_job_below_min_pods_is_left_alone() {
        let spec = policy(required("rack"));
        let result = outcome(&spec, "batch", "Job", &job(3, json!({}))).unwrap();
        assert!(result.edits.is_empty());
        assert!(result.reasons[0].contains("starts at 4 pods"), "{:?}", result.reasons);
    }

    #[test]
    fn a_stricter_own_annotation_is_kept_and_a_weaker_one_replaced_with_a_warning() {
        let spec = policy(required("rack"));
        let host = json!({PODSET_REQUIRED_TOPOLOGY_ANNOTATION: "kubernetes.io/hostname"});
        assert!(outcome(&spec, "batch", "Job", &job(4, host)).unwrap().edits.is_empty());
        let block = json!({PODSET_REQUIRED_TOPOLOGY_ANNOTATION: "example.com/block"});
        let replaced = outcome(&spec, "batch", "Job", &job(4, block)).unwrap();
        assert_eq!(replaced.edits[0].set[0].1, "example.com/rack");
        assert!(replaced.warnings[0].contains("weaker"), "{:?}", replaced.warnings);
        let preferred_rack = json!({PODSET_PREFERRED_TOPOLOGY_ANNOTATION: "example.com/rack"});
        let replaced = outcome(&spec, "batch", "Job", &job(4, preferred_rack)).unwrap();
        assert_eq!(replaced.edits[0].remove, vec![PODSET_PREFERRED_TOPOLOGY_ANNOTATION]);
        let unconstrained = json!({PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION: "true"});
        let replaced = outcome(&spec, "batch", "Job", &job(4, unconstrained)).unwrap();
        assert_eq!(replaced.edits[0].remove, vec![PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION]);
    }

    #[test]
    fn a_preferred_rule_is_satisfied_by_any_required_at_its_level_or_narrower() {
        let spec = policy(TopologyRule { required: None, preferred: Some("block".into()), min_pods: 2 });
        let rack = json!({PODSET_REQUIRED_TOPOLOGY_ANNOTATION: "example.com/rack"});
        assert!(outcome(&spec, "batch", "Job", &job(2, rack)).unwrap().edits.is_empty());
        let bare = outcome(&spec, "batch", "Job", &job(2, json!({}))).unwrap();
        assert_eq!(bare.edits[0].set, vec![(PODSET_PREFERRED_TOPOLOGY_ANNOTATION, "example.com/block".to_owned())]);
    }

    #[test]
    fn an_annotation_naming_no_level_is_denied_with_the_levels() {
        let spec = policy(required("rack"));
        for key in LEVEL_ANNOTATIONS {
            let denial = outcome(&spec, "batch", "Job", &job(4, json!({key: "rack"}))).unwrap_err();
            assert!(
                denial.message.contains("block (example.com/block), rack (example.com/rack)"),
                "{}",
                denial.message
            );
            assert!(denial.message.contains(key), "{}", denial.message);
        }
        let mut without = policy(required("rack"));
        without.tiers[0].topology = None;
        for class in &mut without.gpu_classes {
            class.topology_levels.clear();
        }
        let denial = outcome(&without, "batch", "Job", &job(1, json!({PODSET_REQUIRED_TOPOLOGY_ANNOTATION: "x"})));
        assert!(denial.unwrap_err().message.contains("declare no topology levels"));
    }

    #[test]
    fn leader_worker_set_groups_get_the_slice_form_sized_to_the_workers() {
        let spec = policy(required("rack"));
        let lws = json!({"spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 4, "leaderTemplate": {"spec": {}}, "workerTemplate": {"spec": {}}}}});
        let result = outcome(&spec, "leaderworkerset.x-k8s.io", "LeaderWorkerSet", &lws).unwrap();
        assert_eq!(result.edits.len(), 1);
        assert_eq!(result.edits[0].metadata, "/spec/leaderWorkerTemplate/workerTemplate/metadata");
        assert_eq!(
            result.edits[0].set,
            vec![
                (PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, "example.com/rack".to_owned()),
                (PODSET_SLICE_SIZE_ANNOTATION, "3".to_owned())
            ]
        );
        let mut annotated = lws.clone();
        annotated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = json!({"annotations": {
            PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: "example.com/rack", PODSET_SLICE_SIZE_ANNOTATION: "3"}});
        let again = outcome(&spec, "leaderworkerset.x-k8s.io", "LeaderWorkerSet", &annotated).unwrap();
        assert!(again.edits.is_empty(), "{again:?}");
        annotated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"]
            [PODSET_SLICE_SIZE_ANNOTATION] = json!("1");
        let split = outcome(&spec, "leaderworkerset.x-k8s.io", "LeaderWorkerSet", &annotated).unwrap();
        assert_eq!(split.edits.len(), 1, "slices of one worker do not keep the group together");
        assert!(!split.warnings.is_empty());
    }

    #[test]
    fn every_multi_pod_set_of_a_pytorch_job_gets_the_rule_and_single_pods_do_not() {
        let spec = policy(required("rack"));
        let object = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {}}},
            "Worker": {"replicas": 7, "template": {"spec": {}}},
        }}});
        let result = outcome(&spec, "kubeflow.org", "PyTorchJob", &object).unwrap();
        assert_eq!(result.edits.len(), 1);
        assert_eq!(result.edits[0].metadata, "/spec/pytorchReplicaSpecs/Worker/template/metadata");
    }
}
