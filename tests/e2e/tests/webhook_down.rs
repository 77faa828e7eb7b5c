//! End-to-end: the in-server gate holds with the webhook down (issue 27). The daemon reconciles the sample policy
//! (its ValidatingAdmissionPolicies and bindings among the owned objects, and its MutatingAdmissionPolicies where
//! the API server serves them), no webhook is registered at all (as when the pod is down under `failurePolicy:
//! Ignore`), and a bronze tenant (an impersonated user with `edit` in its namespace) makes the GPU attacks of
//! issue 27. Each attack on another class is refused by the API server with the gate's message; where
//! MutatingAdmissionPolicy is served (Kubernetes 1.36+), a plain GPU Job and Pod are stored in bronze (queue,
//! class, tolerations, suspend) and a priority above the ceiling is clamped, else they are refused too. CPU-only
//! Pods and Jobs are created unchanged. Skipped (and passing) without a reachable cluster or Kueue's v1beta2 CRDs.
//! See docs/admission.md ("The in-server gate").

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tiergate::admission::gate_marks::{CLASS_ADDED_MARK, GATE_MARKS};
use tiergate::plan::gate::gate_name;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, build_prefixed_policy, ensure, prefixed, random_name, run_cluster_test,
    start_tiergate, tenant_client, wait_for,
};
use tiergate_workloads::{PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL};

/// The gate's objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(60);
/// The API server compiles a new policy and starts enforcing it asynchronously (seconds).
const ENFORCEMENT: Duration = Duration::from_secs(120);

const TEST_NAME: &str = "gpu_attacks_with_the_webhook_down_are_refused_and_cpu_workloads_are_created";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_attacks_with_the_webhook_down_are_refused_and_cpu_workloads_are_created() {
    if let Err(error) = run_cluster_test(TEST_NAME, run_scenario).await {
        panic!("{error}");
    }
}

struct Run {
    /// Whether the API server serves MutatingAdmissionPolicy (validate-and-mutate mode).
    mutating: bool,
    prefix: String,
    bronze: String,
    tier: String,
    l4: Value,
    h100: Value,
}

async fn run_scenario(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-down");
    let policy = build_prefixed_policy(&prefix)?;
    let system = format!("{prefix}-system");
    let bronze = format!("{prefix}-bronze");
    let tier = prefixed(&prefix, "bronze");
    let daemon = start_tiergate(client, cleanup, &policy, &system, &[(&bronze, &[(E2E_TIER_LABEL, &tier)])]).await?;
    let class = |name: &str| -> Result<Value, HarnessError> {
        let class = policy.spec.gpu_class(&prefixed(&prefix, name)).ok_or_else(|| format!("no class {name}"))?;
        Ok(serde_json::to_value(&class.node_labels)?)
    };
    let resources = client.list_api_group_resources("admissionregistration.k8s.io/v1").await?;
    let mutating = resources.resources.iter().any(|resource| resource.name == "mutatingadmissionpolicies");
    println!("{TEST_NAME}: MutatingAdmissionPolicy served: {mutating}");
    let run = Run { mutating, l4: class("l4")?, h100: class("h100")?, prefix: prefix.clone(), bronze, tier };
    let result = attack(client, cleanup, &run).await;
    daemon.stop().await;
    result
}

async fn attack(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<(), HarnessError> {
    let binding = gate_name(&run.tier);
    let mut kinds = vec![KueueKind::ValidatingAdmissionPolicyBinding];
    if run.mutating {
        kinds.push(KueueKind::MutatingAdmissionPolicyBinding);
    }
    for kind in kinds {
        wait_for(&format!("the bronze gate's {}", kind.name()), CONVERGE, || async {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
            api.get_opt(&binding).await.ok().flatten()
        })
        .await?;
    }
    let tenant = tenant_client(client, cleanup, &[&run.bronze]).await?;
    let tier_part = format!("binding '{}'", tiergate::plan::gate::gate_name(&run.tier));

    // The API server enforces a new policy once it has compiled it: wait (dry runs) until a GPU Job selecting h100
    // is refused, and, in validate-and-mutate mode, until a plain one comes back in bronze's queue.
    let h100 = json!({"nodeSelector": run.h100});
    wait_for("the API server to enforce the validating policy", ENFORCEMENT, || async {
        let api: Api<Job> = Api::namespaced(tenant.clone(), &run.bronze);
        let job: Job = typed(job_body(run, "probe", json!({}), gpu_spec(h100.clone()))).ok()?;
        let params = PostParams { dry_run: true, ..PostParams::default() };
        api.create(&params, &job).await.err().filter(|error| error.to_string().contains(&tier_part))
    })
    .await?;
    if run.mutating {
        wait_for("the API server to run the mutating policy", ENFORCEMENT, || async {
            let api: Api<Job> = Api::namespaced(tenant.clone(), &run.bronze);
            let job: Job = typed(job_body(run, "probe", json!({}), gpu_spec(json!({})))).ok()?;
            let params = PostParams { dry_run: true, ..PostParams::default() };
            let created = api.create(&params, &job).await.ok()?;
            let queue = created.metadata.labels.as_ref().and_then(|labels| labels.get(QUEUE_NAME_LABEL).cloned());
            (queue == Some(format!("tiergate-{}", run.tier))).then_some(())
        })
        .await?;
    }

    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu.nvidia.com/class", "operator": "In", "values": [run.h100["gpu.nvidia.com/class"]]}]}]}}}});
    let queued = json!({QUEUE_NAME_LABEL: format!("tiergate-{}", run.tier),
        PRIORITY_CLASS_LABEL: prefixed(&run.prefix, "gpu-ultra")});
    let mut top_priority = job_body(run, "top-priority", queued, gpu_spec(json!({"nodeSelector": run.l4})));
    top_priority["spec"]["suspend"] = json!(true);
    let refused: Vec<(&str, Result<Value, HarnessError>)> = vec![
        (
            "Job selecting h100",
            create::<Job>(&tenant, run, job_body(run, "h100", json!({}), gpu_spec(h100.clone()))).await,
        ),
        (
            "Job with h100 node affinity",
            create::<Job>(&tenant, run, job_body(run, "affinity", json!({}), gpu_spec(affinity))).await,
        ),
        ("Pod selecting h100", create::<Pod>(&tenant, run, pod_body(run, "h100", gpu_spec(h100.clone()))).await),
        ("Deployment selecting h100", create::<Deployment>(&tenant, run, deployment_body(run, gpu_spec(h100))).await),
    ];
    let plain: Vec<(&str, Result<Value, HarnessError>)> = vec![
        (
            "Job without a selector",
            create::<Job>(&tenant, run, job_body(run, "plain", json!({}), gpu_spec(json!({})))).await,
        ),
        ("Job with the top priority label", create::<Job>(&tenant, run, top_priority).await),
        ("Pod without a selector", create::<Pod>(&tenant, run, pod_body(run, "plain", gpu_spec(json!({})))).await),
    ];
    if run.mutating {
        check_stored_in_bronze(run, plain)?;
    } else {
        check_refused(&tier_part, plain)?;
    }
    check_refused(&tier_part, refused)?;

    // CPU-only controls are created, unchanged.
    let cpu = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "10m"}}}]});
    let pod = create::<Pod>(&tenant, run, pod_body(run, "cpu", cpu.clone())).await?;
    let job = create::<Job>(&tenant, run, job_body(run, "cpu", json!({}), cpu)).await?;
    for (what, stored) in [("CPU Pod", &pod["metadata"]), ("CPU Job", &job["metadata"])] {
        ensure(stored.get("annotations").is_none() && stored["labels"].get(QUEUE_NAME_LABEL).is_none(), || {
            format!("{what} was edited by the gate: {stored}")
        })?;
    }
    Ok(())
}

/// Validate-and-mutate mode: each plain GPU workload is stored in bronze's queue (queued kinds), on l4 (with the
/// class's tolerations where the policy added the class), suspended (a Job), with a priority label within the
/// ceiling, and the policy's marks.
fn check_stored_in_bronze(run: &Run, created: Vec<(&str, Result<Value, HarnessError>)>) -> Result<(), HarnessError> {
    let ceiling = prefixed(&run.prefix, "gpu-high");
    for (what, outcome) in created {
        let stored = outcome.map_err(|error| format!("{what}: refused with the mutating policy served: {error}"))?;
        let spec = if stored["kind"] == "Pod" { &stored["spec"] } else { &stored["spec"]["template"]["spec"] };
        ensure(spec["nodeSelector"] == run.l4, || format!("{what}: stored off l4: {stored}"))?;
        let class_added = stored["metadata"]["annotations"][CLASS_ADDED_MARK].is_string();
        ensure(!class_added || spec["tolerations"].as_array().is_some_and(|list| !list.is_empty()), || {
            format!("{what}: the policy added the class without its tolerations: {stored}")
        })?;
        ensure(GATE_MARKS.iter().any(|mark| stored["metadata"]["annotations"][mark].is_string()), || {
            format!("{what}: stored without the policy's marks: {stored}")
        })?;
        if stored["kind"] == "Job" {
            ensure(stored["metadata"]["labels"][QUEUE_NAME_LABEL] == json!(format!("tiergate-{}", run.tier)), || {
                format!("{what}: stored outside bronze's queue: {stored}")
            })?;
            ensure(stored["spec"]["suspend"] == json!(true), || format!("{what}: stored unsuspended: {stored}"))?;
        }
        let priority = &stored["metadata"]["labels"][PRIORITY_CLASS_LABEL];
        ensure(priority.is_null() || priority == &json!(ceiling), || {
            format!("{what}: stored with priority {priority}, above bronze's ceiling {ceiling}")
        })?;
    }
    Ok(())
}

/// Each outcome is a refusal carrying the gate's message (`tier <name>`).
fn check_refused(tier_part: &str, outcomes: Vec<(&str, Result<Value, HarnessError>)>) -> Result<(), HarnessError> {
    for (what, outcome) in outcomes {
        match outcome {
            Ok(stored) => return Err(format!("{what}: stored with the webhook down: {stored}").into()),
            Err(error) => {
                let message = error.to_string();
                ensure(message.contains(tier_part), || {
                    format!("{what}: refused without the gate's message: {message}")
                })?;
            }
        }
    }
    Ok(())
}

fn gpu_spec(extra: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

fn job_body(run: &Run, name: &str, labels: Value, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{name}-job"), "namespace": run.bronze, "labels": labels},
        "spec": {"template": {"spec": spec}}})
}

fn pod_body(run: &Run, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("{name}-pod"), "namespace": run.bronze},
        "spec": spec})
}

/// A Deployment of pods with `spec`; a Deployment's pods always restart (the API server refuses any other policy).
fn deployment_body(run: &Run, mut spec: Value) -> Value {
    spec["restartPolicy"] = json!("Always");
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "h100-deploy", "namespace": run.bronze},
        "spec": {"selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec}}})
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, HarnessError> {
    Ok(serde_json::from_value(value)?)
}

/// Creates `body` as the tenant; the object as stored.
async fn create<T>(tenant: &Client, run: &Run, body: Value) -> Result<Value, HarnessError>
where
    T: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<T> = Api::namespaced(tenant.clone(), &run.bronze);
    let stored = api.create(&PostParams::default(), &typed::<T>(body)?).await?;
    Ok(serde_json::to_value(stored)?)
}
