//! The in-server gate: a ValidatingAdmissionPolicy and a MutatingAdmissionPolicy that hold the tier boundary
//! inside the API server when the webhook does not answer, each one fixed CEL program for every kind of the adapter
//! table, bound once per tier with that tier's facts as its parameter object; pure.
//!
//! The programs never change with the policy: what a tier may use lives in its `TierGateParameters` object
//! ([`params`]), derived by the functions the webhook decides with, so the gate stays small whatever the number of
//! tiers and the API server compiles it once. The template walk comes from the adapter table ([`cel`]), the rules
//! from [`rules`]; [`validate`] refuses, [`mutate`] confines. docs/admission.md "The in-server gate" explains them.

pub mod cel;
pub mod mutate;
pub mod params;
pub mod program;
pub(crate) mod rules;
mod run_time;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindingSpec,
    NamedRuleWithOperations, ParamKind, ParamRef, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use kube_core::Resource;
use tiergate_workloads::WorkloadAdapter;

use self::params::{TierGateParameters, build_gate_parameters};
use crate::plan::names::bounded_name;
use crate::policy::{ALWAYS_EXCLUDED_NAMESPACES, Tier, TierPolicy, TierPolicySpec};

/// The failure policy of the validating half: an expression that cannot be evaluated on a matched object refuses
/// it, and so does a missing parameter object, so the gate never fails open.
pub const GATE_FAILURE_POLICY: &str = "Fail";
/// The name of both policies of the TierPolicy called `policy` (one program, but each served TierPolicy owns its
/// copy, so that two policies in one cluster never fight over it).
pub fn gate_policy_name(policy: &str) -> String {
    bounded_name(&format!("tiergate-gate-{policy}"))
}
/// The namespace label every API server sets to the namespace's name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The name of the bindings and the parameter object of `tier`.
pub fn gate_name(tier: &str) -> String {
    bounded_name(&format!("tiergate-gate-{tier}"))
}
/// One line for people: the gate's mode and objects (`tiergate render` prints it; the daemon reports the same in
/// the `InServerGate` status condition).
pub fn gate_summary(gate: &Gate, mode: GateMode) -> String {
    if gate.policies.is_empty() {
        return "in-server gate: none (the policy has no tiers)\n".to_owned();
    }
    let tiers: Vec<&str> = gate.parameters.iter().map(|parameters| parameters.spec.tier.name.as_str()).collect();
    let name = gate.policies.first().and_then(|policy| policy.metadata.name.as_deref()).unwrap_or_default();
    match mode {
        GateMode::ValidateOnly => format!(
            "in-server gate: validate only (ValidatingAdmissionPolicy {name}, bound once per tier with \
             its TierGateParameters: {}); with the webhook down, GPU workloads without the tier's class, queue and \
             priority are refused, not stored unconstrained\n",
            tiers.join(", ")
        ),
        GateMode::ValidateAndMutate => format!(
            "in-server gate: validate and mutate (Validating- and MutatingAdmissionPolicy {name}, bound \
             once per tier with its TierGateParameters: {}); with the webhook down, a GPU workload gets its tier's \
             queue, class and priority ceiling inside the API server, and one that still is not confined to the \
             tier is refused\n",
            tiers.join(", ")
        ),
    }
}

/// The in-server gate of a policy: one parameter object per tier, one ValidatingAdmissionPolicy and one
/// MutatingAdmissionPolicy, and per tier one binding of each to the tier's namespaces and parameter object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// One per tier (tier order), named [`gate_name`] of the tier.
    pub parameters: Vec<TierGateParameters>,
    /// The one validating policy (none for a policy without tiers).
    pub policies: Vec<ValidatingAdmissionPolicy>,
    /// One per tier (tier order), selecting the tier's namespaces and naming its parameter object.
    pub bindings: Vec<ValidatingAdmissionPolicyBinding>,
    /// The one mutating policy; applied only where the API server serves MutatingAdmissionPolicy (1.36+).
    pub mutating_policies: Vec<MutatingAdmissionPolicy>,
    /// One per tier (tier order), as `bindings`.
    pub mutating_bindings: Vec<MutatingAdmissionPolicyBinding>,
}

/// What the gate does inside the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateMode {
    /// ValidatingAdmissionPolicies only (MutatingAdmissionPolicy not served, before Kubernetes 1.36): a GPU
    /// workload the webhook does not answer for is refused.
    ValidateOnly,
    /// ValidatingAdmissionPolicies and MutatingAdmissionPolicies: such a workload is admitted into its tier.
    ValidateAndMutate,
}

impl GateMode {
    /// The mode for an API server that does (`true`) or does not serve MutatingAdmissionPolicy.
    pub fn for_server(serves_mutating_policies: bool) -> Self {
        if serves_mutating_policies { Self::ValidateAndMutate } else { Self::ValidateOnly }
    }

    /// The `InServerGate` condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::ValidateOnly => "ValidateOnly",
            Self::ValidateAndMutate => "ValidateAndMutate",
        }
    }
}

/// The gate of `spec`, every object labelled with `labels`.
pub fn build_gate(policy: &TierPolicy, labels: &BTreeMap<String, String>) -> Gate {
    let spec = &policy.spec;
    let program = gate_policy_name(policy.metadata.name.as_deref().unwrap_or("default"));
    if spec.tiers.is_empty() {
        return Gate::default();
    }
    let meta = |name: String| ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() };
    let mut gate = Gate {
        parameters: build_gate_parameters(spec, labels),
        policies: vec![ValidatingAdmissionPolicy {
            metadata: meta(program.clone()),
            spec: Some(validate::build_validating_spec()),
            status: None,
        }],
        mutating_policies: vec![MutatingAdmissionPolicy {
            metadata: meta(program.clone()),
            spec: Some(mutate::build_mutating_spec()),
        }],
        ..Gate::default()
    };
    for tier in &spec.tiers {
        let name = gate_name(&tier.name);
        let match_resources =
            Some(MatchResources { namespace_selector: Some(tier_namespaces(spec, tier)), ..MatchResources::default() });
        gate.bindings.push(ValidatingAdmissionPolicyBinding {
            metadata: meta(name.clone()),
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: program.clone(),
                validation_actions: vec!["Deny".to_owned()],
                match_resources: match_resources.clone(),
                param_ref: Some(param_ref(&name)),
            },
        });
        gate.mutating_bindings.push(MutatingAdmissionPolicyBinding {
            metadata: meta(name.clone()),
            spec: Some(MutatingAdmissionPolicyBindingSpec {
                policy_name: Some(program.clone()),
                match_resources,
                param_ref: Some(param_ref(&name)),
            }),
        });
    }
    gate
}

/// The gate's parameter kind.
pub(crate) fn param_kind() -> ParamKind {
    ParamKind {
        api_version: Some(TierGateParameters::api_version(&()).into_owned()),
        kind: Some(TierGateParameters::kind(&()).into_owned()),
    }
}

/// A binding's reference to the parameter object `name`; a missing one refuses (the validating half fails closed).
fn param_ref(name: &str) -> ParamRef {
    ParamRef {
        name: Some(name.to_owned()),
        parameter_not_found_action: Some("Deny".to_owned()),
        namespace: None,
        selector: None,
    }
}

/// The namespaces of `tier`: its label value, minus kube-system, the excluded and the admin namespaces.
fn tier_namespaces(spec: &TierPolicySpec, tier: &Tier) -> LabelSelector {
    let exempt: BTreeSet<String> = ALWAYS_EXCLUDED_NAMESPACES
        .iter()
        .map(|name| (*name).to_owned())
        .chain(spec.excluded_namespaces.iter().cloned())
        .chain(spec.admission.admin_namespaces.iter().cloned())
        .collect();
    LabelSelector {
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: spec.tier_label.clone(),
                operator: "In".to_owned(),
                values: Some(vec![tier.name.clone()]),
            },
            LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(exempt.into_iter().collect()),
            },
        ]),
        match_labels: None,
    }
}

/// The match constraints of a policy: the adapter-table kinds for `operations` of the main resource, at the
/// adapter's version (other served versions arrive converted, `matchPolicy: Equivalent`).
pub(crate) fn gate_match_resources<'a>(
    operations: &[&str],
    adapters: impl IntoIterator<Item = &'a WorkloadAdapter>,
) -> MatchResources {
    let mut by_group_version: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for adapter in adapters {
        by_group_version.entry((adapter.group, adapter.version)).or_default().push(adapter.plural());
    }
    let rules = by_group_version
        .into_iter()
        .map(|((group, version), resources)| NamedRuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(operations.iter().map(|operation| (*operation).to_owned()).collect()),
            resources: Some(resources),
            scope: Some("Namespaced".to_owned()),
            resource_names: None,
        })
        .collect();
    MatchResources {
        match_policy: Some("Equivalent".to_owned()),
        resource_rules: Some(rules),
        ..MatchResources::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    /// The YAML size of every object of `gate`, as `tiergate render` prints them.
    fn rendered_size(gate: &Gate) -> usize {
        fn yaml<T: serde::Serialize>(objects: &[T]) -> usize {
            objects.iter().map(|object| serde_saphyr::to_string(object).unwrap().len()).sum()
        }
        yaml(&gate.parameters)
            + yaml(&gate.policies)
            + yaml(&gate.bindings)
            + yaml(&gate.mutating_policies)
            + yaml(&gate.mutating_bindings)
    }

    fn gate_of(policy: &TierPolicy) -> Gate {
        build_gate(policy, &BTreeMap::new())
    }

    #[test]
    fn the_gate_stays_small_for_the_sample_and_each_tier_adds_little() {
        let policy = load_policy(None).unwrap();
        let size = rendered_size(&gate_of(&policy));
        // 128 KiB until issue 52: the validating policy's match condition restates its validations (about 44 KB),
        // which the API server compiles once and which spares it a conversion and six programs on every create.
        assert!(size <= 192 * 1024, "the sample's gate is {size} bytes, over 192 KiB");
        let mut bigger = policy.clone();
        let mut tier = bigger.spec.tiers.last().unwrap().clone();
        tier.name = "platinum".to_owned();
        tier.local_queue_name = None;
        bigger.spec.tiers.push(tier);
        let grown = rendered_size(&gate_of(&bigger));
        assert!(grown > size && grown - size <= 4096, "a tier adds {} bytes, over 4 KiB", grown - size);
    }

    #[test]
    fn the_programs_do_not_change_with_the_policy() {
        let policy = load_policy(None).unwrap();
        let mut other = policy.clone();
        other.spec.tiers.truncate(1);
        for class in &mut other.spec.gpu_classes {
            class.node_labels.insert("extra".into(), "x".into());
        }
        let (one, two) = (gate_of(&policy), gate_of(&other));
        assert_eq!(one.policies[0].spec, two.policies[0].spec, "the validating program reads its facts from params");
        assert_eq!(one.mutating_policies[0].spec, two.mutating_policies[0].spec);
        assert_ne!(one.parameters[0].spec, two.parameters[0].spec);
    }

    #[test]
    fn every_binding_names_its_tiers_parameters_and_selects_its_tiers_namespaces() {
        let policy = load_policy(None).unwrap();
        let gate = gate_of(&policy);
        for ((tier, binding), parameters) in policy.spec.tiers.iter().zip(&gate.bindings).zip(&gate.parameters) {
            let param = binding.spec.param_ref.as_ref().unwrap();
            assert_eq!(param.name, parameters.metadata.name);
            assert_eq!(parameters.spec.tier.name, tier.name);
            let selector = binding.spec.match_resources.as_ref().unwrap().namespace_selector.as_ref().unwrap();
            let tier_requirement = &selector.match_expressions.as_ref().unwrap()[0];
            assert_eq!(tier_requirement.values.as_deref(), Some(&[tier.name.clone()][..]));
        }
    }
}
