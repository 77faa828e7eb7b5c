//! End-to-end on the throwaway control plane's optional real node (a kubelet with containerd, `localhost`): a Job
//! of one busybox pod asking for one of the node's fake `nvidia.com/gpu` really runs there to completion (the Job
//! Complete, its pod Succeeded; the time from create to Complete is printed), and a pod on the node reaches the API
//! server through the `kubernetes` Service's ClusterIP (kube-proxy's rules). Skipped (and passing) without a cluster
//! or without the node (`TIERGATE_E2E_NODE_SKIP` says why); see tests/e2e/src/control_plane/node.rs.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;
use tiergate_e2e::control_plane::node::KUBERNETES_SERVICE_IP;
use tiergate_e2e::real_node::{job_condition_true, job_pods, pod_spec_on_real_node, pod_summary, real_node_or_skip};
use tiergate_e2e::{Cleanup, HarnessError, create_namespace, ensure, random_name, run_cluster_test, wait_for};

/// How long a pod may take to be scheduled, started and finished on a small, busy machine.
const RUN_BOUND: Duration = Duration::from_secs(180);

const GPU_JOB_TEST: &str = "a_gpu_jobs_pod_runs_to_completion_on_the_real_node";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_jobs_pod_runs_to_completion_on_the_real_node() {
    let Some(node) = real_node_or_skip(GPU_JOB_TEST) else { return };
    if let Err(error) =
        run_cluster_test(GPU_JOB_TEST, async |client, cleanup| run_gpu_job(client, cleanup, &node).await).await
    {
        panic!("{error}");
    }
}

async fn run_gpu_job(client: &Client, cleanup: &Cleanup, node: &str) -> Result<(), HarnessError> {
    let namespace = random_name("e2e-real-node");
    create_namespace(client, cleanup, &namespace, &[]).await?;
    let name = "gpu-hello";
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": pod_spec_on_real_node("echo hi from a GPU pod", Some("1"))},
        },
    }))?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let created = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let completed = wait_for("the GPU Job to complete on the real node", RUN_BOUND, || {
        let jobs = jobs.clone();
        async move {
            let job = jobs.get(name).await.ok()?;
            (job_condition_true(&job, "Complete") || job_condition_true(&job, "Failed")).then_some(job)
        }
    })
    .await;
    let took = created.elapsed();
    let pods = job_pods(client, &namespace, name).await;
    let completed = completed
        .map_err(|error| format!("{error}; its pods: {:?}", pods.iter().map(|(_, s)| s).collect::<Vec<_>>()))?;
    ensure(job_condition_true(&completed, "Complete"), || {
        format!("the Job failed instead of completing; its pods: {:?}", pods.iter().map(|(_, s)| s).collect::<Vec<_>>())
    })?;
    println!("real node: the GPU Job completed {:.1} s after it was created", took.as_secs_f64());
    let [(pod, summary)] = pods.as_slice() else {
        return Err(format!("expected one pod of the Job, found {}", pods.len()).into());
    };
    let status = pod.status.as_ref();
    ensure(status.and_then(|status| status.phase.as_deref()) == Some("Succeeded"), || {
        format!("the pod did not succeed: {summary}")
    })?;
    let bound_to = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
    ensure(bound_to == Some(node), || format!("the pod ran on {bound_to:?}, not on the real node {node}"))?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match pods.logs(&pod_name, &LogParams::default()).await {
        Ok(log) => {
            ensure(log.contains("hi from a GPU pod"), || format!("the pod's log lacks its greeting: {log:?}"))?;
            println!("real node: the pod's log, read through the kubelet: {:?}", log.trim());
        }
        Err(error) => return Err(format!("failed to read the pod's log through the kubelet: {error}").into()),
    }
    Ok(())
}

const SERVICE_TEST: &str = "a_pod_on_the_real_node_reaches_the_api_server_through_its_cluster_ip";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_the_real_node_reaches_the_api_server_through_its_cluster_ip() {
    if real_node_or_skip(SERVICE_TEST).is_none() {
        return;
    }
    if let Err(error) = run_cluster_test(SERVICE_TEST, run_service_probe).await {
        panic!("{error}");
    }
}

async fn run_service_probe(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let namespace = random_name("e2e-real-node-svc");
    create_namespace(client, cleanup, &namespace, &[]).await?;
    let name = "reach-api";
    // Only the ClusterIP (no name lookups): the pod's packets go to kube-proxy's rules and the bridge, nowhere else.
    // A TCP connection is the proof: Debian's busybox has no `nc -z`, and its `wget` cannot negotiate TLS with the
    // API server's ECDSA certificate. `nc` exits non-zero when the connection fails or times out.
    let script = format!("echo | nc -w 5 {KUBERNETES_SERVICE_IP} 443 && echo reached {KUBERNETES_SERVICE_IP}:443");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": pod_spec_on_real_node(&script, None),
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let created = Instant::now();
    pods.create(&PostParams::default(), &pod).await?;
    let finished = wait_for("the probe pod to finish on the real node", RUN_BOUND, || {
        let pods = pods.clone();
        async move {
            let pod = pods.get(name).await.ok()?;
            let phase = pod.status.as_ref().and_then(|status| status.phase.clone())?;
            matches!(phase.as_str(), "Succeeded" | "Failed").then_some(pod)
        }
    })
    .await;
    let finished = match finished {
        Ok(pod) => pod,
        Err(error) => {
            let summary = pods.get(name).await.map(|pod| pod_summary(&pod)).unwrap_or_default();
            return Err(format!("{error}; the pod: {summary}").into());
        }
    };
    let log = pods.logs(name, &LogParams::default()).await.unwrap_or_default();
    let succeeded = finished.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Succeeded");
    ensure(succeeded && log.contains("reached"), || {
        format!("the pod did not reach {KUBERNETES_SERVICE_IP}:443: {}; its log: {log:?}", pod_summary(&finished))
    })?;
    println!(
        "real node: a pod connected to the API server through the kubernetes Service ({KUBERNETES_SERVICE_IP}:443) \
         {:.1} s after it was created: {:?}",
        created.elapsed().as_secs_f64(),
        log.trim()
    );
    Ok(())
}
