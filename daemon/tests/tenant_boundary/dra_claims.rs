//! DRA claims: a tenant reaching another tier's GPUs through a ResourceClaim, a ResourceClaimTemplate or a pod's
//! `resourceClaims`, by any field (deviceClassName, a firstAvailable alternative, the driver's generic class with
//! a selector, adminAccess, allocationMode All, a direct claim, a template written before the namespace had a tier),
//! with the webhook up (its decision) and down (the in-server gate evaluated offline as kube-apiserver runs it).
//!
//! The policy is `samples/dra`: tier bronze (namespace `team-dev`) has GPU class l4 (`l4.tiergate.io`), tier gold
//! (`research`) has h100 (`h100.tiergate.io`); both classes are found through NVIDIA's driver `gpu.nvidia.com`.
#![cfg(test)]

use std::sync::Arc;

use serde_json::{Value, json};
use tiergate::admission::claims::{RETARGET_ANNOTATION, claim_template_view};
use tiergate::admission::{AdmissionInputs, Decision, Request, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{parse_cluster_view, parse_policy};
use tiergate::policy::{DraClaimAction, DraGenericClassAction, TierPolicy};
use tiergate::view::Snapshot;

use crate::gate_support::GateOutcome;
use crate::tenant::{denial, denied, gate_in, tenant_review, tenant_review_body};

const BRONZE: &str = "team-dev";
const GOLD: &str = "research";
const L4: &str = "l4.tiergate.io";
const H100: &str = "h100.tiergate.io";
const GENERIC: &str = "gpu.nvidia.com";
const H100_SELECTOR: &str = r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")"#;
/// kube-controller-manager's resourceclaim controller, which makes a pod's claims from its templates.
const CLAIM_CONTROLLER: &str = "system:serviceaccount:kube-system:resource-claim-controller";

fn policy() -> TierPolicy {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/dra/policy.yaml")).unwrap();
    parse_policy(&text, "samples/dra/policy.yaml").unwrap()
}

fn cluster() -> tiergate::view::ClusterView {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/dra/cluster.yaml")).unwrap();
    parse_cluster_view(&text, "samples/dra/cluster.yaml").unwrap()
}

fn snapshot_of(policy: TierPolicy, templates: &[Value]) -> Snapshot {
    let mut snapshot = build_static_snapshot(policy, cluster(), Some("tiergate-system".into()));
    for template in templates {
        let view = claim_template_view(template);
        snapshot.claim_templates.insert((view.namespace.clone(), view.name.clone()), Arc::new(view));
    }
    snapshot
}

/// One `exactly` request of `count` devices of `class`, with extra fields.
fn exactly(class: &str, extra: Value) -> Value {
    let mut request = json!({"deviceClassName": class, "allocationMode": "ExactCount", "count": 1});
    for (key, value) in extra.as_object().unwrap() {
        request[key] = value.clone();
    }
    json!({"name": "gpu", "exactly": request})
}

fn claim_spec(requests: Vec<Value>) -> Value {
    json!({"devices": {"requests": requests}})
}

fn template(namespace: &str, name: &str, requests: Vec<Value>) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(requests)}})
}

fn claim(namespace: &str, requests: Vec<Value>) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu-claim", "namespace": namespace}, "spec": claim_spec(requests)})
}

fn job(namespace: &str, claims: Value, node_selector: Option<Value>) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "resourceClaims": claims,
        "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]});
    if let Some(selector) = node_selector {
        spec["nodeSelector"] = selector;
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": namespace},
        "spec": {"template": {"spec": spec}}})
}

fn webhook(policy: TierPolicy, templates: &[Value], request: &Request) -> Decision {
    mutate(request, &snapshot_of(policy, templates), &AdmissionInputs::default())
}

fn create(object: &Value) -> Request {
    tenant_review("CREATE", object, None, false, &[])
}

fn created_by(object: &Value, user: &str) -> Request {
    let mut request = create(object);
    request.user_info.username = Some(user.to_owned());
    request
}

/// The gate's outcome for `object` created by `user` (the webhook down: the object as sent).
fn gate_as(policy: TierPolicy, object: &Value, user: &str) -> GateOutcome {
    let body: Value = serde_json::from_str(&tenant_review_body("CREATE", object, None, false, &[])).unwrap();
    let mut request = body["request"].clone();
    request["userInfo"]["username"] = json!(user);
    gate_in(policy, cluster(), request)
}

fn gate(object: &Value) -> GateOutcome {
    gate_as(policy(), object, "mallory")
}

fn final_object(decision: &Decision, sent: &Value) -> Value {
    let mut object = sent.clone();
    json_patch::patch(&mut object, &decision.patch).unwrap();
    object
}

#[test]
fn bronze_template_on_its_own_class_passes_both_gates_unchanged() {
    let object = template(BRONZE, "l4", vec![exactly(L4, json!({}))]);
    let decision = webhook(policy(), &[], &create(&object));
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    assert!(decision.patch.0.is_empty());
    assert_eq!(gate(&object), GateOutcome::Admitted);
}

#[test]
fn bronze_template_naming_the_h100_class_is_refused_with_the_webhook_up_and_down() {
    let object = template(BRONZE, "h100", vec![exactly(H100, json!({}))]);
    let message = denied(&webhook(policy(), &[], &create(&object)), "foreign_device_class");
    assert!(
        message.contains("spec.spec.devices.requests[0].exactly.deviceClassName names h100.tiergate.io")
            && message.contains("outside tier bronze")
            && message.contains("Fix: name DeviceClass l4.tiergate.io"),
        "{message}"
    );
    let gate_message = denial(&gate(&object));
    assert!(gate_message.contains("may name only the tier's DeviceClasses"), "{gate_message}");
    assert!(!gate_message.contains("  ") && !message.contains("  "), "one space between words: {gate_message}");
}

#[test]
fn the_generic_class_with_an_h100_selector_is_retargeted_to_l4_or_refused() {
    let h100_selector = json!({"selectors": [{"cel": {"expression": H100_SELECTOR}}]});
    let object = template(BRONZE, "sneaky", vec![exactly(GENERIC, h100_selector)]);
    let decision = webhook(policy(), &[], &create(&object));
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let after = final_object(&decision, &object);
    assert_eq!(after["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"], L4);
    assert_eq!(
        after["metadata"]["annotations"][RETARGET_ANNOTATION],
        "devices.requests[0].exactly.deviceClassName: gpu.nvidia.com -> l4.tiergate.io"
    );
    assert!(decision.warnings[0].contains("replaced by tier bronze's"), "{:?}", decision.warnings);
    // The retargeted template passes the gate (the selector ANDs with l4's: it can only match no device).
    assert_eq!(gate(&after), GateOutcome::Admitted);
    // With the webhook down nothing retargets it: refused.
    denial(&gate(&object));
    // And when the policy says Deny, the webhook refuses it too.
    let mut strict = policy();
    strict.spec.admission.dra_generic_classes = DraGenericClassAction::Deny;
    let message = denied(&webhook(strict, &[], &create(&object)), "generic_device_class");
    assert!(message.contains("names gpu.nvidia.com, the driver's DeviceClass"), "{message}");
}

#[test]
fn a_first_available_list_with_one_foreign_alternative_is_refused() {
    let request = json!({"name": "gpu", "firstAvailable": [
        {"name": "cheap", "deviceClassName": L4, "allocationMode": "ExactCount", "count": 1},
        {"name": "big", "deviceClassName": H100, "allocationMode": "ExactCount", "count": 1}]});
    let object = template(BRONZE, "either", vec![request]);
    let message = denied(&webhook(policy(), &[], &create(&object)), "foreign_device_class");
    assert!(message.contains("devices.requests[0].firstAvailable[1].deviceClassName names h100"), "{message}");
    denial(&gate(&object));
}

#[test]
fn admin_access_and_allocation_mode_all_are_refused_even_on_the_tiers_class() {
    for (extra, reason, field) in [
        (json!({"adminAccess": true}), "dra_admin_access", "exactly.adminAccess"),
        (json!({"allocationMode": "All"}), "dra_allocation_all", "exactly.allocationMode: All"),
    ] {
        let object = claim(BRONZE, vec![exactly(L4, extra)]);
        let message = denied(&webhook(policy(), &[], &create(&object)), reason);
        assert!(message.contains(field), "{message}");
        denial(&gate(&object));
    }
}

#[test]
fn a_device_class_tiergate_does_not_know_is_refused_unless_the_policy_confines() {
    let object = template(BRONZE, "other", vec![exactly("example.com-fpga", json!({}))]);
    let message = denied(&webhook(policy(), &[], &create(&object)), "unknown_device_class");
    assert!(message.contains("sharedDeviceClasses"), "{message}");
    denial(&gate(&object));
    let mut confine = policy();
    confine.spec.admission.dra_claims = DraClaimAction::Confine;
    assert_eq!(webhook(confine.clone(), &[], &create(&object)).verdict, Verdict::Allow);
    assert_eq!(gate_as(confine.clone(), &object, "mallory"), GateOutcome::Admitted);
    // Confine never opens another tier's class.
    let foreign = template(BRONZE, "h100", vec![exactly(H100, json!({}))]);
    denied(&webhook(confine.clone(), &[], &create(&foreign)), "foreign_device_class");
    denial(&gate_as(confine, &foreign, "mallory"));
    // A shared DeviceClass is for every tier.
    let mut shared = policy();
    shared.spec.admission.shared_device_classes = vec!["example.com-fpga".to_owned()];
    assert_eq!(webhook(shared.clone(), &[], &create(&object)).verdict, Verdict::Allow);
    assert_eq!(gate_as(shared, &object, "mallory"), GateOutcome::Admitted);
}

#[test]
fn a_claim_made_by_the_controller_from_a_stale_template_is_refused_by_both_gates() {
    // The template was written before team-dev joined bronze; kube-controller-manager makes the pod's claim from it.
    let object = claim(BRONZE, vec![exactly(H100, json!({}))]);
    denied(&webhook(policy(), &[], &created_by(&object, CLAIM_CONTROLLER)), "foreign_device_class");
    denial(&gate_as(policy(), &object, CLAIM_CONTROLLER));
}

#[test]
fn a_pod_referencing_a_stale_template_is_refused_naming_the_template() {
    let stale = template(BRONZE, "old-h100", vec![exactly(H100, json!({}))]);
    let object = job(BRONZE, json!([{"name": "gpu", "resourceClaimTemplateName": "old-h100"}]), None);
    let message = denied(&webhook(policy(), &[stale], &create(&object)), "foreign_device_class");
    assert!(
        message.contains("ResourceClaimTemplate old-h100 spec.spec.devices.requests[0].exactly.deviceClassName"),
        "{message}"
    );
}

#[test]
fn a_direct_resource_claim_name_is_refused_kueue_would_not_charge_it() {
    let object = job(BRONZE, json!([{"name": "gpu", "resourceClaimName": "mine"}]), None);
    let message = denied(&webhook(policy(), &[], &create(&object)), "dra_direct_claim");
    assert!(message.contains("resourceClaimTemplateName"), "{message}");
    let confined = job(
        BRONZE,
        json!([{"name": "gpu", "resourceClaimName": "mine"}]),
        Some(json!({"nvidia.com/gpu.product": "NVIDIA-L4"})),
    );
    let gate_message = denial(&gate(&confined));
    assert!(gate_message.contains("name no ResourceClaim directly"), "{gate_message}");
}

#[test]
fn a_job_claiming_its_tiers_class_is_pinned_to_that_class_and_queued() {
    let l4_template = template(BRONZE, "l4", vec![exactly(L4, json!({}))]);
    let object = job(BRONZE, json!([{"name": "gpu", "resourceClaimTemplateName": "l4"}]), None);
    let decision = webhook(policy(), &[l4_template], &create(&object));
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let after = final_object(&decision, &object);
    assert_eq!(after["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-L4");
    assert_eq!(after["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
    assert_eq!(after["spec"]["suspend"], true);
    assert_eq!(gate(&after), GateOutcome::Admitted);
    // With the webhook down, the same Job as sent is not confined to the tier: refused.
    denial(&gate(&object));
}

#[test]
fn gold_may_not_claim_l4_and_bronze_may_not_claim_gold_by_a_claim_object() {
    let object = claim(GOLD, vec![exactly(L4, json!({}))]);
    denied(&webhook(policy(), &[], &create(&object)), "foreign_device_class");
    denial(&gate(&object));
    let ok = claim(GOLD, vec![exactly(H100, json!({}))]);
    assert_eq!(webhook(policy(), &[], &create(&ok)).verdict, Verdict::Allow);
    assert_eq!(gate(&ok), GateOutcome::Admitted);
}

#[test]
fn a_cpu_only_pod_is_untouched() {
    let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": BRONZE},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}});
    let decision = webhook(policy(), &[], &create(&object));
    assert!(matches!(decision.verdict, Verdict::Skip { .. }), "{:?}", decision.verdict);
    assert!(matches!(gate(&object), GateOutcome::NotMatched { .. }), "{:?}", gate(&object));
}
