//! GPU classes as the decision sees them: a tier's classes, what a nodeSelector selects, who may pick a class
//! outside the tier, and a class's tolerations as JSON; no I/O.

use serde_json::Value;

use super::error::MutateError;
use crate::labels::LabelLookup;
use crate::policy::{ForeignClassAction, GpuClass, Tier, TierPolicySpec};
use crate::request::Request;
use crate::view::Snapshot;

/// The tier's GPU classes in flavor order.
pub(super) fn tier_classes<'p>(policy: &'p TierPolicySpec, tier: &Tier) -> Result<Vec<&'p GpuClass>, MutateError> {
    tier.gpu_class_names()
        .map(|name| {
            policy
                .gpu_class(name)
                .ok_or_else(|| MutateError::FindGpuClass { tier: tier.name.clone(), class: name.to_owned() })
        })
        .collect()
}

pub(super) struct TierContext<'a> {
    pub(super) request: &'a Request,
    pub(super) snapshot: &'a Snapshot,
    pub(super) policy: &'a TierPolicySpec,
    pub(super) tier: &'a Tier,
    pub(super) namespace: &'a str,
    pub(super) classes: Vec<&'a GpuClass>,
}

impl TierContext<'_> {
    pub(super) fn in_tier(&self, class: &str) -> bool {
        self.classes.iter().any(|candidate| candidate.name == class)
    }

    pub(super) fn class_names(&self) -> String {
        self.classes.iter().map(|class| class.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Whether the requester may pick a class outside the tier (policy `Allow`, or an admin).
    pub(super) fn foreign_allowed_for_requester(&self) -> Option<String> {
        let admission = &self.policy.admission;
        if admission.foreign_gpu_class == ForeignClassAction::Allow {
            return Some("spec.admission.foreignGpuClass is Allow".to_owned());
        }
        if admission.admin_namespaces.iter().any(|name| name == self.namespace) {
            return Some(format!("namespace {} is an admin namespace", self.namespace));
        }
        let user = &self.request.user_info;
        if let Some(name) = user.username.as_ref().filter(|name| admission.admin_users.contains(name)) {
            return Some(format!("user {name} is an admin user"));
        }
        let groups = user.groups.as_deref().unwrap_or_default();
        if let Some(group) = groups.iter().find(|group| admission.admin_groups.contains(group)) {
            return Some(format!("group {group} is an admin group"));
        }
        None
    }
}

/// What a nodeSelector says about GPU classes.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Selection<'p> {
    /// No GPU-class label.
    None,
    /// Every label of this class.
    Class(&'p GpuClass),
    /// A GPU-class label key whose value matches no class (`key=value`).
    Unknown(String),
}

pub(super) fn selection<'p>(policy: &'p TierPolicySpec, selector: &impl LabelLookup) -> Selection<'p> {
    let full = policy.gpu_classes.iter().find(|class| class.is_selected_by(selector));
    if let Some(class) = full {
        return Selection::Class(class);
    }
    selector
        .label_pairs()
        .find(|(key, _)| policy.gpu_classes.iter().any(|class| class.node_labels.contains_key(*key)))
        .map_or(Selection::None, |(key, value)| Selection::Unknown(format!("{key}={value}")))
}

pub(super) fn describe(selection: &Selection<'_>) -> String {
    match selection {
        Selection::None => "no GPU class".to_owned(),
        Selection::Class(class) => format!("GPU class {}", class.name),
        Selection::Unknown(label) => format!("{label}, which is no GPU class of the policy"),
    }
}

pub(super) fn toleration_values(class: &GpuClass) -> Result<Vec<Value>, MutateError> {
    class
        .pod_tolerations()
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(MutateError::SerializeToleration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::inputs::load_policy;

    fn selector(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    #[test]
    fn a_selector_with_all_of_a_class_labels_selects_that_class() {
        let policy = load_policy(None).unwrap().spec;
        let selected = selection(&policy, &selector(&[("gpu.nvidia.com/class", "a100"), ("zone", "a")]));
        assert!(matches!(selected, Selection::Class(class) if class.name == "a100"));
    }

    #[test]
    fn a_class_label_with_an_unknown_value_is_an_unknown_class_and_others_are_none() {
        let policy = load_policy(None).unwrap().spec;
        let unknown = selection(&policy, &selector(&[("gpu.nvidia.com/class", "h200")]));
        assert_eq!(unknown, Selection::Unknown("gpu.nvidia.com/class=h200".to_owned()));
        assert_eq!(selection(&policy, &selector(&[("zone", "a")])), Selection::None);
    }

    #[test]
    fn class_tolerations_come_from_its_taints() {
        let policy = load_policy(None).unwrap().spec;
        let tolerations = toleration_values(policy.gpu_class("l4").unwrap()).unwrap();
        assert_eq!(
            tolerations,
            [
                serde_json::json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"})
            ]
        );
    }
}
