//! DRA claims in the tenant boundary: which DeviceClasses a tier's ResourceClaims, ResourceClaimTemplates and pod
//! `resourceClaims` may name, and the retarget of a driver's generic class to the tier's; no I/O.
//!
//! A claim may name its tier's DRA classes' DeviceClasses (`<class>.tiergate.io`) and the policy's shared ones. A
//! driver's generic class is retargeted to the tier's class of that driver (or refused, per
//! `admission.draGenericClasses`); another tier's class, `adminAccess` and `allocationMode: All` are refused, and
//! so is any class tiergate does not know unless `admission.draClaims: Confine`. A pod may not name a ResourceClaim
//! directly (Kueue charges only claims made from templates), and a template it references is judged again, so
//! one written before the namespace joined a tier cannot carry another tier's class in. The in-server gate
//! enforces the same rules from [`crate::plan::gate`]. docs/admission.md "DRA claims".

use kube_core::admission::Operation;
use serde_json::Value;

use super::classes::tier_classes;
use super::decision::{Decision, Verdict};
use super::error::MutateError;
use super::podspec;
use super::priority::is_admin;
use super::violation::Violation;
use crate::policy::{
    DraClaimAction, DraGenericClassAction, FailureMode, GpuClass, TierPolicySpec, allowed_device_classes,
};
use crate::request::Request;
use crate::view::{ClaimTemplateView, DeviceRequestView, Snapshot};

/// Annotation recording a retarget of a driver's generic DeviceClass to the tier's.
pub const RETARGET_ANNOTATION: &str = "tiergate.io/device-class-retargeted";
/// The API group of DRA claims.
pub const RESOURCE_GROUP: &str = "resource.k8s.io";

/// Every device request of the ResourceClaimSpec `claim_spec` (`exactly`, and each `firstAvailable` alternative).
pub fn device_requests(claim_spec: &Value) -> Vec<DeviceRequestView> {
    let mut found = Vec::new();
    let requests = claim_spec.pointer("/devices/requests").and_then(Value::as_array).map(Vec::as_slice);
    for (index, request) in requests.unwrap_or_default().iter().enumerate() {
        if let Some(exactly) = request.get("exactly") {
            found.push(request_view(exactly, format!("/devices/requests/{index}/exactly"), false));
        }
        let alternatives = request.get("firstAvailable").and_then(Value::as_array).map(Vec::as_slice);
        for (position, alternative) in alternatives.unwrap_or_default().iter().enumerate() {
            found.push(request_view(alternative, format!("/devices/requests/{index}/firstAvailable/{position}"), true));
        }
    }
    found
}

/// A ResourceClaimTemplate object reduced to its device requests (`spec.spec`).
pub fn claim_template_view(template: &Value) -> ClaimTemplateView {
    let text = |pointer: &str| template.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    ClaimTemplateView {
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        requests: template.pointer("/spec/spec").map(device_requests).unwrap_or_default(),
    }
}

fn request_view(request: &Value, base: String, alternative: bool) -> DeviceRequestView {
    let all_devices = request.get("allocationMode").and_then(Value::as_str) == Some("All");
    DeviceRequestView {
        device_class: request.get("deviceClassName").and_then(Value::as_str).unwrap_or_default().to_owned(),
        admin_access: request.get("adminAccess").and_then(Value::as_bool).unwrap_or(false),
        all_devices,
        count: if all_devices { 0 } else { request.get("count").and_then(Value::as_i64).unwrap_or(1) },
        pointer: format!("{base}/deviceClassName"),
        alternative,
    }
}

/// `/devices/requests/0/exactly/deviceClassName` as a field path, `devices.requests[0].exactly.deviceClassName`.
pub fn field_path(pointer: &str) -> String {
    let mut path = String::new();
    for token in pointer.split('/').filter(|token| !token.is_empty()) {
        if token.bytes().all(|byte| byte.is_ascii_digit()) {
            path.push_str(&format!("[{token}]"));
        } else {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(token);
        }
    }
    path
}

/// What a DeviceClass name is to a tier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClassRole<'p> {
    /// The DeviceClass of one of the tier's classes.
    Tier(&'p GpuClass),
    /// One of `admission.sharedDeviceClasses`.
    Shared,
    /// A driver's generic class; the tier's class of that driver, if it has one.
    Generic(Option<&'p GpuClass>),
    /// The DeviceClass of a class outside the tier.
    OtherTier(&'p GpuClass),
    /// A DeviceClass tiergate does not know.
    Unknown,
}

/// What `device_class` is to a tier whose classes are `tier_classes` (primary first).
pub fn class_role<'p>(policy: &'p TierPolicySpec, tier_classes: &[&'p GpuClass], device_class: &str) -> ClassRole<'p> {
    let owns = |class: &GpuClass| class.device_class_name().as_deref() == Some(device_class);
    if let Some(class) = tier_classes.iter().find(|class| owns(class)) {
        return ClassRole::Tier(class);
    }
    if let Some(class) = policy.gpu_classes.iter().find(|class| owns(class)) {
        return ClassRole::OtherTier(class);
    }
    if policy.admission.shared_device_classes.iter().any(|shared| shared == device_class) {
        return ClassRole::Shared;
    }
    if policy.gpu_classes.iter().any(|class| class.generic_device_classes().contains(&device_class)) {
        let target = tier_classes.iter().find(|class| class.generic_device_classes().contains(&device_class));
        return ClassRole::Generic(target.copied());
    }
    ClassRole::Unknown
}

/// A request whose DeviceClass is rewritten to the tier's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retarget {
    /// JSON pointer of the `deviceClassName` below the claim spec.
    pub pointer: String,
    /// The generic class the claim named.
    pub from: String,
    /// The tier's DeviceClass it names instead.
    pub to: String,
}

/// The judgment of one claim spec's device requests against a tier.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClaimJudgment<'p> {
    /// Every refusal, each naming its field (prefixed by the caller's `field_prefix`) and the fix.
    pub(crate) violations: Vec<Violation>,
    /// Generic classes to rewrite (only under `draGenericClasses: Retarget`).
    pub(crate) retargets: Vec<Retarget>,
    /// The tier's classes the claim reaches (after retargets), in request order, each once.
    pub(crate) classes: Vec<&'p GpuClass>,
}

/// Judges `requests` (of a claim spec at `field_prefix`, e.g. `spec.spec.`) for a tier named `tier` whose classes
/// are `tier_classes`.
pub(crate) fn judge_requests<'p>(
    policy: &'p TierPolicySpec,
    tier: &str,
    tier_classes: &[&'p GpuClass],
    requests: &[DeviceRequestView],
    field_prefix: &str,
) -> ClaimJudgment<'p> {
    let mut judgment = ClaimJudgment::default();
    let allowed = allowed_device_classes(policy, tier_classes);
    let name_one = || match allowed.as_slice() {
        [] => format!("claim no GPU through DRA (tier {tier} has no DRA class); request the tier's GPU resource"),
        [only] => format!("name DeviceClass {only}"),
        many => format!("name one of the DeviceClasses [{}]", many.join(", ")),
    };
    let mut refuse = |reason: &'static str, problem: String, fix: String| {
        judgment.violations.push(Violation { reason, problem, fix });
    };
    for request in requests {
        let field = format!("{field_prefix}{}", field_path(&request.pointer));
        let base = field.trim_end_matches(".deviceClassName");
        if request.admin_access {
            refuse(
                "dra_admin_access",
                format!("{base}.adminAccess asks admin access to every device of the class, allocated or not"),
                "remove adminAccess (only the platform team's namespaces may use it)".to_owned(),
            );
        }
        if request.all_devices {
            refuse(
                "dra_allocation_all",
                format!("{base}.allocationMode: All claims every matching device, which Kueue cannot charge"),
                "use allocationMode: ExactCount with a count".to_owned(),
            );
        }
        match class_role(policy, tier_classes, &request.device_class) {
            ClassRole::Tier(class) => push_class(&mut judgment.classes, class),
            ClassRole::Shared => {}
            ClassRole::Generic(Some(class))
                if policy.admission.dra_generic_classes == DraGenericClassAction::Retarget =>
            {
                let to = class.device_class_name().unwrap_or_default();
                judgment.retargets.push(Retarget {
                    pointer: request.pointer.clone(),
                    from: request.device_class.clone(),
                    to,
                });
                push_class(&mut judgment.classes, class);
            }
            ClassRole::Generic(_) => refuse(
                "generic_device_class",
                format!(
                    "{field} names {}, the driver's DeviceClass for every one of its devices, outside tier {tier}'s \
                     classes",
                    request.device_class
                ),
                name_one(),
            ),
            ClassRole::OtherTier(class) => refuse(
                "foreign_device_class",
                format!(
                    "{field} names {}, the DeviceClass of GPU class {}, outside tier {tier}",
                    request.device_class, class.name
                ),
                name_one(),
            ),
            ClassRole::Unknown if policy.admission.dra_claims == DraClaimAction::Confine => {}
            ClassRole::Unknown => refuse(
                "unknown_device_class",
                format!(
                    "{field} names {}, a DeviceClass tiergate does not know (no GPU class of the policy, not in \
                     spec.admission.sharedDeviceClasses)",
                    display_class(&request.device_class)
                ),
                format!(
                    "{}, or ask the platform team to list a non-GPU DeviceClass under \
                     spec.admission.sharedDeviceClasses",
                    name_one()
                ),
            ),
        }
    }
    judgment
}

fn push_class<'p>(classes: &mut Vec<&'p GpuClass>, class: &'p GpuClass) {
    if !classes.iter().any(|seen| seen.name == class.name) {
        classes.push(class);
    }
}

fn display_class(name: &str) -> &str {
    if name.is_empty() { "no DeviceClass" } else { name }
}

/// The judgment of a pod spec's `resourceClaims` in `namespace`: a direct `resourceClaimName` is refused (unless
/// `draClaims: Confine`), and each template found in the snapshot is judged like a claim (its retargets happen
/// when the claim is made from it, so they only choose the class here).
pub(crate) fn judge_pod_claims<'p>(
    policy: &'p TierPolicySpec,
    snapshot: &Snapshot,
    namespace: &str,
    tier: &str,
    tier_classes: &[&'p GpuClass],
    spec: &Value,
) -> ClaimJudgment<'p> {
    let mut judgment = ClaimJudgment::default();
    let claims = spec.get("resourceClaims").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (index, claim) in claims.iter().enumerate() {
        if let Some(name) = claim.get("resourceClaimName").and_then(Value::as_str) {
            if policy.admission.dra_claims == DraClaimAction::Deny {
                judgment.violations.push(Violation {
                    reason: "dra_direct_claim",
                    problem: format!(
                        "spec.resourceClaims[{index}].resourceClaimName names the ResourceClaim {name} directly; \
                         Kueue charges only claims made from a ResourceClaimTemplate, so its devices would run \
                         outside tier {tier}'s quota"
                    ),
                    fix: "use resourceClaimTemplateName with a ResourceClaimTemplate in this namespace".to_owned(),
                });
            }
            continue;
        }
        let Some(template) = claim.get("resourceClaimTemplateName").and_then(Value::as_str) else { continue };
        let Some(view) = snapshot.claim_template(namespace, template) else { continue };
        let prefix = format!("ResourceClaimTemplate {template} spec.spec.");
        let found = judge_requests(policy, tier, tier_classes, &view.requests, &prefix);
        judgment.violations.extend(found.violations);
        for class in found.classes {
            push_class(&mut judgment.classes, class);
        }
    }
    judgment
}

/// One line per entry of a pod spec's `resourceClaims`, for the decision's reasons (`explain`, `why`): the devices
/// its template asks per DeviceClass, the GPU class each is, and what Kueue charges per pod.
pub fn describe_pod_claims(policy: &TierPolicySpec, snapshot: &Snapshot, namespace: &str, spec: &Value) -> Vec<String> {
    let claims = spec.get("resourceClaims").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut lines = Vec::new();
    for (index, claim) in claims.iter().enumerate() {
        let name = claim.get("name").and_then(Value::as_str).unwrap_or_default();
        let field = format!("resourceClaims[{index}] ({name})");
        if let Some(direct) = claim.get("resourceClaimName").and_then(Value::as_str) {
            lines.push(format!("{field}: the ResourceClaim {direct}, named directly (Kueue charges nothing for it)"));
            continue;
        }
        let Some(template) = claim.get("resourceClaimTemplateName").and_then(Value::as_str) else { continue };
        let Some(view) = snapshot.claim_template(namespace, template) else {
            lines.push(format!(
                "{field}: ResourceClaimTemplate {template}, not (yet) in tiergate's cache: its claim is judged when \
                 kube-controller-manager makes it"
            ));
            continue;
        };
        for request in &view.requests {
            let class = policy.gpu_classes.iter().find(|class| {
                class.device_class_name().as_deref() == Some(request.device_class.as_str())
                    || class.generic_device_classes().contains(&request.device_class.as_str())
            });
            let charged = match class {
                Some(class) if !request.alternative && !request.all_devices => {
                    format!("; Kueue charges {} {} per pod", class.primary_resource(), request.count)
                }
                _ => String::new(),
            };
            let what = match class {
                Some(class) => format!("GPU class {}", class.name),
                None => "no GPU class".to_owned(),
            };
            let count = if request.all_devices { "all".to_owned() } else { request.count.to_string() };
            lines.push(format!(
                "{field}: ResourceClaimTemplate {template} asks {count} × {} ({what}){charged}",
                display_class(&request.device_class)
            ));
        }
    }
    lines
}

/// A DRA claim kind of `group`/`kind` (`resource.k8s.io`): its name and where its claim spec is (`/spec` of a
/// ResourceClaim, `/spec/spec` of a ResourceClaimTemplate); `None` for any other kind.
fn claim_kind(group: &str, kind: &str) -> Option<(&'static str, &'static str)> {
    match (group, kind) {
        (RESOURCE_GROUP, "ResourceClaim") => Some(("ResourceClaim", "/spec")),
        (RESOURCE_GROUP, "ResourceClaimTemplate") => Some(("ResourceClaimTemplate", "/spec/spec")),
        _ => None,
    }
}

/// The decision on a ResourceClaim or ResourceClaimTemplate in a tiered namespace (`None` for any other kind):
/// refused with every violation, or allowed with the generic classes retargeted. Claims are judged whoever writes
/// them (kube-controller-manager makes a pod's claims from its templates); specs are immutable, so only CREATE is
/// judged.
pub(crate) fn decide_claim_object(request: &Request, snapshot: &Snapshot) -> Option<Decision> {
    let (kind, spec_pointer) = claim_kind(&request.kind.group, &request.kind.kind)?;
    Some(decide_claim(request, snapshot, kind, spec_pointer).unwrap_or_else(|error| {
        // As `mutate::decide_or_fail`: tiergate's own failure follows the policy's failure mode.
        let closed =
            snapshot.policy.as_ref().is_some_and(|policy| policy.spec.admission.failure_mode == FailureMode::Closed);
        let message = error.to_string();
        let verdict = Verdict::Failed { reason: error.reason(), message: message.clone(), closed };
        Decision::unchanged(kind, verdict, vec![message])
    }))
}

fn decide_claim(
    request: &Request,
    snapshot: &Snapshot,
    kind: &'static str,
    spec_pointer: &str,
) -> Result<Decision, MutateError> {
    let skip = |reason: &'static str, why: String| Ok(Decision::unchanged(kind, Verdict::Skip { reason }, vec![why]));
    if request.operation != Operation::Create {
        return skip("claim_spec_immutable", "a claim's spec cannot change after it is created".to_owned());
    }
    let Some(namespace) = request.namespace.as_deref() else {
        return skip("cluster_scoped", "the object has no namespace".to_owned());
    };
    let Some(policy) = snapshot.policy.as_ref().map(|policy| &policy.spec) else {
        return skip("no_policy", "no TierPolicy exists yet".to_owned());
    };
    if policy.is_excluded(namespace, snapshot.own_namespace.as_deref()) {
        return skip("namespace_excluded", format!("namespace {namespace} is excluded"));
    }
    let Some(tier) = snapshot.namespaces.get(namespace).and_then(|view| policy.tier_of(&view.labels)) else {
        return skip("no_tier", format!("namespace {namespace} has no tier"));
    };
    let Some(object) = request.object.as_ref() else {
        let message = format!("request.object is missing from a {kind} CREATE");
        return Ok(Decision::unchanged(kind, Verdict::Invalid { message: message.clone() }, vec![message]));
    };
    if is_admin(policy, request, namespace) {
        return skip("admin", format!("the namespace, user or group may claim any DeviceClass ({kind})"));
    }
    let classes = tier_classes(policy, tier)?;
    let requests = object.pointer(spec_pointer).map(device_requests).unwrap_or_default();
    let prefix = format!("{}.", field_path(spec_pointer));
    let judgment = judge_requests(policy, &tier.name, &classes, &requests, &prefix);
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("(generated name)");
    if !judgment.violations.is_empty() {
        let problems: Vec<String> = judgment
            .violations
            .iter()
            .map(|violation| format!("{}. Fix: {}", violation.problem, violation.fix))
            .collect();
        let message = format!(
            "{kind} {namespace}/{name} is in tier {} (namespace {namespace}), whose claims may name DeviceClasses \
             [{}]: {}",
            tier.name,
            allowed_device_classes(policy, &classes).join(", "),
            problems.join("; ")
        );
        let reason = judgment.violations[0].reason;
        return Ok(Decision::unchanged(kind, Verdict::Deny { reason, message: message.clone() }, vec![message]));
    }
    if judgment.retargets.is_empty() {
        let why = format!("every device request names a DeviceClass tier {} may use", tier.name);
        return Ok(Decision::unchanged(kind, Verdict::Allow, vec![why]));
    }
    let mut after = object.clone();
    let mut notes = Vec::new();
    for retarget in &judgment.retargets {
        let pointer = format!("{spec_pointer}{}", retarget.pointer);
        if let Some(slot) = after.pointer_mut(&pointer) {
            *slot = Value::String(retarget.to.clone());
        }
        notes.push(format!("{}: {} -> {}", field_path(&retarget.pointer), retarget.from, retarget.to));
    }
    let note = notes.join("; ");
    if let Some(metadata) = after.get_mut("metadata") {
        podspec::set_string(metadata, "annotations", RETARGET_ANNOTATION, &note)
            .map_err(|source| MutateError::EditField { pointer: "/metadata/annotations".to_owned(), source })?;
    }
    let warning = format!(
        "{kind} {namespace}/{name}: the driver's generic DeviceClass was replaced by tier {}'s ({note}); name it \
         yourself to silence this warning",
        tier.name
    );
    Ok(Decision {
        kind,
        verdict: Verdict::Allow,
        patch: json_patch::diff(object, &after),
        object: Some(after),
        object_as_sent_at: Vec::new(),
        patch_as_sent: None,
        warnings: vec![warning.clone()],
        reasons: vec![warning],
    })
}
