//! Workload kinds and children: every kind Kueue manages gets its tier's queue; children of Kueue-managed parents are left to the parent; CronJob templates are checked.
#![cfg(test)]

use crate::tenant::tenant_review;
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::policy::{TierPolicy, UnknownKindAction};

const BRONZE: &str = "ml-team-dev";
const QUEUE: &str = "kueue.x-k8s.io/queue-name";

fn review(operation: &str, object: &Value, old: Option<&Value>) -> Request {
    tenant_review(operation, object, old, false, &["tenants"])
}

fn decide_with(request: &Request, policy: TierPolicy) -> Decision {
    let snapshot = build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None);
    mutate(request, &snapshot, &AdmissionInputs::default())
}

fn decide(request: &Request) -> Decision {
    decide_with(request, load_policy(None).unwrap())
}

fn patched(request: &Request, decision: &Decision) -> Value {
    let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
    json_patch::patch(&mut object, &decision.patch).unwrap();
    object
}

fn assert_refused(decision: &Decision, kind: &str) -> String {
    let Verdict::Deny { message, .. } = &decision.verdict else {
        panic!("{kind} was not refused: {:?} {:?}", decision.verdict, decision.reasons);
    };
    assert!(message.contains(kind), "{message}");
    message.clone()
}

fn pod_spec(class: Option<&str>) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "img",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if let Some(class) = class {
        spec["nodeSelector"] = json!({"gpu.nvidia.com/class": class});
    }
    spec
}

fn rayjob(worker_class: Option<&str>) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": BRONZE},
        "spec": {"entrypoint": "python train.py", "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "head", "image": "ray", "resources": {"requests": {"cpu": "2"}}}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "rayStartParams": {},
                "template": {"spec": pod_spec(worker_class)}}]}}})
}

fn cronjob(class: Option<&str>) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": BRONZE},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": {"spec": pod_spec(class)}}}}})
}

#[test]
fn bronze_rayjob_without_a_queue_gets_the_bronze_queue_and_is_suspended_so_it_cannot_run_outside_quota() {
    let request = review("CREATE", &rayjob(None), None);
    let decision = decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let object = patched(&request, &decision);
    assert_eq!(object["metadata"]["labels"][QUEUE], "tiergate-bronze");
    assert_eq!(object["spec"]["suspend"], true);
    let worker = &object["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"];
    assert_eq!(worker["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
}

#[test]
fn rayjob_with_an_h100_selector_in_its_worker_group_is_refused() {
    assert_refused(&decide(&review("CREATE", &rayjob(Some("h100")), None)), "RayJob");
}

#[test]
fn raycluster_updated_to_add_an_h100_worker_group_is_refused() {
    let spec = |class| rayjob(class)["spec"]["rayClusterSpec"].clone();
    let old = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": BRONZE},
        "spec": spec(None)});
    let mut new = old.clone();
    new["spec"] = spec(Some("h100"));
    assert_refused(&decide(&review("UPDATE", &new, Some(&old))), "RayCluster");
}

#[test]
fn pytorchjob_worker_selecting_a_foreign_class_is_refused_even_when_the_master_is_clean() {
    let object = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": BRONZE}, "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": pod_spec(None)}},
            "Worker": {"replicas": 3, "template": {"spec": pod_spec(Some("a100"))}}}}});
    assert_refused(&decide(&review("CREATE", &object, None)), "PyTorchJob");
}

#[test]
fn mpijob_worker_selecting_h100_is_refused() {
    let object = json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "mpi", "namespace": BRONZE}, "spec": {"mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "l", "image": "img"}]}}},
            "Worker": {"replicas": 2, "template": {"spec": pod_spec(Some("h100"))}}}}});
    assert_refused(&decide(&review("CREATE", &object, None)), "MPIJob");
}

#[test]
fn leaderworkerset_worker_template_selecting_h100_is_refused() {
    let object = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": BRONZE}, "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 2, "leaderTemplate": {"spec": pod_spec(None)}, "workerTemplate": {"spec": pod_spec(Some("h100"))}}}});
    assert_refused(&decide(&review("CREATE", &object, None)), "LeaderWorkerSet");
}

#[test]
fn leaderworkerset_without_a_queue_gets_the_bronze_queue_on_the_object_and_on_every_pod_template() {
    let object = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": BRONZE}, "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 2, "workerTemplate": {"spec": pod_spec(None)}}}});
    let request = review("CREATE", &object, None);
    let object = patched(&request, &decide(&request));
    assert_eq!(object["metadata"]["labels"][QUEUE], "tiergate-bronze");
    assert_eq!(
        object["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"][QUEUE],
        "tiergate-bronze"
    );
}

#[test]
fn leaderworkerset_updated_to_select_h100_in_its_worker_template_is_refused() {
    let lws = |class| {
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": BRONZE, "labels": {QUEUE: "tiergate-bronze"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod_spec(class)}}}})
    };
    let old = lws(None);
    assert_refused(&decide(&review("UPDATE", &lws(Some("h100")), Some(&old))), "LeaderWorkerSet");
    // An unrelated UPDATE of a queued LeaderWorkerSet keeps its queue on the object and its templates.
    let request = review("UPDATE", &old, Some(&old));
    let object = patched(&request, &decide(&request));
    assert_eq!(
        object["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"][QUEUE],
        "tiergate-bronze"
    );
}

#[test]
fn appwrapper_wrapping_a_job_with_an_h100_selector_is_refused() {
    let object = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": BRONZE}, "spec": {"components": [{"template": {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "inner"},
            "spec": {"template": {"spec": pod_spec(Some("h100"))}}}}]}});
    assert_refused(&decide(&review("CREATE", &object, None)), "AppWrapper");
}

#[test]
fn sparkapplication_executor_selecting_h100_is_refused() {
    let object = json!({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "spark", "namespace": BRONZE}, "spec": {"type": "Python", "sparkVersion": "3.5.0",
            "mode": "cluster", "driver": {"cores": 1},
            "executor": {"instances": 2, "gpu": {"name": "nvidia.com/gpu", "quantity": 1},
                "nodeSelector": {"gpu.nvidia.com/class": "h100"}}}});
    assert_refused(&decide(&review("CREATE", &object, None)), "SparkApplication");
}

#[test]
fn cronjob_with_an_h100_job_template_is_refused_at_create_instead_of_failing_every_spawned_job() {
    let message = assert_refused(&decide(&review("CREATE", &cronjob(Some("h100")), None)), "CronJob");
    assert!(message.contains("tier bronze"), "{message}");
}

#[test]
fn cronjob_updated_to_an_h100_job_template_is_refused() {
    let old = cronjob(None);
    assert_refused(&decide(&review("UPDATE", &cronjob(Some("h100")), Some(&old))), "CronJob");
}

#[test]
fn cronjob_template_gets_the_bronze_queue_so_every_job_it_spawns_is_queued() {
    for operation in ["CREATE", "UPDATE"] {
        let object = cronjob(None);
        let request = review(operation, &object, (operation == "UPDATE").then_some(&object));
        let decision = decide(&request);
        assert_eq!(decision.verdict, Verdict::Allow, "{operation}");
        let object = patched(&request, &decision);
        let job_template = &object["spec"]["jobTemplate"];
        assert_eq!(job_template["metadata"]["labels"][QUEUE], "tiergate-bronze", "{operation}");
        assert_eq!(job_template["spec"]["suspend"], true, "{operation}");
        assert_eq!(job_template["spec"]["template"]["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
        assert_eq!(object["spec"].get("suspend"), None, "the schedule itself is not paused");
    }
}

fn pod_of_unknown_kind() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wf-step", "namespace": BRONZE,
        "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "wf",
            "uid": "0b9c7e55-0000-4000-8000-000000000001", "controller": true}]},
        "spec": pod_spec(None)})
}

#[test]
fn gpu_pods_of_a_crd_kind_neither_tiergate_nor_kueue_knows_are_refused_by_default_naming_the_kind() {
    let message = assert_refused(&decide(&review("CREATE", &pod_of_unknown_kind(), None)), "argoproj.io/Workflow");
    assert!(message.contains("unknownGpuKinds"), "{message}");
}

#[test]
fn gpu_pods_of_an_unknown_kind_are_queued_and_gated_one_by_one_when_the_policy_says_queue_pods() {
    let mut policy = load_policy(None).unwrap();
    policy.spec.admission.unknown_gpu_kinds = UnknownKindAction::QueuePods;
    let request = review("CREATE", &pod_of_unknown_kind(), None);
    let decision = decide_with(&request, policy);
    assert_eq!(decision.verdict, Verdict::Allow);
    let pod = patched(&request, &decision);
    assert_eq!(pod["metadata"]["labels"][QUEUE], "tiergate-bronze");
    assert_eq!(pod["metadata"]["labels"]["kueue.x-k8s.io/managed"], "true");
    assert_eq!(pod["metadata"]["finalizers"], json!(["kueue.x-k8s.io/managed"]));
    assert_eq!(pod["spec"]["schedulingGates"], json!([{"name": "kueue.x-k8s.io/admission"}]));
    assert_eq!(pod["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
}

#[test]
fn cpu_pods_of_an_unknown_kind_are_not_touched() {
    let mut pod = pod_of_unknown_kind();
    pod["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    let decision = decide(&review("CREATE", &pod, None));
    assert_eq!(decision.verdict, Verdict::Skip { reason: "no_gpu_request" });
}
