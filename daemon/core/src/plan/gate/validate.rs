//! The in-server gate's ValidatingAdmissionPolicy: one fixed program for every kind of the adapter table that
//! refuses a GPU workload the tier does not allow (another tier's class, resource, queue or priority), reading the
//! tier's facts from its parameter object; pure.
//!
//! Each validation is `!variables.gpu || <rule>`: a CPU-only object costs the walk of its specs and nothing else.
//! Messages name the tier, the kind, the field and the fix (`messageExpression`, from the parameter object).

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicySpec, Validation, Variable};
use tiergate_workloads::{ADAPTERS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter};

use super::cel::{all_of, literal, pointer_path};
use super::program::{
    Kinds, OBJECT, OLD_OBJECT, by_kind, common_variables, identity_conditions, usable_queue, variable,
};
use super::rules::{F, asks_only_tier_resources, confined, names_priority_class, reaches_gpu};
use super::{GATE_FAILURE_POLICY, gate_match_resources, param_kind};

const WEBHOOK: &str = "the tiergate webhook normally adds this — is it running?";

/// The policy's spec.
pub fn build_validating_spec() -> ValidatingAdmissionPolicySpec {
    ValidatingAdmissionPolicySpec {
        failure_policy: Some(GATE_FAILURE_POLICY.to_owned()),
        param_kind: Some(param_kind()),
        match_constraints: Some(gate_match_resources(&["CREATE", "UPDATE"], ADAPTERS.iter())),
        match_conditions: Some(identity_conditions()),
        variables: Some(variables()),
        validations: Some(validations()),
        ..ValidatingAdmissionPolicySpec::default()
    }
}

fn variables() -> Vec<Variable> {
    let mut variables = common_variables(Kinds::All);
    variables.extend([
        variable("reaching", format!("variables.specs.map(g, g.filter(s, {}))", reaches_gpu("s", 1))),
        variable("gpu", "variables.outside || variables.reaching.exists(g, size(g) > 0)".to_owned()),
        variable("gpuSpecs", "variables.outside ? variables.specs : variables.reaching".to_owned()),
        variable("kept", by_kind(&templates_kept, "false")),
        variable("free", format!("variables.queued && {F}.classLeftToKueue")),
        variable("queueOk", by_kind(&queue_rule, "true")),
        variable("priorityOk", by_kind(&|adapter| Some(priority_rule(adapter)), "true")),
        variable("priorityClassOk", by_kind(&priority_class_rule, "true")),
    ]);
    variables
}

fn validation(rule: &str, message: &str, message_expression: String) -> Validation {
    Validation {
        expression: format!("!variables.gpu || {rule}"),
        message: Some(message.to_owned()),
        reason: Some("Forbidden".to_owned()),
        message_expression: Some(message_expression),
    }
}

/// A message: `parts` joined, each text as a CEL literal and each `Cel` as is.
fn message(parts: &[Part<'_>]) -> String {
    parts
        .iter()
        .map(|part| match part {
            Part::Text(text) => literal(text),
            Part::Cel(expression) => format!("({expression})"),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A piece of a message.
enum Part<'a> {
    /// Fixed text.
    Text(&'a str),
    /// A CEL string expression.
    Cel(&'a str),
}

fn validations() -> Vec<Validation> {
    use Part::{Cel, Text};
    let tier = format!("{F}.name");
    let kind = "request.kind.kind";
    let (classes, names, allowed, queue, default) = (
        format!("{F}.classSelectorsText"),
        format!("{F}.classNamesText"),
        format!("{F}.allowedPrioritiesText"),
        format!("{F}.queue"),
        format!("{F}.defaultPriority"),
    );
    let fallback = "variables.free ? '; or leave the GPU class to Kueue (no GPU-class selector)' : ''";
    let claims = "params.spec.claimsDenied ? ', and claim no devices through DRA (resourceClaims)' : ''";
    let suspended = by_kind(
        &|adapter| adapter.suspend_pointer().map(|_| literal(" and be created suspended, as Kueue expects")),
        "''",
    );
    let other_labels = by_kind(
        &|adapter| {
            (adapter.queue_labels_at != "/metadata")
                .then(|| literal(&format!(" (its own and at {})", adapter.queue_labels_at)))
        },
        "''",
    );
    let labels_at = by_kind(&|adapter| Some(literal(&format!("{}/labels", adapter.queue_labels_at))), "''");
    vec![
        validation(
            &format!("variables.kept || variables.gpuSpecs.all(g, g.all(s, {}))", confined("s", 1, "variables.free")),
            "GPU pods must select the tier's GPU class and no other",
            message(&[
                Text("tier "),
                Cel(&tier),
                Text(": GPU pods of a "),
                Cel(kind),
                Text(" must select "),
                Cel(&classes),
                Text(" (nodeSelector, or required node affinity In) and no other GPU class"),
                Cel(fallback),
                Text(&format!("; {WEBHOOK}")),
            ]),
        ),
        validation(
            &format!(
                "variables.kept || variables.specs.all(g, g.all(s, {}))",
                asks_only_tier_resources("s", 1, "variables.queued")
            ),
            "GPU pods may ask only the GPU resources of the tier's classes that it has quota for",
            message(&[
                Text("tier "),
                Cel(&tier),
                Text(": GPU pods of a "),
                Cel(kind),
                Text(" may ask only the GPU resources of "),
                Cel(&names),
                Text(" that the tier has quota for"),
                Cel(claims),
                Text("; ask one of those (the TierPolicy's gpuClasses and the tier's quotas)"),
            ]),
        ),
        validation(
            "variables.queueOk",
            "a GPU workload must carry the tier's queue label and be created suspended",
            message(&[
                Text("tier "),
                Cel(&tier),
                Text(": a GPU "),
                Cel(kind),
                Text(&format!(" must carry the label {QUEUE_NAME_LABEL}=")),
                Cel(&queue),
                Text(" (no other tier's queue)"),
                Cel(&suspended),
                Text(&format!("; {WEBHOOK}")),
            ]),
        ),
        validation(
            "variables.priorityOk",
            "the priority-class label may name only a priority the tier may use",
            message(&[
                Text("tier "),
                Cel(&tier),
                Text(&format!(": the {PRIORITY_CLASS_LABEL} label of a GPU ")),
                Cel(kind),
                Cel(&other_labels),
                Text(" may name only "),
                Cel(&allowed),
                Text(&format!("; remove it or name one of those; {WEBHOOK}")),
            ]),
        ),
        validation(
            "variables.priorityClassOk",
            "a queued GPU workload whose pods name a priorityClassName must carry the priority-class label",
            message(&[
                Text("tier "),
                Cel(&tier),
                Text(": the pods of a GPU "),
                Cel(kind),
                Text(" name a priorityClassName, which Kueue would take as the workload priority; set the label "),
                Text(&format!("{PRIORITY_CLASS_LABEL}=")),
                Cel(&default),
                Text(" (or one of "),
                Cel(&allowed),
                Text(") at "),
                Cel(&labels_at),
                Text(&format!(", or remove priorityClassName; {WEBHOOK}")),
            ]),
        ),
    ]
}

/// CEL: an UPDATE that leaves the kind's immutable templates as they were (`immutable_on_update` other than
/// suspend and the queue label): the webhook leaves them as sent, so the gate judges only what the update
/// introduced. `None` for kinds whose templates stay mutable (Deployment, StatefulSet, CronJob, ...).
fn templates_kept(adapter: &WorkloadAdapter) -> Option<String> {
    let same: Vec<String> = adapter
        .immutable_on_update
        .iter()
        .copied()
        .filter(|pointer| Some(*pointer) != adapter.suspend_pointer() && !pointer.contains("queue-name"))
        .map(|pointer| {
            let (guard, path) = pointer_path(OBJECT, pointer);
            let (old_guard, old_path) = pointer_path(OLD_OBJECT, pointer);
            format!("(({guard}) ? (({old_guard}) && {path} == {old_path}) : !({old_guard}))")
        })
        .collect();
    (!same.is_empty()).then(|| format!("(request.operation == 'UPDATE' && {})", all_of(same)))
}

/// CEL: the object at `root` is suspended through `pointer`.
fn suspended(root: &str, pointer: &str) -> String {
    let (guard, path) = pointer_path(root, pointer);
    format!("(({guard}) && {path} == true)")
}

/// The queue rule of a queued kind (`admission/update.rs`): CREATE needs a usable queue and `suspend: true`;
/// UPDATE keeps a usable queue, except a workload that never had one and keeps running as it was.
fn queue_rule(adapter: &WorkloadAdapter) -> Option<String> {
    let at = adapter.queue_labels_at;
    let usable = usable_queue(OBJECT, at);
    let old_usable = usable_queue(OLD_OBJECT, at);
    match adapter.queueing {
        Queueing::NotQueued => None,
        Queueing::SuspendedWithQueueLabel { suspend } => Some(format!(
            "(request.operation == 'CREATE' ? ({usable} && {}) : ({usable} || (!{old_usable} && !{} && !{})))",
            suspended(OBJECT, suspend),
            suspended(OLD_OBJECT, suspend),
            suspended(OBJECT, suspend),
        )),
        Queueing::PodGroupWithQueueLabel { .. } => {
            Some(format!("(request.operation == 'CREATE' ? {usable} : ({usable} || !{old_usable}))"))
        }
    }
}

/// CEL: the priority-class label at each of the kind's label locations names a priority the tier may use, or is
/// what the old object had (the webhook holds the object's own labels and those of a CronJob's job template to the
/// ceiling, `admission/priority.rs`).
fn priority_rule(adapter: &WorkloadAdapter) -> String {
    let label = literal(PRIORITY_CLASS_LABEL);
    all_of(adapter.priority_labels_at().map(|at| {
        let (guard, path) = pointer_path(OBJECT, &format!("{at}/labels"));
        let (old_guard, old_path) = pointer_path(OLD_OBJECT, &format!("{at}/labels"));
        format!(
            "(!(({guard}) && {label} in {path}) || {path}[{label}] in {F}.allowedPriorities || (request.operation == \
             'UPDATE' && ({old_guard}) && {label} in {old_path} && {old_path}[{label}] == {path}[{label}]))"
        )
    }))
}

/// CEL: a queued kind whose pods name a `priorityClassName` carries the priority-class label where Kueue reads it
/// (the tier has a default bucket; `admission/priority.rs` gives it that default), unless an UPDATE keeps the
/// templates as they were.
fn priority_class_rule(adapter: &WorkloadAdapter) -> Option<String> {
    if !adapter.is_queued() {
        return None;
    }
    let (guard, path) = pointer_path(OBJECT, &format!("{}/labels", adapter.queue_labels_at));
    let labelled = format!("(({guard}) && {} in {path})", literal(PRIORITY_CLASS_LABEL));
    let kept = templates_kept(adapter).unwrap_or_else(|| "false".to_owned());
    Some(format!(
        "({F}.defaultPriority == '' || {labelled} || {kept} || variables.specs.all(g, g.all(s, !{})))",
        names_priority_class("s")
    ))
}
