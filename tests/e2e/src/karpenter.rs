//! A real Karpenter (kubernetes-sigs/karpenter's kwok cloud provider) for the e2e suites: its CRDs installed where
//! the cluster has none, the binary started against `KUBECONFIG` with an instance-types file of GPU shapes and a
//! short batch window, its log kept in a temporary file, the nodes it launches made Ready (no kubelet backs them:
//! the harness writes the Ready condition and lifts the `not-ready` taint, as the autoscaler suite does), and on
//! stop the process killed and its pods, NodeClaims and nodes deleted. Does I/O (a process, files, the API).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::autoscaler::lift_not_ready;
use crate::control_plane::assets::{MissingBinary, find_in_environment};
use crate::control_plane::process::Process;
use crate::{Cleanup, HarnessError, install_crd};

/// The binary (Karpenter built from `kwok/`), found as the control plane's binaries are.
pub const BINARY: &str = "karpenter-kwok";
/// A directory holding Karpenter's CRDs (`kwok/charts/crds/`); default: `karpenter-crds/` beside the binary's
/// real path.
pub const CRDS_ENV: &str = "TIERGATE_E2E_KARPENTER_CRDS";
/// The CRDs the kwok provider needs.
const CRD_FILES: [&str; 3] =
    ["karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml", "karpenter.kwok.sh_kwoknodeclasses.yaml"];
/// The label Karpenter puts on each node and NodeClaim, naming its NodePool.
pub const NODEPOOL_LABEL: &str = tiergate_karpenter::NODEPOOL_LABEL;
/// Karpenter's batch window: it launches once no new pending pod came for the idle time, or after the max.
pub const BATCH_IDLE: Duration = Duration::from_secs(1);
/// See [`BATCH_IDLE`].
pub const BATCH_MAX: Duration = Duration::from_secs(5);
/// The zone of every offering.
const ZONE: &str = "test-zone-a";
/// How long Karpenter may take to become ready (a cold start on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How many of its log's last lines a failure quotes.
const TAIL_LINES: usize = 40;

/// One instance type the kwok provider offers (on-demand and spot, in one zone).
#[derive(Clone, Debug)]
pub struct InstanceType {
    /// Its name; Karpenter reads the family from the part before the first `-`.
    pub name: String,
    /// CPU cores.
    pub cpu: u32,
    /// Memory in GiB.
    pub memory_gib: u32,
    /// `nvidia.com/gpu`.
    pub gpus: u32,
}

/// The kwok provider's instance-types file (`INSTANCE_TYPES_FILE_PATH`, the format of its
/// `kwok/cloudprovider/instance_types.json`).
pub fn build_instance_types(types: &[InstanceType]) -> Value {
    let offering = |capacity_type: &str, price: f64| {
        json!({"Price": price, "Available": true, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
        ]})
    };
    let types: Vec<Value> = types
        .iter()
        .map(|shape| {
            let price = f64::from(shape.cpu) * 0.05 + f64::from(shape.gpus);
            let mut resources = json!({"cpu": shape.cpu.to_string(), "memory": format!("{}Gi", shape.memory_gib),
                "ephemeral-storage": "100Gi", "pods": "110"});
            if shape.gpus > 0 {
                resources["nvidia.com/gpu"] = json!(shape.gpus.to_string());
            }
            json!({"name": shape.name, "offerings": [offering("on-demand", price), offering("spot", price * 0.7)],
                "architecture": "amd64", "operatingSystems": ["linux"], "resources": resources})
        })
        .collect();
    Value::Array(types)
}

/// Where the binary is, or where it was looked for.
pub fn find_binary() -> Result<PathBuf, MissingBinary> {
    find_in_environment(BINARY)
}

/// The CRD files of [`CRD_FILES`]: from [`CRDS_ENV`], else `karpenter-crds/` beside the binary's real path.
pub fn find_crds(binary: &Path) -> Result<Vec<PathBuf>, String> {
    let dir = match std::env::var_os(CRDS_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let real = binary.canonicalize().map_err(|error| format!("{}: {error}", binary.display()))?;
            real.parent().map(|parent| parent.join("karpenter-crds")).unwrap_or_default()
        }
    };
    let files: Vec<PathBuf> = CRD_FILES.iter().map(|file| dir.join(file)).collect();
    match files.iter().find(|file| !file.is_file()) {
        Some(missing) => {
            Err(format!("Karpenter's CRD {} is missing (set {CRDS_ENV} to their directory)", missing.display()))
        }
        None => Ok(files),
    }
}

/// The API resource of Karpenter's NodeClaims.
pub fn node_claim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"), "nodeclaims")
}

/// The API resource of Karpenter's NodePools.
pub fn node_pool_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"), "nodepools")
}

/// The API resource of the kwok provider's node classes.
pub fn kwok_node_class_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass"),
        "kwoknodeclasses",
    )
}

/// The NodeClaim a node of Karpenter's belongs to: its `kubernetes.io/hostname` label names it (the kwok
/// provider's Node names differ).
pub fn node_claim_of(node: &Node) -> Option<String> {
    node.labels().get("kubernetes.io/hostname").filter(|_| node.labels().contains_key(NODEPOOL_LABEL)).cloned()
}

/// Whether the cluster already serves Karpenter's NodePools (a real Karpenter is installed: the suite must not
/// start a second one beside it).
pub async fn already_served(client: &Client) -> bool {
    client
        .list_api_group_resources("karpenter.sh/v1")
        .await
        .is_ok_and(|list| list.resources.iter().any(|resource| resource.name == "nodepools"))
}

/// A running Karpenter. [`Karpenter::stop`] (or, as a fallback, drop on a multi-thread runtime) deletes its
/// NodeClaims and kills it.
pub struct Karpenter {
    client: Client,
    process: Option<Process>,
    log: PathBuf,
    readiness: Option<(CancellationToken, JoinHandle<()>)>,
    /// The log's directory (and the instance-types file), removed on drop unless [`Karpenter::keep_log`] kept it.
    dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Karpenter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Karpenter").field("log", &self.log).finish_non_exhaustive()
    }
}

impl Karpenter {
    /// Installs the CRDs of `crds` where absent (tracked by `cleanup`), writes `types` as the provider's instance
    /// types, starts `binary` against the cluster of `KUBECONFIG` and waits until its `/readyz` answers 200.
    pub async fn start(
        client: &Client,
        cleanup: &Cleanup,
        binary: &Path,
        crds: &[PathBuf],
        types: &[InstanceType],
    ) -> Result<Self, HarnessError> {
        for file in crds {
            let text = std::fs::read_to_string(file)?;
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
                .map_err(|error| format!("failed to read {} as a CRD: {error}", file.display()))?;
            install_crd(client, cleanup, crd).await?;
        }
        let kubeconfig = std::env::var("KUBECONFIG").map_err(|_| "KUBECONFIG is not set")?;
        let dir = tempfile::Builder::new().prefix("tiergate-e2e-karpenter-").tempdir()?;
        let types_file = dir.path().join("instance-types.json");
        std::fs::write(&types_file, serde_json::to_string_pretty(&build_instance_types(types))?)?;
        let log = dir.path().join("karpenter.log");
        let free_port =
            || -> Result<u16, HarnessError> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
        let (metrics, health) = (free_port()?.to_string(), free_port()?.to_string());
        let (idle, max) = (format!("{}s", BATCH_IDLE.as_secs()), format!("{}s", BATCH_MAX.as_secs()));
        let env: [(&str, &Path); 8] = [
            ("KUBECONFIG", Path::new(&kubeconfig)),
            ("DISABLE_LEADER_ELECTION", Path::new("true")),
            ("METRICS_PORT", Path::new(&metrics)),
            ("HEALTH_PROBE_PORT", Path::new(&health)),
            ("INSTANCE_TYPES_FILE_PATH", &types_file),
            ("BATCH_IDLE_DURATION", Path::new(&idle)),
            ("BATCH_MAX_DURATION", Path::new(&max)),
            ("LOG_LEVEL", Path::new("debug")),
        ];
        let process = Process::spawn(BINARY, binary, &[], &env, log.clone())?;
        let mut karpenter =
            Self { client: client.clone(), process: Some(process), log, readiness: None, dir: Some(dir) };
        karpenter.readiness = Some(spawn_node_readiness(client));
        karpenter.wait_until_ready(&health).await?;
        Ok(karpenter)
    }

    async fn wait_until_ready(&mut self, port: &str) -> Result<(), HarnessError> {
        let url = format!("http://127.0.0.1:{port}/readyz");
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Some(process) = self.process.as_mut()
                && process.exited().is_some()
            {
                return Err(process.failure("become ready"));
            }
            if http.get(&url).send().await.is_ok_and(|response| response.status().is_success()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("karpenter was not ready within {START_TIMEOUT:?}; {}", self.log_tail()).into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The names of the NodeClaims of each NodePool (only pools with NodeClaims are listed).
    pub async fn node_claims_by_pool(&self) -> Result<BTreeMap<String, Vec<String>>, HarnessError> {
        let claims = Api::<DynamicObject>::all_with(self.client.clone(), &node_claim_resource());
        let mut by_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for claim in claims.list(&ListParams::default()).await?.items {
            let pool = claim.labels().get(NODEPOOL_LABEL).cloned().unwrap_or_default();
            by_pool.entry(pool).or_default().push(claim.name_any());
        }
        Ok(by_pool)
    }

    /// Keeps its log file after it stops (for a failure to point at), and returns the file.
    pub fn keep_log(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        self.log.clone()
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        let tail = self.process.as_ref().map(|process| process.log_tail(TAIL_LINES)).unwrap_or_default();
        format!("last {TAIL_LINES} lines of {}:\n{tail}", self.log.display())
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(|process| process.exited().is_none())
    }

    /// Kills it, stops making nodes Ready, and deletes what it left: the pods bound to its nodes (no kubelet would
    /// ever confirm their end), its NodeClaims (their finalizers dropped: no Karpenter remains to remove them) and
    /// its nodes. Kwok instances are only Node objects, so nothing outside the cluster leaks.
    pub async fn stop(mut self) {
        self.kill();
        if let Some((token, task)) = self.readiness.take() {
            token.cancel();
            let _ = task.await;
        }
        delete_leftovers(&self.client).await;
    }

    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop();
        }
    }
}

impl Drop for Karpenter {
    fn drop(&mut self) {
        let running = self.process.is_some();
        self.kill();
        if let Some((token, _)) = self.readiness.take() {
            token.cancel();
        }
        if running && let Ok(handle) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            tokio::task::block_in_place(|| handle.block_on(delete_leftovers(&client)));
        }
    }
}

/// Deletes, with no grace period, every pod bound to a node of a NodePool (reporting, never failing).
async fn force_delete_pods_on_karpenter_nodes(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(listed) = nodes.list(&ListParams::default().labels(NODEPOOL_LABEL)).await else { return };
    let pods: Api<Pod> = Api::all(client.clone());
    for node in listed.items {
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", node.name_any()));
        let Ok(bound) = pods.list(&on_node).await else { continue };
        for pod in bound.items {
            let Some(namespace) = pod.namespace() else { continue };
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            if let Err(error) = api
                .delete(&pod.name_any(), &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
                .await
                && !matches!(&error, kube::Error::Api(status) if status.code == 404)
            {
                println!("cleanup: failed to delete pod {namespace}/{} on a Karpenter node: {error}", pod.name_any());
            }
        }
    }
}

/// After Karpenter is gone: the pods on its nodes, its NodeClaims (finalizers dropped) and its nodes.
async fn delete_leftovers(client: &Client) {
    force_delete_pods_on_karpenter_nodes(client).await;
    let claims = Api::<DynamicObject>::all_with(client.clone(), &node_claim_resource());
    if let Ok(list) = claims.list(&ListParams::default()).await {
        for claim in list.items {
            let patch = json!({"metadata": {"finalizers": null}});
            let _ = claims.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
            let _ = claims.delete(&claim.name_any(), &DeleteParams::background()).await;
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let selector = ListParams::default().labels(NODEPOOL_LABEL);
    if let Ok(list) = nodes.list(&selector).await {
        for node in list.items {
            let patch = json!({"metadata": {"finalizers": null}});
            let _ = nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
            let _ = nodes.delete(&node.name_any(), &DeleteParams::background()).await;
        }
    }
}

/// Every 200 ms, makes the nodes Karpenter launched Ready: the kwok provider creates Node objects that no kubelet
/// backs, so the harness writes their `Ready` condition and lifts the `not-ready` taint (keeping the GPU class's).
fn spawn_node_readiness(client: &Client) -> (CancellationToken, JoinHandle<()>) {
    let token = CancellationToken::new();
    let nodes: Api<Node> = Api::all(client.clone());
    let stop = token.clone();
    let task = tokio::spawn(async move {
        while !stop.is_cancelled() {
            if let Ok(listed) = nodes.list(&ListParams::default().labels(NODEPOOL_LABEL)).await {
                for node in listed.items {
                    mark_ready(&nodes, &node).await;
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

async fn mark_ready(nodes: &Api<Node>, node: &Node) {
    let conditions = node.status.as_ref().and_then(|status| status.conditions.as_deref()).unwrap_or_default();
    if conditions.iter().any(|condition| condition.type_ == "Ready" && condition.status == "True") {
        return;
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "made Ready by the tiergate e2e harness (no kubelet backs kwok nodes)",
        "lastHeartbeatTime": now.to_string(), "lastTransitionTime": now.to_string()}]}});
    // A conflict or a node already gone is retried (or dropped) on the next pass.
    let _ = nodes.patch_status(&node.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_types_offer_gpus_on_demand_and_spot_in_one_zone() {
        let types = build_instance_types(&[
            InstanceType { name: "gpu-1x".into(), cpu: 8, memory_gib: 32, gpus: 1 },
            InstanceType { name: "cpu-4x".into(), cpu: 4, memory_gib: 16, gpus: 0 },
        ]);
        assert_eq!(types[0]["resources"]["nvidia.com/gpu"], "1");
        assert!(types[1]["resources"].get("nvidia.com/gpu").is_none());
        let offerings = types[0]["offerings"].as_array().unwrap();
        assert_eq!(offerings.len(), 2);
        assert_eq!(offerings[0]["Requirements"][0]["values"][0], "on-demand");
        assert_eq!(offerings[1]["Requirements"][1]["values"][0], ZONE);
    }
}
