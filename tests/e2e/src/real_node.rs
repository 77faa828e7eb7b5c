//! Helpers of the suites that run pods on the throwaway plane's real node: whether there is one (or why the suite
//! is skipped), a busybox pod spec placed there, and what a Job or pod has become. Does I/O (the API).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::control_plane::node::{
    BUSYBOX_IMAGE, GPU_RESOURCE, NODE_ENV, NODE_SKIP_ENV, REAL_NODE_LABEL, REAL_NODE_TAINT,
};
use crate::{SKIP_ENV, skip};

/// The node's name from the control plane's environment, or `None` after printing why the suite is skipped: the
/// plane's reason for having no node, or for not running at all.
pub fn real_node_or_skip(test: &str) -> Option<String> {
    let set = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    if let Some(name) = set(NODE_ENV) {
        return Some(name);
    }
    let reason = set(NODE_SKIP_ENV).or_else(|| set(SKIP_ENV)).unwrap_or_else(|| {
        format!(
            "{NODE_ENV} is not set: no real node is known (`bash tests/run.sh` starts one with its throwaway control \
             plane when kubelet, kube-proxy, containerd, runc and the CNI plugins are found; against another \
             cluster, name a node labelled and tainted {REAL_NODE_LABEL}=true that advertises {GPU_RESOURCE})"
        )
    });
    skip(test, &reason);
    None
}

/// A pod template's spec that runs `script` in busybox on the real node only (its selector and taint), as a
/// Guaranteed pod (100m CPU, 32Mi) with `gpus` of the node's fake GPUs when given.
pub fn pod_spec_on_real_node(script: &str, gpus: Option<&str>) -> serde_json::Value {
    let mut spec = busybox_pod_spec(script, gpus);
    spec["nodeSelector"] = json!({REAL_NODE_LABEL: "true"});
    spec["tolerations"] =
        json!([{"key": REAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
    spec
}

/// A pod template's spec that runs `script` in busybox, Guaranteed (100m CPU, 32Mi), with `gpus` fake GPUs when
/// given, and no placement of its own: left to tiergate to place on its tier's class.
pub fn busybox_pod_spec(script: &str, gpus: Option<&str>) -> serde_json::Value {
    let mut resources = json!({
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "100m", "memory": "32Mi"},
    });
    if let Some(gpus) = gpus {
        resources["requests"][GPU_RESOURCE] = json!(gpus);
        resources["limits"][GPU_RESOURCE] = json!(gpus);
    }
    json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": "main",
            "image": BUSYBOX_IMAGE,
            "command": ["sh", "-c", script],
            "resources": resources,
        }],
    })
}

/// Whether `job` has condition `type_` True (`Complete`, `Failed`, `Suspended`).
pub fn job_condition_true(job: &Job, type_: &str) -> bool {
    let conditions = job.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == type_ && condition.status == "True")
}

/// Why a pod has not run yet, from its phase and its containers' waiting or terminated reasons.
pub fn pod_summary(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let phase = status.and_then(|status| status.phase.clone()).unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()).unwrap_or_default();
    let containers: Vec<String> = status
        .and_then(|status| status.container_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|container| format!("{:?}", container.state))
        .collect();
    format!("phase {phase:?} on node {node:?}, containers {containers:?}")
}

/// The pods of Job `job` in `namespace`, each summarized.
pub async fn job_pods(client: &Client, namespace: &str, job: &str) -> Vec<(Pod, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await;
    listed.map(|list| list.items).unwrap_or_default().into_iter().map(|pod| (pod.clone(), pod_summary(&pod))).collect()
}
