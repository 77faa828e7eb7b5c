//! `mutate()`: the admission decision as a pure function of (request, snapshot, scoring and placement inputs):
//! tier queue, GPU class, placement and scoring applied to the object's lean view (`admission::lean`), the JSON
//! patch built at the pointers it edited (`admission::patch`); no I/O.
//!
//! The rules, in order, are documented in docs/admission.md.

use std::collections::BTreeMap;

use kube_core::admission::Operation;
use serde_json::Value;
use tiergate_compat::scoring_annotations::job_type_label_value;
use tiergate_workloads::{
    KUEUE_ADMISSION_GATE, KUEUE_MANAGED_LABEL, MAX_EXEC_TIME_LABEL, MULTIKUEUE_CONTROLLER, PRIORITY_CLASS_LABEL,
    PodTemplatePointers, QUEUE_NAME_LABEL, Queueing, TemplateLayout, WorkloadAdapter, adapter_for, set_pointer,
    unknown_embedded_kinds, unknown_owner_kind,
};

use super::boundary::{self, HOSTNAME_LABEL, MIRROR_POD_WRITER_PREFIX, Reach, TierBounds, Violation};
use super::claims;
use super::classes::{Selection, TierContext, describe, selection, tier_classes, toleration_values};
use super::decision::{AdmissionInputs, Decision, Verdict};
use super::error::MutateError;
use super::gate_marks::undo_gate_edits;
use super::multikueue::{CopyCheck, check_copy};
use super::owners::{OwnerCheck, check_owner};
use super::patch::{Lookup, child_pointer, patch_at};
use super::podspec::{self, ShapeError};
use super::priority::{PriorityFix, is_admin, priority_fix};
use super::run_time::{RunTimeFacts, RunTimeOutcome, run_time_outcome};
use super::topology::build_topology_outcome;
use super::update::{QueueFacts, QueueOutcome, queue_outcome};
use crate::placement::{CUDA_VISIBLE_DEVICES, JsonEntries, PlacementOutcome};
use crate::policy::{FailureMode, GpuClass, NodeNameAction, UnknownKindAction};
use crate::request::{Request, owner_references};
use crate::scoring::buckets::check_priority_ceiling;
use crate::scoring::features::JOB_TYPE_LABEL;
use crate::scoring::{
    CHOSEN_GPU_ANNOTATION, DECIDED_AT_ANNOTATION, SEED_CHOSEN_GPU_ANNOTATION, SEED_DECIDED_AT_ANNOTATION, ScoreOutcome,
    ScoreSource,
};
use crate::view::Snapshot;

/// Annotation naming the tier the workload was decided for.
pub const TIER_ANNOTATION: &str = "tiergate.io/tier";
/// Annotation with a short summary of what was decided.
pub const DECISION_ANNOTATION: &str = "tiergate.io/decision";
/// Decides one admission request. Pure: the same request, snapshot and inputs always give the same decision, and
/// running it on its own output yields an empty patch.
pub fn mutate(request: &Request, snapshot: &Snapshot, inputs: &AdmissionInputs) -> Decision {
    let kind = &request.kind;
    if let Some(decision) = claims::decide_claim_object(request, snapshot) {
        return decision;
    }
    let Some(adapter) = adapter_for(&kind.group, &kind.version, &kind.kind) else {
        // Placement validates owners tiergate never mutates (ReplicaSet); its "deny" still holds.
        if let Err(error) = &inputs.placement {
            let message = error.to_string();
            let verdict = Verdict::Deny { reason: "placement_invalid", message: message.clone() };
            return Decision::unchanged("unknown", verdict, vec![message]);
        }
        let reason = format!("tiergate does not handle {}/{} {}", kind.group, kind.version, kind.kind);
        return Decision::unchanged("unknown", Verdict::Skip { reason: "kind_not_handled" }, vec![reason]);
    };
    if let Some((undone, taken_back)) = gate_edits_taken_back(adapter, request, snapshot) {
        return decide_on_undone(adapter, undone, taken_back, snapshot, inputs);
    }
    decide_or_fail(adapter, request, snapshot, inputs)
}

/// The request as the tenant sent it, when the in-server gate's MutatingAdmissionPolicies edited it first (a
/// CREATE carrying their marks, `gate_marks`), with the JSON patch that takes their edits back.
fn gate_edits_taken_back(
    adapter: &WorkloadAdapter,
    request: &Request,
    snapshot: &Snapshot,
) -> Option<(Request, json_patch::Patch)> {
    if request.operation != Operation::Create {
        return None;
    }
    let object = request.object.as_ref()?;
    let policy = &snapshot.policy.as_ref()?.spec;
    let namespace = snapshot.namespaces.get(request.namespace.as_deref()?)?;
    let primary = policy.tier_of(&namespace.labels).and_then(|tier| policy.gpu_class(&tier.gpu_class));
    let undone = undo_gate_edits(object, adapter, primary)?;
    let taken_back = json_patch::diff(object, &undone);
    let request = Request {
        types: request.types.clone(),
        uid: request.uid.clone(),
        kind: request.kind.clone(),
        sub_resource: request.sub_resource.clone(),
        name: request.name.clone(),
        namespace: request.namespace.clone(),
        operation: request.operation.clone(),
        user_info: request.user_info.clone(),
        dry_run: request.dry_run,
        object: Some(undone),
        old_object: None,
    };
    Some((request, taken_back))
}

/// The decision on the object as sent, as a patch of the object the policies edited: an allowed decision first
/// takes their edits back, then applies its own; any other verdict leaves their edits (a refusal refuses, a
/// skip or a fail-open keeps the object constrained by the policies).
fn decide_on_undone(
    adapter: &'static WorkloadAdapter,
    undone: Request,
    taken_back: json_patch::Patch,
    snapshot: &Snapshot,
    inputs: &AdmissionInputs,
) -> Decision {
    let mut decision = decide_or_fail(adapter, &undone, snapshot, inputs);
    if decision.verdict != Verdict::Allow {
        decision.patch = json_patch::Patch(Vec::new());
        decision.object = None;
        return decision;
    }
    let own = std::mem::take(&mut decision.patch.0);
    decision.patch.0 = taken_back.0.into_iter().chain(own).collect();
    decision.reasons.insert(
        0,
        "the in-server gate's MutatingAdmissionPolicy edited the object first; its edits were taken back and the \
         webhook decided on the object as sent"
            .to_owned(),
    );
    decision
}

fn decide_or_fail(
    adapter: &'static WorkloadAdapter,
    request: &Request,
    snapshot: &Snapshot,
    inputs: &AdmissionInputs,
) -> Decision {
    match decide(adapter, request, snapshot, inputs) {
        Ok(decision) => decision,
        Err(error) => {
            let closed = snapshot
                .policy
                .as_ref()
                .is_some_and(|policy| policy.spec.admission.failure_mode == FailureMode::Closed);
            let message = error.to_string();
            Decision::unchanged(
                adapter.kind,
                Verdict::Failed { reason: error.reason(), message: message.clone(), closed },
                vec![message],
            )
        }
    }
}

fn skip(adapter: &WorkloadAdapter, reason: &'static str, why: String) -> Decision {
    Decision::unchanged(adapter.kind, Verdict::Skip { reason }, vec![why])
}

fn decide(
    adapter: &'static WorkloadAdapter,
    request: &Request,
    snapshot: &Snapshot,
    inputs: &AdmissionInputs,
) -> Result<Decision, MutateError> {
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return Ok(skip(adapter, "operation_not_handled", format!("{:?} requests are not mutated", request.operation)));
    }
    if let Some(sub_resource) = &request.sub_resource {
        return Ok(skip(adapter, "subresource", format!("subresource {sub_resource} is not mutated")));
    }
    let Some(namespace) = request.namespace.as_deref() else {
        return Ok(skip(adapter, "cluster_scoped", "the object has no namespace".to_owned()));
    };
    let Some(policy) = snapshot.policy.as_ref() else {
        return Ok(skip(adapter, "no_policy", "no TierPolicy exists yet".to_owned()));
    };
    let policy = &policy.spec;
    if policy.is_excluded(namespace, snapshot.own_namespace.as_deref()) {
        let why =
            format!("namespace {namespace} is excluded (kube-system, tiergate's own, or spec.excludedNamespaces)");
        return Ok(skip(adapter, "namespace_excluded", why));
    }
    let Some(object) = request.object.as_ref() else {
        let message = format!("request.object is missing from a {:?} request for {}", request.operation, adapter.kind);
        return Ok(Decision::unchanged(adapter.kind, Verdict::Invalid { message: message.clone() }, vec![message]));
    };
    let before = object;
    if before.lookup("/metadata/deletionTimestamp").is_some_and(|stamp| !stamp.is_null()) {
        return Ok(skip(adapter, "being_deleted", "the object is being deleted".to_owned()));
    }
    match check_copy(request, policy, namespace) {
        CopyCheck::Unmarked => {}
        CopyCheck::Dispatched { why } => return Ok(skip(adapter, "multikueue_copy", why)),
        CopyCheck::Forged { message } => {
            let verdict = Verdict::Deny { reason: "multikueue_mark_forged", message: message.clone() };
            return Ok(Decision::unchanged(adapter.kind, verdict, vec![message]));
        }
    }
    let placement = match &inputs.placement {
        Ok(placement) => placement,
        Err(error) => {
            let message = error.to_string();
            let verdict = Verdict::Deny { reason: "placement_invalid", message: message.clone() };
            return Ok(Decision::unchanged(adapter.kind, verdict, vec![message]));
        }
    };
    let requester = request.user_info.username.as_deref();
    let owner_references = match owner_references(object) {
        Ok(references) => references,
        Err(error) => {
            let message = format!(
                "request.object.metadata.ownerReferences is not a list of owner references ({error}); fix the \
                 object's ownerReferences"
            );
            return Ok(Decision::unchanged(adapter.kind, Verdict::Invalid { message: message.clone() }, vec![message]));
        }
    };
    let owner = check_owner(Some(&owner_references), namespace, requester, &policy.admission, snapshot);
    let mut work = Work {
        adapter,
        templates: adapter.pod_templates(before),
        after: before.clone(),
        before,
        warnings: Vec::new(),
        reasons: Vec::new(),
        owner,
        template_reasons: 0..0,
        queue_note: None,
        templates_restored: false,
        written: Vec::new(),
        as_sent: Vec::new(),
        old: request.old_object.as_ref(),
    };
    let placed = work.apply_placement(placement)?;
    let tier = snapshot.namespaces.get(namespace).and_then(|view| policy.tier_of(&view.labels));
    let Some(tier) = tier else {
        let why =
            format!("namespace {namespace} has no tier (label {} names no tier of the policy)", policy.tier_label);
        return work.finish(request, placed, "no_tier", why);
    };
    let context = TierContext { request, snapshot, policy, tier, namespace, classes: tier_classes(policy, tier)? };
    if let Some(denial) = work.node_name_denial(&context) {
        return Ok(denial);
    }
    let labels_before = work.after.lookup("/metadata/labels").cloned();
    if let Some(denial) = work.apply_priority_fix(&context)? {
        return Ok(denial);
    }
    let placed = placed || work.after.lookup("/metadata/labels") != labels_before.as_ref();
    if let Some(denial) = work.foreign_strategy_denial(&context) {
        return Ok(denial);
    }
    let resources: Vec<&str> = context.classes.iter().map(|class| class.primary_resource()).collect();
    // A kind sized outside its templates (TrainJob `resourcesPerNode`) makes every template of the object reach GPUs.
    let sized_outside = adapter.requests_outside_templates(work.before, &resources);
    // Read after placement: a strategy or pinning annotation must not make tiergate write another tier's class.
    let reaching: Vec<(PodTemplatePointers, Reach)> = work
        .templates
        .iter()
        .filter_map(|template| {
            let mut reach = boundary::reach(policy, snapshot, work.after.lookup(&template.spec)?);
            if sized_outside && !reach.reaches_gpu() {
                reach.routes.push("its object requests GPUs outside the pod templates".to_owned());
            }
            reach.reaches_gpu().then(|| (template.clone(), reach))
        })
        .collect();
    if reaching.is_empty() && !sized_outside {
        let why = "no pod template can reach GPU nodes (no GPU resource, DRA claim, toleration of a GPU taint, \
                   GPU-class node selection or GPU node name)"
            .to_owned();
        return work.finish(request, placed, "no_gpu_request", why);
    }
    if let Some(denial) = work.unconfinable_update(&context, &reaching) {
        return Ok(denial);
    }
    if let Some(why) = work.owner.unverified_reason() {
        work.reasons.push(why);
    }
    let first_template_reason = work.reasons.len();
    let mut gpu_templates: Vec<PodTemplatePointers> = Vec::new();
    for (template, reach) in &reaching {
        match work.check_boundary(&context, template, reach) {
            Ok(true) => gpu_templates.push(template.clone()),
            Ok(false) => {}
            Err(denial) => return Ok(*denial),
        }
    }
    for template in &gpu_templates {
        if let Some(denial) = work.apply_gpu_class(&context, template, inputs.score.as_ref())? {
            return Ok(denial);
        }
    }
    if let Some(denial) = work.apply_unknown_kinds(&context, &resources)? {
        return Ok(denial);
    }
    if let Some(denial) = work.apply_topology(&context)? {
        return Ok(denial);
    }
    if let Some(score) = &inputs.score {
        work.apply_score(&context, score, &gpu_templates)?;
    }
    work.template_reasons = first_template_reason..work.reasons.len();
    if let Some(denial) = work.apply_queue(&context)? {
        return Ok(denial);
    }
    work.apply_priority(&context, request, inputs.score.as_ref())?;
    work.apply_run_time(&context)?;
    work.restore_immutable(request);
    work.settle_reasons(&context);
    work.annotate_decision(&context)?;
    work.decision(Verdict::Allow)
}

/// The object being mutated (borrowed from the request, edited in a copy) and what was said about it.
struct Work<'r> {
    adapter: &'static WorkloadAdapter,
    templates: Vec<PodTemplatePointers>,
    before: &'r Value,
    after: Value,
    warnings: Vec<String>,
    reasons: Vec<String>,
    /// The object's controller reference, verified against the owner index.
    owner: OwnerCheck,
    /// The reasons that describe pod-template changes (dropped when an UPDATE leaves the templates as they were).
    template_reasons: std::ops::Range<usize>,
    /// Why the queue label is what it is, stated once the final object is known.
    queue_note: Option<String>,
    /// An UPDATE restored the templates as they came, undoing tiergate's template changes.
    templates_restored: bool,
    /// Every pointer edited in `after`: the patch is built there.
    written: Vec<String>,
    /// Immutable pointers an UPDATE put back as sent without copying them into `after`: below each, the final
    /// object is `before` (`final_at`), and `after` still holds tiergate's undone edits.
    as_sent: Vec<&'static str>,
    /// The old object of an UPDATE (read by several UPDATE checks).
    old: Option<&'r Value>,
}

impl Work<'_> {
    /// The value at `pointer` in the mutated object, created as `{}` when absent.
    fn at(&mut self, pointer: &str) -> Result<&mut Value, MutateError> {
        let shape = |field| MutateError::EditField {
            pointer: pointer.to_owned(),
            source: ShapeError { field, expected: "object" },
        };
        self.written.push(pointer.to_owned());
        if self.after.lookup(pointer).is_none_or(Value::is_null)
            && !self.set(pointer, Some(Value::Object(serde_json::Map::new())))
        {
            return Err(shape("parent"));
        }
        self.after.lookup_mut(pointer).ok_or_else(|| shape("path"))
    }

    /// Sets (or with `None` removes) the value at `pointer` in the mutated object, as `set_pointer` does.
    fn set(&mut self, pointer: &str, value: Option<Value>) -> bool {
        self.written.push(pointer.to_owned());
        set_pointer(&mut self.after, pointer, value)
    }

    fn edit<T>(
        &mut self,
        pointer: &str,
        change: impl FnOnce(&mut Value) -> Result<T, ShapeError>,
    ) -> Result<T, MutateError> {
        let target = self.at(pointer)?;
        change(target).map_err(|source| MutateError::EditField { pointer: pointer.to_owned(), source })
    }

    fn apply_placement(&mut self, placement: &PlacementOutcome) -> Result<bool, MutateError> {
        let mut placed = false;
        let templates = self.templates.clone();
        if let Some(assignment) = &placement.assignment {
            let tolerations = assignment
                .tolerations
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(MutateError::SerializeToleration)?;
            for template in &templates {
                self.edit(&template.spec, |spec| {
                    podspec::merge_string_map(spec, "nodeSelector", &assignment.node_selector)?;
                    podspec::add_tolerations(spec, &tolerations)
                })?;
            }
            self.reasons.push(format!("placement rule {} of {}", assignment.rule, assignment.owner));
            placed = true;
        }
        if let Some(pinning) = &placement.pinning {
            for template in &templates {
                let kept = self.edit(&template.spec, |spec| {
                    podspec::require_hostname(spec, &pinning.node)?;
                    podspec::set_env_unless_present(spec, CUDA_VISIBLE_DEVICES, &pinning.cuda_visible_devices)
                })?;
                // Placement already warns about each of these containers; say it once.
                for container in kept {
                    self.reasons.push(format!("container {container} keeps its own {CUDA_VISIBLE_DEVICES}"));
                }
            }
            self.reasons.push(format!(
                "pinned to node {} with {CUDA_VISIBLE_DEVICES}={}",
                pinning.node, pinning.cuda_visible_devices
            ));
            placed = true;
        }
        if !placement.metadata_labels.is_empty() || !placement.metadata_annotations.is_empty() {
            self.edit("/metadata", |metadata| {
                podspec::merge_string_map(metadata, "labels", &placement.metadata_labels)?;
                podspec::merge_string_map(metadata, "annotations", &placement.metadata_annotations)
            })?;
            placed = true;
        }
        let owner = self.adapter.templates != TemplateLayout::Pod;
        if owner && !placement.template_annotations.is_empty() {
            for template in &templates {
                self.edit(&template.metadata, |metadata| {
                    podspec::merge_string_map(metadata, "annotations", &placement.template_annotations)
                })?;
            }
            placed = true;
        }
        let mut removed = false;
        for template in templates.iter().filter(|_| owner) {
            for key in &placement.removed_template_annotations {
                let pointer = child_pointer(&format!("{}/annotations", template.metadata), key);
                if self.after.lookup(&pointer).is_some() {
                    removed |= self.set(&pointer, None);
                }
            }
        }
        if removed {
            self.reasons.push(format!(
                "removed {} from the pod template (its source annotation is gone)",
                placement.removed_template_annotations.join(", ")
            ));
            placed = true;
        }
        self.warnings.extend(placement.warnings.iter().cloned());
        Ok(placed)
    }

    /// Puts the tier's (or the kept user's) GPU class on one template; `Some` is a denial.
    fn apply_gpu_class(
        &mut self,
        context: &TierContext<'_>,
        template: &PodTemplatePointers,
        score: Option<&ScoreOutcome>,
    ) -> Result<Option<Decision>, MutateError> {
        let selector = self.after.lookup(&template.spec).map(|spec| podspec::string_map(spec, "nodeSelector"));
        let selected = selection(context.policy, &selector.unwrap_or_default());
        let class = match &selected {
            Selection::Class(class) if context.in_tier(&class.name) => {
                self.reasons
                    .push(format!("keeps the user's GPU class {} (allowed in tier {})", class.name, context.tier.name));
                Some(*class)
            }
            Selection::Class(_) | Selection::Unknown(_) => {
                let Some(why) = self.foreign_allowed(context, template, &selected) else {
                    let written =
                        self.before.lookup(&template.spec).map(|spec| podspec::string_map(spec, "nodeSelector"));
                    let denial = self.foreign_denial(context, &selected);
                    if selection(context.policy, &written.unwrap_or_default()) != selected {
                        return Ok(Some(with_placement_hint(denial)));
                    }
                    return Ok(Some(denial));
                };
                self.warnings.push(format!(
                    "{} kept outside tier {} ({}): {why}",
                    describe(&selected),
                    context.tier.name,
                    context.class_names()
                ));
                self.reasons.push(format!("keeps {} outside the tier: {why}", describe(&selected)));
                match selected {
                    Selection::Class(class) => Some(class),
                    // An unknown class has no tolerations to add; the user's selector stays as written.
                    _ => return Ok(None),
                }
            }
            Selection::None => match self.claimed_class(context, template) {
                Some(class) => {
                    self.reasons.push(format!("pinned to GPU class {}: its DRA claims name that class", class.name));
                    Some(class)
                }
                None => self.tier_class_for(context, score),
            },
        };
        let Some(class) = class else {
            let all: Vec<&GpuClass> = context.classes.clone();
            for class in all {
                let tolerations = toleration_values(class)?;
                self.edit(&template.spec, |spec| podspec::add_tolerations(spec, &tolerations))?;
            }
            return Ok(None);
        };
        let tolerations = toleration_values(class)?;
        self.edit(&template.spec, |spec| {
            podspec::merge_string_map(spec, "nodeSelector", &class.node_labels)?;
            podspec::add_tolerations(spec, &tolerations)
        })?;
        Ok(None)
    }

    /// The one class of the tier the template's DRA claims reach (through templates the snapshot knows), if
    /// exactly one: its pods must run on that class's nodes, and Kueue charges the flavor they select.
    fn claimed_class<'p>(&self, context: &TierContext<'p>, template: &PodTemplatePointers) -> Option<&'p GpuClass> {
        let spec = self.after.lookup(&template.spec)?;
        let judged = claims::judge_pod_claims(
            context.policy,
            context.snapshot,
            context.namespace,
            &context.tier.name,
            &context.classes,
            spec,
        );
        match judged.classes.as_slice() {
            [class] if !class.node_labels.is_empty() => Some(*class),
            _ => None,
        }
    }

    /// The class for a template without a GPU-class selector: the scorer's choice inside the tier, else the
    /// primary; `None` for a queued kind in a tier with fallbacks (Kueue picks the flavor and sets its labels).
    fn tier_class_for<'p>(&mut self, context: &TierContext<'p>, score: Option<&ScoreOutcome>) -> Option<&'p GpuClass> {
        let chosen = score.and_then(|score| score.chosen_gpu_class.as_deref());
        if let Some((chosen, class)) = chosen
            .and_then(|chosen| context.classes.iter().find(|class| class.name == chosen).map(|class| (chosen, *class)))
        {
            self.reasons.push(format!("GPU class {chosen}: the scorer's choice, inside tier {}", context.tier.name));
            return Some(class);
        }
        if self.adapter.is_queued() && context.classes.len() > 1 {
            self.reasons.push(format!(
                "tolerations of GPU classes {}; Kueue picks the flavor and sets its node selector at admission",
                context.class_names()
            ));
            return None;
        }
        let primary = context.classes.first().copied();
        if let Some(class) = primary {
            self.reasons.push(format!("GPU class {} of tier {}", class.name, context.tier.name));
        }
        primary
    }

    fn foreign_allowed(
        &self,
        context: &TierContext<'_>,
        template: &PodTemplatePointers,
        selected: &Selection<'_>,
    ) -> Option<String> {
        if let Some(why) = context.foreign_allowed_for_requester() {
            return Some(why);
        }
        if let Some(owner) = self.trusted_owner() {
            return Some(format!("its owner {owner} was admitted by tiergate with it"));
        }
        if context.request.operation == Operation::Update {
            let old = self.old;
            let old_selector = old
                .as_ref()
                .and_then(|old| old.lookup(&template.spec))
                .map(|spec| podspec::string_map(spec, "nodeSelector"))
                .unwrap_or_default();
            if selection(context.policy, &old_selector) == *selected {
                return Some("the object already had it before this update".to_owned());
            }
        }
        None
    }

    /// The tenant boundary of one template that can reach GPU nodes: `Ok(true)` confines it to the tier's classes,
    /// `Ok(false)` leaves an allowed override alone (with a warning), `Err` is the denial.
    fn check_boundary(
        &mut self,
        context: &TierContext<'_>,
        template: &PodTemplatePointers,
        reach: &Reach,
    ) -> Result<bool, Box<Decision>> {
        let bounds = TierBounds {
            policy: context.policy,
            snapshot: context.snapshot,
            namespace: context.namespace,
            tier: context.tier,
            classes: &context.classes,
            queued: self.adapter.is_queued(),
        };
        let judge = |object: &Value| object.lookup(&template.spec).map(|spec| boundary::violations(&bounds, spec));
        let found = judge(&self.after).unwrap_or_default();
        if found.is_empty() {
            if reach.gpu_resources.is_empty() {
                self.reasons.push(format!(
                    "confined to tier {}: the pod template {}",
                    context.tier.name,
                    reach.routes.join(", ")
                ));
            }
            if reach.dra_claims
                && let Some(spec) = self.after.lookup(&template.spec)
            {
                let described = claims::describe_pod_claims(context.policy, context.snapshot, context.namespace, spec);
                self.reasons.extend(described);
            }
            return Ok(true);
        }
        let old_found = match context.request.operation {
            Operation::Update => self.old.and_then(judge),
            _ => None,
        };
        let exemption = context
            .foreign_allowed_for_requester()
            .or_else(|| self.trusted_owner().map(|owner| format!("its owner {owner} was admitted by tiergate with it")))
            .or_else(|| {
                (old_found.as_ref() == Some(&found)).then(|| "the object already had it before this update".to_owned())
            });
        if let Some(why) = exemption {
            for violation in &found {
                self.warnings.push(format!("{} kept in tier {}: {why}", violation.problem, context.tier.name));
            }
            self.reasons.push(format!("keeps what it names outside tier {}: {why}", context.tier.name));
            return Ok(false);
        }
        let written_by_placement = judge(self.before).is_some_and(|before| before != found);
        Err(Box::new(self.boundary_denial(context, &found, written_by_placement)))
    }

    /// A placement strategy declared on the object or a pod template with a rule on another tier's class.
    fn foreign_strategy_denial(&self, context: &TierContext<'_>) -> Option<Decision> {
        let judge = |object: &Value| {
            let in_tier = |class: &str| context.in_tier(class);
            let metadata = std::iter::once("/metadata".to_owned())
                .chain(self.templates.iter().map(|template| template.metadata.clone()));
            let mut found: Vec<Violation> = Vec::new();
            for pointer in metadata {
                let Some(meta) = object.lookup(&pointer) else { continue };
                let (annotations, labels) = (JsonEntries::of(meta, "annotations"), JsonEntries::of(meta, "labels"));
                for violation in boundary::foreign_strategy_rules(context.policy, &in_tier, &annotations, &labels) {
                    if !found.contains(&violation) {
                        found.push(violation);
                    }
                }
            }
            found
        };
        let found = judge(&self.after);
        if found.is_empty() || context.foreign_allowed_for_requester().is_some() {
            return None;
        }
        let old = match context.request.operation {
            Operation::Update => self.old,
            _ => None,
        };
        if old.is_some_and(|old| judge(old) == found) {
            return None;
        }
        Some(self.boundary_denial(context, &found, false))
    }

    /// How messages name the object: `Job ml-team-dev/train`.
    fn subject(&self, context: &TierContext<'_>) -> String {
        format!("{} {}/{}", self.adapter.kind, context.namespace, object_name(self.before))
    }

    /// A CREATE whose pod or pod template names its node in `spec.nodeName`, under `podsNamingNodes: Deny`:
    /// refused whatever the node, as the in-server gate refuses it (it cannot read the node's labels). Exempt
    /// users and groups and the kubelets' mirror pods pass; an UPDATE is not judged here (a pod's `nodeName` is
    /// immutable, and the pods of a template given one later are each refused when they are created).
    fn node_name_denial(&self, context: &TierContext<'_>) -> Option<Decision> {
        let request = context.request;
        let requester = request.user_info.username.as_deref().unwrap_or_default();
        if context.policy.admission.pods_naming_nodes != NodeNameAction::Deny
            || request.operation != Operation::Create
            || requester.starts_with(MIRROR_POD_WRITER_PREFIX)
            || is_admin(context.policy, request, context.namespace)
        {
            return None;
        }
        let (pointer, node) = self.templates.iter().find_map(|template| {
            let node = self.before.lookup(&template.spec).and_then(boundary::named_node)?;
            Some((template.spec.as_str(), node))
        })?;
        let message = format!(
            "{} names node {node} in {pointer}/nodeName, in tier {} (namespace {}): a pod that names its node skips \
             the scheduler and the GPU classes' taints, and tiergate refuses it in tiered namespaces whether or not \
             its webhook answers. Fix: select the node with nodeSelector {HOSTNAME_LABEL}: {node} instead (a GPU pod \
             is then confined to the tier's classes [{}]), or ask the platform team (spec.admission.\
             podsNamingNodes: CheckNodeClass, or an admin namespace).",
            self.subject(context),
            context.tier.name,
            context.namespace,
            context.class_names(),
        );
        let verdict = Verdict::Deny { reason: "pod_names_node", message: message.clone() };
        Some(Decision::unchanged(self.adapter.kind, verdict, vec![message]))
    }

    /// An UPDATE that gives a template a route to GPU nodes where tiergate may not patch the template (a Pod's
    /// spec, a Job's template: `immutable_on_update`): the confinement would be dropped, so it is refused.
    fn unconfinable_update(
        &self,
        context: &TierContext<'_>,
        reaching: &[(PodTemplatePointers, Reach)],
    ) -> Option<Decision> {
        if context.request.operation != Operation::Update || context.foreign_allowed_for_requester().is_some() {
            return None;
        }
        let old = self.old?;
        let immutable = |pointer: &str| self.adapter.immutable_on_update.iter().any(|fixed| pointer.starts_with(fixed));
        let (_, reach) = reaching.iter().find(|(template, _)| {
            immutable(&template.spec)
                && !old
                    .lookup(&template.spec)
                    .is_some_and(|spec| boundary::reach(context.policy, context.snapshot, spec).reaches_gpu())
        })?;
        let message = format!(
            "{}: this UPDATE gives the pod template a route to GPU nodes ({}), but tiergate cannot change the \
             template of an existing {} to confine it to tier {}'s GPU classes [{}]. Fix: create a new {} with it \
             (tiergate then sets the tier's selector and tolerations).",
            self.subject(context),
            reach.routes.join(", "),
            self.adapter.kind,
            context.tier.name,
            context.class_names(),
            self.adapter.kind,
        );
        let verdict = Verdict::Deny { reason: "unconfinable_update", message: message.clone() };
        Some(Decision::unchanged(self.adapter.kind, verdict, vec![message]))
    }

    fn boundary_denial(&self, context: &TierContext<'_>, found: &[Violation], written_by_placement: bool) -> Decision {
        let problems: Vec<String> =
            found.iter().map(|violation| format!("{}. Fix: {}", violation.problem, violation.fix)).collect();
        let message = format!(
            "{} is in tier {} (namespace {}), which may use GPU classes [{}]: {}. To allow other classes, list the \
             namespace, user or group in the TierPolicy's spec.admission (adminNamespaces, adminUsers, adminGroups).",
            self.subject(context),
            context.tier.name,
            context.namespace,
            context.class_names(),
            problems.join("; "),
        );
        let reason = found.first().map_or("foreign_gpu_class", |violation| violation.reason);
        let denial =
            Decision::unchanged(self.adapter.kind, Verdict::Deny { reason, message: message.clone() }, vec![message]);
        if written_by_placement { with_placement_hint(denial) } else { denial }
    }

    /// Holds a priority-class label to the tier's ceiling (or refuses it), and sets the tier's default where a
    /// pod `priorityClassName` would become a queued workload's priority; `Some` is a denial.
    fn apply_priority_fix(&mut self, context: &TierContext<'_>) -> Result<Option<Decision>, MutateError> {
        if is_admin(context.policy, context.request, context.namespace) {
            return Ok(None);
        }
        let labels = podspec::string_map(self.after.get("metadata").unwrap_or(&Value::Null), "labels");
        let pod_priority_class = self.templates.iter().find_map(|template| {
            self.after
                .lookup(&format!("{}/priorityClassName", template.spec))
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        // Kueue's pod integration queues a Pod the user labelled with a queue: its priority works the same way.
        let queued = self.adapter.is_queued() || labels.contains_key(QUEUE_NAME_LABEL);
        for at in self.adapter.priority_labels_at() {
            // A CronJob's job template: its Jobs are created by the CronJob controller, which the in-server gate
            // does not judge, so the label they are created with is held to the ceiling here.
            let fix = if at == "/metadata" {
                priority_fix(context.policy, context.tier, &labels, queued, pod_priority_class.as_deref())
            } else {
                let labels = podspec::string_map(self.after.lookup(at).unwrap_or(&Value::Null), "labels");
                priority_fix(context.policy, context.tier, &labels, false, None)
            };
            if let Some(denial) = self.apply_priority_fix_at(at, fix)? {
                return Ok(Some(denial));
            }
        }
        Ok(None)
    }

    /// Carries out `fix` on the labels of the metadata at `at` (notes about another place than the object's own
    /// metadata name it); `Some` is a denial.
    fn apply_priority_fix_at(&mut self, at: &str, fix: PriorityFix) -> Result<Option<Decision>, MutateError> {
        let place = |note: String| if at == "/metadata" { note } else { format!("{at}: {note}") };
        match fix {
            PriorityFix::Keep => {}
            PriorityFix::Set { class, warning, reason } => {
                self.edit(at, |metadata| podspec::set_string(metadata, "labels", PRIORITY_CLASS_LABEL, &class))?;
                self.warnings.extend(warning.map(place));
                self.reasons.push(place(reason));
            }
            PriorityFix::Remove { warning } => {
                self.set(&child_pointer(&format!("{at}/labels"), PRIORITY_CLASS_LABEL), None);
                self.warnings.push(place(warning));
            }
            PriorityFix::Deny { message } => {
                let message = place(message);
                let verdict = Verdict::Deny { reason: "priority_above_ceiling", message: message.clone() };
                return Ok(Some(Decision::unchanged(self.adapter.kind, verdict, vec![message])));
            }
        }
        Ok(None)
    }

    /// The tier's topology rule on the object's pod sets (`admission::topology`); `Some` is a denial. An object
    /// Kueue admits through its owner is left to the owner's decision.
    fn apply_topology(&mut self, context: &TierContext<'_>) -> Result<Option<Decision>, MutateError> {
        if self.left_to_owner().is_some() {
            return Ok(None);
        }
        let pod_sets = self.adapter.pod_sets(&self.after);
        let outcome = match build_topology_outcome(context.policy, context.tier, &pod_sets, &self.after) {
            Ok(outcome) => outcome,
            Err(denial) => {
                let verdict = Verdict::Deny { reason: "topology_level_unknown", message: denial.message.clone() };
                return Ok(Some(Decision::unchanged(self.adapter.kind, verdict, vec![denial.message])));
            }
        };
        for edit in &outcome.edits {
            for key in &edit.remove {
                self.set(&child_pointer(&format!("{}/annotations", edit.metadata), key), None);
            }
            let set: BTreeMap<String, String> =
                edit.set.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect();
            self.edit(&edit.metadata, |metadata| podspec::merge_string_map(metadata, "annotations", set))?;
        }
        self.warnings.extend(outcome.warnings);
        self.reasons.extend(outcome.reasons);
        Ok(None)
    }

    /// A Pod whose controller was verified in the caches and is a kind tiergate admits itself (its template was
    /// checked there); an unverified claim is never trusted.
    fn trusted_owner(&self) -> Option<String> {
        if self.adapter.templates != TemplateLayout::Pod {
            return None;
        }
        match &self.owner {
            OwnerCheck::Verified { owner, .. } => Some(owner.clone()),
            OwnerCheck::None | OwnerCheck::Unverified { .. } => None,
        }
    }

    /// Kueue manages the verified owner as one workload: this object is the owner's to queue and unsuspend.
    fn left_to_owner(&self) -> Option<&str> {
        match &self.owner {
            OwnerCheck::Verified { owner, queued_by_kueue: true } => Some(owner),
            _ => None,
        }
    }

    fn foreign_denial(&self, context: &TierContext<'_>, selected: &Selection<'_>) -> Decision {
        let name = object_name(self.before);
        let key = match selected {
            Selection::Class(class) => class.node_labels.keys().cloned().collect::<Vec<_>>().join(", "),
            Selection::Unknown(label) => label.split('=').next().unwrap_or_default().to_owned(),
            Selection::None => String::new(),
        };
        let message = format!(
            "{} {}/{name} selects {}, but namespace {} is in tier {}, which may use GPU classes [{}]. \
             Fix: remove the nodeSelector {key} (tiergate then sets {}) or select one of [{}]; to allow other \
             classes, list the namespace, user or group in the TierPolicy's spec.admission \
             (adminNamespaces, adminUsers, adminGroups).",
            self.adapter.kind,
            context.namespace,
            describe(selected),
            context.namespace,
            context.tier.name,
            context.class_names(),
            context.tier.gpu_class,
            context.class_names(),
        );
        let verdict = Verdict::Deny { reason: "foreign_gpu_class", message: message.clone() };
        Decision::unchanged(self.adapter.kind, verdict, vec![message])
    }

    fn apply_score(
        &mut self,
        context: &TierContext<'_>,
        score: &ScoreOutcome,
        gpu_templates: &[PodTemplatePointers],
    ) -> Result<(), MutateError> {
        self.warnings.extend(score.warnings.iter().cloned());
        for template in gpu_templates {
            self.edit(&template.spec, |spec| podspec::add_job_type_anti_affinity(spec, &score.avoid_job_types))?;
        }
        if !score.avoid_job_types.is_empty() {
            self.reasons.push(format!("avoids nodes running job types {}", score.avoid_job_types.join(", ")));
        }
        let mut annotations = score.annotations();
        if let Some(chosen) = score.chosen_gpu_class.as_deref().filter(|chosen| !context.in_tier(chosen)) {
            self.warnings.push(format!(
                "the scorer chose GPU class {chosen}, outside tier {} ({}); ignored",
                context.tier.name,
                context.class_names()
            ));
            annotations.remove(CHOSEN_GPU_ANNOTATION);
            annotations.remove(SEED_CHOSEN_GPU_ANNOTATION);
        }
        if let ScoreSource::Fallback { reason } = score.source {
            self.reasons.push(format!("scoring fell back to the tier default priority ({reason})"));
        }
        // The same decision already recorded keeps its time: a reinvoked webhook (or `explain` on its own output)
        // scores again, and an unchanged answer must not rewrite the object.
        let metadata = self.before.get("metadata").unwrap_or(&Value::Null);
        let recorded = |key: &str| podspec::string_entry(metadata, "annotations", key);
        let time_keys = [DECIDED_AT_ANNOTATION, SEED_DECIDED_AT_ANNOTATION];
        let unchanged = annotations
            .iter()
            .filter(|(key, _)| !time_keys.contains(&key.as_str()))
            .all(|(key, value)| recorded(key) == Some(value.as_str()));
        if unchanged {
            for key in time_keys {
                if let Some(time) = recorded(key) {
                    annotations.insert(key.to_owned(), time.to_owned());
                }
            }
        }
        self.edit("/metadata", |metadata| podspec::merge_string_map(metadata, "annotations", annotations))?;
        self.label_job_type(gpu_templates)
    }

    /// Labels the pod templates with the job type (when it is a valid label value and the template has no such
    /// label yet), so the anti-affinity of later jobs and the scorer's co-located job types see these pods.
    fn label_job_type(&mut self, gpu_templates: &[PodTemplatePointers]) -> Result<(), MutateError> {
        let metadata = self.before.get("metadata").unwrap_or(&Value::Null);
        let Some(job_type) = job_type_label_value(|key| podspec::string_entry(metadata, "annotations", key)) else {
            return Ok(());
        };
        let mut labelled = false;
        for template in gpu_templates {
            let pointer = child_pointer(&format!("{}/labels", template.metadata), JOB_TYPE_LABEL);
            if self.after.lookup(&pointer).is_none() {
                self.edit(&template.metadata, |metadata| {
                    podspec::set_string(metadata, "labels", JOB_TYPE_LABEL, &job_type)
                })?;
                labelled = true;
            }
        }
        if labelled {
            self.reasons.push(format!("pods labelled {JOB_TYPE_LABEL}={job_type} (seen by other jobs' anti-affinity)"));
        }
        Ok(())
    }

    /// The queue label and suspension of a queued kind (see `update::queue_outcome`), or the pod-group labels of a
    /// kind Kueue gates pod by pod; `Some` is a refusal.
    fn apply_queue(&mut self, context: &TierContext<'_>) -> Result<Option<Decision>, MutateError> {
        let (suspend, group_annotations) = match self.adapter.queueing {
            Queueing::NotQueued => return Ok(None),
            Queueing::SuspendedWithQueueLabel { suspend } => (Some(suspend), None),
            Queueing::PodGroupWithQueueLabel { template_annotations } => (None, Some(template_annotations)),
        };
        if self.left_to_owner().is_some() {
            return Ok(None);
        }
        let labels_at = self.adapter.queue_labels_at;
        let request = context.request;
        // A kind whose queue label lives in a template (CronJob) never runs itself: every UPDATE is decided like a
        // CREATE, so the Jobs it spawns next are queued and suspended.
        let template_only = labels_at != "/metadata";
        let update = request.operation == Operation::Update && !template_only;
        let old = if update { self.old } else { None };
        let current = label(self.before, labels_at, QUEUE_NAME_LABEL);
        let old_queue = old.as_ref().and_then(|old| label(old, labels_at, QUEUE_NAME_LABEL));
        let tier_queue = context.tier.local_queue();
        let facts = QueueFacts {
            update,
            current: current.as_deref(),
            old: old_queue.as_deref(),
            suspended: self.adapter.is_suspended(self.before),
            old_suspended: old.as_ref().is_some_and(|old| self.adapter.is_suspended(old)),
            tier_queue: &tier_queue,
        };
        let foreign_tier = |queue: &str| {
            context
                .policy
                .tiers
                .iter()
                .find(|tier| tier.name != context.tier.name && tier.local_queue() == queue)
                .map(|tier| tier.name.clone())
        };
        let exists =
            |queue: &str| context.snapshot.local_queues.contains(&(context.namespace.to_owned(), queue.to_owned()));
        match queue_outcome(facts, foreign_tier) {
            QueueOutcome::Keep(queue) => {
                if !exists(&queue) {
                    self.warnings.push(format!(
                        "LocalQueue {queue} does not exist in namespace {}; Kueue keeps the workload suspended until \
                         it does (tier {}'s queue is {tier_queue})",
                        context.namespace, context.tier.name
                    ));
                }
                self.queue_note = Some("the user's queue, kept".to_owned());
            }
            QueueOutcome::Set { queue, why } => {
                self.edit(labels_at, |metadata| podspec::set_string(metadata, "labels", QUEUE_NAME_LABEL, &queue))?;
                if !exists(&queue) {
                    self.warnings.push(format!(
                        "LocalQueue {queue} does not exist in namespace {} yet; Kueue admits the workload once \
                         tiergate has created it",
                        context.namespace
                    ));
                }
                if current.is_some() || update {
                    self.warnings.push(format!("{QUEUE_NAME_LABEL} set to {queue}: {why}"));
                }
                self.queue_note = Some(why);
            }
            QueueOutcome::Running { warning } => self.warnings.push(warning),
            QueueOutcome::Refuse { missing } => {
                let message = format!(
                    "{} {}/{}: this update sets spec.suspend: false, but the object has {missing}, so it would run \
                     outside tier {}'s quota. Fix: keep spec.suspend: true and set the label {QUEUE_NAME_LABEL}: \
                     {tier_queue} (or remove the label and tiergate sets it); Kueue unsuspends the workload once it \
                     is admitted.",
                    self.adapter.kind,
                    context.namespace,
                    object_name(self.before),
                    context.tier.name,
                );
                let verdict = Verdict::Deny { reason: "unsuspended_without_queue", message: message.clone() };
                return Ok(Some(Decision::unchanged(self.adapter.kind, verdict, vec![message])));
            }
        }
        if let Some(annotations) = group_annotations
            && let Some(queue) = label(&self.after, labels_at, QUEUE_NAME_LABEL)
        {
            self.label_pod_group(QUEUE_NAME_LABEL, &queue, annotations)?;
            self.reasons.push("every pod template labelled with the queue; Kueue gates the pods as a group".to_owned());
        }
        if let Some(suspend) = suspend
            && !update
            && !self.adapter.is_suspended(self.before)
            && !self.set(suspend, Some(Value::Bool(true)))
        {
            return Err(MutateError::EditField {
                pointer: suspend.to_owned(),
                source: ShapeError { field: "suspend", expected: "object" },
            });
        }
        if !update {
            self.hand_to_multikueue(context, labels_at, &tier_queue)?;
        }
        Ok(None)
    }

    /// What Kueue's own webhook does for a queue whose ClusterQueue dispatches through MultiKueue
    /// (`ApplyDefaultForManagedBy`): an object of a dispatching tier, queued in the tier's LocalQueue, names
    /// MultiKueue as its controller, unless it names a controller other than its kind's own. Kueue's webhook cannot
    /// do it here: the API server calls it before tiergate's (configurations in name order), when the object has no
    /// queue label yet, and without it MultiKueue rejects the workload ("Expecting spec.managedBy").
    fn hand_to_multikueue(
        &mut self,
        context: &TierContext<'_>,
        labels_at: &str,
        tier_queue: &str,
    ) -> Result<(), MutateError> {
        let Some(managed_by) = self.adapter.managed_by else { return Ok(()) };
        let dispatches = context.tier.dispatch.as_ref().is_some_and(|dispatch| !dispatch.clusters.is_empty());
        let queued_here = label(&self.after, labels_at, QUEUE_NAME_LABEL).as_deref() == Some(tier_queue);
        let current = self.before.lookup(managed_by.pointer).and_then(Value::as_str);
        let replaceable = current.is_none_or(|controller| controller == managed_by.own_controller);
        if !dispatches || !queued_here || !replaceable {
            return Ok(());
        }
        if !self.set(managed_by.pointer, Some(Value::String(MULTIKUEUE_CONTROLLER.to_owned()))) {
            return Err(MutateError::EditField {
                pointer: managed_by.pointer.to_owned(),
                source: ShapeError { field: "managedBy", expected: "object" },
            });
        }
        let field = managed_by.pointer.trim_start_matches('/').replace('/', ".");
        self.reasons.push(format!(
            "{field}: {MULTIKUEUE_CONTROLLER}, so Kueue dispatches it to tier {}'s worker clusters",
            context.tier.name
        ));
        Ok(())
    }

    /// What Kueue's webhook does for a pod-group kind (LeaderWorkerSet): `label` and `annotations` on every pod
    /// template, so the pods are created labelled and Kueue's pod webhook gates them.
    fn label_pod_group(&mut self, label: &str, value: &str, annotations: &[(&str, &str)]) -> Result<(), MutateError> {
        let annotations: BTreeMap<String, String> =
            annotations.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        for template in self.templates.clone() {
            self.edit(&template.metadata, |metadata| {
                podspec::set_string(metadata, "labels", label, value)?;
                podspec::merge_string_map(metadata, "annotations", &annotations)
            })?;
        }
        Ok(())
    }

    /// The unknown-kind rule: GPU pods of a kind neither tiergate nor Kueue knows (embedded in an AppWrapper, or
    /// a Pod's controller) are refused or queued pod by pod, as `spec.admission.unknownGpuKinds` says; `Some` is a
    /// denial.
    fn apply_unknown_kinds(
        &mut self,
        context: &TierContext<'_>,
        resources: &[&str],
    ) -> Result<Option<Decision>, MutateError> {
        let embedded = unknown_embedded_kinds(self.adapter.templates, self.before, resources);
        let owner = match self.adapter.templates {
            TemplateLayout::Pod => unknown_owner_kind(self.before),
            _ => None,
        };
        let unknown: Vec<String> = embedded.into_iter().chain(owner.clone()).collect();
        if unknown.is_empty() {
            return Ok(None);
        }
        let name = object_name(self.before);
        if context.policy.admission.unknown_gpu_kinds == UnknownKindAction::Deny {
            let message = format!(
                "{} {}/{name}: {} is a kind neither tiergate nor Kueue manages, and its pods request {}, so they \
                 would run outside tier {}'s quota. Fix: use a kind Kueue manages (Job, JobSet, RayJob, PyTorchJob, \
                 LeaderWorkerSet, ...), or have the cluster admin set spec.admission.unknownGpuKinds: QueuePods in \
                 the TierPolicy (with Kueue's pod integration enabled).",
                self.adapter.kind,
                context.namespace,
                unknown.join(", "),
                resources.join(", "),
                context.tier.name,
            );
            let verdict = Verdict::Deny { reason: "unknown_gpu_kind", message: message.clone() };
            return Ok(Some(Decision::unchanged(self.adapter.kind, verdict, vec![message])));
        }
        if owner.is_none() {
            self.reasons.push(format!(
                "the pods of {} are queued one by one through Kueue's pod integration (unknownGpuKinds: QueuePods)",
                unknown.join(", ")
            ));
            return Ok(None);
        }
        if context.request.operation != Operation::Create {
            return Ok(None);
        }
        let queue = label_at(self.before, "/metadata", QUEUE_NAME_LABEL)
            .map_or_else(|| context.tier.local_queue(), str::to_owned);
        let edited = self.edit("/metadata", |metadata| {
            podspec::set_string(metadata, "labels", QUEUE_NAME_LABEL, &queue)?;
            podspec::set_string(metadata, "labels", KUEUE_MANAGED_LABEL, "true")?;
            podspec::add_list_item(metadata, "finalizers", &Value::String(KUEUE_MANAGED_LABEL.to_owned()))
        });
        edited?;
        let gate = serde_json::json!({ "name": KUEUE_ADMISSION_GATE });
        self.edit("/spec", |spec| podspec::add_list_item(spec, "schedulingGates", &gate))?;
        self.reasons.push(format!(
            "owned by {}, a kind Kueue does not manage: queued as a single pod in LocalQueue {queue} (gated by \
             {KUEUE_ADMISSION_GATE} until Kueue admits it)",
            unknown.join(", ")
        ));
        Ok(None)
    }

    /// The priority label: the score's class (held to the tier's ceiling) when scored; on UPDATE without a score,
    /// the old object's label is restored (priority is decided at creation, never by the tenant's update).
    fn apply_priority(
        &mut self,
        context: &TierContext<'_>,
        request: &Request,
        score: Option<&ScoreOutcome>,
    ) -> Result<(), MutateError> {
        if !self.adapter.is_queued() || self.left_to_owner().is_some() {
            return Ok(());
        }
        let Some(score) = score else {
            if request.operation == Operation::Update {
                self.restore_priority();
            }
            return Ok(());
        };
        // The scorer clamps already; a second guard, like the chosen GPU class.
        let check = check_priority_ceiling(&score.priority_class, context.tier, &context.policy.priority_buckets);
        let class = match check.replacement() {
            None => score.priority_class.clone(),
            Some(Some(ceiling)) => {
                self.warnings.push(format!(
                    "the score's priority class {} is above tier {}'s ceiling; clamped to {ceiling}",
                    score.priority_class, context.tier.name
                ));
                ceiling.to_owned()
            }
            Some(None) => return Ok(()),
        };
        let labels_at = self.adapter.queue_labels_at;
        let priority_in = |object| label_at(object, labels_at, PRIORITY_CLASS_LABEL);
        if let Some(user) = priority_in(self.before).filter(|user| *user != class)
            && priority_in(&self.after) == Some(user)
        {
            self.warnings.push(format!("priority class {user} replaced by {class} from the workload's score"));
        }
        self.edit(labels_at, |metadata| podspec::set_string(metadata, "labels", PRIORITY_CLASS_LABEL, &class))?;
        if matches!(self.adapter.queueing, Queueing::PodGroupWithQueueLabel { .. }) {
            self.label_pod_group(PRIORITY_CLASS_LABEL, &class, &[])?;
        }
        let basis = match (&score.source, score.score) {
            (ScoreSource::Fallback { .. }, _) | (_, None) => "the tier's default".to_owned(),
            (source, Some(value)) => format!("score {value} ({})", source.name()),
        };
        self.reasons.push(format!("priority class {class} from {basis}"));
        Ok(())
    }

    /// Where Kueue reads this object's run-time label, the place it is decided first: a queued kind's
    /// (`run_time_labels_at`), or a Pod's own metadata when Kueue's pod integration queues it by its queue label.
    fn run_time_labels(&self) -> Vec<String> {
        match self.adapter.templates {
            TemplateLayout::Pod => label_at(&self.after, "/metadata", QUEUE_NAME_LABEL)
                .filter(|queue| !queue.is_empty())
                .map(|_| vec!["/metadata".to_owned()])
                .unwrap_or_default(),
            _ => self.adapter.run_time_labels_at(),
        }
    }

    /// Holds the `kueue.x-k8s.io/max-exec-time-seconds` label to the tier's `maxRunTime` (`admission::run_time`)
    /// where Kueue reads it, and gives a pod-group kind's templates the same value (its pods copy them). An object
    /// Kueue admits through its owner is left to the owner; an admin keeps the limit it asks for.
    fn apply_run_time(&mut self, context: &TierContext<'_>) -> Result<(), MutateError> {
        let Some(limits) = context.tier.run_time_limits() else { return Ok(()) };
        if self.left_to_owner().is_some() || is_admin(context.policy, context.request, context.namespace) {
            return Ok(());
        }
        let locations = self.run_time_labels();
        let Some((at, templates)) = locations.split_first() else { return Ok(()) };
        // A label in a template (a CronJob's job template) is never a running workload's: decided as on CREATE.
        let update = context.request.operation == Operation::Update && at == "/metadata";
        let old = if update { self.old } else { None };
        let current = label(self.before, at, MAX_EXEC_TIME_LABEL);
        let old_label = old.and_then(|old| label(old, at, MAX_EXEC_TIME_LABEL));
        let facts = RunTimeFacts {
            update,
            current: current.as_deref(),
            old: old_label.as_deref(),
            stays_suspended: self.adapter.is_suspended(self.before)
                && old.is_some_and(|old| self.adapter.is_suspended(old)),
            limits,
            tier: &context.tier.name,
        };
        match run_time_outcome(facts) {
            RunTimeOutcome::Keep { reason } => self.reasons.push(reason),
            RunTimeOutcome::Set { seconds, warning, reason } => {
                self.edit(at, |metadata| podspec::set_string(metadata, "labels", MAX_EXEC_TIME_LABEL, &seconds))?;
                self.warnings.extend(warning);
                self.reasons.push(reason);
            }
            RunTimeOutcome::Remove { warning } => {
                self.set(&child_pointer(&format!("{at}/labels"), MAX_EXEC_TIME_LABEL), None);
                self.reasons.push(
                    "UPDATE: run-time limit removed again (the update added it while the workload runs)".to_owned(),
                );
                self.warnings.push(warning);
            }
        }
        let Some(seconds) = label(&self.after, at, MAX_EXEC_TIME_LABEL) else { return Ok(()) };
        let mut labelled = false;
        for metadata in templates {
            let template = metadata.strip_suffix("/metadata").unwrap_or(metadata);
            let present = self.after.lookup(template).is_some_and(Value::is_object);
            if present && label(&self.after, metadata, MAX_EXEC_TIME_LABEL).as_deref() != Some(seconds.as_str()) {
                self.edit(metadata, |metadata| podspec::set_string(metadata, "labels", MAX_EXEC_TIME_LABEL, &seconds))?;
                labelled = true;
            }
        }
        if labelled {
            self.reasons
                .push(format!("every pod template labelled {MAX_EXEC_TIME_LABEL}={seconds} (Kueue reads the pods')"));
        }
        Ok(())
    }

    fn restore_priority(&mut self) {
        let old = self.old;
        let labels_at = self.adapter.queue_labels_at;
        let old_priority = old.as_ref().and_then(|old| label(old, labels_at, PRIORITY_CLASS_LABEL));
        let new_priority = label(self.before, labels_at, PRIORITY_CLASS_LABEL);
        if old_priority == new_priority {
            return;
        }
        let pointer = child_pointer(&format!("{labels_at}/labels"), PRIORITY_CLASS_LABEL);
        let restored = old_priority.clone().map(Value::String);
        let labels = format!("{labels_at}/labels");
        if old_priority.is_some() && self.after.lookup(&labels).is_none_or(Value::is_null) {
            self.set(&labels, Some(Value::Object(serde_json::Map::new())));
        }
        self.set(&pointer, restored);
        let (was, now) = (old_priority.as_deref().unwrap_or("(none)"), new_priority.as_deref().unwrap_or("(none)"));
        self.warnings.push(format!(
            "{PRIORITY_CLASS_LABEL} is decided at creation: this update's change from {was} to {now} was undone"
        ));
        self.reasons.push(format!("UPDATE: priority class restored to {was}"));
    }

    fn restore_immutable(&mut self, request: &Request) {
        if request.operation != Operation::Update || self.adapter.immutable_on_update.is_empty() {
            return;
        }
        // The queue label is decided by `apply_queue` on UPDATE too (restored when dropped, Kueue's rule).
        let queue_pointer = child_pointer("/metadata/labels", QUEUE_NAME_LABEL);
        let pointers: Vec<&'static str> =
            self.adapter.immutable_on_update.iter().copied().filter(|pointer| *pointer != queue_pointer).collect();
        // A suspended, never-started workload may still change its templates' scheduling directives (Kubernetes'
        // mutable scheduling directives of a suspended Job, which JobSet follows), also while being unsuspended:
        // the tier's selector and tolerations an update removed are put back; the rest stays as the update wrote it.
        let directives: Vec<(String, Option<Value>)> = if self.scheduling_mutable() {
            self.templates
                .iter()
                .flat_map(|template| ["nodeSelector", "tolerations"].map(|field| format!("{}/{field}", template.spec)))
                .map(|pointer| {
                    let value = self.after.lookup(&pointer).cloned();
                    (pointer, value)
                })
                .collect()
        } else {
            Vec::new()
        };
        // Only what tiergate edited can differ from the object as sent (compared there, not elsewhere), and only
        // what differs is written back: an equal value is no edit, and needs no copy of its subtree.
        let mut differing: Vec<&str> = Vec::new();
        let before = self.before;
        for pointer in pointers.iter().copied() {
            let sent = before.lookup(pointer);
            if !self.edited(pointer) || sent == self.after.lookup(pointer) {
                continue;
            }
            differing.push(pointer);
            match sent {
                // Read as sent from now on, not copied back (`final_at`).
                Some(_) if directives.is_empty() && self.may_leave_as_sent(pointer) => self.as_sent.push(pointer),
                // Copied back: the copy equals the object as sent there.
                Some(sent) if set_pointer(&mut self.after, pointer, Some(sent.clone())) => {}
                sent => {
                    self.set(pointer, sent.cloned());
                    continue;
                }
            }
            // Nothing at or inside the pointer is an edit any more: the patch does not compare that subtree again.
            self.written.retain(|written| !contains(pointer, written));
        }
        let changed = !differing.is_empty();
        let mut directive_written = false;
        for (pointer, value) in directives {
            if self.after.lookup(&pointer) != value.as_ref() {
                self.set(&pointer, value);
                directive_written = true;
            }
        }
        // Restoring a label may leave a map tiergate created empty; do not add an empty map to the object.
        for map in ["/metadata/labels", "/metadata/annotations"] {
            let created_empty = self.before.lookup(map).is_none()
                && self.after.lookup(map).and_then(Value::as_object).is_some_and(serde_json::Map::is_empty);
            if created_empty {
                self.set(map, None);
            }
        }
        // A template under a pointer just restored equals the one sent, unless a directive was put back since.
        let restored = |spec: &str| !directive_written && differing.iter().any(|pointer| contains(pointer, spec));
        self.templates_restored = changed
            && self.templates.iter().all(|template| {
                restored(&template.spec) || self.before.lookup(&template.spec) == self.after.lookup(&template.spec)
            });
        if changed {
            self.reasons.push(format!("UPDATE: left {} as they were (immutable after creation)", pointers.join(", ")));
        }
    }

    /// Whether an UPDATE may put `pointer` (which holds a value as sent) back by reading `before` there from now on
    /// instead of copying it into `after`: nothing still to be patched is above it, and what is read after the
    /// restore (each template's spec, the queue labels' metadata, the suspend field) is at, inside or beside it,
    /// never a parent of it.
    fn may_leave_as_sent(&self, pointer: &str) -> bool {
        let above = |outer: &str| outer != pointer && contains(outer, pointer);
        let mut read_later = self
            .templates
            .iter()
            .map(|template| template.spec.as_str())
            .chain([self.adapter.queue_labels_at])
            .chain(self.adapter.suspend_pointer());
        !self.written.iter().any(|written| above(written)) && !read_later.any(above)
    }

    /// The value at `pointer` in the final object: `before` below a pointer left as sent, else `after`.
    fn final_at(&self, pointer: &str) -> Option<&Value> {
        match self.as_sent.iter().any(|sent| contains(sent, pointer)) {
            true => self.before.lookup(pointer),
            false => self.after.lookup(pointer),
        }
    }

    /// Label `key` of the final object, on the metadata that carries the kind's queue labels.
    fn final_label(&self, key: &str) -> Option<&str> {
        self.final_at(self.adapter.queue_labels_at).and_then(|metadata| podspec::string_entry(metadata, "labels", key))
    }

    /// Whether the decision wrote at, inside or above `pointer` (anything else in the copy is still the object as
    /// sent).
    fn edited(&self, pointer: &str) -> bool {
        self.written.iter().any(|written| contains(written, pointer) || contains(pointer, written))
    }

    /// Whether this UPDATE may change the templates' scheduling directives: the old object was suspended and never
    /// started (`status.startTime` unset). Kubernetes allows it then, also in the update that unsuspends (that is
    /// how Kueue injects a flavor's node labels at admission).
    fn scheduling_mutable(&self) -> bool {
        let old = self.old;
        self.adapter.templates != TemplateLayout::Pod
            && old.as_ref().is_some_and(|old| {
                self.adapter.is_suspended(old) && old.lookup("/status/startTime").is_none_or(Value::is_null)
            })
    }

    /// Reasons checked against the final object: template reasons are dropped when the templates ended as they
    /// came, and queue and suspension are read from the final object, so `explain` never claims a change the
    /// patch does not make.
    fn settle_reasons(&mut self, context: &TierContext<'_>) {
        if self.templates_restored {
            // The GPU-class and scoring changes to the templates were undone: they must not be reported.
            let dropped = self.template_reasons.clone();
            self.reasons.drain(dropped);
        }
        if !self.adapter.is_queued() {
            return;
        }
        if let Some(owner) = self.left_to_owner() {
            let why = format!(
                "left to its owner {owner}: Kueue admits the owner as one workload, so this object gets no queue \
                 name and no suspension from tiergate"
            );
            self.reasons.push(why);
            return;
        }
        match self.final_label(QUEUE_NAME_LABEL).map(str::to_owned) {
            Some(queue) => {
                let note = self.queue_note.take().map(|note| format!(": {note}")).unwrap_or_default();
                self.reasons.push(format!("queued in LocalQueue {queue} of tier {}{note}", context.tier.name));
            }
            None => self.reasons.push(format!("not queued: the final object has no {QUEUE_NAME_LABEL}")),
        }
        if let Queueing::SuspendedWithQueueLabel { suspend } = self.adapter.queueing
            && self.final_at(suspend).and_then(Value::as_bool).unwrap_or(false)
            && !self.adapter.is_suspended(self.before)
        {
            let field = suspend.trim_start_matches('/').replace('/', ".");
            self.reasons.push(format!("suspended so Kueue admits it ({field}: true)"));
        }
    }

    /// `tiergate.io/tier` and a summary read back from the final object, so it is the same on every run.
    fn annotate_decision(&mut self, context: &TierContext<'_>) -> Result<(), MutateError> {
        let mut classes: Vec<String> = Vec::new();
        for template in &self.templates {
            let selector = self.final_at(&template.spec).map(|spec| podspec::string_map(spec, "nodeSelector"));
            if let Selection::Class(class) = selection(context.policy, &selector.unwrap_or_default())
                && !classes.contains(&class.name)
            {
                classes.push(class.name.clone());
            }
        }
        let mut summary = match classes.is_empty() {
            true => format!("gpu-class: unset (tier allows {})", context.class_names()),
            false => format!("gpu-class: {}", classes.join(",")),
        };
        if let Some(queue) = self.final_label(QUEUE_NAME_LABEL) {
            summary.push_str(&format!("; queue: {queue}"));
        }
        if let Some(priority) = self.final_label(PRIORITY_CLASS_LABEL) {
            summary.push_str(&format!("; priority: {priority}"));
        }
        let run_time = self.run_time_labels().first().and_then(|at| {
            let metadata = self.final_at(at)?;
            podspec::string_entry(metadata, "labels", MAX_EXEC_TIME_LABEL).map(str::to_owned)
        });
        if let Some(seconds) = run_time.filter(|_| context.tier.max_run_time.is_some()) {
            summary.push_str(&format!("; max-exec-time: {seconds}s"));
        }
        let annotations = BTreeMap::from([
            (TIER_ANNOTATION.to_owned(), context.tier.name.clone()),
            (DECISION_ANNOTATION.to_owned(), summary),
        ]);
        self.edit("/metadata", |metadata| podspec::merge_string_map(metadata, "annotations", annotations))
    }

    /// Ends a request whose tier part was skipped: placement changes (if any) still go out.
    fn finish(
        mut self,
        request: &Request,
        placed: bool,
        reason: &'static str,
        why: String,
    ) -> Result<Decision, MutateError> {
        self.reasons.push(why);
        if !placed {
            return Ok(Decision::unchanged(self.adapter.kind, Verdict::Skip { reason }, self.reasons));
        }
        self.restore_immutable(request);
        self.decision(Verdict::Allow)
    }

    fn decision(self, verdict: Verdict) -> Result<Decision, MutateError> {
        let patch = patch_at(self.before, &self.after, &self.written)?;
        Ok(Decision {
            kind: self.adapter.kind,
            verdict,
            patch,
            object: Some(self.after),
            object_as_sent_at: self.as_sent,
            patch_as_sent: None,
            warnings: self.warnings,
            reasons: self.reasons,
        })
    }
}

/// Whether the value at JSON pointer `outer` holds the one at `inner` (the same pointer, or a prefix cut at a `/`).
fn contains(outer: &str, inner: &str) -> bool {
    inner.strip_prefix(outer).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The value of label `key` in the metadata at pointer `metadata` of `object`, if any.
fn label(object: &Value, metadata: &str, key: &str) -> Option<String> {
    label_at(object, metadata, key).map(str::to_owned)
}

/// `label`, borrowed from `object`.
fn label_at<'v>(object: &'v Value, metadata: &str, key: &str) -> Option<&'v str> {
    object.lookup(metadata).and_then(|metadata| podspec::string_entry(metadata, "labels", key))
}

/// A denial whose cause tiergate itself wrote from the object's placement or pinning annotation.
fn with_placement_hint(mut decision: Decision) -> Decision {
    const HINT: &str = " This was written by tiergate from the object's placement or pinning annotation \
        (smart-scheduler.io/schedule-strategy, CustomPodScheduleStrategy, tiergate.io/placement or \
        gpu-scheduling-map): name a strategy or node of the tier's classes instead.";
    if let Verdict::Deny { message, .. } = &mut decision.verdict {
        message.push_str(HINT);
        decision.reasons = vec![message.clone()];
    }
    decision
}

fn object_name(object: &Value) -> String {
    let metadata = object.get("metadata");
    let field = |name: &str| metadata.and_then(|metadata| metadata.get(name)).and_then(Value::as_str);
    match (field("name"), field("generateName")) {
        (Some(name), _) if !name.is_empty() => name.to_owned(),
        (_, Some(prefix)) => format!("{prefix}*"),
        _ => "(unnamed)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::contains;

    #[test]
    fn a_pointer_contains_itself_and_what_is_below_it_cut_at_a_slash() {
        assert!(contains("/spec/template", "/spec/template"));
        assert!(contains("/spec/template", "/spec/template/spec/nodeSelector"));
        assert!(!contains("/spec/template", "/spec/templates"));
        assert!(!contains("/spec/template/spec", "/spec/template"));
        assert!(contains("", "/spec"));
    }
}
