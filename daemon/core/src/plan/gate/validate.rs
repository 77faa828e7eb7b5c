//! The in-server gate's ValidatingAdmissionPolicy: one fixed program for every kind of the adapter table that
//! refuses a GPU workload the tier does not allow (another tier's class, resource, queue or priority, a run-time
//! limit missing or above the tier's ceiling), reading the tier's facts from its parameter object; pure.
//!
//! Each validation is `!variables.gpu || <rule>`, and one match condition restates them all ([`BREAKS_A_RULE`]): a
//! request every rule admits (a CPU-only object, a GPU object as the webhook leaves it) costs that one program.
//! Messages are fixed text naming the field, where the tier's facts are and the fix ([`validations`]).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicySpec, Validation, Variable,
};
use tiergate_workloads::{
    ADAPTERS, MAX_EXEC_TIME_LABEL, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter,
};

use tiergate_kueue::HOSTNAME_LABEL;

use crate::admission::MIRROR_POD_WRITER_PREFIX;

use super::cel::{all_of, literal, pointer_path};
use super::program::{
    Kinds, OBJECT, OLD_OBJECT, asks_gpu, by_kind, common_variables, identity_checks, outside_asks_gpu, usable_queue,
    variable,
};
use super::rules::{
    F, P, asks_only_tier_resources, claim_within_tier, confined, names_node, names_priority_class, reaches_gpu,
};
use super::run_time::{limited, run_time_rule};
use super::{GATE_FAILURE_POLICY, gate_match_resources, param_kind};

/// DRA's API group (ResourceClaims, ResourceClaimTemplates).
const CLAIM_GROUP: &str = "resource.k8s.io";
const WEBHOOK: &str = "the tiergate webhook normally adds this — is it running?";

/// The policy's spec.
pub fn build_validating_spec() -> ValidatingAdmissionPolicySpec {
    let (variables, validations) = (variables(), validations());
    ValidatingAdmissionPolicySpec {
        failure_policy: Some(GATE_FAILURE_POLICY.to_owned()),
        param_kind: Some(param_kind()),
        match_constraints: Some(with_claims(gate_match_resources(&["CREATE", "UPDATE"], ADAPTERS.iter()))),
        match_conditions: Some(vec![MatchCondition {
            name: BREAKS_A_RULE.to_owned(),
            expression: breaks_a_rule(&variables, &validations),
        }]),
        variables: Some(variables),
        validations: Some(validations),
        ..ValidatingAdmissionPolicySpec::default()
    }
}

/// The name of the policy's one match condition: the request breaks a rule, so the validations run to say which.
pub const BREAKS_A_RULE: &str = "breaks-a-rule";

/// The variables the match condition binds once around every rule, in order: those every rule reads first (the
/// walk, the identity checks in `gpu`). The others are written out where a rule reads them, so that an object that
/// asks no GPU never evaluates them (the API server evaluates the policy's variables lazily; a bind is eager, and
/// `claim` fails on any other kind). Each bind is a comprehension the API server enters, and every name read inside
/// it (`request`, `object`, `params`) is looked up through it: binding `outside`, `queued` and `kept` here too made
/// a CPU-only Job's program 17% slower (`perf/gate_program.py`).
const BOUND: [&str; 2] = ["specs", "gpu"];

/// The variable bound only where `gpu` holds, around the rules it guards: `kept`, read by three of them (on an
/// UPDATE a comparison of the kind's templates, done once).
const BOUND_FOR_GPU: &str = "kept";

/// How a validation that only a GPU request can break starts.
const GPU_GUARD: &str = "!variables.gpu || ";

/// CEL: some validation fails: `!(every validation)`, the variables bound by one-element comprehensions (Kubernetes'
/// CEL has no `cel.bind`) or written out; the rules guarded by `gpu` are judged together, under one guard.
///
/// kube-apiserver 1.36 converts the object to unstructured for every CEL evaluation pass: one for the match
/// conditions, one for the validations and one for their (here empty) message expressions. A request every rule
/// admits, which is nearly every request, stops after the first pass, one program, where the validations took two
/// passes and seven programs; a request that breaks a rule pays one pass more, and gets the validations' messages.
fn breaks_a_rule(variables: &[Variable], validations: &[Validation]) -> String {
    let inlined: Vec<(&str, &str)> = variables
        .iter()
        .filter(|variable| !BOUND.contains(&variable.name.as_str()) && variable.name != BOUND_FOR_GPU)
        .map(|variable| (variable.name.as_str(), variable.expression.as_str()))
        .collect();
    let rule = |expression: &str| format!("({})", resolve(expression, &inlined));
    let bind = |variable: &Variable, body: String| {
        format!("[{}].all({}, {body})", resolve(&variable.expression, &inlined), bound_name(&variable.name))
    };
    let guarded =
        all_of(validations.iter().filter_map(|validation| validation.expression.strip_prefix(GPU_GUARD)).map(rule));
    let guarded = match variables.iter().find(|variable| variable.name == BOUND_FOR_GPU) {
        Some(kept) => bind(kept, guarded),
        None => guarded,
    };
    let unguarded = validations
        .iter()
        .filter(|validation| !validation.expression.starts_with(GPU_GUARD))
        .map(|validation| rule(&validation.expression));
    let every_rule = all_of(std::iter::once(format!("(!{} || {guarded})", bound_name("gpu"))).chain(unguarded));
    let bound = variables
        .iter()
        .filter(|variable| BOUND.contains(&variable.name.as_str()))
        .rev()
        .fold(every_rule, |body, variable| bind(variable, body));
    format!("!{bound}")
}

/// The match condition's name for `variables.<name>`.
fn bound_name(name: &str) -> String {
    format!("tg_{name}")
}

/// `expression` with each `variables.<name>` read from its bind, or written out (resolved in turn) where `inlined`
/// has it.
fn resolve(expression: &str, inlined: &[(&str, &str)]) -> String {
    const PREFIX: &str = "variables.";
    let mut out = String::with_capacity(expression.len());
    let mut rest = expression;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let name = &after[..end];
        match inlined.iter().find(|(known, _)| *known == name) {
            Some((_, written)) => {
                out.push('(');
                out.push_str(&resolve(written, inlined));
                out.push(')');
            }
            None => out.push_str(&bound_name(name)),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn variables() -> Vec<Variable> {
    let mut variables = common_variables(Kinds::All);
    let [(_, not_exempt), (_, not_trusted)] = identity_checks();
    variables.extend([
        // The one variable every validation reads first: for an object that asks no GPU (most creates) it is the
        // only work, so it reads the identity checks and the walk directly rather than through more variables.
        variable(
            "gpu",
            format!("({not_exempt}) && ({not_trusted}) && {}", asks_gpu("variables.specs", &outside_asks_gpu(OBJECT))),
        ),
        variable("kept", by_kind(&templates_kept, "false")),
        variable("free", format!("variables.queued && {F}.classLeftToKueue")),
        variable("claim", format!("request.kind.kind == 'ResourceClaim' ? {OBJECT}.spec : {OBJECT}.spec.spec")),
        variable("namesNode", format!("variables.specs.exists(g, g.exists(s, {}))", names_node("s"))),
    ]);
    variables
}

/// The match constraints plus DRA's ResourceClaims and ResourceClaimTemplates at CREATE (their spec is immutable).
fn with_claims(mut constraints: MatchResources) -> MatchResources {
    constraints.resource_rules.get_or_insert_with(Vec::new).push(NamedRuleWithOperations {
        api_groups: Some(vec![CLAIM_GROUP.to_owned()]),
        api_versions: Some(vec!["v1".to_owned()]),
        operations: Some(vec!["CREATE".to_owned()]),
        resources: Some(vec!["resourceclaims".to_owned(), "resourceclaimtemplates".to_owned()]),
        scope: Some("Namespaced".to_owned()),
        resource_names: None,
    });
    constraints
}

/// The node-name rule (`podsNamingNodes: Deny`, `admission::mutate` `node_name_denial`): at CREATE, no pod or pod
/// template names its node in `spec.nodeName`, whoever writes it but the exempt users and groups, a trusted
/// controller writing a kind other than a Pod, and the kubelets' mirror pods. Not `variables.gpu`: the gate cannot
/// read the node's labels, so a pod that asks for no GPU is refused too (issue 49).
fn node_name_validation() -> Validation {
    let [(_, not_exempt), (_, not_trusted)] = identity_checks();
    Validation {
        expression: format!(
            "!{P}.nodeNamesDenied || request.operation != 'CREATE' || !variables.namesNode || !({not_exempt}) || \
             !({not_trusted}) || request.userInfo.username.startsWith('{MIRROR_POD_WRITER_PREFIX}')"
        ),
        message: Some(format!(
            "a pod in a tiered namespace may not name its node in spec.nodeName (it would skip the scheduler and the \
             GPU classes' taints, and the API server cannot check the node's GPU class): select the node with \
             nodeSelector {HOSTNAME_LABEL} instead, or ask the platform team (TierPolicy \
             spec.admission.podsNamingNodes: CheckNodeClass, or an admin namespace)"
        )),
        reason: Some("Forbidden".to_owned()),
        message_expression: None,
    }
}

/// The claim rule, whoever writes the claim (kube-controller-manager makes a pod's claims from its templates, so a
/// template written before its namespace joined a tier is caught here), except the exempt users and groups.
fn claim_validation() -> Validation {
    let [(_, not_exempt), _] = identity_checks();
    Validation {
        expression: format!(
            "request.kind.group != '{CLAIM_GROUP}' || !({not_exempt}) || {}",
            claim_within_tier("variables.claim")
        ),
        message: Some(
            "a DRA claim in this tier may name only the tier's DeviceClasses (TierGateParameters \
             spec.tier.deviceClasses), without adminAccess or allocationMode: All; a driver's generic DeviceClass \
             is replaced by the tier's only while the tiergate webhook answers — name the tier's DeviceClass"
                .to_owned(),
        ),
        reason: Some("Forbidden".to_owned()),
        message_expression: None,
    }
}

/// One validation per rule, each `!variables.gpu || <rule>` with a fixed message naming the field and the fix.
///
/// Fixed messages, not `messageExpression`: kube-apiserver evaluates every message expression of a policy on every
/// request it judges, passing or not (`validating/validator.go`), which measured half the gate's cost per create.
/// The tier is in the error already (the API server names the binding, `tiergate-gate-<tier>`), and what it may use
/// is in the binding's TierGateParameters; `kubectl tiergate explain` names it for a workload.
fn validations() -> Vec<Validation> {
    let suspended = "where Kueue suspends the kind, be created with suspend: true";
    [
        (
            // Confined first: a spec the webhook confined (nearly every GPU create) is done without walking its
            // requests again to see whether it reaches a GPU.
            format!(
                "variables.kept || variables.specs.all(g, g.all(s, {} || (!variables.outside && !{})))",
                confined("s", 1, "variables.free"),
                reaches_gpu("s", 1)
            ),
            format!(
                "GPU pods must select a GPU class of this tier (all node labels of one class in nodeSelector, or \
                 required node affinity In the tier's values; the classes are in this binding's TierGateParameters, \
                 spec.tier.classes) and no other GPU class; {WEBHOOK}"
            ),
        ),
        (
            format!(
                "variables.kept || variables.specs.all(g, g.all(s, {}))",
                asks_only_tier_resources("s", 1, "variables.queued")
            ),
            "GPU pods may ask only GPU resources that a class of this tier counts and the tier has quota for \
             (TierGateParameters spec.tier.resourceNames, resourcePrefixes and quotaResources), and, under \
             draClaims: Deny, name no ResourceClaim directly (resourceClaims[].resourceClaimName; use \
             resourceClaimTemplateName); ask one of those"
                .to_owned(),
        ),
        (
            by_kind(&queue_rule, "true"),
            format!(
                "a GPU workload must carry the label {QUEUE_NAME_LABEL} naming this tier's LocalQueue \
                 (TierGateParameters spec.tier.queue), no other tier's, and, {suspended}; {WEBHOOK}"
            ),
        ),
        (
            by_kind(&|adapter| Some(priority_rule(adapter)), "true"),
            format!(
                "the {PRIORITY_CLASS_LABEL} label of a GPU workload (and of a CronJob's job template) may name only a \
                 priority this tier may use (TierGateParameters spec.tier.allowedPriorities); remove it or name \
                 one of those; {WEBHOOK}"
            ),
        ),
        (
            by_kind(&priority_class_rule, "true"),
            format!(
                "the pods of a queued GPU workload name a priorityClassName, which Kueue would take as the workload \
                 priority: set the {PRIORITY_CLASS_LABEL} label where Kueue reads it (the object, or a CronJob's \
                 job template) to this tier's default (TierGateParameters spec.tier.defaultPriority) or another \
                 allowed priority, or remove priorityClassName; {WEBHOOK}"
            ),
        ),
        (
            format!("(!{} || {})", limited(), by_kind(&run_time_rule, "true")),
            format!(
                "a GPU workload of this tier must carry the label {MAX_EXEC_TIME_LABEL} where Kueue reads it (the \
                 object, a CronJob's job template, each pod template of a LeaderWorkerSet, a pod queued by its own \
                 queue label) with a whole number of seconds no greater than the tier's ceiling \
                 (TierGateParameters spec.tier.maxRunTime: ceiling, highestSeconds); set it to that many seconds or \
                 fewer (an UPDATE may leave it as it was); {WEBHOOK}"
            ),
        ),
    ]
    .into_iter()
    .map(|(rule, message)| Validation {
        expression: format!("{GPU_GUARD}{rule}"),
        message: Some(message),
        reason: Some("Forbidden".to_owned()),
        message_expression: None,
    })
    .chain([claim_validation(), node_name_validation()])
    .collect()
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
/// templates as they were (`variables.kept`).
fn priority_class_rule(adapter: &WorkloadAdapter) -> Option<String> {
    if !adapter.is_queued() {
        return None;
    }
    let (guard, path) = pointer_path(OBJECT, &format!("{}/labels", adapter.queue_labels_at));
    let labelled = format!("(({guard}) && {} in {path})", literal(PRIORITY_CLASS_LABEL));
    Some(format!(
        "({F}.defaultPriority == '' || {labelled} || variables.kept || variables.specs.all(g, g.all(s, !{})))",
        names_priority_class("s")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_match_condition_reads_no_variable_of_the_policy_and_binds_each_bound_one() {
        let spec = build_validating_spec();
        let condition = &spec.match_conditions.as_deref().unwrap_or_default()[0];
        assert_eq!(condition.name, BREAKS_A_RULE);
        assert!(!condition.expression.contains("variables."), "match conditions cannot read variables");
        let names: Vec<&str> = spec.variables.iter().flatten().map(|variable| variable.name.as_str()).collect();
        for name in BOUND.into_iter().chain([BOUND_FOR_GPU]) {
            assert!(names.contains(&name), "{name} is no variable of the policy");
            assert!(condition.expression.contains(&format!("].all({}, ", bound_name(name))), "{name} is not bound");
        }
    }

    #[test]
    fn resolving_writes_out_inlined_variables_and_reads_bound_ones() {
        let inlined = [("free", "variables.queued && params.spec.tier.classLeftToKueue")];
        assert_eq!(
            resolve("variables.gpu || variables.free || variables.specs", &inlined),
            "tg_gpu || (tg_queued && params.spec.tier.classLeftToKueue) || tg_specs"
        );
    }
}
