//! The in-server gate's MutatingAdmissionPolicies: the webhook's core edits done inside the API server (the tier's
//! queue label and `suspend`, the class selector and tolerations on GPU templates, the priority clamp), so that
//! with the webhook down a plain GPU workload is admitted into its tier rather than refused; pure.
//!
//! One policy and one binding per tier, next to the ValidatingAdmissionPolicy of the same name, with the same
//! `matchConditions` and namespace selector. Every edit is a JSON patch computed in CEL: `variables.removals`
//! (the paths of marks a tenant may have forged) and `variables.additions` (`{path, value}` pairs, ancestors
//! created as needed; the request kind's `variables.<kind>Additions`), which the policy's one mutation turns into
//! `remove` and `add` operations. One mutation, not one per kind: the API server encodes, patches, decodes and
//! defaults the whole object once per mutation, even for an empty patch, which for a tenant's flood of large
//! objects is most of its cost. Each edit leaves its mark (`admission::gate_marks`), so the webhook, which the API
//! server calls after the policies, decides on the object as the tenant sent it.
//!
//! Templates are edited where a kind holds them at fixed pointers (Pod, Job, CronJob, Deployment, StatefulSet,
//! LeaderWorkerSet, SparkApplication, the head group of a Ray kind); templates in lists or maps (JobSet, the
//! Kubeflow replica specs, Ray worker groups, TrainJob runtime patches) cannot be named by a fixed JSON-patch path
//! in CEL, so there the ValidatingAdmissionPolicy refuses an unconfined GPU template with its message instead.
//! AppWrapper is not matched at all ([`mutated_adapters`]).

use k8s_openapi::api::admissionregistration::v1::{
    JSONPatch, MatchCondition, MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBindingSpec, MutatingAdmissionPolicySpec, Mutation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tiergate_workloads::{ADAPTERS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter, pointer_tokens};

use super::cel::{Quantifier, guarded_path, list, literal, over_templates, pointer_path};
use super::{TierRules, any_of, gate_name, is_kind, resource_rules_for, tier_namespaces};
use crate::admission::gate_marks::{CLASS_ADDED_MARK, GATE_MARKS, PRIORITY_WAS_MARK, QUEUE_WAS_MARK};
use crate::policy::{CeilingAction, ForeignClassAction, GpuClass, Tier, TierPolicySpec};
use crate::scoring::buckets::{CeilingCheck, check_priority_ceiling, priority_ceiling};

/// A CEL error in a mutation skips the policy, not the request: the ValidatingAdmissionPolicy (`Fail`) still
/// refuses an unconstrained GPU workload, and the webhook still decides when it answers.
pub const MUTATING_FAILURE_POLICY: &str = "Ignore";

/// The variable listing the mark paths to remove (any kind).
pub const REMOVALS_VARIABLE: &str = "removals";
/// The variable listing the request kind's `{path, value}` additions.
pub const ADDITIONS_VARIABLE: &str = "additions";

/// The policy's one mutation: the removals, then the additions.
pub const MUTATION_EXPRESSION: &str = "variables.removals.map(p, JSONPatch{op: 'remove', path: p}) + \
     variables.additions.map(a, JSONPatch{op: 'add', path: a.path, value: a.value})";

/// The kinds the mutating half edits: every adapter but AppWrapper, whose components hold their templates in a
/// list of objects of any kind (nothing there has a fixed JSON-patch path, and its GPU condition alone is a quarter
/// of a policy's size, seconds of the API server's compile time). With the webhook down, the validating half refuses
/// a GPU AppWrapper with its message.
pub fn mutated_adapters() -> impl Iterator<Item = &'static WorkloadAdapter> {
    ADAPTERS.iter().filter(|adapter| !matches!(adapter.templates, tiergate_workloads::TemplateLayout::Embedded { .. }))
}

/// The variable-name stem of a kind (`job`, `rayjob`, `leaderworkerset`).
pub fn kind_variable(adapter: &WorkloadAdapter) -> String {
    adapter.kind.to_ascii_lowercase()
}

/// The mutating half of the gate: one policy and one binding per tier (tier order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MutatingGate {
    /// One per tier.
    pub policies: Vec<MutatingAdmissionPolicy>,
    /// One per tier, selecting the tier's namespaces.
    pub bindings: Vec<MutatingAdmissionPolicyBinding>,
}

/// The MutatingAdmissionPolicies of `spec`, every object labelled with `labels`.
pub fn build_mutating_gate(spec: &TierPolicySpec, labels: &std::collections::BTreeMap<String, String>) -> MutatingGate {
    let meta = |name: String| ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() };
    let mut gate = MutatingGate::default();
    for tier in &spec.tiers {
        let name = gate_name(&tier.name);
        let rules = TierRules::new(spec, tier);
        let mut variables = Vec::new();
        let mut branches = Vec::new();
        for adapter in mutated_adapters() {
            let stem = kind_variable(adapter);
            let mut edits = KindEdits::new(&rules, adapter, &stem);
            let additions = edits.additions();
            // The conditions first: a variable may refer only to those before it.
            variables.append(&mut edits.conditions);
            variables.push(Variable { name: format!("{stem}Additions"), expression: additions });
            branches.push(format!("{} ? variables.{stem}Additions : ", is_kind(adapter)));
        }
        // The request kind's additions: a variable is evaluated when first read, so only that kind's are.
        let by_kind = format!("{}[]", branches.concat());
        variables.push(Variable { name: REMOVALS_VARIABLE.to_owned(), expression: removals() });
        variables.push(Variable { name: ADDITIONS_VARIABLE.to_owned(), expression: by_kind });
        let mutations = vec![Mutation {
            patch_type: "JSONPatch".to_owned(),
            json_patch: Some(JSONPatch { expression: Some(MUTATION_EXPRESSION.to_owned()) }),
            apply_configuration: None,
        }];
        gate.policies.push(MutatingAdmissionPolicy {
            metadata: meta(name.clone()),
            spec: Some(MutatingAdmissionPolicySpec {
                failure_policy: Some(MUTATING_FAILURE_POLICY.to_owned()),
                match_constraints: Some(MatchResources {
                    match_policy: Some("Equivalent".to_owned()),
                    resource_rules: Some(resource_rules_for(&["CREATE"], mutated_adapters())),
                    ..MatchResources::default()
                }),
                match_conditions: Some(mutating_match_conditions(&rules)),
                variables: Some(variables),
                mutations: Some(mutations),
                // The webhook runs after the policies and leaves a constrained object constrained; nothing here
                // needs a second pass.
                reinvocation_policy: Some("Never".to_owned()),
                param_kind: None,
            }),
        });
        gate.bindings.push(MutatingAdmissionPolicyBinding {
            metadata: meta(name.clone()),
            spec: Some(MutatingAdmissionPolicyBindingSpec {
                policy_name: Some(name),
                match_resources: Some(MatchResources {
                    namespace_selector: Some(tier_namespaces(spec, tier)),
                    ..MatchResources::default()
                }),
                param_ref: None,
            }),
        });
    }
    gate
}

/// The validating policy's `matchConditions`, and per kind: no template selects a GPU class outside the tier.
/// Such an object is refused by the validating half whatever the mutating half would add (it never rewrites a
/// class the tenant chose), and by the webhook when it answers; leaving it out spares the API server a JSON patch
/// of the whole object per request when a tenant floods it with them (`tests/e2e/tests/tenant_flood.rs`).
fn mutating_match_conditions(rules: &TierRules<'_>) -> Vec<MatchCondition> {
    let mut conditions = rules.match_conditions(mutated_adapters());
    if rules.spec.admission.foreign_gpu_class == ForeignClassAction::Allow {
        return conditions;
    }
    for adapter in mutated_adapters() {
        let choices = over_templates(adapter.templates, "object", Quantifier::All, 0, &|spec, _flat, depth| {
            rules.no_foreign_class(spec, depth)
        });
        conditions.push(MatchCondition {
            name: format!("{}-selects-no-foreign-class", kind_variable(adapter)),
            expression: format!("!{} || {choices}", is_kind(adapter)),
        });
    }
    conditions
}

/// What the policy does to objects of one kind in one tier.
struct KindEdits<'r, 'p> {
    rules: &'r TierRules<'p>,
    adapter: &'static WorkloadAdapter,
    /// The kind's variable-name stem.
    stem: String,
    /// Each condition an edit and its mark both test, as a variable (`<stem><Name>`), so it is written once.
    conditions: Vec<Variable>,
    /// The class whose selector and tolerations go on unconfined GPU templates: the tier's `gpuClass`, unless
    /// the tier leaves the class to Kueue (fallback classes on a queued kind) or allows foreign classes.
    class: Option<&'p GpuClass>,
}

impl<'r, 'p> KindEdits<'r, 'p> {
    fn new(rules: &'r TierRules<'p>, adapter: &'static WorkloadAdapter, stem: &str) -> Self {
        let tier: &Tier = rules.tier;
        let free = !tier.fallback_gpu_classes.is_empty() && adapter.is_queued();
        let allowed_anything = rules.spec.admission.foreign_gpu_class == ForeignClassAction::Allow;
        let class = (!free && !allowed_anything).then(|| rules.spec.gpu_class(&tier.gpu_class)).flatten();
        Self { rules, adapter, stem: stem.to_owned(), conditions: Vec::new(), class }
    }

    /// Registers `expression` as the variable `<stem><name>`; the CEL that reads it.
    fn condition(&mut self, name: &str, expression: String) -> String {
        let name = format!("{}{name}", self.stem);
        self.conditions.push(Variable { name: name.clone(), expression });
        format!("variables.{name}")
    }

    /// CEL list of `{path, value}` additions: the annotations map if a mark needs it, then each edit and its mark.
    fn additions(&mut self) -> String {
        let mut edits: Vec<(String, String)> = Vec::new();
        if let Some(queue) = self.queue_edit() {
            edits.push(queue);
        }
        if let Some(class) = self.class_edit() {
            edits.push(class);
        }
        if let Some(priority) = self.priority_edit() {
            edits.push(priority);
        }
        let mut parts = Vec::new();
        let marked = any_of(edits.iter().map(|(condition, _)| condition.clone()).collect::<Vec<_>>());
        let (guard, _) = pointer_path("object", "/metadata/annotations");
        parts.push(format!("({marked} && !({guard}) ? [{}] : [])", addition("'/metadata/annotations'", "{}")));
        parts.extend(edits.into_iter().map(|(_, additions)| additions));
        if let Some(suspend) = self.suspend_edit() {
            parts.push(suspend);
        }
        parts.join(" + ")
    }

    /// The queue label when the object has none, an empty one or another tier's: `(condition, additions)`.
    fn queue_edit(&mut self) -> Option<(String, String)> {
        if matches!(self.adapter.queueing, Queueing::NotQueued) {
            return None;
        }
        let at = self.adapter.queue_labels_at;
        let condition = self.condition("Queue", format!("!{}", self.rules.usable_queue("object", at)));
        let (guard, labels) = pointer_path("object", &format!("{at}/labels"));
        let label = literal(QUEUE_NAME_LABEL);
        let was = format!("(({guard}) && {label} in {labels} ? {labels}[{label}] : '')");
        let queue = literal(&self.rules.tier.local_queue());
        let additions = format!(
            "({condition} ? {} + {} : [])",
            set_at(&format!("{at}/labels/{}", escape(QUEUE_NAME_LABEL)), &queue),
            mark(QUEUE_WAS_MARK, &was)
        );
        Some((condition, additions))
    }

    /// `suspend: true` on a kind Kueue gates with it, when not already set (no mark: the webhook sets it too).
    fn suspend_edit(&self) -> Option<String> {
        let Queueing::SuspendedWithQueueLabel { suspend } = self.adapter.queueing else { return None };
        let (guard, path) = pointer_path("object", suspend);
        Some(format!("(({guard}) && {path} == true ? [] : {})", set_at(suspend, "true")))
    }

    /// The class's selector and tolerations on each fixed GPU template that selects no GPU class at all (one
    /// selecting another class is left to the ValidatingAdmissionPolicy, which refuses it).
    fn class_edit(&mut self) -> Option<(String, String)> {
        let class = self.class?;
        let specs = self.adapter.templates.fixed_spec_pointers();
        if specs.is_empty() {
            return None;
        }
        let outside = self.outside_asks_gpu();
        let tolerations: Vec<Value> =
            class.pod_tolerations().iter().filter_map(|toleration| serde_json::to_value(toleration).ok()).collect();
        let mut conditions = Vec::new();
        let mut additions = Vec::new();
        let mut pointers = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let (guard, path) = pointer_path("object", spec);
            let unconfined = format!(
                "(({guard}) && ({outside} || {}) && !{})",
                self.rules.reaches_gpu(&path, is_flat(spec, self.adapter), 0),
                self.chooses_class(&path)
            );
            let condition = self.condition(&format!("Class{index}"), unconfined);
            let selector = set_map_entries(
                &format!("{spec}/nodeSelector"),
                class.node_labels.iter().map(|(key, value)| (key.as_str(), literal(value))),
            );
            let tolerations = append_missing(&format!("{spec}/tolerations"), &tolerations);
            additions.push(format!("({condition} ? {selector} + {tolerations} : [])"));
            pointers.push(format!("({condition} ? {} : '')", literal(&format!("{spec},"))));
            conditions.push(condition);
        }
        let condition = self.condition("Class", any_of(conditions));
        let mark = format!("({condition} ? {} : [])", mark(CLASS_ADDED_MARK, &pointers.join(" + ")));
        additions.push(mark);
        Some((condition, additions.join(" + ")))
    }

    /// The priority label clamped to the tier's ceiling when it names a bucket above it (`priorityAboveCeiling:
    /// Clamp`); a label naming no bucket is left to the ValidatingAdmissionPolicy.
    fn priority_edit(&mut self) -> Option<(String, String)> {
        let spec = self.rules.spec;
        if spec.admission.priority_above_ceiling != CeilingAction::Clamp {
            return None;
        }
        let tier = self.rules.tier;
        let ceiling = priority_ceiling(tier, &spec.priority_buckets)?;
        let above: Vec<&str> = spec
            .priority_buckets
            .iter()
            .filter(|bucket| {
                matches!(check_priority_ceiling(&bucket.name, tier, &spec.priority_buckets), CeilingCheck::Above { .. })
            })
            .map(|bucket| bucket.name.as_str())
            .collect();
        if above.is_empty() {
            return None;
        }
        let (guard, labels) = pointer_path("object", "/metadata/labels");
        let label = literal(PRIORITY_CLASS_LABEL);
        let condition = self.condition(
            "Priority",
            format!("(({guard}) && {label} in {labels} && {labels}[{label}] in {})", list(above)),
        );
        let additions = format!(
            "({condition} ? [{}] + {} : [])",
            addition(&literal(&format!("/metadata/labels/{}", escape(PRIORITY_CLASS_LABEL))), &literal(&ceiling.name)),
            mark(PRIORITY_WAS_MARK, &format!("{labels}[{label}]"))
        );
        Some((condition, additions))
    }

    /// CEL: a requirement outside the templates asks a GPU (TrainJob `resourcesPerNode`).
    fn outside_asks_gpu(&self) -> String {
        any_of(
            self.adapter
                .resources_outside_templates
                .iter()
                .map(|pointer| {
                    let (guard, path) = pointer_path("object", pointer);
                    format!(
                        "({guard} && {})",
                        self.rules.requirements_any(&path, 0, &|name| self.rules.is_gpu_resource(name))
                    )
                })
                .collect::<Vec<_>>(),
        )
    }

    /// CEL: the pod spec at `spec` names some GPU-class label key in its nodeSelector or a required node-affinity
    /// term (a choice the webhook judges; the policy adds nothing then).
    fn chooses_class(&self, spec: &str) -> String {
        let keys = list(self.rules.class_keys());
        let selector = format!("(has({spec}.nodeSelector) && {spec}.nodeSelector.exists(s0, s0 in {keys}))");
        let affinity =
            self.rules.affinity_terms(spec, 0, Quantifier::Any, &|expression| format!("{expression}.key in {keys}"));
        format!("({selector} || {affinity})")
    }
}

/// CEL list of the mark paths present on the object, whatever its kind (a forged mark never survives the policy).
fn removals() -> String {
    let (guard, path) = pointer_path("object", "/metadata/annotations");
    let parts: Vec<String> = GATE_MARKS
        .iter()
        .map(|mark| {
            format!(
                "(({guard}) && {} in {path} ? [{}] : [])",
                literal(mark),
                literal(&json_pointer(&["metadata", "annotations", mark]))
            )
        })
        .collect();
    parts.join(" + ")
}

/// Whether the pointer `spec` of `adapter` is a flat SparkPodSpec.
fn is_flat(spec: &str, adapter: &WorkloadAdapter) -> bool {
    match adapter.templates {
        tiergate_workloads::TemplateLayout::Patterns(patterns) => {
            patterns.iter().any(|pattern| matches!(pattern, tiergate_workloads::TemplateAt::Flat(at) if *at == spec))
        }
        _ => false,
    }
}

/// One addition, `{path, value}` (both `dyn`: the API server's CEL wants map literals of one value type).
fn addition(path: &str, value: &str) -> String {
    format!("{{'path': dyn({path}), 'value': dyn({value})}}")
}

/// A JSON pointer token with `~` and `/` escaped (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn json_pointer(tokens: &[&str]) -> String {
    tokens.iter().map(|token| format!("/{}", escape(token))).collect()
}

/// CEL list setting the mark `key` to the CEL string `value` (the annotations map exists by then).
fn mark(key: &str, value: &str) -> String {
    format!("[{}]", addition(&literal(&json_pointer(&["metadata", "annotations", key])), value))
}

/// CEL list of additions setting `pointer` to the CEL value `value`, creating the first missing ancestor as a
/// nested map.
fn set_at(pointer: &str, value: &str) -> String {
    let tokens = pointer_tokens(pointer);
    set_from(&tokens, 0, value)
}

fn set_from(tokens: &[String], level: usize, value: &str) -> String {
    let path: String = tokens.iter().map(|token| format!("/{}", escape(token))).collect();
    if level + 1 >= tokens.len() {
        return format!("[{}]", addition(&literal(&path), value));
    }
    let (guard, _) = guarded_path("object", &tokens[..=level]);
    let here: String = tokens[..=level].iter().map(|token| format!("/{}", escape(token))).collect();
    let nested = tokens[level + 1..]
        .iter()
        .rev()
        .fold(value.to_owned(), |inner, token| format!("{{{}: {inner}}}", literal(token)));
    format!("(({guard}) ? {} : [{}])", set_from(tokens, level + 1, value), addition(&literal(&here), &nested))
}

/// CEL list of additions putting each `(key, CEL value)` into the string map at `pointer`.
fn set_map_entries<'a>(pointer: &str, entries: impl Iterator<Item = (&'a str, String)>) -> String {
    let entries: Vec<(&str, String)> = entries.collect();
    let (guard, _) = pointer_path("object", pointer);
    let whole: Vec<String> = entries.iter().map(|(key, value)| format!("{}: {value}", literal(key))).collect();
    let each: Vec<String> =
        entries.iter().map(|(key, value)| addition(&literal(&format!("{pointer}/{}", escape(key))), value)).collect();
    format!("(({guard}) ? [{}] : {})", each.join(", "), set_at(pointer, &format!("{{{}}}", whole.join(", "))))
}

/// CEL list of additions appending each of `items` (objects of string fields, as tolerations are) that the list
/// at `pointer` lacks.
fn append_missing(pointer: &str, items: &[Value]) -> String {
    if items.is_empty() {
        return "[]".to_owned();
    }
    let (guard, path) = pointer_path("object", pointer);
    let literals: Vec<String> = items.iter().map(cel_value).collect();
    let each: Vec<String> = items
        .iter()
        .zip(&literals)
        .map(|(item, literal_item)| {
            format!(
                "({path}.exists(x, {}) ? [] : [{}])",
                same_fields("x", item),
                addition(&literal(&format!("{pointer}/-")), literal_item)
            )
        })
        .collect();
    format!(
        "(({guard}) ? {} : [{}])",
        each.join(" + "),
        addition(&literal(pointer), &format!("[{}]", literals.join(", ")))
    )
}

/// CEL: the object `item` has every string field of `value` with the same value.
fn same_fields(item: &str, value: &Value) -> String {
    let fields: Vec<String> = value
        .as_object()
        .into_iter()
        .flatten()
        .map(|(field, value)| {
            let (guard, path) = guarded_path(item, std::slice::from_ref(field));
            format!("({guard} && {path} == {})", cel_value(value))
        })
        .collect();
    if fields.is_empty() { "true".to_owned() } else { fields.join(" && ") }
}

/// A JSON value as a CEL literal.
fn cel_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => literal(text),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(|item| format!("dyn({})", cel_value(item))).collect::<Vec<_>>().join(", "))
        }
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(key, value)| format!("{}: dyn({})", literal(key), cel_value(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
