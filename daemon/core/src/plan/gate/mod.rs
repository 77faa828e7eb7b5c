//! The in-server gate: ValidatingAdmissionPolicies that hold the tier boundary inside the API server when the
//! webhook does not answer, generated from the adapter table and the policy's classes, queues and ceilings; pure.
//!
//! One policy and one binding per tier (`tiergate-gate-<tier>`), bound to the namespaces carrying the tier label.
//! Every rule is built from the definitions the webhook decides with: the template pointers of
//! `tiergate_workloads::ADAPTERS` ([`cel`]), the GPU resources of [`crate::admission::VENDOR_GPU_RESOURCE_PREFIXES`]
//! and each class's `resource_patterns()`, the class labels and taints, `Tier::local_queue()` and the priority
//! buckets `check_priority_ceiling` lets the tier keep. docs/admission.md "The in-server gate" explains the rules.

pub mod cel;
pub mod mutate;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, NamedRuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use tiergate_workloads::{ADAPTERS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter};

use self::cel::{Quantifier, all_templates_split, list, literal, over_templates, pointer_path};
use crate::admission::VENDOR_GPU_RESOURCE_PREFIXES;
use crate::plan::names::bounded_name;
use crate::policy::{ALWAYS_EXCLUDED_NAMESPACES, DraClaimAction, ForeignClassAction, GpuClass, Tier, TierPolicySpec};
use crate::scoring::buckets::{CeilingCheck, check_priority_ceiling};

/// The failure policy of every generated policy: an expression that cannot be evaluated on a matched (GPU-asking,
/// tiered, non-exempt) object refuses it, so the gate never fails open; `matchConditions` keep everything else out.
pub const GATE_FAILURE_POLICY: &str = "Fail";
/// The namespace label every API server sets to the namespace's name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// A quantity whose leading number is zero, as `tiergate_workloads::requests_any` reads it.
const ZERO_QUANTITY: &str = r"^\s*\+*[0.]*([^0-9.].*)?$";

/// The name of the policy and of the binding of `tier`.
pub fn gate_name(tier: &str) -> String {
    bounded_name(&format!("tiergate-gate-{tier}"))
}

/// One line for people: the gate's mode and objects (`tiergate render` prints it; the daemon reports the same in
/// the `InServerGate` status condition).
pub fn gate_summary(gate: &Gate, mode: GateMode) -> String {
    if gate.policies.is_empty() {
        return "in-server gate: none (the policy has no tiers)\n".to_owned();
    }
    let names: Vec<&str> = gate.policies.iter().filter_map(|policy| policy.metadata.name.as_deref()).collect();
    match mode {
        GateMode::ValidateOnly => format!(
            "in-server gate: validate only ({} ValidatingAdmissionPolicies and bindings: {}); with the webhook down, \
             GPU workloads without the tier's class, queue and priority are refused, not stored unconstrained\n",
            names.len(),
            names.join(", ")
        ),
        GateMode::ValidateAndMutate => format!(
            "in-server gate: validate and mutate ({} ValidatingAdmissionPolicies, {} MutatingAdmissionPolicies and \
             their bindings: {}); with the webhook down, a GPU workload gets its tier's queue, class and priority \
             ceiling inside the API server, and one that still is not confined to the tier is refused\n",
            names.len(),
            gate.mutating_policies.len(),
            names.join(", ")
        ),
    }
}

/// The in-server gate of a policy: one ValidatingAdmissionPolicy and one binding per tier, and one
/// MutatingAdmissionPolicy and one binding per tier (tier order; [`mutate`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// One per tier.
    pub policies: Vec<ValidatingAdmissionPolicy>,
    /// One per tier, selecting the tier's namespaces.
    pub bindings: Vec<ValidatingAdmissionPolicyBinding>,
    /// One per tier; applied only where the API server serves MutatingAdmissionPolicy (Kubernetes 1.36+).
    pub mutating_policies: Vec<MutatingAdmissionPolicy>,
    /// One per tier, selecting the tier's namespaces.
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
pub fn build_gate(spec: &TierPolicySpec, labels: &BTreeMap<String, String>) -> Gate {
    let meta = |name: String| ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() };
    let mut gate = Gate::default();
    for tier in &spec.tiers {
        let name = gate_name(&tier.name);
        gate.policies.push(ValidatingAdmissionPolicy {
            metadata: meta(name.clone()),
            spec: Some(build_policy_spec(spec, tier)),
            status: None,
        });
        gate.bindings.push(ValidatingAdmissionPolicyBinding {
            metadata: meta(name.clone()),
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: name,
                validation_actions: vec!["Deny".to_owned()],
                match_resources: Some(MatchResources {
                    namespace_selector: Some(tier_namespaces(spec, tier)),
                    ..MatchResources::default()
                }),
                param_ref: None,
            },
        });
    }
    let mutating = mutate::build_mutating_gate(spec, labels);
    gate.mutating_policies = mutating.policies;
    gate.mutating_bindings = mutating.bindings;
    gate
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

/// The adapter-table kinds as resource rules for `operations` of the main resource, at the adapter's version
/// (other served versions arrive converted, `matchPolicy: Equivalent`).
fn resource_rules_for<'a>(
    operations: &[&str],
    adapters: impl IntoIterator<Item = &'a WorkloadAdapter>,
) -> Vec<NamedRuleWithOperations> {
    let mut by_group_version: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for adapter in adapters {
        by_group_version.entry((adapter.group, adapter.version)).or_default().push(adapter.plural());
    }
    by_group_version
        .into_iter()
        .map(|((group, version), resources)| NamedRuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(operations.iter().map(|operation| (*operation).to_owned()).collect()),
            resources: Some(resources),
            scope: Some("Namespaced".to_owned()),
            resource_names: None,
        })
        .collect()
}

fn build_policy_spec(spec: &TierPolicySpec, tier: &Tier) -> ValidatingAdmissionPolicySpec {
    let rules = TierRules::new(spec, tier);
    ValidatingAdmissionPolicySpec {
        failure_policy: Some(GATE_FAILURE_POLICY.to_owned()),
        match_constraints: Some(MatchResources {
            match_policy: Some("Equivalent".to_owned()),
            resource_rules: Some(resource_rules_for(&["CREATE", "UPDATE"], ADAPTERS)),
            ..MatchResources::default()
        }),
        match_conditions: Some(rules.match_conditions(ADAPTERS)),
        validations: Some(rules.validations()),
        ..ValidatingAdmissionPolicySpec::default()
    }
}

/// What one tier's rules are built from.
struct TierRules<'p> {
    spec: &'p TierPolicySpec,
    tier: &'p Tier,
    classes: Vec<&'p GpuClass>,
}

/// `request.kind` is the adapter's kind.
fn is_kind(adapter: &WorkloadAdapter) -> String {
    format!("(request.kind.group == {} && request.kind.kind == {})", literal(adapter.group), literal(adapter.kind))
}

fn any_of(parts: impl IntoIterator<Item = String>) -> String {
    let parts: Vec<String> = parts.into_iter().collect();
    if parts.is_empty() { "false".to_owned() } else { format!("({})", parts.join(" || ")) }
}

fn all_of(parts: impl IntoIterator<Item = String>) -> String {
    let parts: Vec<String> = parts.into_iter().collect();
    if parts.is_empty() { "true".to_owned() } else { format!("({})", parts.join(" && ")) }
}

/// CEL: `name` matches one of the resource `patterns` (`policy::resource_matches`: exact, or a prefix before a
/// trailing `*`), as one anchored regular expression.
fn resource_regex(name: &str, patterns: impl IntoIterator<Item = String>) -> String {
    let mut prefixes = BTreeSet::new();
    let mut exact = BTreeSet::new();
    for pattern in patterns {
        match pattern.strip_suffix('*') {
            Some(stem) => prefixes.insert(stem.to_owned()),
            None => exact.insert(pattern),
        };
    }
    let covered =
        |name: &str, except: &str| prefixes.iter().any(|prefix| prefix != except && name.starts_with(prefix.as_str()));
    let mut alternatives: Vec<String> = prefixes
        .iter()
        .filter(|prefix| !covered(prefix, prefix))
        .map(|prefix| format!("{}.*", regex_syntax::escape(prefix)))
        .collect();
    alternatives.extend(exact.iter().filter(|name| !covered(name, "")).map(|name| regex_syntax::escape(name)));
    if alternatives.is_empty() {
        return "false".to_owned();
    }
    format!("{name}.matches({})", literal(&format!("^({})$", alternatives.join("|"))))
}

/// `field` of `base` or the empty string.
fn or_empty(base: &str, field: &str) -> String {
    format!("(has({base}.{field}) ? {base}.{field} : '')")
}

impl<'p> TierRules<'p> {
    fn new(spec: &'p TierPolicySpec, tier: &'p Tier) -> Self {
        let classes = tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)).collect();
        Self { spec, tier, classes }
    }

    /// Every GPU-class label key of the policy (what selects a class).
    fn class_keys(&self) -> BTreeSet<&'p str> {
        self.spec.gpu_classes.iter().flat_map(|class| class.node_labels.keys().map(String::as_str)).collect()
    }

    /// The values of `key` that select a class of the tier.
    fn tier_values(&self, key: &str) -> BTreeSet<&'p str> {
        self.classes.iter().filter_map(|class| class.node_labels.get(key).map(String::as_str)).collect()
    }

    /// CEL: the resource name `name` is a GPU (`admission::boundary::is_gpu_resource`: a vendor prefix or a
    /// pattern of any class).
    fn is_gpu_resource(&self, name: &str) -> String {
        let patterns = self.spec.gpu_classes.iter().flat_map(|class| class.resource_patterns());
        let prefixes = VENDOR_GPU_RESOURCE_PREFIXES.iter().map(|prefix| format!("{prefix}*"));
        resource_regex(name, prefixes.chain(patterns.map(str::to_owned)))
    }

    /// CEL: the resource `name` may be asked in this tier (a class of the tier counts it; on a queued kind the
    /// tier also has quota for it).
    fn is_provided(&self, name: &str, queued: bool) -> String {
        let patterns = self.classes.iter().flat_map(|class| class.resource_patterns()).map(str::to_owned);
        let counted = resource_regex(name, patterns);
        if queued {
            format!("({counted} && {name} in {})", list(self.tier.quotas.keys().map(String::as_str)))
        } else {
            counted
        }
    }

    /// CEL: some resource of the requirements `requirements` matches `test` with a non-zero quantity.
    fn requirements_any(&self, requirements: &str, depth: usize, test: &dyn Fn(&str) -> String) -> String {
        let name = format!("r{depth}");
        let parts = ["requests", "limits"].map(|kind| {
            let map = format!("{requirements}.{kind}");
            format!(
                "(has({map}) && {map}.exists({name}, {} && !string({map}[{name}]).matches({})))",
                test(&name),
                literal(ZERO_QUANTITY)
            )
        });
        any_of(parts)
    }

    /// CEL: some container (or the pod) of `spec` asks a resource matching `test` (`requests_any` and
    /// `requested_resources`: containers, init containers, SparkPodSpec sidecars and `gpu`, pod-level resources).
    fn asks(&self, spec: &str, flat: bool, depth: usize, test: &dyn Fn(&str) -> String) -> String {
        let container = format!("c{depth}");
        let mut fields = vec!["containers", "initContainers"];
        if flat {
            fields.push("sidecars");
        }
        let lists: Vec<String> =
            fields.into_iter().map(|field| format!("(has({spec}.{field}) ? {spec}.{field} : [])")).collect();
        let resources = format!("{container}.resources");
        let mut parts = vec![format!(
            "({}).exists({container}, has({resources}) && {})",
            lists.join(" + "),
            self.requirements_any(&resources, depth, test)
        )];
        parts.push(format!(
            "(has({spec}.resources) && {})",
            self.requirements_any(&format!("{spec}.resources"), depth, test)
        ));
        if flat {
            let gpu = format!("{spec}.gpu");
            parts.push(format!(
                "(has({gpu}) && has({gpu}.name) && has({gpu}.quantity) && {} && !string({gpu}.quantity).matches({}))",
                test(&format!("{gpu}.name")),
                literal(ZERO_QUANTITY)
            ));
        }
        any_of(parts)
    }

    /// CEL: `spec` can reach GPU nodes (`admission::boundary::reach` without the node-name route, which needs
    /// the node list): a GPU resource, a DRA claim, a toleration of a GPU class's taint, a GPU-class label key in
    /// its nodeSelector or node affinity.
    fn reaches_gpu(&self, spec: &str, flat: bool, depth: usize) -> String {
        let resources = self.asks(spec, flat, depth, &|name| self.is_gpu_resource(name));
        let claims = format!("(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0)");
        let keys = list(self.class_keys());
        let tolerations = self.tolerates_gpu_taint(spec, depth);
        let selector =
            format!("(has({spec}.nodeSelector) && {spec}.nodeSelector.exists(s{depth}, s{depth} in {keys}))");
        let affinity =
            self.affinity_terms(spec, depth, Quantifier::Any, &|expression| format!("{expression}.key in {keys}"));
        any_of([resources, claims, tolerations, selector, affinity])
    }

    /// CEL: a toleration of `spec` tolerates a GPU class's taint (`boundary::tolerated_gpu_taint`).
    fn tolerates_gpu_taint(&self, spec: &str, depth: usize) -> String {
        let toleration = format!("l{depth}");
        let (key, operator, value, effect) = (
            or_empty(&toleration, "key"),
            or_empty(&toleration, "operator"),
            or_empty(&toleration, "value"),
            or_empty(&toleration, "effect"),
        );
        let taints: BTreeSet<String> = self
            .spec
            .gpu_classes
            .iter()
            .flat_map(|class| &class.node_taints)
            .map(|taint| {
                format!(
                    "(({key} == {} || ({key} == '' && {operator} == 'Exists')) && ({operator} == 'Exists' || {value} == {}) \
                     && ({effect} == '' || {effect} == {}))",
                    literal(&taint.key),
                    literal(taint.value.as_deref().unwrap_or_default()),
                    literal(&taint.effect)
                )
            })
            .collect();
        if taints.is_empty() {
            return "false".to_owned();
        }
        format!("(has({spec}.tolerations) && {spec}.tolerations.exists({toleration}, {}))", any_of(taints))
    }

    /// CEL: `test` over the matchExpressions of the node-affinity terms of `spec` (required and preferred for
    /// `Any`; required only for `All`).
    fn affinity_terms(
        &self,
        spec: &str,
        depth: usize,
        quantifier: Quantifier,
        test: &dyn Fn(&str) -> String,
    ) -> String {
        let node = format!("{spec}.affinity.nodeAffinity");
        let required = format!("{node}.requiredDuringSchedulingIgnoredDuringExecution");
        let (term, expression) = (format!("n{depth}"), format!("e{depth}"));
        let guard =
            format!("has({spec}.affinity) && has({node}) && has({required}) && has({required}.nodeSelectorTerms)");
        match quantifier {
            Quantifier::Any => {
                let preferred = format!("{node}.preferredDuringSchedulingIgnoredDuringExecution");
                let test = test(&expression);
                format!(
                    "(({guard} && {required}.nodeSelectorTerms.exists({term}, has({term}.matchExpressions) && \
                     {term}.matchExpressions.exists({expression}, {test}))) || (has({spec}.affinity) && has({node}) && \
                     has({preferred}) && {preferred}.exists({term}, has({term}.preference) && \
                     has({term}.preference.matchExpressions) && {term}.preference.matchExpressions.exists({expression}, \
                     {test}))))"
                )
            }
            Quantifier::All => format!(
                "(!({guard}) || {required}.nodeSelectorTerms.all({term}, !has({term}.matchExpressions) || \
                 {term}.matchExpressions.all({expression}, {})))",
                test(&expression)
            ),
        }
    }

    /// CEL: `value` (a label value of key `key`, itself a CEL expression) selects a class of the tier.
    fn value_in_tier(&self, key: &str, value: &str) -> String {
        let parts = self.class_keys().into_iter().map(|class_key| {
            format!("({key} == {} && {value} in {})", literal(class_key), list(self.tier_values(class_key)))
        });
        any_of(parts.collect::<Vec<_>>())
    }

    /// CEL: `spec` is confined to the tier's classes: no GPU-class label outside them in its nodeSelector or a
    /// required `In`, and a class of the tier selected (nodeSelector, or every required term `In` the tier's
    /// values), or `free` (a queued kind of a tier with fallbacks: Kueue picks the flavor).
    fn confined(&self, spec: &str, depth: usize, free: bool) -> String {
        if self.spec.admission.foreign_gpu_class == ForeignClassAction::Allow {
            return "true".to_owned();
        }
        let keys = list(self.class_keys());
        let value = format!("v{depth}");
        let no_foreign_choice = self.no_foreign_class(spec, depth);
        let selects_class = any_of(self.classes.iter().map(|class| {
            all_of(class.node_labels.iter().map(|(key, value)| {
                format!(
                    "(has({spec}.nodeSelector) && {} in {spec}.nodeSelector && {spec}.nodeSelector[{}] == {})",
                    literal(key),
                    literal(key),
                    literal(value)
                )
            }))
        }));
        let required = format!("{spec}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution");
        let (term, expression) = (format!("n{depth}"), format!("e{depth}"));
        let affinity_confines = format!(
            "(has({spec}.affinity) && has({spec}.affinity.nodeAffinity) && has({required}) && \
             has({required}.nodeSelectorTerms) && size({required}.nodeSelectorTerms) > 0 && \
             {required}.nodeSelectorTerms.all({term}, has({term}.matchExpressions) && \
             {term}.matchExpressions.exists({expression}, {expression}.key in {keys} && {expression}.operator == 'In' && \
             has({expression}.values) && {expression}.values.all({value}, {}))))",
            self.value_in_tier(&format!("{expression}.key"), &value)
        );
        let mut chosen = vec![selects_class, affinity_confines];
        if free {
            chosen.push("true".to_owned());
        }
        format!("({no_foreign_choice} && {})", any_of(chosen))
    }

    /// CEL: the pod spec at `spec` selects no GPU class outside the tier, by nodeSelector or a required
    /// node-affinity `In` term (`true` when the policy allows foreign classes).
    fn no_foreign_class(&self, spec: &str, depth: usize) -> String {
        if self.spec.admission.foreign_gpu_class == ForeignClassAction::Allow {
            return "true".to_owned();
        }
        let keys = list(self.class_keys());
        let selector_key = format!("s{depth}");
        let no_foreign_selector = format!(
            "(!has({spec}.nodeSelector) || {spec}.nodeSelector.all({selector_key}, !({selector_key} in {keys}) || {}))",
            self.value_in_tier(&selector_key, &format!("{spec}.nodeSelector[{selector_key}]"))
        );
        let value = format!("v{depth}");
        let no_foreign_affinity = self.affinity_terms(spec, depth, Quantifier::All, &|expression| {
            format!(
                "!({expression}.key in {keys}) || {expression}.operator != 'In' || !has({expression}.values) || \
                 {expression}.values.all({value}, {})",
                self.value_in_tier(&format!("{expression}.key"), &value)
            )
        });
        format!("({no_foreign_selector} && {no_foreign_affinity})")
    }

    /// CEL: an object of `adapter` asks for a GPU (some template reaches GPU nodes, or a requirement outside the
    /// templates asks one).
    fn asks_gpu(&self, adapter: &WorkloadAdapter) -> String {
        let outside = adapter.resources_outside_templates.iter().map(|pointer| {
            let (guard, path) = pointer_path("object", pointer);
            format!("({guard} && {})", self.requirements_any(&path, 0, &|name| self.is_gpu_resource(name)))
        });
        let templates = over_templates(adapter.templates, "object", Quantifier::Any, 0, &|spec, flat, depth| {
            self.reaches_gpu(spec, flat, depth)
        });
        any_of(std::iter::once(templates).chain(outside).collect::<Vec<_>>())
    }

    /// CEL: every GPU template of an `adapter` object satisfies `rule` (every template does when a requirement
    /// outside the templates asks a GPU).
    fn every_gpu_template(&self, adapter: &WorkloadAdapter, rule: &dyn Fn(&str, bool, usize) -> String) -> Vec<String> {
        self.every_template(adapter, true, rule)
    }

    /// CEL: every template (`only_gpu`: every GPU template) of an `adapter` object satisfies `rule`, unless an
    /// UPDATE keeps the kind's immutable templates as they were.
    fn every_template(
        &self,
        adapter: &WorkloadAdapter,
        only_gpu: bool,
        rule: &dyn Fn(&str, bool, usize) -> String,
    ) -> Vec<String> {
        let kept = Self::templates_kept(adapter);
        let outside = any_of(
            adapter
                .resources_outside_templates
                .iter()
                .map(|pointer| {
                    let (guard, path) = pointer_path("object", pointer);
                    format!("({guard} && {})", self.requirements_any(&path, 0, &|name| self.is_gpu_resource(name)))
                })
                .collect::<Vec<_>>(),
        );
        let parts = all_templates_split(adapter.templates, "object", &|spec, flat, depth| {
            if only_gpu {
                format!("(!({outside} || {}) || {})", self.reaches_gpu(spec, flat, depth), rule(spec, flat, depth))
            } else {
                rule(spec, flat, depth)
            }
        });
        parts
            .into_iter()
            .map(|part| match &kept {
                Some(kept) => format!("({kept} || {part})"),
                None => part,
            })
            .collect()
    }

    /// CEL: an UPDATE that leaves the kind's immutable templates as they were (`immutable_on_update` other than
    /// suspend and the queue label): the webhook leaves them as sent (rule 11), so the gate judges only what the
    /// update introduced. `None` for kinds whose templates stay mutable (Deployment, StatefulSet, CronJob, ...).
    fn templates_kept(adapter: &WorkloadAdapter) -> Option<String> {
        let pointers: Vec<&str> = adapter
            .immutable_on_update
            .iter()
            .copied()
            .filter(|pointer| Some(*pointer) != adapter.suspend_pointer() && !pointer.contains("queue-name"))
            .collect();
        if pointers.is_empty() {
            return None;
        }
        let same = pointers.into_iter().map(|pointer| {
            let (guard, path) = pointer_path("object", pointer);
            let (old_guard, old_path) = pointer_path("oldObject", pointer);
            format!("(({guard}) ? (({old_guard}) && {path} == {old_path}) : !({old_guard}))")
        });
        Some(format!("(request.operation == 'UPDATE' && {})", all_of(same.collect::<Vec<_>>())))
    }

    fn match_conditions<'a>(&self, adapters: impl IntoIterator<Item = &'a WorkloadAdapter>) -> Vec<MatchCondition> {
        let admission = &self.spec.admission;
        let mut conditions = Vec::new();
        let users: Vec<&str> =
            admission.admin_users.iter().chain(&admission.multi_kueue_users).map(String::as_str).collect();
        if !users.is_empty() {
            conditions.push(MatchCondition {
                name: "not-an-exempt-user".to_owned(),
                expression: format!("!(request.userInfo.username in {})", list(users)),
            });
        }
        if !admission.admin_groups.is_empty() {
            conditions.push(MatchCondition {
                name: "not-an-exempt-group".to_owned(),
                expression: format!(
                    "!has(request.userInfo.groups) || !request.userInfo.groups.exists(g, g in {})",
                    list(admission.admin_groups.iter().map(String::as_str))
                ),
            });
        }
        // A controller writes what an admitted template says (Job pods, a Deployment's ReplicaSets, Kueue
        // injecting the admitted flavor, tiergate itself): the template was gated when the tenant wrote it.
        conditions.push(MatchCondition {
            name: "not-a-controller".to_owned(),
            expression: "!request.userInfo.username.startsWith('system:') || \
                         request.userInfo.username.startsWith('system:serviceaccount:' + request.namespace + ':')"
                .to_owned(),
        });
        // One condition per kind (all must hold, so each is `!<kind> || ...`): a condition over every kind at once
        // would pass cel-go's 100,000-code-point limit.
        for adapter in adapters {
            conditions.push(MatchCondition {
                name: format!("{}-asks-for-a-gpu", adapter.kind.to_ascii_lowercase()),
                expression: format!("!{} || {}", is_kind(adapter), self.asks_gpu(adapter)),
            });
        }
        conditions
    }

    /// Every validation, kind by kind (adapter-table order): each is `!<kind> || <rule>`, so a request is judged
    /// only by its own kind's rules and each message names the kind.
    fn validations(&self) -> Vec<Validation> {
        let tier = &self.tier.name;
        let fallbacks = !self.tier.fallback_gpu_classes.is_empty();
        let class_names: Vec<&str> = self.classes.iter().map(|class| class.name.as_str()).collect();
        let selectors: Vec<String> = self
            .classes
            .iter()
            .map(|class| {
                class.node_labels.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(",")
            })
            .collect();
        let allowed: Vec<&str> = self
            .spec
            .priority_buckets
            .iter()
            .filter(|bucket| {
                check_priority_ceiling(&bucket.name, self.tier, &self.spec.priority_buckets) == CeilingCheck::Within
            })
            .map(|bucket| bucket.name.as_str())
            .collect();
        let webhook = "the tiergate webhook normally adds this — is it running?";
        let deny_claims = self.spec.admission.dra_claims == DraClaimAction::Deny;
        let mut validations = Vec::new();
        for adapter in ADAPTERS {
            let kind = adapter.kind;
            let mut push = |rules: Vec<String>, message: String| {
                for rule in rules {
                    validations.push(Validation {
                        expression: format!("!{} || {rule}", is_kind(adapter)),
                        message: Some(message.clone()),
                        reason: Some("Forbidden".to_owned()),
                        message_expression: None,
                    });
                }
            };
            let free = fallbacks && adapter.is_queued();
            let choice = if free { "; or leave the GPU class to Kueue (no GPU-class selector)" } else { "" };
            push(
                self.every_gpu_template(adapter, &|spec, _, depth| self.confined(spec, depth, free)),
                format!(
                    "tier {tier}: GPU pods of a {kind} must select {} (nodeSelector, or required node affinity In) \
                     and no other GPU class{choice}; {webhook}",
                    selectors.join(" or ")
                ),
            );
            let queued = adapter.is_queued();
            // A foreign GPU resource or a claim is itself a route to GPU nodes: every template is checked.
            push(
                self.every_template(adapter, false, &|spec, flat, depth| {
                    let foreign = self.asks(spec, flat, depth, &|name| {
                        format!("{} && !{}", self.is_gpu_resource(name), self.is_provided(name, queued))
                    });
                    let claims = format!("(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0)");
                    if deny_claims { format!("!{foreign} && !{claims}") } else { format!("!{foreign}") }
                }),
                format!(
                    "tier {tier}: GPU pods of a {kind} may ask only the GPU resources of {} that the tier has quota \
                     for{}; ask one of those (the TierPolicy's gpuClasses and the tier's quotas)",
                    class_names.join(", "),
                    if deny_claims { ", and claim no devices through DRA (resourceClaims)" } else { "" }
                ),
            );
            if let Some(rule) = self.queue_rule(adapter) {
                push(
                    vec![rule],
                    format!(
                        "tier {tier}: a GPU {kind} must carry the label {QUEUE_NAME_LABEL}={} (no other tier's \
                         queue){}; {webhook}",
                        self.tier.local_queue(),
                        if adapter.suspend_pointer().is_some() {
                            " and be created suspended, as Kueue expects"
                        } else {
                            ""
                        }
                    ),
                );
            }
            push(
                adapter.priority_labels_at().map(|at| Self::priority_rule(&allowed, at)).collect(),
                format!(
                    "tier {tier}: the {PRIORITY_CLASS_LABEL} label of a GPU {kind}{} may name only {}; remove it or \
                     name one of those; {webhook}",
                    match adapter.queue_labels_at {
                        "/metadata" => String::new(),
                        at => format!(" (its own and at {at})"),
                    },
                    if allowed.is_empty() { "nothing".to_owned() } else { allowed.join(", ") }
                ),
            );
        }
        validations
    }

    /// CEL: the labels at `pointer` of `root` carry a usable queue (non-empty, no other tier's LocalQueue).
    fn usable_queue(&self, root: &str, pointer: &str) -> String {
        let (guard, path) = pointer_path(root, &format!("{pointer}/labels"));
        let others: Vec<String> =
            self.spec.tiers.iter().filter(|tier| tier.name != self.tier.name).map(Tier::local_queue).collect();
        let label = literal(QUEUE_NAME_LABEL);
        format!(
            "({guard} && {label} in {path} && {path}[{label}] != '' && !({path}[{label}] in {}))",
            list(others.iter().map(String::as_str))
        )
    }

    /// CEL: the object at `root` is suspended through `pointer`.
    fn suspended(root: &str, pointer: &str) -> String {
        let (guard, path) = pointer_path(root, pointer);
        format!("({guard} && {path} == true)")
    }

    /// The queue rule of a queued kind (`admission/update.rs`): CREATE needs a usable queue and `suspend: true`;
    /// UPDATE keeps a usable queue, except a workload that never had one and keeps running as it was.
    fn queue_rule(&self, adapter: &WorkloadAdapter) -> Option<String> {
        let labels_at = adapter.queue_labels_at;
        let usable = self.usable_queue("object", labels_at);
        let old_usable = self.usable_queue("oldObject", labels_at);
        match adapter.queueing {
            Queueing::NotQueued => None,
            Queueing::SuspendedWithQueueLabel { suspend } => Some(format!(
                "(request.operation == 'CREATE' ? ({usable} && {}) : ({usable} || (!{old_usable} && !{} && !{})))",
                Self::suspended("object", suspend),
                Self::suspended("oldObject", suspend),
                Self::suspended("object", suspend),
            )),
            Queueing::PodGroupWithQueueLabel { .. } => {
                Some(format!("(request.operation == 'CREATE' ? {usable} : ({usable} || !{old_usable}))"))
            }
        }
    }

    /// The priority rule for the labels of the metadata at `at`: the label names a bucket within the ceiling, or
    /// is what the old object had (the webhook holds the object's own labels and those of a CronJob's job template
    /// to the ceiling, `admission/priority.rs`).
    fn priority_rule(allowed: &[&str], at: &str) -> String {
        let (guard, path) = pointer_path("object", &format!("{at}/labels"));
        let (old_guard, old_path) = pointer_path("oldObject", &format!("{at}/labels"));
        let label = literal(PRIORITY_CLASS_LABEL);
        format!(
            "(!({guard} && {label} in {path}) || {path}[{label}] in {} || (request.operation == 'UPDATE' && \
             {old_guard} && {label} in {old_path} && {old_path}[{label}] == {path}[{label}]))",
            list(allowed.iter().copied())
        )
    }
}
