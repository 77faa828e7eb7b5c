//! The webhook does not answer (`failurePolicy: Ignore`, the pod down, saturated or cut off): the in-server gate's
//! ValidatingAdmissionPolicies, evaluated offline as kube-apiserver runs them, still refuse every GPU attack of
//! issue 27 with a message naming the tier, the rule and the fix; CPU-only workloads are never matched.
//!
//! Every attacker is a tenant of tier bronze (namespace `ml-team-dev`, GPU class l4, queue `tiergate-bronze`,
//! priority ceiling gpu-high in the sample policy).
#![cfg(test)]

use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

use crate::gate_support::GateOutcome;
use crate::tenant::{denial, gate_in, tenant_review, tenant_review_body};

const BRONZE: &str = "ml-team-dev";
const CLASS: &str = "gpu.nvidia.com/class";

/// The request as the API server would send it for user `user` (a tenant by default).
fn request_of(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let body: Value = serde_json::from_str(&tenant_review_body(operation, object, old, false, &[])).unwrap();
    body["request"].clone()
}

/// What the gate does with `request` (the webhook down: the object as sent).
fn gate(request: Value) -> GateOutcome {
    gate_in(load_policy(None).unwrap(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), request)
}

fn gpu_spec(extra: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    spec
}

fn job(labels: Value, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE, "labels": labels},
        "spec": {"template": {"spec": spec}}})
}

fn h100_selector() -> Value {
    json!({"nodeSelector": {CLASS: "h100"}})
}

#[test]
fn bronze_gpu_job_selecting_h100_is_denied_with_the_tier_and_the_fix() {
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(h100_selector())), None)));
    assert!(
        message.contains(
            "with binding 'tiergate-gate-bronze' denied request: GPU pods must select a GPU class of this tier"
        ),
        "{message}"
    );
    assert!(message.contains("is it running?"), "{message}");
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn bronze_gpu_job_without_any_selector_is_denied() {
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(json!({}))), None)));
    assert!(message.contains("must select a GPU class of this tier"), "{message}");
}

#[test]
fn bronze_gpu_job_with_h100_required_node_affinity_is_denied() {
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": CLASS, "operator": "In", "values": ["h100"]}]}]}}}});
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(affinity)), None)));
    assert!(message.contains("no other GPU class"), "{message}");
}

#[test]
fn bronze_gpu_job_naming_the_top_priority_is_denied_even_when_queued_and_confined() {
    let labels = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/priority-class": "gpu-ultra"});
    let mut object = job(labels, gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
    object["spec"]["suspend"] = json!(true);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert_eq!(
        message,
        "ValidatingAdmissionPolicy 'tiergate-gate-default' with binding 'tiergate-gate-bronze' denied request: the \
         kueue.x-k8s.io/priority-class label of a GPU workload (and of a CronJob's job template) may name only a \
         priority this tier may use (TierGateParameters spec.tier.allowedPriorities); remove it or name one of \
         those; the tiergate webhook normally adds this — is it running?"
    );
}

#[test]
fn bronze_gpu_pod_selecting_h100_is_denied() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(h100_selector())});
    let message = denial(&gate(request_of("CREATE", &pod, None)));
    assert!(message.contains("GPU pods must select a GPU class of this tier"), "{message}");
}

#[test]
fn bronze_gpu_deployment_selecting_h100_is_denied() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": BRONZE},
        "spec": {"selector": {}, "template": {"spec": gpu_spec(h100_selector())}}});
    let message = denial(&gate(request_of("CREATE", &deployment, None)));
    assert!(message.contains("GPU pods must select a GPU class of this tier"), "{message}");
}

#[test]
fn cpu_only_pods_and_jobs_are_never_matched() {
    let cpu = json!({"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE}, "spec": cpu});
    for object in [pod, job(json!({}), cpu.clone())] {
        let outcome = gate(request_of("CREATE", &object, None));
        assert!(
            matches!(&outcome, GateOutcome::NotMatched { condition } if condition == crate::gate_support::NO_GPU),
            "{outcome:?}"
        );
    }
}

#[test]
fn a_bronze_gpu_job_as_the_webhook_leaves_it_passes() {
    let object = job(json!({}), gpu_spec(json!({})));
    let snapshot = build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    );
    let decision = mutate(&tenant_review("CREATE", &object, None, false, &[]), &snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    let mut mutated = object.clone();
    json_patch::patch(&mut mutated, &decision.patch).unwrap();
    assert_eq!(gate(request_of("CREATE", &mutated, None)), GateOutcome::Admitted);
}

#[test]
fn a_job_forging_a_jobset_owner_still_needs_the_queue() {
    let mut object = job(json!({}), gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
    object["metadata"]["ownerReferences"] = json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "name": "js", "uid": "forged", "controller": true}]);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn another_tiers_queue_or_an_unsuspended_create_is_denied() {
    let selector = json!({"nodeSelector": {CLASS: "l4"}});
    let gold = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-gold"}), gpu_spec(selector.clone()));
    assert!(denial(&gate(request_of("CREATE", &gold, None))).contains("no other tier's"));
    let running = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"}), gpu_spec(selector));
    assert!(denial(&gate(request_of("CREATE", &running, None))).contains("suspend: true"));
}

#[test]
fn an_update_dropping_the_queue_label_is_denied() {
    let selector = json!({"nodeSelector": {CLASS: "l4"}});
    let mut old = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"}), gpu_spec(selector.clone()));
    old["spec"]["suspend"] = json!(true);
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({});
    new["spec"]["suspend"] = json!(false);
    let message = denial(&gate(request_of("UPDATE", &new, Some(&old))));
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn the_tenants_own_service_account_is_not_exempt_as_a_controller() {
    let mut request = request_of("CREATE", &job(json!({}), gpu_spec(h100_selector())), None);
    request["userInfo"]["username"] = json!(format!("system:serviceaccount:{BRONZE}:builder"));
    assert!(gate(request).is_denied());
}

#[test]
fn a_controller_creating_pods_from_a_gated_template_passes() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(json!({"nodeSelector": {CLASS: "l4"}}))});
    let mut request = request_of("CREATE", &pod, None);
    request["userInfo"]["username"] = json!("system:serviceaccount:kube-system:job-controller");
    assert_eq!(gate(request), GateOutcome::Admitted);
}

#[test]
fn a_pod_written_by_any_controller_is_still_held_to_the_tier() {
    // Issue 40: a tenant's ReplicaSet, ReplicationController or DaemonSet (kinds the gate does not list) makes
    // their controllers write the tenant's pod template; the pod is gated whoever writes it.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(h100_selector())});
    for writer in [
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:replication-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:job-controller",
        "system:kube-controller-manager",
        "system:serviceaccount:kueue-system:kueue-controller-manager",
    ] {
        let mut request = request_of("CREATE", &pod, None);
        request["userInfo"]["username"] = json!(writer);
        let message = denial(&gate(request));
        assert!(message.contains("GPU pods must select a GPU class of this tier"), "{writer}: {message}");
    }
}

#[test]
fn a_service_account_of_the_tenants_other_namespace_is_not_a_trusted_controller() {
    // Issue 40: a tenant owning two namespaces binds a service account of one in the other.
    for object in [job(json!({}), gpu_spec(h100_selector())), {
        let mut cron = cron_job(json!({}));
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["nodeSelector"] = json!({CLASS: "h100"});
        cron
    }] {
        let mut request = request_of("CREATE", &object, None);
        request["userInfo"]["username"] = json!("system:serviceaccount:ml-research:deployer");
        let message = denial(&gate(request));
        assert!(message.contains("no other GPU class"), "{message}");
    }
}

#[test]
fn a_trusted_controller_writing_a_jobs_child_kind_is_left_alone_but_not_its_pods() {
    let mut request = request_of("CREATE", &job(json!({}), gpu_spec(json!({}))), None);
    request["userInfo"]["username"] = json!("system:serviceaccount:kube-system:cronjob-controller");
    assert_eq!(gate(request), GateOutcome::NotMatched { condition: crate::gate_support::NOT_TRUSTED.to_owned() });
}

#[test]
fn a_queued_job_whose_pods_name_a_priority_class_needs_the_priority_label() {
    // Issue 40: Kueue takes a pod priorityClassName as the workload priority when no label names one.
    let labels = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"});
    let mut object = job(labels, gpu_spec(json!({"nodeSelector": {CLASS: "l4"}, "priorityClassName": "top"})));
    object["spec"]["suspend"] = json!(true);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(message.contains("name a priorityClassName, which Kueue would take as the workload priority"), "{message}");
    assert!(message.contains("set the kueue.x-k8s.io/priority-class label where Kueue reads it"), "{message}");
    object["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = json!("gpu-high");
    assert_eq!(gate(request_of("CREATE", &object, None)), GateOutcome::Admitted);
}

#[test]
fn kube_system_is_never_bound() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"},
        "spec": gpu_spec(h100_selector())});
    assert_eq!(gate(request_of("CREATE", &pod, None)), GateOutcome::NotBound);
}

/// A bronze GPU CronJob whose job template carries `template_labels`.
fn cron_job(template_labels: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": BRONZE},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {
            "metadata": {"labels": template_labels},
            "spec": {"template": {"spec": gpu_spec(json!({}))}}}}})
}

#[test]
fn a_cron_jobs_job_template_naming_the_top_priority_is_denied_then_clamped_by_the_webhook() {
    // The CronJob controller creates its Jobs, and the gate exempts controllers: the job template's label is the
    // Jobs' priority, so the gate judges it on the CronJob.
    let object = cron_job(json!({"kueue.x-k8s.io/priority-class": "gpu-ultra"}));
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(
        message.contains("priority-class label of a GPU workload (and of a CronJob's job template) may name only a"),
        "{message}"
    );
    // The webhook clamps it to bronze's ceiling, and the gate then passes what it stores.
    let snapshot = build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    );
    let decision = mutate(&tenant_review("CREATE", &object, None, false, &[]), &snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    let mut mutated = object.clone();
    json_patch::patch(&mut mutated, &decision.patch).unwrap();
    assert_eq!(mutated["spec"]["jobTemplate"]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
    assert_eq!(gate(request_of("CREATE", &mutated, None)), GateOutcome::Admitted);
}
