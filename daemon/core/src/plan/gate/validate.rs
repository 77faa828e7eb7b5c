//! The in-server gate's ValidatingAdmissionPolicy: one fixed program for every kind of the adapter table that
//! refuses a GPU workload the tier does not allow (another tier's class, resource, queue or priority), reading the
//! tier's facts from its parameter object; pure.
//!
//! Each validation is `!variables.gpu || <rule>`: a CPU-only object costs the walk of its specs and nothing else.
//! Messages are fixed text naming the field, where the tier's facts are and the fix ([`validations`]).

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicySpec, Validation, Variable,
};
use tiergate_workloads::{ADAPTERS, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter};

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
use super::{GATE_FAILURE_POLICY, gate_match_resources, param_kind};

/// DRA's API group (ResourceClaims, ResourceClaimTemplates).
const CLAIM_GROUP: &str = "resource.k8s.io";
const WEBHOOK: &str = "the tiergate webhook normally adds this — is it running?";

/// The policy's spec.
pub fn build_validating_spec() -> ValidatingAdmissionPolicySpec {
    ValidatingAdmissionPolicySpec {
        failure_policy: Some(GATE_FAILURE_POLICY.to_owned()),
        param_kind: Some(param_kind()),
        match_constraints: Some(with_claims(gate_match_resources(&["CREATE", "UPDATE"], ADAPTERS.iter()))),
        // No match conditions: the API server converts the object for CEL once per evaluation, and match
        // conditions are a second evaluation. The identity checks are a variable every validation reads first.
        match_conditions: None,
        variables: Some(variables()),
        validations: Some(validations()),
        ..ValidatingAdmissionPolicySpec::default()
    }
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
        variable("reaching", format!("variables.specs.map(g, g.filter(s, {}))", reaches_gpu("s", 1))),
        variable("gpuSpecs", "variables.outside ? variables.specs : variables.reaching".to_owned()),
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
            format!("variables.kept || variables.gpuSpecs.all(g, g.all(s, {}))", confined("s", 1, "variables.free")),
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
    ]
    .into_iter()
    .map(|(rule, message)| Validation {
        expression: format!("!variables.gpu || {rule}"),
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
