//! The in-server gate's MutatingAdmissionPolicy: the webhook's core edits done inside the API server (the tier's
//! queue label and `suspend`, the class selector and tolerations on GPU templates, the priority clamp, the tier's
//! default priority where pods name a `priorityClassName`, the tier's run-time limit where the label is missing),
//! so that with the webhook down a plain GPU workload is admitted into its tier rather than refused; one fixed
//! program for every kind, reading the tier's facts from its parameter object; pure.
//!
//! Every edit is a JSON patch computed in CEL: `variables.removals` (the paths of marks a tenant may have forged)
//! and `variables.additions` (`{path, value}` pairs, ancestors created as needed), which the policy's one mutation
//! turns into `remove` and `add` operations. One mutation: the API server encodes, patches, decodes and defaults
//! the whole object once per mutation, even for an empty patch, so the match conditions keep out everything with
//! nothing to do (CPU-only objects, a GPU class outside the tier, which the validating half refuses). Each edit
//! leaves its mark (`admission::gate_marks`), so the webhook, which the API server calls after the policies,
//! decides on the object as the tenant sent it.
//!
//! Templates are edited where a kind holds them at fixed pointers (Pod, Job, CronJob, Deployment, StatefulSet,
//! LeaderWorkerSet, SparkApplication, the head group of a Ray kind); templates in lists or maps (JobSet, the
//! Kubeflow replica specs, Ray worker groups, TrainJob runtime patches, AppWrapper components) have no fixed
//! JSON-patch path in CEL, so there the validating half refuses an unconfined GPU template with its message.

use k8s_openapi::api::admissionregistration::v1::{
    JSONPatch, MatchCondition, MutatingAdmissionPolicySpec, Mutation, Variable,
};
use tiergate_workloads::{ADAPTERS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter, pointer_tokens};

use super::cel::{escape, guarded_path, literal, pointer_path};
use super::program::{
    Kinds, OBJECT, asks_gpu, by_kind, common_variables, identity_conditions, is_kind, outside_asks_gpu,
    spec_groups_by_kind, usable_queue, variable,
};
use super::rules::{F, P, chooses_class, names_priority_class, no_foreign_class, or_empty, reaches_gpu};
use super::run_time::{added_places, additions_for, limited, mark_text};
use super::{gate_match_resources, param_kind};
use crate::admission::gate_marks::{
    CLASS_ADDED_MARK, GATE_MARKS, PRIORITY_WAS_MARK, QUEUE_WAS_MARK, RUN_TIME_ADDED_MARK,
};

/// A CEL error in a mutation skips the policy, not the request: the ValidatingAdmissionPolicy (`Fail`) still
/// refuses an unconstrained GPU workload, and the webhook still decides when it answers.
pub const MUTATING_FAILURE_POLICY: &str = "Ignore";

/// The policy's one mutation: the removals, then the additions.
pub const MUTATION_EXPRESSION: &str = "variables.removals.map(p, JSONPatch{op: 'remove', path: p}) + \
     variables.additions.map(a, JSONPatch{op: 'add', path: a.path, value: a.value})";

/// The policy's spec.
pub fn build_mutating_spec() -> MutatingAdmissionPolicySpec {
    MutatingAdmissionPolicySpec {
        failure_policy: Some(MUTATING_FAILURE_POLICY.to_owned()),
        param_kind: Some(param_kind()),
        match_constraints: Some(gate_match_resources(
            &["CREATE"],
            ADAPTERS.iter().filter(|adapter| Kinds::Mutated.serves(adapter)),
        )),
        match_conditions: Some(match_conditions()),
        variables: Some(variables()),
        mutations: Some(vec![Mutation {
            patch_type: "JSONPatch".to_owned(),
            json_patch: Some(JSONPatch { expression: Some(MUTATION_EXPRESSION.to_owned()) }),
            apply_configuration: None,
        }]),
        // The webhook runs after the policies and leaves a constrained object constrained; nothing here needs a
        // second pass.
        reinvocation_policy: Some("Never".to_owned()),
    }
}

/// The identity conditions, then: the object asks for a GPU, and no template selects a GPU class outside the tier
/// (the validating half refuses those whatever this half would add; leaving them out spares the API server a
/// patch of the whole object when a tenant floods it with them, `tests/e2e/tests/tenant_flood.rs`).
fn match_conditions() -> Vec<MatchCondition> {
    let object = "dyn(object)";
    let groups = spec_groups_by_kind(object, Kinds::Mutated);
    let mut conditions = identity_conditions();
    conditions.push(MatchCondition {
        name: "asks-for-a-gpu".to_owned(),
        expression: asks_gpu(&groups, &outside_asks_gpu(object)),
    });
    conditions.push(MatchCondition {
        name: "selects-no-foreign-class".to_owned(),
        expression: format!("{groups}.all(g, g.all(s, {}))", no_foreign_class("s", 1)),
    });
    conditions
}

/// The largest number of fixed template pointers a kind has (SparkApplication: driver, executor and their
/// templates).
fn max_fixed_specs() -> usize {
    ADAPTERS.iter().map(|adapter| adapter.templates.fixed_spec_pointers().len()).max().unwrap_or_default()
}

fn variables() -> Vec<Variable> {
    let mut variables = common_variables(Kinds::Mutated);
    variables.extend([
        variable("fixed", by_kind(&fixed_specs, "[]")),
        variable(
            "classEdits",
            format!(
                "size({F}.nodeSelectorEntries) == 0 || (variables.queued && {F}.classLeftToKueue) ? [] : \
                 variables.fixed.filter(f, (variables.outside || {}) && !{})",
                reaches_gpu("f.spec", 1),
                chooses_class("f.spec", 1)
            ),
        ),
        variable(
            "queueEdit",
            format!(
                "variables.queued && !{}",
                by_kind(&|adapter| adapter.is_queued().then(|| usable_queue(OBJECT, adapter.queue_labels_at)), "true")
            ),
        ),
        variable("clamp", clamp_condition()),
        variable("defaultPriority", default_priority_condition()),
        variable("runTimeAdded", format!("{} ? {} : []", limited(), by_kind(&added_places, "[]"))),
        variable(
            "marked",
            "variables.queueEdit || size(variables.classEdits) > 0 || variables.clamp || variables.defaultPriority \
             || size(variables.runTimeAdded) > 0"
                .to_owned(),
        ),
        variable("removals", removals()),
        variable("additions", additions()),
    ]);
    variables
}

/// CEL: the kind's fixed pod specs present on the object, as `{path, spec}`.
fn fixed_specs(adapter: &WorkloadAdapter) -> Option<String> {
    let parts: Vec<String> = adapter
        .templates
        .fixed_spec_pointers()
        .into_iter()
        .map(|pointer| {
            let (guard, path) = pointer_path(OBJECT, &pointer);
            format!("(({guard}) ? [{{'path': dyn({}), 'spec': dyn({path})}}] : [])", literal(&pointer))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join(" + ")))
}

/// CEL: the object's own priority label names a bucket above the tier's ceiling (`priorityAboveCeiling: Clamp`);
/// a label naming no bucket is left to the validating half.
fn clamp_condition() -> String {
    let (guard, labels) = pointer_path(OBJECT, "/metadata/labels");
    let label = literal(PRIORITY_CLASS_LABEL);
    format!(
        "{P}.priorityClamped && {F}.priorityCeiling != '' && ({guard}) && {label} in {labels} && {labels}[{label}] in          {P}.priorityBuckets && !({labels}[{label}] in {F}.allowedPriorities)"
    )
}

/// CEL: a queued kind labelled on its own metadata, with no priority label, whose pods name a
/// `priorityClassName`, in a tier with a default bucket (`admission/priority.rs` gives it the default).
fn default_priority_condition() -> String {
    let (guard, labels) = pointer_path(OBJECT, "/metadata/labels");
    let on_object = ADAPTERS
        .iter()
        .filter(|adapter| adapter.is_queued() && adapter.queue_labels_at != "/metadata")
        .map(|adapter| format!("!{}", is_kind(adapter)))
        .collect::<Vec<_>>()
        .join(" && ");
    format!(
        "variables.queued && {on_object} && {F}.defaultPriority != '' && !(({guard}) && {} in {labels}) && \
         variables.specs.exists(g, g.exists(s, {}))",
        literal(PRIORITY_CLASS_LABEL),
        names_priority_class("s")
    )
}

/// CEL list of the `{path, value}` additions.
fn additions() -> String {
    let (guard, _) = pointer_path(OBJECT, "/metadata/annotations");
    let mut parts =
        vec![format!("(variables.marked && !({guard}) ? [{}] : [])", addition("'/metadata/annotations'", "{}"))];
    parts.push(format!("(variables.queueEdit ? {} : [])", by_kind(&queue_additions, "[]")));
    parts.push(class_additions());
    let label = literal(PRIORITY_CLASS_LABEL);
    let priority_path = literal(&format!("/metadata/labels/{}", escape(PRIORITY_CLASS_LABEL)));
    parts.push(format!(
        "(variables.clamp ? [{}] + {} : [])",
        addition(&priority_path, &format!("{F}.priorityCeiling")),
        mark(PRIORITY_WAS_MARK, &format!("{OBJECT}.metadata.labels[{label}]"))
    ));
    // Added by its path, not with `set_at`: the object's labels map exists by then (a queued kind labelled on its
    // own metadata without a usable queue gets one from the queue edit above), and creating it again would drop the
    // queue label just added.
    parts.push(format!(
        "(variables.defaultPriority ? [{}] + {} : [])",
        addition(&priority_path, &format!("{F}.defaultPriority")),
        mark(PRIORITY_WAS_MARK, "''")
    ));
    parts.push(by_kind(&suspend_additions, "[]"));
    // After the queue label's: the run-time label joins the labels map that edit may have created.
    parts.push(by_kind(&|adapter| additions_for(adapter, &set_at), "[]"));
    parts.push(format!(
        "(size(variables.runTimeAdded) > 0 ? {} : [])",
        mark(RUN_TIME_ADDED_MARK, &by_kind(&mark_text, "''"))
    ));
    parts.join(" + ")
}

/// CEL list: the tier's queue label on the kind's label metadata, and the mark with the value it replaced.
fn queue_additions(adapter: &WorkloadAdapter) -> Option<String> {
    if !adapter.is_queued() {
        return None;
    }
    let at = adapter.queue_labels_at;
    let (guard, labels) = pointer_path(OBJECT, &format!("{at}/labels"));
    let label = literal(QUEUE_NAME_LABEL);
    let was = format!("(({guard}) && {label} in {labels} ? {labels}[{label}] : '')");
    Some(format!(
        "{} + {}",
        set_at(&format!("{at}/labels/{}", escape(QUEUE_NAME_LABEL)), &format!("{F}.queue")),
        mark(QUEUE_WAS_MARK, &was)
    ))
}

/// CEL list: `suspend: true` on a kind Kueue gates with it, when not already set (no mark: the webhook sets it
/// too).
fn suspend_additions(adapter: &WorkloadAdapter) -> Option<String> {
    let Queueing::SuspendedWithQueueLabel { suspend } = adapter.queueing else { return None };
    let (guard, path) = pointer_path(OBJECT, suspend);
    Some(format!("(({guard}) && {path} == true ? [] : {})", set_at(suspend, "true")))
}

/// CEL list: the tier class's selector and tolerations on each fixed GPU template that selects no GPU class at
/// all, and the mark listing the templates edited.
fn class_additions() -> String {
    let mut parts = Vec::new();
    let mut pointers = Vec::new();
    for index in 0..max_fixed_specs() {
        let edit = format!("variables.classEdits[{index}]");
        parts.push(format!("(size(variables.classEdits) > {index} ? {} : [])", class_edit(&edit)));
        pointers.push(format!("(size(variables.classEdits) > {index} ? {edit}.path + ',' : '')"));
    }
    parts.push(format!("(size(variables.classEdits) > 0 ? {} : [])", mark(CLASS_ADDED_MARK, &pointers.join(" + "))));
    parts.join(" + ")
}

/// CEL list of the additions for one edit `edit` (`{path, spec}`).
fn class_edit(edit: &str) -> String {
    let spec = format!("{edit}.spec");
    let selector = format!(
        "(has({spec}.nodeSelector) ? {F}.nodeSelectorEntries.map(q, {}) : [{}])",
        addition(&format!("{edit}.path + '/nodeSelector/' + q.token"), "q.value"),
        addition(&format!("{edit}.path + '/nodeSelector'"), &format!("{F}.nodeSelector"))
    );
    let same = ["key", "operator", "value", "effect"]
        .map(|field| format!("{} == {}", or_empty("x", field), or_empty("t", field)))
        .join(" && ");
    let tolerations = format!(
        "(has({spec}.tolerations) ? {F}.tolerations.filter(t, !{spec}.tolerations.exists(x, {same})).map(t, {}) : \
         (size({F}.tolerations) > 0 ? [{}] : []))",
        addition(&format!("{edit}.path + '/tolerations/-'"), "t"),
        addition(&format!("{edit}.path + '/tolerations'"), &format!("{F}.tolerations"))
    );
    format!("{selector} + {tolerations}")
}

/// CEL list of the mark paths present on the object, whatever its kind (a forged mark never survives the policy).
fn removals() -> String {
    let (guard, path) = pointer_path(OBJECT, "/metadata/annotations");
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

/// One addition, `{path, value}` (both `dyn`: the API server's CEL wants map literals of one value type).
fn addition(path: &str, value: &str) -> String {
    format!("{{'path': dyn({path}), 'value': dyn({value})}}")
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
    let (guard, _) = guarded_path(OBJECT, &tokens[..=level]);
    let here: String = tokens[..=level].iter().map(|token| format!("/{}", escape(token))).collect();
    let nested = tokens[level + 1..]
        .iter()
        .rev()
        .fold(value.to_owned(), |inner, token| format!("{{{}: {inner}}}", literal(token)));
    format!("(({guard}) ? {} : [{}])", set_from(tokens, level + 1, value), addition(&literal(&here), &nested))
}
