//! A real cluster-autoscaler (kwok cloud provider) for the e2e suites: its node groups written as node templates
//! into ConfigMaps of a namespace of its own, the binary started against `KUBECONFIG` with ProvisioningRequests
//! enabled and scale-down off, its log kept in a temporary file, the `not-ready` taint lifted from the nodes it
//! creates (no kubelet or node-lifecycle controller does), and on stop the process killed and its nodes deleted.
//! Does I/O (a process, files, the API).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Taint};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::control_plane::assets::{MissingBinary, find_in_environment};
use crate::control_plane::provisioning::provisioning_request_resource;
use crate::{Cleanup, HarnessError, create_namespace, random_name};

/// The binary, found as the control plane's binaries are (`TIERGATE_TEST_ASSETS`, `KUBEBUILDER_ASSETS`, `PATH`).
pub const BINARY: &str = "cluster-autoscaler";
/// The node label whose value names a node's group (the kwok provider's `nodegroups.fromNodeLabelKey`).
pub const NODE_GROUP_LABEL: &str = "e2e.tiergate.io/node-group";
/// The label the kwok provider reads a node's GPU type from (`nodes.gpuConfig.gpuLabelKey`).
pub const GPU_TYPE_LABEL: &str = "nvidia.com/gpu.product";
/// How often the autoscaler looks at the cluster (`--scan-interval`).
pub const SCAN_INTERVAL: Duration = Duration::from_secs(5);
/// The taint the API server's `TaintNodesByCondition` admission puts on every new Node.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// How long the autoscaler may take to list its node groups and start its loop (a cold start on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// The log line of each autoscaler loop (`--v=4`).
const LOOP_LINE: &str = "Starting main loop";
/// The log line of each scale-up decision.
const SCALE_UP_LINE: &str = "Final scale-up plan:";
/// How many of its log's last lines a failure quotes.
const TAIL_LINES: usize = 40;

/// One node group: its nodes all alike, created by the autoscaler from a template, none at start.
#[derive(Clone, Debug)]
pub struct NodeGroup {
    /// Its name, the value of [`NODE_GROUP_LABEL`] on its nodes (and the prefix of their names); unique to the run.
    pub name: String,
    /// The most nodes the group may have.
    pub max_count: u32,
    /// `nvidia.com/gpu` of each node.
    pub gpus_per_node: u32,
    /// The GPU type (value of [`GPU_TYPE_LABEL`]), e.g. `NVIDIA-H100-80GB-HBM3`.
    pub gpu_type: String,
    /// Further node labels (the GPU class's).
    pub labels: BTreeMap<String, String>,
    /// The node taints (the GPU class's).
    pub taints: Vec<Taint>,
}

impl NodeGroup {
    /// The group's template Node for the kwok provider: min 0, `max_count`, its labels and taints, and a Ready
    /// status with `gpus_per_node` GPUs, 32 CPUs, 256 GiB and 110 pods.
    pub fn build_template(&self) -> Value {
        let mut labels = self.labels.clone();
        labels.insert(NODE_GROUP_LABEL.to_owned(), self.name.clone());
        labels.insert(GPU_TYPE_LABEL.to_owned(), self.gpu_type.clone());
        labels.insert("kubernetes.io/arch".to_owned(), "amd64".to_owned());
        labels.insert("kubernetes.io/os".to_owned(), "linux".to_owned());
        let resources = json!({"nvidia.com/gpu": self.gpus_per_node.to_string(), "cpu": "32", "memory": "256Gi",
                               "pods": "110", "ephemeral-storage": "100Gi"});
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "annotations": {
                    "cluster-autoscaler.kwok.nodegroup/min-count": "0",
                    "cluster-autoscaler.kwok.nodegroup/max-count": self.max_count.to_string(),
                },
                "labels": labels,
            },
            "spec": {"taints": self.taints},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "a node the e2e suite's cluster-autoscaler made (kwok provider)"}],
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"},
            },
        })
    }
}

/// The kwok provider's configuration (ConfigMap `kwok-provider-config`, key `config`): templates from ConfigMap
/// `kwok-provider-templates`, groups by [`NODE_GROUP_LABEL`], no kwok taint, GPUs typed by [`GPU_TYPE_LABEL`].
pub fn build_provider_config(groups: &[NodeGroup]) -> Value {
    let types: BTreeMap<&str, Value> = groups.iter().map(|group| (group.gpu_type.as_str(), json!({}))).collect();
    json!({
        "apiVersion": "v1alpha1",
        "readNodesFrom": "configmap",
        "nodegroups": {"fromNodeLabelKey": NODE_GROUP_LABEL},
        "nodes": {"skipTaint": true, "gpuConfig": {"gpuLabelKey": GPU_TYPE_LABEL, "availableGPUTypes": types}},
        "configmap": {"name": "kwok-provider-templates"},
    })
}

/// The kwok provider's node templates (ConfigMap `kwok-provider-templates`, key `templates`): a v1 List.
pub fn build_node_templates(groups: &[NodeGroup]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": groups.iter().map(NodeGroup::build_template).collect::<Vec<_>>()})
}

/// The autoscaler's arguments: kwok provider, `namespace` for its ConfigMaps and status, ProvisioningRequests on,
/// a 5 s loop, no scale-down (a suite's nodes stay until it deletes them), its endpoints on `port` of loopback.
fn build_args(kubeconfig: &str, namespace: &str, port: u16) -> Vec<String> {
    [
        "--cloud-provider=kwok".to_owned(),
        format!("--kubeconfig={kubeconfig}"),
        format!("--namespace={namespace}"),
        "--enable-provisioning-requests=true".to_owned(),
        "--leader-elect=false".to_owned(),
        format!("--scan-interval={}s", SCAN_INTERVAL.as_secs()),
        "--scale-down-enabled=false".to_owned(),
        "--max-node-provision-time=2m".to_owned(),
        format!("--address=127.0.0.1:{port}"),
        "--logtostderr=true".to_owned(),
        "--v=4".to_owned(),
    ]
    .into()
}

/// Whether the API server serves ProvisioningRequests (`autoscaling.x-k8s.io/v1`), or why not.
pub async fn provisioning_requests_served(client: &Client) -> Result<(), String> {
    let api: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &provisioning_request_resource());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(error) => Err(format!(
            "the cluster does not serve ProvisioningRequests (autoscaling.x-k8s.io/v1): {error}; install the CRD \
             before Kueue starts (the throwaway control plane does)"
        )),
    }
}

/// Where the binary is, or where it was looked for.
pub fn find_binary() -> Result<PathBuf, MissingBinary> {
    find_in_environment(BINARY)
}

/// A running cluster-autoscaler. [`Autoscaler::stop`] (or, as a fallback, drop on a multi-thread runtime) kills it
/// and deletes the nodes of its groups.
pub struct Autoscaler {
    client: Client,
    /// Its namespace (ConfigMaps, status); tracked by the [`Cleanup`] it was started with.
    pub namespace: String,
    /// Its node groups.
    pub groups: Vec<NodeGroup>,
    child: Option<Child>,
    log: PathBuf,
    lifter: Option<(CancellationToken, JoinHandle<()>)>,
    /// The log's directory, removed on drop unless [`Autoscaler::keep_log`] kept it.
    dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Autoscaler {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Autoscaler")
            .field("namespace", &self.namespace)
            .field("groups", &self.groups)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Autoscaler {
    /// Writes the ConfigMaps into a new namespace (tracked by `cleanup`), starts `binary` against the cluster of
    /// `KUBECONFIG` and waits until it has listed `groups` and run its first loop.
    pub async fn start(
        client: &Client,
        cleanup: &Cleanup,
        binary: &Path,
        groups: Vec<NodeGroup>,
    ) -> Result<Self, HarnessError> {
        let kubeconfig = std::env::var("KUBECONFIG").map_err(|_| "KUBECONFIG is not set")?;
        let namespace = random_name("e2e-autoscaler");
        create_namespace(client, cleanup, &namespace, &[]).await?;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        for (name, key, value) in [
            ("kwok-provider-config", "config", build_provider_config(&groups)),
            ("kwok-provider-templates", "templates", build_node_templates(&groups)),
        ] {
            let map = ConfigMap {
                metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
                data: Some([(key.to_owned(), serde_json::to_string_pretty(&value)?)].into()),
                ..ConfigMap::default()
            };
            maps.create(&PostParams::default(), &map).await?;
        }
        let dir = tempfile::Builder::new().prefix("tiergate-e2e-autoscaler-").tempdir()?;
        let log = dir.path().join("cluster-autoscaler.log");
        let output = std::fs::File::create(&log)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(binary)
            .args(build_args(&kubeconfig, &namespace, port))
            .env("KWOK_PROVIDER_MODE", "local")
            .env("POD_NAMESPACE", &namespace)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()
            .map_err(|error| format!("failed to start {}: {error}", binary.display()))?;
        let mut autoscaler =
            Self { client: client.clone(), namespace, groups, child: Some(child), log, lifter: None, dir: Some(dir) };
        autoscaler.lifter = Some(spawn_taint_lifter(client, autoscaler.selector()));
        autoscaler.wait_for_loops(1, START_TIMEOUT).await?;
        Ok(autoscaler)
    }

    /// The label selector of every node of its groups.
    pub fn selector(&self) -> String {
        let names: Vec<&str> = self.groups.iter().map(|group| group.name.as_str()).collect();
        format!("{NODE_GROUP_LABEL} in ({})", names.join(","))
    }

    /// The names of the nodes of each group (every group listed, empty ones too).
    pub async fn nodes_by_group(&self) -> Result<BTreeMap<String, Vec<String>>, HarnessError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let listed = nodes.list(&ListParams::default().labels(&self.selector())).await?;
        let mut by_group: BTreeMap<String, Vec<String>> =
            self.groups.iter().map(|group| (group.name.clone(), Vec::new())).collect();
        for node in listed.items {
            let group = node.labels().get(NODE_GROUP_LABEL).cloned().unwrap_or_default();
            by_group.entry(group).or_default().push(node.name_any());
        }
        Ok(by_group)
    }

    /// How many nodes each group has.
    pub async fn group_sizes(&self) -> Result<BTreeMap<String, usize>, HarnessError> {
        Ok(self.nodes_by_group().await?.into_iter().map(|(group, nodes)| (group, nodes.len())).collect())
    }

    /// Keeps its log file after it stops (for a failure to point at), and returns the file.
    pub fn keep_log(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        self.log.clone()
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "last {TAIL_LINES} lines of {}:\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
        )
    }

    /// How many loops it has started.
    pub fn loops(&self) -> usize {
        self.log_text().lines().filter(|line| line.contains(LOOP_LINE)).count()
    }

    /// Every scale-up decision it logged (`Final scale-up plan: [{group 0->2 (max: 2)}]`), the plan part.
    pub fn scale_up_plans(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter_map(|line| line.split_once(SCALE_UP_LINE).map(|(_, plan)| plan.trim().to_owned()))
            .collect()
    }

    /// Waits until it has started `count` more loops than now (e.g. 2: a full loop has run after this call), or
    /// fails with its log's tail after `timeout` or when it exits.
    pub async fn wait_for_more_loops(&mut self, count: usize, timeout: Duration) -> Result<(), HarnessError> {
        let target = self.loops() + count;
        self.wait_for_loops(target, timeout).await
    }

    async fn wait_for_loops(&mut self, target: usize, timeout: Duration) -> Result<(), HarnessError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|child| child.try_wait().ok().flatten()) {
                return Err(format!("cluster-autoscaler exited ({status}); {}", self.log_tail()).into());
            }
            if self.loops() >= target {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "failed to observe cluster-autoscaler's loop {target} within {timeout:?}; {}",
                    self.log_tail()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| child.try_wait().ok().flatten().is_none())
    }

    /// Kills it, stops lifting taints and deletes the nodes of its groups (its namespace goes with the cleanup).
    pub async fn stop(mut self) {
        self.kill();
        if let Some((token, task)) = self.lifter.take() {
            token.cancel();
            let _ = task.await;
        }
        delete_nodes(&self.client, &self.selector()).await;
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Autoscaler {
    fn drop(&mut self) {
        let running = self.child.is_some();
        self.kill();
        if let Some((token, _)) = self.lifter.take() {
            token.cancel();
        }
        if running && let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (client, selector) = (self.client.clone(), self.selector());
            tokio::task::block_in_place(|| handle.block_on(delete_nodes(&client, &selector)));
        }
    }
}

/// Deletes every node `selector` matches (reporting, never failing).
async fn delete_nodes(client: &Client, selector: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.delete_collection(&DeleteParams::background(), &ListParams::default().labels(selector)).await {
        Ok(_) => {}
        Err(error) => println!("cleanup: failed to delete the autoscaler's nodes ({selector}): {error}"),
    }
}

/// Every 200 ms, drops the `not-ready` taint from the nodes `selector` matches, keeping their other taints (the
/// GPU class's): the API server's admission put it there and nothing here lifts it, so no pod would bind.
fn spawn_taint_lifter(client: &Client, selector: String) -> (CancellationToken, JoinHandle<()>) {
    let token = CancellationToken::new();
    let nodes: Api<Node> = Api::all(client.clone());
    let stop = token.clone();
    let task = tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Ok(listed) = nodes.list(&ListParams::default().labels(&selector)).await {
                for node in listed.items {
                    lift_not_ready(&nodes, &node).await;
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    (token, task)
}

/// Drops the `not-ready` taint from `node`, keeping its other taints (a conflict is retried on the next pass).
pub(crate) async fn lift_not_ready(nodes: &Api<Node>, node: &Node) {
    let taints = node.spec.as_ref().and_then(|spec| spec.taints.clone()).unwrap_or_default();
    if !taints.iter().any(|taint| taint.key == NOT_READY_TAINT) {
        return;
    }
    let kept: Vec<Taint> = taints.into_iter().filter(|taint| taint.key != NOT_READY_TAINT).collect();
    let patch = json!({"metadata": {"resourceVersion": node.resource_version()}, "spec": {"taints": kept}});
    // A conflict (the autoscaler or the API server wrote it meanwhile) is retried on the next pass.
    let _ = nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> NodeGroup {
        NodeGroup {
            name: "run-h100".to_owned(),
            max_count: 2,
            gpus_per_node: 1,
            gpu_type: "NVIDIA-H100".to_owned(),
            labels: [("gpu.nvidia.com/class".to_owned(), "h100".to_owned())].into(),
            taints: vec![Taint {
                key: "nvidia.com/gpu".to_owned(),
                value: Some("present".to_owned()),
                effect: "NoSchedule".to_owned(),
                time_added: None,
            }],
        }
    }

    #[test]
    fn a_template_carries_the_group_label_bounds_labels_taints_and_gpus() {
        let template = group().build_template();
        assert_eq!(template["metadata"]["labels"][NODE_GROUP_LABEL], "run-h100");
        assert_eq!(template["metadata"]["labels"]["gpu.nvidia.com/class"], "h100");
        assert_eq!(template["metadata"]["annotations"]["cluster-autoscaler.kwok.nodegroup/min-count"], "0");
        assert_eq!(template["metadata"]["annotations"]["cluster-autoscaler.kwok.nodegroup/max-count"], "2");
        assert_eq!(template["spec"]["taints"][0]["key"], "nvidia.com/gpu");
        assert_eq!(template["status"]["allocatable"]["nvidia.com/gpu"], "1");
        let templates = build_node_templates(&[group()]);
        assert_eq!((templates["kind"].as_str(), templates["items"].as_array().map(Vec::len)), (Some("List"), Some(1)));
    }

    #[test]
    fn the_provider_groups_nodes_by_the_run_label_and_types_gpus() {
        let config = build_provider_config(&[group()]);
        assert_eq!(config["nodegroups"]["fromNodeLabelKey"], NODE_GROUP_LABEL);
        assert_eq!(config["nodes"]["skipTaint"], true);
        assert!(config["nodes"]["gpuConfig"]["availableGPUTypes"].get("NVIDIA-H100").is_some());
        assert_eq!(config["configmap"]["name"], "kwok-provider-templates");
    }

    #[test]
    fn the_autoscaler_runs_with_provisioning_requests_and_no_scale_down() {
        let args = build_args("/k", "ns", 1234);
        for expected in ["--cloud-provider=kwok", "--namespace=ns", "--enable-provisioning-requests=true"] {
            assert!(args.iter().any(|arg| arg == expected), "{expected} in {args:?}");
        }
        assert!(args.iter().any(|arg| arg == "--scale-down-enabled=false"));
        assert!(args.iter().any(|arg| arg == "--address=127.0.0.1:1234"));
    }
}
