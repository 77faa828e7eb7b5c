//! End-to-end: GPUs found through Dynamic Resource Allocation, by tier (issue 41, item 5), on a real API server
//! with kube-scheduler and a Kueue that maps tiergate's DeviceClasses to `nvidia.com/gpu`. Two fake nodes (an
//! H100 and an L4) publish two devices each in ResourceSlices of NVIDIA's driver `gpu.nvidia.com`; the daemon
//! reconciles `samples/dra` (its DeviceClasses `h100.tiergate.io` and `l4.tiergate.io` among the owned objects) and
//! the real webhook runs in this process. A bronze tenant (impersonated, `edit` in its namespace) shows:
//! - a Job claiming `l4.tiergate.io` through a ResourceClaimTemplate is admitted by Kueue, charged one
//!   `nvidia.com/gpu` of bronze's quota, and its pod's claim is allocated a device of the L4 node, where it binds;
//! - bronze's quota of 2 GPUs admits two such Jobs, each on its own L4 device, and holds the third (Kueue says the
//!   quota is short);
//! - a template naming the driver's generic class `gpu.nvidia.com` is retargeted to `l4.tiergate.io` (the policy
//!   default): without a selector its claim gets an L4 device, with a selector for H100 it gets none, although
//!   the H100 node has both devices free; under `draGenericClasses: Deny` the webhook refuses it;
//! - a template naming `h100.tiergate.io` is refused by the webhook, and with the webhook stopped (registered
//!   under `failurePolicy: Ignore`, as the chart does) by the in-server gate, which refuses the generic class too;
//! - a CPU-only pod is created untouched and scheduled.
//!
//! Kueue's mapping names the DeviceClasses, so the policy keeps the sample's class names (cluster-scoped objects
//! with fixed names: DeviceClasses `h100.tiergate.io`, `l4.tiergate.io` and ResourceFlavors `h100`, `l4`); only
//! its tiers, priority buckets and tier label are the run's. This suite waits until the previous holder of those
//! names is gone, skips when a live policy holds them, and removes them before it ends. Skipped (and passing)
//! without a reachable cluster, Kueue's v1beta2 CRDs, `TIERGATE_E2E_WEBHOOK_HOST`, a kube-scheduler
//! (`TIERGATE_E2E_SCHEDULER_SKIP`), `resource.k8s.io/v1`, or Kueue's `deviceClassMappings` for the sample.
//! See docs/guides/dra.md ("DRA") and docs/admission.md ("DRA claims").

use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tiergate::admission::claims::RETARGET_ANNOTATION;
use tiergate::live::fetch::workload_resource;
use tiergate::plan::dra::{kueue_device_class_mappings, mapping_differences, parse_kueue_mappings};
use tiergate::plan::gate::gate_name;
use tiergate::plan::names::{cluster_queue_name, gpu_class_flavor_name};
use tiergate::plan::{MANAGED_BY_LABEL, POLICY_LABEL, owned_label_selector};
use tiergate::policy::{DraGenericClassAction, TierPolicy};
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::webhook::{
    FailurePolicy, InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook_with, run_webhook_test,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HARNESS_MANAGER, HarnessError, SCHEDULER_SKIP_ENV, apply_policy, ensure, prefixed,
    random_name, release_pods, skip, start_tiergate, tenant_client, wait_for, wait_for_local_queue,
};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

const TEST: &str = "bronze_dra_claims_are_charged_to_its_quota_allocated_on_l4_and_held_to_its_device_classes";

/// The daemon's objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(60);
/// The API server compiles a new admission policy or webhook configuration and uses it asynchronously.
const ENFORCEMENT: Duration = Duration::from_secs(120);
/// Kueue admits in cycles, then the Job controller, the claim controller and kube-scheduler each take a turn.
const SCHEDULED: Duration = Duration::from_secs(180);
/// Objects of an earlier run (Kueue holds a ResourceFlavor until no ClusterQueue names it).
const GONE: Duration = Duration::from_secs(180);

/// NVIDIA's DRA driver, and its generic DeviceClass (every device of the driver).
const DRIVER: &str = "gpu.nvidia.com";
/// The node label NVIDIA's GPU feature discovery sets, which the sample's classes select.
const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// The whole-GPU resource Kueue counts the DeviceClasses as.
const GPU: &str = "nvidia.com/gpu";
/// A claim selector a bronze tenant might add to the generic class to reach gold's GPUs.
const H100_SELECTOR: &str = r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")"#;
const SAMPLE: &str = "../../samples/dra/policy.yaml";
/// Bronze's `nvidia.com/gpu` quota (the sample's), and the devices each fake node publishes: every Job bronze's
/// quota admits finds a device on the L4 node.
const BRONZE_GPUS: usize = 2;
/// Where a kubelet renews its node's Lease, and how often the fake nodes' heartbeats are renewed here.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const NODE_HEARTBEAT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bronze_dra_claims_are_charged_to_its_quota_allocated_on_l4_and_held_to_its_device_classes() {
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

/// A fake GPU node and the devices its driver publishes.
struct GpuNode {
    name: String,
    /// The `nvidia.com/gpu.product` label value.
    product_label: &'static str,
    /// The driver's `productName` attribute.
    product_name: &'static str,
    architecture: &'static str,
    compute_capability: &'static str,
    memory: &'static str,
}

impl GpuNode {
    fn devices(&self) -> Vec<String> {
        (0..BRONZE_GPUS).map(|index| format!("gpu-{index}")).collect()
    }
}

struct Run {
    prefix: String,
    system: String,
    bronze: String,
    tier: String,
    policy: TierPolicy,
    h100: GpuNode,
    l4: GpuNode,
}

impl Run {
    fn new() -> Result<Self, HarnessError> {
        let prefix = random_name("e2e-dra");
        Ok(Self {
            system: format!("{prefix}-system"),
            bronze: format!("{prefix}-bronze"),
            tier: prefixed(&prefix, "bronze"),
            policy: build_dra_policy(&prefix)?,
            h100: GpuNode {
                name: format!("{prefix}-h100"),
                product_label: "NVIDIA-H100-80GB-HBM3",
                product_name: "NVIDIA H100 80GB HBM3",
                architecture: "Hopper",
                compute_capability: "9.0.0",
                memory: "81559Mi",
            },
            l4: GpuNode {
                name: format!("{prefix}-l4"),
                product_label: "NVIDIA-L4",
                product_name: "NVIDIA L4",
                architecture: "Ada Lovelace",
                compute_capability: "8.9.0",
                memory: "23034Mi",
            },
            prefix,
        })
    }

    /// The DeviceClass of the policy's GPU class `class` (`h100.tiergate.io`).
    fn device_class(&self, class: &str) -> Result<String, HarnessError> {
        let found = self.policy.spec.gpu_class(class).and_then(|class| class.device_class_name());
        Ok(found.ok_or_else(|| format!("the DRA sample has no DRA class {class}"))?)
    }

    /// The cluster-scoped objects with fixed names this run's policy owns: (resource, name).
    fn fixed_names(&self) -> Vec<(ApiResource, String)> {
        let mut names = Vec::new();
        for class in &self.policy.spec.gpu_classes {
            names.extend(class.device_class_name().map(|name| (ApiResource::erase::<DeviceClass>(&()), name)));
            names.push((KueueKind::ResourceFlavor.api_resource(), gpu_class_flavor_name(&class.name, None)));
        }
        names
    }
}

/// `samples/dra/policy.yaml` named `prefix`, its tiers (chosen by [`E2E_TIER_LABEL`]) and priority buckets renamed
/// `<prefix>-<name>`, bronze's GPU quota [`BRONZE_GPUS`]; its GPU classes keep their names, since Kueue's
/// `deviceClassMappings` name their DeviceClasses.
fn build_dra_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SAMPLE);
    let mut policy = tiergate::inputs::load_policy(Some(&path))?;
    policy.metadata.name = Some(prefix.to_owned());
    policy.spec.tier_label = E2E_TIER_LABEL.to_owned();
    for bucket in &mut policy.spec.priority_buckets {
        bucket.name = prefixed(prefix, &bucket.name);
    }
    for tier in &mut policy.spec.tiers {
        if tier.name == "bronze" {
            let quota = tier.quotas.get_mut(GPU).ok_or("the DRA sample's bronze tier has no GPU quota")?;
            quota.nominal = Quantity(BRONZE_GPUS.to_string());
        }
        tier.name = prefixed(prefix, &tier.name);
        tier.default_priority_class = tier.default_priority_class.as_deref().map(|class| prefixed(prefix, class));
        tier.max_priority_class = tier.max_priority_class.as_deref().map(|class| prefixed(prefix, class));
    }
    Ok(policy)
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let run = Run::new()?;
    if let Some(reason) = dra_unavailable(client, &run).await? {
        skip(TEST, &reason);
        return Ok(());
    }
    // Tracked before the policy (their owner), so cleanup deletes them after it.
    for (resource, name) in run.fixed_names() {
        cleanup.track(resource, None, &name);
    }
    create_gpu_nodes(client, cleanup, &run).await?;
    let heartbeat = Heartbeat::start(client, vec![run.h100.name.clone(), run.l4.name.clone()]);
    let labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.tier), (RUN_LABEL, &run.prefix)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &[(&run.bronze, labels)]).await?;
    let mut webhook = match InProcessWebhook::start(endpoint, daemon.admission_state()) {
        Ok(webhook) => Some(webhook),
        Err(error) => {
            daemon.stop().await;
            return Err(error);
        }
    };
    let started = std::time::Instant::now();
    let outcome = check_dra(client, cleanup, endpoint, &mut webhook, &run).await;
    println!("{TEST}: scenarios took {:.1} s", started.elapsed().as_secs_f64());
    release_pods(client, &run.bronze).await;
    heartbeat.stop().await;
    cleanup.run().await;
    if let Some(webhook) = webhook.take() {
        webhook.stop().await;
    }
    daemon.stop().await;
    // The daemon may have applied them again between the policy's deletion and its stop; the next run (and the
    // kubenexus render's dry run in gate_holes, which names flavors h100 and l4) needs the names free.
    let removed = remove_fixed_names(client, &run).await;
    outcome.and(removed)
}

/// Why this cluster cannot run the suite, if it cannot: no kube-scheduler, no `resource.k8s.io/v1`, Kueue's
/// Configuration without the sample's mappings, or the fixed names held by a live policy. Leftovers of an earlier
/// run (their policy gone) are deleted and waited out.
async fn dra_unavailable(client: &Client, run: &Run) -> Result<Option<String>, HarnessError> {
    if let Ok(reason) = std::env::var(SCHEDULER_SKIP_ENV)
        && !reason.is_empty()
    {
        return Ok(Some(reason));
    }
    let wanted = ["deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"];
    match client.list_api_group_resources("resource.k8s.io/v1").await {
        Ok(list) => {
            let missing: Vec<&str> =
                wanted.into_iter().filter(|name| !list.resources.iter().any(|served| served.name == *name)).collect();
            if !missing.is_empty() {
                return Ok(Some(format!("the API server does not serve resource.k8s.io/v1 {missing:?}")));
            }
        }
        Err(error) => return Ok(Some(format!("the API server does not serve resource.k8s.io/v1: {error}"))),
    }
    let (namespace, (name, key)) = ("kueue-system", ("kueue-manager-config", "controller_manager_config.yaml"));
    let config = match Api::<ConfigMap>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(Some(map)) => map.data.and_then(|mut data| data.remove(key)),
        Ok(None) => None,
        Err(error) => return Ok(Some(format!("failed to read ConfigMap {namespace}/{name}: {error}"))),
    };
    let Some(config) = config else {
        return Ok(Some(format!("no Kueue Configuration in ConfigMap {namespace}/{name}, key {key}")));
    };
    let live = match parse_kueue_mappings(&config) {
        Ok(live) => live,
        Err(error) => return Ok(Some(format!("Kueue's Configuration does not parse: {error}"))),
    };
    let differences = mapping_differences(&kueue_device_class_mappings(&run.policy.spec), &live);
    if !differences.is_empty() {
        return Ok(Some(format!("Kueue does not charge the DRA sample's DeviceClasses: {}", differences.join("; "))));
    }
    for (resource, name) in run.fixed_names() {
        if let Some(holder) = free_fixed_name(client, &resource, &name).await? {
            return Ok(Some(holder));
        }
    }
    Ok(None)
}

/// Makes `name` free for this run: an object of a TierPolicy that no longer exists is deleted (with the policy's
/// ClusterQueues, which hold a ResourceFlavor) and waited out; one of a live policy, or not tiergate's, is the
/// returned reason to skip.
async fn free_fixed_name(client: &Client, resource: &ApiResource, name: &str) -> Result<Option<String>, HarnessError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let Some(found) = api.get_opt(name).await? else { return Ok(None) };
    let kind = &resource.kind;
    let labels = found.labels();
    match labels.get(POLICY_LABEL).filter(|_| labels.contains_key(MANAGED_BY_LABEL)) {
        None if found.metadata.deletion_timestamp.is_none() => {
            return Ok(Some(format!("{kind} {name} exists and is not tiergate's; this suite needs the name")));
        }
        None => {}
        Some(owner) => {
            if Api::<TierPolicy>::all(client.clone()).get_opt(owner).await.ok().flatten().is_some() {
                return Ok(Some(format!(
                    "{kind} {name} belongs to TierPolicy {owner}, which exists; this suite needs the name for its \
                     own policy"
                )));
            }
            delete_cluster_queues_of(client, owner).await?;
            if found.metadata.deletion_timestamp.is_none() {
                api.delete(name, &DeleteParams::background()).await?;
            }
        }
    }
    let gone = wait_for(&format!("{kind} {name} of an earlier policy to go"), GONE, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
    if let Err(error) = gone {
        return Err(format!("{error}; {}", holders_text(client, &api, name).await).into());
    }
    Ok(None)
}

/// What keeps `name` from going, read now: its deletion and finalizers, and the ClusterQueues that still name it
/// (Kueue keeps a ResourceFlavor while one does).
async fn holders_text(client: &Client, api: &Api<DynamicObject>, name: &str) -> String {
    let found = match api.get_opt(name).await {
        Ok(Some(object)) => format!(
            "deleting {}, finalizers {:?}, labels {:?}",
            object.metadata.deletion_timestamp.is_some(),
            object.finalizers(),
            object.labels()
        ),
        Ok(None) => "gone now".to_owned(),
        Err(error) => format!("failed to read: {error}"),
    };
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    let naming: Vec<String> = match queues.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter(|queue| queue.data["spec"]["resourceGroups"].to_string().contains(&format!("\"{name}\"")))
            .map(|queue| format!("{} (deleting {})", queue.name_any(), queue.metadata.deletion_timestamp.is_some()))
            .collect(),
        Err(error) => vec![format!("failed to list: {error}")],
    };
    format!("{name} now: {found}; ClusterQueues naming it: {naming:?}")
}

/// Deletes the ClusterQueues of policy `policy`, which hold its ResourceFlavors. Their garbage collection may never
/// come: the harness deletes the TierPolicy CRD right after the policy, and a collector that has not yet resolved
/// the owner then never can (seen: a run's ClusterQueues and flavors `h100`, `l4` left behind).
async fn delete_cluster_queues_of(client: &Client, policy: &str) -> Result<(), HarnessError> {
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    let owned = ListParams::default().labels(&owned_label_selector(policy));
    for queue in queues.list(&owned).await?.items {
        if queue.metadata.deletion_timestamp.is_none() {
            queues.delete(&queue.name_any(), &DeleteParams::background()).await?;
        }
    }
    Ok(())
}

/// Deletes this run's objects with fixed names (if its policy still labels them), and its ClusterQueues that hold
/// the ResourceFlavors, and waits until they are gone.
async fn remove_fixed_names(client: &Client, run: &Run) -> Result<(), HarnessError> {
    delete_cluster_queues_of(client, &run.prefix).await?;
    for (resource, name) in run.fixed_names() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let ours = |object: &DynamicObject| object.labels().get(POLICY_LABEL) == Some(&run.prefix);
        if api.get_opt(&name).await?.is_some_and(|object| ours(&object)) {
            api.delete(&name, &DeleteParams::background()).await.ok();
        }
        let gone = wait_for(&format!("{} {name} to be deleted", resource.kind), GONE, || async {
            api.get_opt(&name).await.ok()?.is_none_or(|object| !ours(&object)).then_some(())
        })
        .await;
        if let Err(error) = gone {
            return Err(format!("{error}; {}", holders_text(client, &api, &name).await).into());
        }
    }
    Ok(())
}

/// Renews the fake nodes' Leases and Ready heartbeats every [`NODE_HEARTBEAT`] until stopped (or dropped), so that
/// a node lifecycle controller (a real cluster's; the throwaway plane runs none) keeps them Ready and untainted.
struct Heartbeat {
    stop: CancellationToken,
    task: JoinHandle<()>,
    _stop_on_drop: DropGuard,
}

impl Heartbeat {
    fn start(client: &Client, nodes: Vec<String>) -> Self {
        let stop = CancellationToken::new();
        let (token, client) = (stop.clone(), client.clone());
        let task = tokio::spawn(async move {
            let renew_all = async || {
                for node in &nodes {
                    if let Err(error) = renew_node(&client, node).await {
                        println!("{TEST}: failed to renew node {node}'s heartbeat: {error}");
                    }
                }
            };
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    () = async { renew_all().await; tokio::time::sleep(NODE_HEARTBEAT).await } => {}
                }
            }
        });
        Self { _stop_on_drop: stop.clone().drop_guard(), stop, task }
    }

    /// Stops renewing and waits until no renewal is in flight (before the nodes are deleted).
    async fn stop(self) {
        self.stop.cancel();
        if let Err(error) = self.task.await {
            println!("{TEST}: the node heartbeat task failed: {error}");
        }
    }
}

/// What a kubelet does for `node`: its Lease renewed, its Ready condition heartbeat now.
async fn renew_node(client: &Client, node: &str) -> Result<(), HarnessError> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}});
    lease["spec"]["renewTime"] = serde_json::to_value(MicroTime(now))?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    leases.patch(node, &PatchParams::apply(HARNESS_MANAGER).force(), &Patch::Apply(&lease)).await?;
    let mut ready = json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "fake node of the DRA e2e test"});
    ready["lastHeartbeatTime"] = serde_json::to_value(Time(now))?;
    let status = json!({"status": {"conditions": [ready]}});
    Api::<Node>::all(client.clone()).patch_status(node, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// The H100 and L4 nodes (Ready, schedulable) and one ResourceSlice each, as NVIDIA's driver publishes them.
async fn create_gpu_nodes(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<(), HarnessError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    for node in [&run.h100, &run.l4] {
        let body: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": {
                PRODUCT_LABEL: node.product_label, "kubernetes.io/hostname": node.name}},
        }))?;
        nodes.create(&PostParams::default(), &body).await?;
        cleanup.track(ApiResource::erase::<Node>(&()), None, &node.name);
        let resources = json!({"cpu": "48", "memory": "192Gi", "pods": "110"});
        let status = json!({"status": {"capacity": resources, "allocatable": resources}});
        nodes.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        renew_node(client, &node.name).await?;
        cleanup.track(ApiResource::erase::<Lease>(&()), Some(NODE_LEASE_NAMESPACE), &node.name);
        // The API server's admission taints a new node not-ready; no node lifecycle controller lifts it here.
        nodes.patch(&node.name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": []}}))).await?;

        let devices: Vec<Value> = node
            .devices()
            .iter()
            .enumerate()
            .map(|(index, device)| {
                json!({"name": device,
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": format!("GPU-{}-{index}", node.name)},
                        "productName": {"string": node.product_name},
                        "brand": {"string": "Nvidia"},
                        "architecture": {"string": node.architecture},
                        "cudaComputeCapability": {"version": node.compute_capability},
                        "driverVersion": {"version": "580.65.6"},
                        "cudaDriverVersion": {"version": "13.0.0"},
                        "index": {"int": index},
                        "minor": {"int": index},
                    },
                    "capacity": {"memory": {"value": node.memory}}})
            })
            .collect();
        let slice_name = format!("{}-{DRIVER}", node.name);
        let slice: ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": slice_name},
            "spec": {"driver": DRIVER, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }))?;
        slices.create(&PostParams::default(), &slice).await?;
        cleanup.track(ApiResource::erase::<ResourceSlice>(&()), None, &slice_name);
    }
    Ok(())
}

async fn check_dra(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &mut Option<InProcessWebhook>,
    run: &Run,
) -> Result<(), HarnessError> {
    let (l4_class, h100_class) = (run.device_class("l4")?, run.device_class("h100")?);
    wait_for_daemon_objects(client, run, &[&l4_class, &h100_class]).await?;
    let tenant = tenant_client(client, cleanup, &[&run.bronze]).await?;
    let binding = format!("binding '{}'", gate_name(&run.tier));

    // The gate first, with no webhook registered: a template naming gold's class is refused by the API server.
    let probe = template(run, "probe", &h100_class, None);
    let what = "the API server to enforce the gate on claims (a template naming h100 refused by the binding)";
    wait_for_answer(
        what,
        ENFORCEMENT,
        || create::<ResourceClaimTemplate>(&tenant, run, probe.clone(), true),
        |answer| answer.as_ref().err().filter(|error| error.to_string().contains(&binding)).map(|_| ()),
    )
    .await?;
    let ca_pem = webhook.as_ref().map(|webhook| webhook.ca_pem.clone()).ok_or("the webhook is not running")?;
    register_webhook_with(client, cleanup, endpoint, &ca_pem, &run.prefix, FailurePolicy::Ignore).await?;
    let probe = template(run, "probe", DRIVER, None);
    let what = "the API server to send claims to the webhook (a generic template retargeted to l4)";
    wait_for_answer(
        what,
        ENFORCEMENT,
        || create::<ResourceClaimTemplate>(&tenant, run, probe.clone(), true),
        |answer| answer.as_ref().ok().filter(|stored| class_of_template(stored) == l4_class).map(|_| ()),
    )
    .await?;

    // 1. A Job claiming bronze's class: charged to its quota, allocated on the L4 node.
    create::<ResourceClaimTemplate>(&tenant, run, template(run, "l4", &l4_class, None), false).await?;
    create::<Job>(&tenant, run, gpu_job(run, "l4-1", "l4"), false).await?;
    let mut allocated = vec![admitted_and_allocated(client, run, "l4-1", &l4_class).await?];

    // 2. The driver's generic class is retargeted to bronze's (the policy default): with a selector for H100 the
    // claim fits no device of bronze's class, although the H100 node has both of its devices free.
    let generic = create::<ResourceClaimTemplate>(&tenant, run, template(run, "generic", DRIVER, None), false).await?;
    check_retargeted(&generic, &l4_class)?;
    let sneaky = template(run, "generic-h100", DRIVER, Some(H100_SELECTOR));
    let sneaky = create::<ResourceClaimTemplate>(&tenant, run, sneaky, false).await?;
    check_retargeted(&sneaky, &l4_class)?;
    let selectors = &sneaky["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"];
    ensure(selectors.to_string().contains("NVIDIA H100"), || {
        format!("the claim's own selector was dropped: {sneaky}")
    })?;
    create::<Job>(&tenant, run, gpu_job(run, "sneak-h100", "generic-h100"), false).await?;
    check_no_device_fits(client, run, "sneak-h100", &l4_class).await?;
    delete_job(client, run, "sneak-h100").await?;

    // 3. Bronze's quota of BRONZE_GPUS devices: the next Jobs (the first of them claiming through the retargeted
    // generic template) are admitted and get the L4 node's other devices; one more is held for quota.
    for index in 2..=BRONZE_GPUS {
        let (job, template) = (format!("l4-{index}"), if index == 2 { "generic" } else { "l4" });
        create::<Job>(&tenant, run, gpu_job(run, &job, template), false).await?;
        let device = admitted_and_allocated(client, run, &job, &l4_class).await?;
        ensure(!allocated.contains(&device), || format!("{job} was allocated {device}, already taken: {allocated:?}"))?;
        allocated.push(device);
    }
    let held = format!("l4-{}", BRONZE_GPUS + 1);
    create::<Job>(&tenant, run, gpu_job(run, &held, "l4"), false).await?;
    check_held_for_quota(client, run, &held).await?;

    // 4. Gold's class is refused by the webhook, as a template and as a claim.
    let webhook_part = "admission webhook \"mutate.e2e.tiergate.io\" denied the request";
    let foreign = [format!("names {h100_class}, the DeviceClass of GPU class h100, outside tier {}", run.tier)];
    let outcome = create::<ResourceClaimTemplate>(&tenant, run, template(run, "h100", &h100_class, None), false);
    expect_refused("a template naming h100", outcome.await, webhook_part, &foreign)?;
    let outcome = create::<ResourceClaim>(&tenant, run, claim(run, "h100", &h100_class), false);
    expect_refused("a claim naming h100", outcome.await, webhook_part, &foreign)?;

    // 5. A CPU-only pod is untouched and scheduled.
    check_cpu_pod(client, &tenant, run).await?;

    // Under draGenericClasses: Deny the webhook refuses the generic class instead of retargeting it.
    let mut strict = run.policy.clone();
    strict.spec.admission.dra_generic_classes = DraGenericClassAction::Deny;
    apply_policy(client, &strict).await?;
    let generic_part = format!("names {DRIVER}, the driver's DeviceClass for every one of its devices");
    let what = "the webhook to refuse the generic class under Deny";
    let probe = sneaky_template(run);
    let message = wait_for_answer(
        what,
        CONVERGE,
        || create::<ResourceClaimTemplate>(&tenant, run, probe.clone(), true),
        |answer| answer.as_ref().err().map(message_of).filter(|message| message.contains(&generic_part)),
    )
    .await?;
    ensure(message.contains(webhook_part) && message.contains(&format!("Fix: name DeviceClass {l4_class}")), || {
        format!("the generic class under Deny was refused without the webhook's message: {message}")
    })?;
    println!("{TEST}: generic class under Deny, webhook: {message}");

    // The webhook stops (its registration stays, failurePolicy Ignore): the in-server gate refuses both.
    if let Some(webhook) = webhook.take() {
        webhook.stop().await;
    }
    let probe = template(run, "probe", DRIVER, None);
    let what = "the API server to judge claims without the webhook (a generic template refused by the binding)";
    wait_for_answer(
        what,
        ENFORCEMENT,
        || create::<ResourceClaimTemplate>(&tenant, run, probe.clone(), true),
        |answer| answer.as_ref().err().filter(|error| error.to_string().contains(&binding)).map(|_| ()),
    )
    .await?;
    let gate = ["may name only the tier's DeviceClasses".to_owned()];
    let outcome = create::<ResourceClaimTemplate>(&tenant, run, template(run, "h100-down", &h100_class, None), false);
    expect_refused("a template naming h100, webhook down", outcome.await, &binding, &gate)?;
    let outcome = create::<ResourceClaimTemplate>(&tenant, run, sneaky_template(run), false);
    expect_refused("the generic class with an H100 selector, webhook down", outcome.await, &binding, &gate)?;
    let kept = create::<ResourceClaimTemplate>(&tenant, run, template(run, "l4-down", &l4_class, None), false).await?;
    ensure(class_of_template(&kept) == l4_class, || format!("a template on {l4_class} was changed: {kept}"))
}

/// Calls `ask` (a create, usually a dry run) until `accepted` takes its answer; on timeout the error shows the
/// last answer: the object as stored, or the refusal.
async fn wait_for_answer<T, Ask, Fut>(
    what: &str,
    timeout: Duration,
    ask: Ask,
    accepted: impl Fn(&Result<Value, HarnessError>) -> Option<T>,
) -> Result<T, HarnessError>
where
    Ask: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Value, HarnessError>>,
{
    let last = std::sync::Mutex::new(String::from("no answer yet"));
    let waited = wait_for(what, timeout, || async {
        let answer = ask().await;
        let taken = accepted(&answer);
        if taken.is_none()
            && let Ok(mut last) = last.lock()
        {
            *last = match &answer {
                Ok(stored) => format!("stored as {stored}"),
                Err(error) => format!("refused: {}", message_of(error)),
            };
        }
        taken
    })
    .await;
    waited.map_err(|error| {
        let last = last.lock().map(|last| last.clone()).unwrap_or_default();
        format!("{error}; the last answer: {last}").into()
    })
}

/// The DeviceClasses (this policy's), the bronze LocalQueue and ClusterQueue.
async fn wait_for_daemon_objects(client: &Client, run: &Run, classes: &[&str]) -> Result<(), HarnessError> {
    let bronze = run.policy.spec.tier(&run.tier).ok_or("the DRA policy has no bronze tier")?;
    wait_for_local_queue(client, &run.bronze, &bronze.local_queue(), CONVERGE).await?;
    let device_classes: Api<DeviceClass> = Api::all(client.clone());
    let cluster_queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    wait_for("tiergate's DeviceClasses and bronze's ClusterQueue", CONVERGE, || async {
        for class in classes {
            let found = device_classes.get_opt(class).await.ok()??;
            (found.labels().get(POLICY_LABEL) == Some(&run.prefix)).then_some(())?;
        }
        cluster_queues.get_opt(&cluster_queue_name(&run.tier)).await.ok()?.map(|_| ())
    })
    .await
}

/// A ResourceClaimTemplate of one device of `class`, with an optional CEL selector.
fn template(run: &Run, name: &str, class: &str, selector: Option<&str>) -> Value {
    let mut request = json!({"deviceClassName": class, "allocationMode": "ExactCount", "count": 1});
    if let Some(expression) = selector {
        request["selectors"] = json!([{"cel": {"expression": expression}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": run.bronze},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}})
}

fn sneaky_template(run: &Run) -> Value {
    template(run, "generic-h100-again", DRIVER, Some(H100_SELECTOR))
}

fn claim(run: &Run, name: &str, class: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": run.bronze},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": 1}}]}}})
}

/// A one-pod Job whose pod claims one device through ResourceClaimTemplate `template`; the tenant writes no
/// queue, class or suspend (the webhook does).
fn gpu_job(run: &Run, name: &str, template: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": run.bronze},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "claims": [{"name": "gpu"}]}}]}}}})
}

fn class_of_template(stored: &Value) -> &str {
    stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"].as_str().unwrap_or_default()
}

fn check_retargeted(stored: &Value, l4_class: &str) -> Result<(), HarnessError> {
    let annotation = stored["metadata"]["annotations"][RETARGET_ANNOTATION].as_str().unwrap_or_default();
    let expected = format!("devices.requests[0].exactly.deviceClassName: {DRIVER} -> {l4_class}");
    ensure(class_of_template(stored) == l4_class && annotation == expected, || {
        format!("a template naming {DRIVER} was not retargeted to {l4_class} (annotation {expected:?}): {stored}")
    })?;
    let name = stored["metadata"]["name"].as_str().unwrap_or_default();
    println!("{TEST}: template {name} stored with {RETARGET_ANNOTATION}: {annotation}");
    Ok(())
}

/// Creates `body` in the bronze namespace as `as_client` (a dry run when `dry_run`); the object as stored.
async fn create<K>(as_client: &Client, run: &Run, body: Value, dry_run: bool) -> Result<Value, HarnessError>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(as_client.clone(), &run.bronze);
    let object: K = serde_json::from_value(body)?;
    let stored = api.create(&PostParams { dry_run, ..PostParams::default() }, &object).await?;
    Ok(serde_json::to_value(stored)?)
}

/// The Workload of Job `job` in bronze, as JSON.
async fn workload_of(client: &Client, run: &Run, job: &str) -> Option<Value> {
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), &run.bronze, &workload_resource());
    let list = workloads.list(&ListParams::default()).await.ok()?;
    let workload = list.items.into_iter().find(|workload| {
        workload.metadata.owner_references.iter().flatten().any(|owner| owner.kind == "Job" && owner.name == job)
    })?;
    serde_json::to_value(workload).ok()
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|condition| condition["type"] == type_)
}

fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|condition| condition["status"] == "True")
}

/// The one pod of Job `job`, as JSON.
async fn pod_of(client: &Client, run: &Run, job: &str) -> Option<Value> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &run.bronze);
    let list = pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await.ok()?;
    serde_json::to_value(list.items.into_iter().next()?).ok()
}

/// The ResourceClaim made for `pod`'s claim `gpu`, as JSON.
async fn claim_of(client: &Client, run: &Run, pod: &Value) -> Option<Value> {
    let statuses = pod["status"]["resourceClaimStatuses"].as_array()?;
    let name = statuses.iter().find(|status| status["name"] == "gpu")?["resourceClaimName"].as_str()?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &run.bronze);
    serde_json::to_value(claims.get_opt(name).await.ok()??).ok()
}

/// Job `job` is admitted by Kueue in bronze's queue on flavor l4, charged one `nvidia.com/gpu`, and its pod is
/// bound to the L4 node with its claim (of `class`) allocated one of that node's devices; returns the device.
async fn admitted_and_allocated(client: &Client, run: &Run, job: &str, class: &str) -> Result<String, HarnessError> {
    let workload = wait_for(&format!("Kueue to admit {job}"), SCHEDULED, || async {
        workload_of(client, run, job).await.filter(|workload| is_true(workload, "Admitted"))
    })
    .await;
    let workload = with_job_state(client, run, job, workload).await?;
    let assignment = &workload["status"]["admission"]["podSetAssignments"][0];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let (flavor, usage) = (text(&assignment["flavors"][GPU]), text(&assignment["resourceUsage"][GPU]));
    let queue = text(&workload["status"]["admission"]["clusterQueue"]);
    println!("{TEST}: {job} admitted by ClusterQueue {queue}, flavor {flavor}, resourceUsage {GPU}: {usage}");
    ensure(
        flavor == gpu_class_flavor_name("l4", None) && usage == "1" && queue == cluster_queue_name(&run.tier),
        || format!("{job} is not charged one {GPU} of bronze's l4 flavor: {assignment} in {queue}"),
    )?;
    let allocated = wait_for(&format!("{job}'s pod bound with its claim allocated"), SCHEDULED, || async {
        let pod = pod_of(client, run, job).await?;
        pod["spec"]["nodeName"].as_str()?;
        let claim = claim_of(client, run, &pod).await?;
        claim["status"]["allocation"].is_object().then_some((pod, claim))
    })
    .await;
    let (pod, claim) = with_job_state(client, run, job, allocated).await?;
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    let results = claim["status"]["allocation"]["devices"]["results"].as_array().cloned().unwrap_or_default();
    let [result] = results.as_slice() else {
        return Err(format!("{job}'s claim was allocated {} devices, not 1: {results:?}", results.len()).into());
    };
    let (pool, device) = (result["pool"].as_str().unwrap_or_default(), result["device"].as_str().unwrap_or_default());
    let published = published_device(client, pool, device).await?;
    let product = published.as_ref().and_then(|(_, attributes)| attributes["productName"]["string"].as_str());
    let slice_node = published.as_ref().map(|(node, _)| node.as_str());
    let label = Api::<Node>::all(client.clone()).get(node).await?.labels().get(PRODUCT_LABEL).cloned();
    let requested = claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"].as_str().unwrap_or_default();
    let driver = result["driver"].as_str().unwrap_or_default();
    println!(
        "{TEST}: {job}'s pod bound to node {node} ({PRODUCT_LABEL}={}); its claim {} ({requested}) allocated \
         {driver}/{pool}/{device} (productName {:?})",
        label.as_deref().unwrap_or_default(),
        claim["metadata"]["name"].as_str().unwrap_or_default(),
        product.unwrap_or_default(),
    );
    ensure(
        driver == DRIVER
            && requested == class
            && slice_node == Some(node)
            && product == Some(run.l4.product_name)
            && label.as_deref() == Some(run.l4.product_label),
        || format!("{job}'s claim is not one {class} device of its L4 node {node}: {}", claim["status"]),
    )?;
    Ok(format!("{pool}/{device}"))
}

/// The node and attributes of `device` of pool `pool` as the driver's ResourceSlices publish it.
async fn published_device(client: &Client, pool: &str, device: &str) -> Result<Option<(String, Value)>, HarnessError> {
    let slices = Api::<ResourceSlice>::all(client.clone()).list(&ListParams::default()).await?;
    for slice in slices.items {
        let spec = slice.spec;
        if spec.driver != DRIVER || spec.pool.name != pool {
            continue;
        }
        let found = spec.devices.iter().flatten().find(|published| published.name == device);
        if let Some(published) = found {
            return Ok(Some((spec.node_name.unwrap_or_default(), serde_json::to_value(&published.attributes)?)));
        }
    }
    Ok(None)
}

/// No device of the cluster fits Job `job`'s claim (retargeted to `class`, with a selector for H100): Kueue 0.19
/// evaluates the claim's selectors against the ResourceSlices and keeps the Workload inadmissible, saying so (no
/// quota taken, no pod); Kueue 0.17 evaluates no CEL selector and keeps it inadmissible for having one; a Kueue
/// that leaves devices to the scheduler admits it, and kube-scheduler finds no node for the pod. Either way nothing
/// is allocated.
async fn check_no_device_fits(client: &Client, run: &Run, job: &str, class: &str) -> Result<(), HarnessError> {
    let verdict = wait_for(&format!("Kueue's or kube-scheduler's verdict on {job}"), SCHEDULED, || async {
        let workload = workload_of(client, run, job).await?;
        let reserved = condition(&workload, "QuotaReserved");
        if let Some(reserved) = reserved.filter(|reserved| reserved["status"] == "False")
            && let Some(message) = reserved["message"].as_str().filter(|message| message.contains(class))
        {
            return Some(("Kueue", message.to_owned(), None));
        }
        if let Some(reserved) = reserved.filter(|reserved| reserved["reason"] == "Inadmissible")
            && let Some(message) =
                reserved["message"].as_str().filter(|message| message.contains("CEL selectors are not supported"))
        {
            return Some(("Kueue (before 0.18: no CEL selector evaluated)", message.to_owned(), None));
        }
        // kube-scheduler's end state: unschedulable for the claim (an earlier attempt may have failed otherwise).
        let pod = pod_of(client, run, job).await?;
        let scheduled = condition(&pod, "PodScheduled")?;
        (scheduled["status"] == "False" && scheduled["reason"] == "Unschedulable").then_some(())?;
        let message = scheduled["message"].as_str().unwrap_or_default().to_owned();
        message.contains("claim").then_some(())?;
        let claim = claim_of(client, run, &pod).await?;
        Some(("kube-scheduler", message, Some((pod, claim))))
    })
    .await;
    let (source, message, placed) = with_job_state(client, run, job, verdict).await?;
    println!("{TEST}: {job}: {source} finds no device for its claim: {message}");
    match placed {
        None => {
            let workload = workload_of(client, run, job).await.ok_or_else(|| format!("{job}'s Workload is gone"))?;
            let pod = pod_of(client, run, job).await;
            ensure(!is_true(&workload, "Admitted") && pod.is_none(), || {
                format!("{job} is inadmissible but runs: {}", job_state_now(&workload, pod.as_ref()))
            })
        }
        Some((pod, claim)) => {
            ensure(pod["spec"]["nodeName"].is_null() && claim["status"]["allocation"].is_null(), || {
                format!("{job}'s claim was allocated: {} (pod on {})", claim["status"], pod["spec"]["nodeName"])
            })
        }
    }
}

fn job_state_now(workload: &Value, pod: Option<&Value>) -> String {
    format!("Workload status {}; pod {pod:?}", workload["status"])
}

/// What Kueue, the Job controller and kube-scheduler show of Job `job`, for a failure message.
async fn job_state(client: &Client, run: &Run, job: &str) -> String {
    let workload = workload_of(client, run, job).await.map(|workload| workload["status"].clone());
    let pod = pod_of(client, run, job).await;
    let claim = match &pod {
        Some(pod) => {
            claim_of(client, run, pod).await.map(|claim| json!({"spec": claim["spec"], "status": claim["status"]}))
        }
        None => None,
    };
    let pod = pod.map(|pod| json!({"spec.nodeName": pod["spec"]["nodeName"], "status": pod["status"]}));
    format!("Workload status {workload:?}; pod {pod:?}; claim {claim:?}")
}

/// `waited`, or its error with the state of Job `job`.
async fn with_job_state<T>(
    client: &Client,
    run: &Run,
    job: &str,
    waited: Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    match waited {
        Ok(value) => Ok(value),
        Err(error) => Err(format!("{error}; {}", job_state(client, run, job).await).into()),
    }
}

/// Deletes Job `job` and waits until its Workload is gone (its quota released).
async fn delete_job(client: &Client, run: &Run, job: &str) -> Result<(), HarnessError> {
    Api::<Job>::namespaced(client.clone(), &run.bronze).delete(job, &DeleteParams::background()).await?;
    wait_for(&format!("{job}'s Workload to be deleted"), SCHEDULED, || async {
        workload_of(client, run, job).await.is_none().then_some(())
    })
    .await
}

/// Job `job`'s Workload is not admitted and Kueue says why: bronze's `nvidia.com/gpu` quota is used up, as its
/// ClusterQueue's usage shows.
async fn check_held_for_quota(client: &Client, run: &Run, job: &str) -> Result<(), HarnessError> {
    // The end state, Kueue's quota verdict, not the first QuotaReserved=False seen: a Workload can say False for
    // another passing reason before the scheduler has tried it. A wrong final verdict shows in the error's state.
    let what = format!("Kueue to hold {job} for want of {GPU} quota (QuotaReserved=False, \"insufficient\")");
    let message = wait_for(&what, SCHEDULED, || async {
        let workload = workload_of(client, run, job).await?;
        let reserved = condition(&workload, "QuotaReserved")?;
        let message = reserved["message"].as_str()?;
        let held = reserved["status"] == "False" && message.contains("insufficient") && message.contains(GPU);
        held.then(|| message.to_owned())
    })
    .await;
    let message = with_job_state(client, run, job, message).await?;
    println!("{TEST}: {job} held: {message}");
    let workload = workload_of(client, run, job).await.ok_or_else(|| format!("{job}'s Workload is gone"))?;
    ensure(!is_true(&workload, "Admitted"), || {
        format!("{job} is held for quota yet admitted: {}", workload["status"])
    })?;
    // Kueue writes the ClusterQueue's status after its own cache has admitted: wait for it to show the quota used.
    let queue = cluster_queue_name(&run.tier);
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    let gpus_used = || async {
        let found = queues.get(&queue).await.ok()?;
        let usage = found.data["status"]["flavorsUsage"].as_array()?.clone();
        let total = usage
            .iter()
            .filter(|flavor| flavor["name"] == gpu_class_flavor_name("l4", None))
            .flat_map(|flavor| flavor["resources"].as_array().cloned().unwrap_or_default())
            .find(|resource| resource["name"] == GPU)
            .and_then(|resource| resource["total"].as_str().map(str::to_owned));
        Some((total, usage))
    };
    let quota = BRONZE_GPUS.to_string();
    let shown = wait_for(&format!("ClusterQueue {queue} to show {quota} {GPU} used"), SCHEDULED, || async {
        gpus_used().await.and_then(|(total, _)| total).filter(|total| *total == quota)
    })
    .await;
    if let Err(error) = shown {
        return Err(format!("{error}; its flavorsUsage: {:?}", gpus_used().await.map(|(_, usage)| usage)).into());
    }
    println!("{TEST}: ClusterQueue {queue} status.flavorsUsage: l4 {GPU} total {quota}");
    Ok(())
}

/// Refused, by the webhook or the gate as `source` names, with every one of `parts` in the message.
fn expect_refused(
    what: &str,
    outcome: Result<Value, HarnessError>,
    source: &str,
    parts: &[String],
) -> Result<(), HarnessError> {
    let message = match outcome {
        Ok(stored) => return Err(format!("{what} was stored: {stored}").into()),
        Err(error) => message_of(&error),
    };
    println!("{TEST}: {what}: {message}");
    ensure(message.contains(source) && parts.iter().all(|part| message.contains(part.as_str())), || {
        format!("{what}: refused without {source:?} and {parts:?}: {message}")
    })
}

/// The API server's message of a refusal (the Status's `message`), or the error as text.
fn message_of(error: &HarnessError) -> String {
    match error.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status.message.clone(),
        _ => error.to_string(),
    }
}

/// A CPU-only pod is stored as written (no node selector, no tiergate mark or queue) and kube-scheduler binds it.
async fn check_cpu_pod(client: &Client, tenant: &Client, run: &Run) -> Result<(), HarnessError> {
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": run.bronze},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}});
    let stored = create::<Pod>(tenant, run, body, false).await?;
    let metadata = &stored["metadata"];
    ensure(
        stored["spec"]["nodeSelector"].is_null()
            && stored["spec"]["affinity"].is_null()
            && stored["spec"]["schedulingGates"].is_null()
            && metadata["annotations"].as_object().is_none_or(|map| !map.keys().any(|key| key.contains("tiergate")))
            && metadata["labels"].as_object().is_none_or(|map| !map.keys().any(|key| key.contains("kueue"))),
        || format!("the CPU-only pod was changed: {stored}"),
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &run.bronze);
    let node = wait_for("the CPU-only pod to be scheduled", SCHEDULED, || async {
        pods.get("cpu").await.ok()?.spec?.node_name
    })
    .await;
    let node = match node {
        Ok(node) => node,
        Err(error) => {
            let pod = pods.get_opt("cpu").await.ok().flatten().map(|pod| serde_json::to_value(pod).unwrap_or_default());
            let scheduled = pod.as_ref().and_then(|pod| condition(pod, "PodScheduled").cloned());
            return Err(format!("{error}; its PodScheduled condition now: {scheduled:?}").into());
        }
    };
    println!("{TEST}: the CPU-only pod was stored unchanged and bound to {node}");
    Ok(())
}
