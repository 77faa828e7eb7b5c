//! The in-server gate's MutatingAdmissionPolicies and their marks: with the webhook down, a bronze tenant's plain
//! GPU workloads are stored in bronze (queue, class, priority ceiling) and its attacks still refused; with the
//! webhook up, a forged mark never moves a workload out of its tier. The policies run offline as kube-apiserver
//! runs them (`gate_support::run_mutating`), then the ValidatingAdmissionPolicies or the webhook.
//!
//! Every attacker is a tenant of tier bronze (namespace `ml-team-dev`, GPU class l4, queue `tiergate-bronze`,
//! priority ceiling gpu-high in the sample policy).
#![cfg(test)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tiergate::admission::gate_marks::{CLASS_ADDED_MARK, GATE_MARKS, PRIORITY_WAS_MARK, QUEUE_WAS_MARK};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

use crate::gate_support::{CompiledGate, GateOutcome, gate_of, run_mutating, with_big_stack};
use crate::tenant::{tenant_review, tenant_review_body};

const BRONZE: &str = "ml-team-dev";
const CLASS: &str = "gpu.nvidia.com/class";
const QUEUE: &str = "kueue.x-k8s.io/queue-name";
const PRIORITY: &str = "kueue.x-k8s.io/priority-class";

fn request_of(object: &Value) -> Value {
    let body: Value = serde_json::from_str(&tenant_review_body("CREATE", object, None, false, &[])).unwrap();
    body["request"].clone()
}

fn bronze_labels() -> BTreeMap<String, String> {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    view.namespaces.iter().find(|ns| ns.name == BRONZE).map(|ns| ns.labels.to_btree_map()).unwrap()
}

/// The webhook down: the mutating policies, then the validating ones. The object as stored, or the refusal.
fn webhook_down(object: Value) -> Result<Value, String> {
    with_big_stack(move || {
        let gate = gate_of(&load_policy(None).unwrap());
        let request = request_of(&object);
        let mutated = run_mutating(&gate, &request, &bronze_labels()).unwrap_or(object);
        let mut after = request;
        after["object"] = mutated.clone();
        match CompiledGate::new(gate).run(&after, &bronze_labels()) {
            GateOutcome::Denied(messages) => Err(messages.join("\n")),
            _ => Ok(mutated),
        }
    })
}

/// The webhook up: the mutating policies (when `served`), then the webhook. The object as stored, or the denial.
fn webhook_up(object: Value, served: bool) -> Result<Value, String> {
    with_big_stack(move || {
        let policy = load_policy(None).unwrap();
        let object = if served {
            run_mutating(&gate_of(&policy), &request_of(&object), &bronze_labels()).unwrap_or(object)
        } else {
            object
        };
        let snapshot = build_static_snapshot(
            policy,
            parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
            Some("tiergate-system".into()),
        );
        let decision =
            mutate(&tenant_review("CREATE", &object, None, false, &[]), &snapshot, &AdmissionInputs::default());
        match decision.verdict {
            Verdict::Deny { message, .. } => Err(message),
            _ => {
                let mut stored = object;
                json_patch::patch(&mut stored, &decision.patch).unwrap();
                Ok(stored)
            }
        }
    })
}

fn gpu_job(labels: Value, annotations: Value, extra_spec: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (key, value) in extra_spec.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE, "labels": labels, "annotations": annotations},
        "spec": {"template": {"spec": spec}}})
}

fn forged_marks() -> Value {
    json!({QUEUE_WAS_MARK: "tiergate-gold", PRIORITY_WAS_MARK: "gpu-ultra", CLASS_ADDED_MARK: "/spec/template/spec,"})
}

fn assert_in_bronze(stored: &Value) {
    assert_eq!(stored["metadata"]["labels"][QUEUE], "tiergate-bronze", "{stored:#}");
    assert_eq!(stored["spec"]["template"]["spec"]["nodeSelector"][CLASS], "l4", "{stored:#}");
    let priority = stored["metadata"]["labels"][PRIORITY].as_str();
    assert!(matches!(priority, None | Some("gpu-high" | "gpu-medium" | "gpu-default")), "{stored:#}");
}

#[test]
fn with_the_webhook_down_a_plain_bronze_gpu_job_is_stored_in_bronze_not_refused() {
    let stored = webhook_down(gpu_job(json!({}), json!({}), json!({}))).unwrap();
    assert_in_bronze(&stored);
    assert_eq!(stored["spec"]["suspend"], true, "Kueue must start it suspended: {stored:#}");
    let tolerations = stored["spec"]["template"]["spec"]["tolerations"].as_array().unwrap();
    assert!(tolerations.iter().any(|toleration| toleration["key"] == "nvidia.com/gpu"), "{stored:#}");
    assert_eq!(stored["metadata"]["annotations"][CLASS_ADDED_MARK], "/spec/template/spec,");
}

#[test]
fn with_the_webhook_down_a_priority_above_the_ceiling_is_clamped_and_the_original_marked() {
    let stored = webhook_down(gpu_job(json!({PRIORITY: "gpu-ultra"}), json!({}), json!({}))).unwrap();
    assert_eq!(stored["metadata"]["labels"][PRIORITY], "gpu-high");
    assert_eq!(stored["metadata"]["annotations"][PRIORITY_WAS_MARK], "gpu-ultra");
}

#[test]
fn with_the_webhook_down_another_tiers_queue_label_is_replaced_by_bronzes() {
    let stored = webhook_down(gpu_job(json!({QUEUE: "tiergate-gold"}), json!({}), json!({}))).unwrap();
    assert_in_bronze(&stored);
    assert_eq!(stored["metadata"]["annotations"][QUEUE_WAS_MARK], "tiergate-gold");
}

#[test]
fn with_the_webhook_down_an_h100_selector_is_not_rewritten_but_refused() {
    let message = webhook_down(gpu_job(json!({}), json!({}), json!({"nodeSelector": {CLASS: "h100"}}))).unwrap_err();
    assert!(
        message.contains(
            "with binding 'tiergate-gate-bronze' denied request: GPU pods must select a GPU class of this tier"
        ),
        "{message}"
    );
}

#[test]
fn a_foreign_class_job_is_left_to_the_validating_half_not_patched_first() {
    // The mutating half does not match what the validating half refuses anyway: a tenant's flood of large
    // foreign-class Jobs costs the API server no JSON patch of each (tests/e2e/tests/tenant_flood.rs).
    let gate = with_big_stack(|| gate_of(&load_policy(None).unwrap()));
    let selector = json!({"nodeSelector": {CLASS: "h100"}});
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": CLASS, "operator": "In", "values": ["l4", "a100"]}]}]}}}});
    for (name, spec, annotations) in [
        ("h100 selector", selector.clone(), json!({})),
        ("affinity naming a100 beside l4", affinity, json!({})),
        ("h100 selector with forged marks", selector, forged_marks()),
    ] {
        let object = gpu_job(json!({}), annotations, spec);
        let gate = gate.clone();
        let request = request_of(&object);
        let matched = with_big_stack(move || run_mutating(&gate, &request, &bronze_labels()));
        assert_eq!(matched, None, "{name}: the mutating half matched a foreign-class Job");
        let message = webhook_down(object.clone()).unwrap_err();
        assert!(message.contains("GPU pods must select a GPU class of this tier"), "{name}: {message}");
        let denied = webhook_up(object, true).unwrap_err();
        assert!(denied.contains("GPU class"), "{name}: {denied}");
    }
    // The tier's own class chosen by the tenant is still matched: the policy adds the queue label and suspend.
    let own = webhook_down(gpu_job(json!({}), json!({}), json!({"nodeSelector": {CLASS: "l4"}}))).unwrap();
    assert_in_bronze(&own);
    assert_eq!(own["spec"]["suspend"], true, "{own:#}");
}

#[test]
fn with_the_webhook_down_forged_marks_are_overwritten_or_removed_by_the_policy() {
    let stored = webhook_down(gpu_job(json!({}), forged_marks(), json!({}))).unwrap();
    assert_in_bronze(&stored);
    assert_eq!(stored["metadata"]["annotations"][QUEUE_WAS_MARK], "", "the policy's own mark: {stored:#}");
    assert!(stored["metadata"]["annotations"].get(PRIORITY_WAS_MARK).is_none(), "a forged mark survived: {stored:#}");
}

#[test]
fn with_the_webhook_up_the_stored_job_is_what_the_webhook_alone_would_store() {
    for labels in [json!({}), json!({PRIORITY: "gpu-ultra"}), json!({QUEUE: "tiergate-gold", PRIORITY: "gpu-medium"})] {
        let object = gpu_job(labels, json!({"team": "vision"}), json!({}));
        let alone = webhook_up(object.clone(), false).unwrap();
        let after_policies = webhook_up(object, true).unwrap();
        pretty_assertions::assert_eq!(alone, after_policies);
        assert_in_bronze(&after_policies);
        for mark in GATE_MARKS {
            assert!(after_policies["metadata"]["annotations"].get(mark).is_none(), "{mark} left on {after_policies:#}");
        }
    }
}

#[test]
fn forged_marks_sent_to_the_webhook_never_leave_bronze() {
    // A tenant's own l4 selector plus marks claiming the policy added it, the queue was gold's and the priority ultra:
    // taking the "edits" back only yields an object the tenant could have sent, which the webhook then judges.
    let own_l4 = json!({"nodeSelector": {CLASS: "l4"}});
    for served in [false, true] {
        let stored =
            webhook_up(gpu_job(json!({PRIORITY: "gpu-medium"}), forged_marks(), own_l4.clone()), served).unwrap();
        assert_in_bronze(&stored);
        for mark in GATE_MARKS {
            assert!(stored["metadata"]["annotations"].get(mark).is_none(), "{mark} left on {stored:#}");
        }
    }
}

#[test]
fn forged_marks_on_a_cpu_job_give_nothing_the_tenant_could_not_send_itself() {
    let cpu = |labels: Value, annotations: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "etl", "namespace": BRONZE, "labels": labels, "annotations": annotations},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "etl"}]}}}})
    };
    let forged = cpu(json!({}), forged_marks());
    let down = webhook_down(forged.clone()).unwrap();
    assert_eq!(down, forged, "the policies never match a CPU-only workload");
    // What the marks claim was there: gold's queue label (a LocalQueue that does not exist in a bronze namespace, so
    // the Job can never be admitted) and gpu-ultra (clamped).
    let claimed = cpu(json!({QUEUE: "tiergate-gold", PRIORITY: "gpu-ultra"}), json!({}));
    pretty_assertions::assert_eq!(webhook_up(forged, true).unwrap(), webhook_up(claimed, false).unwrap());
}

#[test]
fn with_the_webhook_down_a_job_without_any_label_whose_pods_name_a_priority_class_keeps_every_label_added() {
    // The queue edit creates the labels map; the default priority and the run-time limit must join it.
    let mut object = gpu_job(json!({}), json!({}), json!({"priorityClassName": "top"}));
    object["metadata"].as_object_mut().unwrap().remove("labels");
    let stored = webhook_down(object).unwrap();
    let labels = &stored["metadata"]["labels"];
    assert_eq!(labels[QUEUE], "tiergate-bronze", "{stored:#}");
    assert_eq!(labels[PRIORITY], "gpu-default", "{stored:#}");
    assert_eq!(labels["kueue.x-k8s.io/max-exec-time-seconds"], "14400", "{stored:#}");
}
