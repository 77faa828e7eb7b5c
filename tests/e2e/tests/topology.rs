//! End-to-end test of topology-aware placement by tier (issue 29) against a real API server with Kueue v0.19+:
//! eight fake GPU nodes in two racks of four (one block), a GPU class naming the block, rack and hostname levels,
//! gold with `topology: {required: rack, minPods: 4}` and bronze without a rule, Jobs through the real webhook.
//! - A gold 4-pod Job is admitted with all four pods on nodes of one rack (read from the Workload's
//!   `topologyAssignment`), and where a kube-scheduler runs its pods are bound to exactly those nodes.
//! - A gold 6-pod Job waits (no rack has 6 GPUs), and `why` shows Kueue's topology message.
//! - A bronze 6-pod Job is admitted across racks.
//!
//! Node objects stand in for machines: the control plane runs without node lifecycle, so the Ready condition set
//! through the status subresource stays; no kubelet ends a pod bound to one, so the suite deletes such pods at once
//! (grace period 0). Skipped (and passing) without a reachable cluster, Kueue's v1beta2 CRDs or
//! `TIERGATE_E2E_WEBHOOK_HOST`. Nodes and namespaces are deleted at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::cmd::build_live_answer;
use tiergate::live::{KubectlConnection, connect};
use tiergate::plan::class_flavor_name;
use tiergate::plan::names::cluster_queue_name;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, SCHEDULER_SKIP_ENV, ensure, is_admitted, job_workload,
    plain_gpu_job, random_name, release_pods, start_tiergate, status_condition, wait_for, wait_until_admitted_as,
};
use tiergate_kueue::{PODSET_REQUIRED_TOPOLOGY_ANNOTATION, decode_topology_assignment};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// Kueue objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(60);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);
/// Kueue reads the nodes into its topology cache and schedules in cycles; every Job is decided well within this.
const SCHEDULED: Duration = Duration::from_secs(120);
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
const BLOCK_LABEL: &str = "e2e.tiergate.io/block";
const RACK_LABEL: &str = "e2e.tiergate.io/rack";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
const RACKS: usize = 2;
const NODES_PER_RACK: usize = 4;

struct Run {
    prefix: String,
    system: String,
    gold: String,
    bronze: String,
    policy: TierPolicy,
}

impl Run {
    fn new() -> Result<Self, HarnessError> {
        let prefix = random_name("e2e");
        Ok(Self {
            system: format!("{prefix}-system"),
            gold: format!("{prefix}-gold"),
            bronze: format!("{prefix}-bronze"),
            policy: build_policy(&prefix)?,
            prefix,
        })
    }

    fn class(&self) -> String {
        format!("{}-h100", self.prefix)
    }

    /// The class's ResourceFlavor (its name carries the Topology).
    fn flavor(&self) -> String {
        let class = self.policy.spec.gpu_class(&self.class());
        class.map_or_else(|| self.class(), class_flavor_name)
    }

    fn node(&self, rack: usize, index: usize) -> String {
        format!("{}-r{rack}-n{index}", self.prefix)
    }

    fn rack(&self, rack: usize) -> String {
        format!("{}-rack-{rack}", self.prefix)
    }
}

/// Gold (required rack from 4 pods) and bronze (no rule) on one GPU class with block, rack and hostname levels.
fn build_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let name = |base: &str| format!("{prefix}-{base}");
    let quotas = json!({"nvidia.com/gpu": {"nominal": "8"}, "cpu": {"nominal": "64"}, "memory": {"nominal": "64Gi"}});
    let policy = json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [{
                "name": name("h100"),
                "nodeLabels": {CLASS_LABEL: name("h100")},
                "topologyLevels": [
                    {"name": "block", "nodeLabel": BLOCK_LABEL},
                    {"name": "rack", "nodeLabel": RACK_LABEL},
                    {"name": "host", "nodeLabel": HOSTNAME_LABEL},
                ],
            }],
            "priorityBuckets": [{"name": name("default"), "minScore": 0, "value": 100}],
            "scoring": {"enabled": false},
            "tiers": [
                {"name": name("gold"), "gpuClass": name("h100"), "quotas": quotas,
                 "topology": {"required": "rack", "minPods": 4}},
                {"name": name("bronze"), "gpuClass": name("h100"), "quotas": quotas},
            ],
        }
    });
    Ok(serde_json::from_value(policy)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gold_jobs_stay_in_one_rack_or_wait_and_bronze_jobs_spread_across_racks() {
    const TEST: &str = "gold_jobs_stay_in_one_rack_or_wait_and_bronze_jobs_spread_across_racks";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let run = Run::new()?;
    create_nodes(client, cleanup, &run).await?;
    let daemon = start_daemon(client, cleanup, &run).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        let outcome = check_placements(client, cleanup, endpoint, webhook, &run).await;
        // The admitted Jobs' pods are bound to fake nodes: without a kubelet their graceful deletion never ends,
        // so they are deleted at once, and the namespaces go with the rest of the cleanup.
        for namespace in [&run.gold, &run.bronze] {
            release_pods(client, namespace).await;
        }
        outcome
    })
    .await
}

/// 2 racks × 4 nodes, one GPU each, Ready.
async fn create_nodes(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<(), HarnessError> {
    let nodes: Api<Node> = Api::all(client.clone());
    for rack in 0..RACKS {
        for index in 0..NODES_PER_RACK {
            let name = run.node(rack, index);
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {
                    CLASS_LABEL: run.class(),
                    BLOCK_LABEL: format!("{}-block-0", run.prefix),
                    RACK_LABEL: run.rack(rack),
                    HOSTNAME_LABEL: name,
                }},
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
            cleanup.track(ApiResource::erase::<Node>(&()), None, &name);
            let resources = json!({"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi", "pods": "110"});
            let status = json!({"status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "fake node of the topology e2e test"}],
            }});
            nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
            // The API server's TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
            // controller that would lift it once Ready is off in the control plane, so lift it here.
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": []}}))).await?;
        }
    }
    Ok(())
}

async fn start_daemon(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    let gold_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.gold), (RUN_LABEL, &run.prefix)];
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.bronze), (RUN_LABEL, &run.prefix)];
    let tenants = [(run.gold.as_str(), gold_labels), (run.bronze.as_str(), bronze_labels)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &tenants).await?;
    let topologies = KueueKind::Topology.api_resource();
    let flavors = KueueKind::ResourceFlavor.api_resource();
    let local_queues = KueueKind::LocalQueue.api_resource();
    wait_for("the Topology, the TAS flavor and both LocalQueues", CONVERGE, || async {
        let topology: Api<DynamicObject> = Api::all_with(client.clone(), &topologies);
        let found = topology.list(&ListParams::default().labels(&format!("tiergate.io/policy={}", run.prefix))).await;
        let name = found.ok()?.items.first()?.name_any();
        let flavor: Api<DynamicObject> = Api::all_with(client.clone(), &flavors);
        let flavor = flavor.get_opt(&run.flavor()).await.ok()??;
        (flavor.data["spec"]["topologyName"].as_str() == Some(name.as_str())).then_some(())?;
        for (tenant, tier) in [(&run.gold, &run.policy.spec.tiers[0]), (&run.bronze, &run.policy.spec.tiers[1])] {
            let queues: Api<DynamicObject> = Api::namespaced_with(client.clone(), tenant, &local_queues);
            queues.get_opt(&tier.local_queue()).await.ok()??;
        }
        Some(())
    })
    .await?;
    Ok(daemon)
}

/// Waits until a dry-run gold Job comes back queued with the rack rule. The rule is the webhook's own edit: the
/// in-server gate's mutating half (in effect since the daemon applied it) also writes the queue label, so a queued
/// probe alone would pass before the API server calls the webhook, and gold-4 would be stored without the rule.
async fn wait_until_mutating(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let probe = plain_gpu_job(&run.gold, "probe", 4, 1)?;
    let ruled = |stored: &Job| {
        stored.labels().contains_key(QUEUE_NAME_LABEL) && template_topology_rule(stored) == Some(RACK_LABEL)
    };
    let what = "the API server to call the webhook (a dry-run gold Job stored with the rack rule)";
    wait_until_admitted_as(client, what, WEBHOOK_PROPAGATION, &probe, ruled).await
}

/// The topology rule (`kueue.x-k8s.io/podset-required-topology`) on a Job's pod template, if any.
fn template_topology_rule(job: &Job) -> Option<&str> {
    let metadata = job.spec.as_ref()?.template.metadata.as_ref()?;
    metadata.annotations.as_ref()?.get(PODSET_REQUIRED_TOPOLOGY_ANNOTATION).map(String::as_str)
}

/// Pods per node of the first pod set's topology assignment (`None` when there is none).
fn pods_per_node(workload: &Value) -> Option<BTreeMap<String, u64>> {
    let assignment = workload["status"]["admission"]["podSetAssignments"][0].get("topologyAssignment")?;
    let (levels, domains) = decode_topology_assignment(assignment);
    let host = levels.iter().position(|level| level == HOSTNAME_LABEL)?;
    let mut nodes = BTreeMap::new();
    for domain in domains {
        *nodes.entry(domain.values.get(host)?.clone()).or_insert(0) += domain.pods;
    }
    Some(nodes)
}

/// The racks of `nodes` (the test's own node names).
fn racks_of(run: &Run, nodes: &BTreeMap<String, u64>) -> BTreeSet<String> {
    (0..RACKS)
        .filter(|rack| (0..NODES_PER_RACK).any(|index| nodes.contains_key(&run.node(*rack, index))))
        .map(|rack| run.rack(rack))
        .collect()
}

async fn create_job(client: &Client, namespace: &str, name: &str, pods: u32) -> Result<Job, HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    Ok(jobs.create(&PostParams::default(), &plain_gpu_job(namespace, name, pods, 1)?).await?)
}

async fn check_placements(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
    wait_until_mutating(client, run).await?;

    // Gold, 4 pods: the webhook writes the rack rule; Kueue admits it inside one rack.
    let stored = create_job(client, &run.gold, "gold-4", 4).await?;
    let written = template_topology_rule(&stored);
    ensure(written == Some(RACK_LABEL), || format!("gold-4 carries {written:?}, expected {RACK_LABEL}"))?;
    // Admitted is final here (no waitForPodsReady, nothing preempts in this queue), so a slow poll cannot miss it.
    let gold_four = wait_for("Kueue to admit gold-4 with a topology assignment", SCHEDULED, || async {
        let workload = job_workload(client, &run.gold, "gold-4").await?;
        (is_admitted(&workload) && pods_per_node(&workload).is_some()).then_some(workload)
    })
    .await;
    let gold_four = with_placement(client, run, &run.gold, "gold-4", gold_four).await?;
    let nodes = pods_per_node(&gold_four).unwrap_or_default();
    let racks = racks_of(run, &nodes);
    println!("gold-4 admitted on {nodes:?} (racks {racks:?})");
    ensure(nodes.values().sum::<u64>() == 4 && racks.len() == 1, || {
        format!("gold-4 is not 4 pods within one rack: {nodes:?} in racks {racks:?}")
    })?;

    check_pods_placed(client, run, (&run.gold, "gold-4"), &nodes).await?;

    // Free the rack again: the Job, its pods and its Workload go. Pods bound to a fake node never finish a graceful
    // deletion (no kubelet confirms it), which would hold the Job (foreground) and its Workload for good: whether
    // kube-scheduler had bound them before this delete was a race. They are deleted at once instead.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.gold);
    jobs.delete("gold-4", &DeleteParams::foreground()).await?;
    force_delete_pods(client, &run.gold, "gold-4").await?;
    let deleted = wait_for("gold-4's Workload and pods to be deleted", SCHEDULED, || async {
        let pods = job_pods(client, &run.gold, "gold-4").await.ok()?;
        (pods.is_empty() && job_workload(client, &run.gold, "gold-4").await.is_none()).then_some(())
    })
    .await;
    with_placement(client, run, &run.gold, "gold-4", deleted).await?;

    // Gold, 6 pods: no rack has 6 GPUs, so it waits, and Kueue says why.
    create_job(client, &run.gold, "gold-6", 6).await?;
    let message = wait_for("Kueue to leave gold-6 pending with a topology message", SCHEDULED, || async {
        let workload = job_workload(client, &run.gold, "gold-6").await?;
        let reserved = status_condition(&workload, "QuotaReserved")?;
        let message = reserved["message"].as_str()?.to_owned();
        (reserved["status"] == "False" && message.to_ascii_lowercase().contains("topology")).then_some(message)
    })
    .await;
    let message = with_placement(client, run, &run.gold, "gold-6", message).await?;
    println!("gold-6 pending: {message}");
    check_why_shows_pending(run, &message).await?;

    // Bronze, 6 pods, no rule: admitted, across racks.
    let stored = create_job(client, &run.bronze, "bronze-6", 6).await?;
    let annotations =
        stored.spec.as_ref().and_then(|spec| spec.template.metadata.as_ref()).and_then(|m| m.annotations.clone());
    ensure(annotations.unwrap_or_default().keys().all(|key| !key.contains("topology")), || {
        "bronze-6 got a topology annotation although bronze has no rule".to_owned()
    })?;
    let bronze = wait_for("Kueue to admit bronze-6", SCHEDULED, || async {
        let workload = job_workload(client, &run.bronze, "bronze-6").await?;
        is_admitted(&workload).then_some(workload)
    })
    .await;
    let bronze = with_placement(client, run, &run.bronze, "bronze-6", bronze).await?;
    let nodes = pods_per_node(&bronze).ok_or("bronze-6 was admitted without a topology assignment")?;
    let racks = racks_of(run, &nodes);
    println!("bronze-6 admitted on {nodes:?} (racks {racks:?})");
    ensure(nodes.values().sum::<u64>() == 6 && racks.len() == RACKS, || {
        format!("bronze-6 is not 6 pods across both racks: {nodes:?} in racks {racks:?}")
    })?;
    let (_, table) = why(run, &run.bronze, "bronze-6").await?;
    let shown = nodes.keys().all(|node| table.contains(&format!("{HOSTNAME_LABEL}={node}")));
    ensure(shown, || format!("why does not show bronze-6's topology assignment {nodes:?}:\n{table}"))?;
    let still = job_workload(client, &run.gold, "gold-6").await.ok_or("gold-6's Workload is gone")?;
    ensure(!is_admitted(&still), || "gold-6 was admitted although no rack holds 6 GPUs".to_owned())
}

/// `why job/NAME -n NAMESPACE`, built by the library calls the plugin makes: the summary and the table.
async fn why(run: &Run, namespace: &str, job: &str) -> Result<(String, String), HarnessError> {
    let (live, _) = connect(&KubectlConnection::default()).await?;
    let answer = build_live_answer(&live, &format!("job/{job}"), namespace, &run.prefix).await?;
    let table = answer.to_table();
    println!("why job/{job}:\n{table}");
    Ok((answer.summary, table))
}

/// `why` on the waiting gold Job: Kueue's message, the tier's rule, and a sentence saying no domain fits.
async fn check_why_shows_pending(run: &Run, message: &str) -> Result<(), HarnessError> {
    let (summary, table) = why(run, &run.gold, "gold-6").await?;
    ensure(table.contains(message), || format!("why does not show Kueue's message {message:?}:\n{table}"))?;
    ensure(table.contains("required rack"), || format!("why does not show the tier's topology rule:\n{table}"))?;
    ensure(summary.starts_with("Pending: no domain of the topology level"), || {
        format!("why does not say no domain fits: {summary}")
    })
}

/// The pods of Job `job` in `namespace`.
async fn job_pods(client: &Client, namespace: &str, job: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Ok(pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await?.items)
}

/// Deletes the pods of Job `job` at once (grace period 0): no kubelet runs on the fake nodes to end them.
async fn force_delete_pods(client: &Client, namespace: &str, job: &str) -> Result<(), HarnessError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    pods.delete_collection(&DeleteParams::default().grace_period(0), &selector).await?;
    Ok(())
}

/// With a kube-scheduler, Job `job`'s pods end up bound to the nodes of its topology assignment `assigned` (pods
/// per node): Kueue's topology ungater pins each pod to its node, and the scheduler binds it there. Without one
/// (`TIERGATE_E2E_SCHEDULER_SKIP`) pods are never bound, and only the assignment was checked.
async fn check_pods_placed(
    client: &Client,
    run: &Run,
    (namespace, job): (&str, &str),
    assigned: &BTreeMap<String, u64>,
) -> Result<(), HarnessError> {
    if let Ok(reason) = std::env::var(SCHEDULER_SKIP_ENV)
        && !reason.is_empty()
    {
        println!("{job}: its pods' nodes are not checked, no kube-scheduler binds them: {reason}");
        return Ok(());
    }
    let pods = assigned.values().sum::<u64>();
    let what = format!("{job}'s {pods} pods bound to the nodes of its topology assignment {assigned:?}");
    let placed = wait_for(&what, SCHEDULED, || async {
        let listed = job_pods(client, namespace, job).await.ok()?;
        let nodes: Vec<String> = listed.iter().filter_map(|pod| pod.spec.as_ref()?.node_name.clone()).collect();
        (u64::try_from(nodes.len()).ok() == Some(pods) && listed.len() == nodes.len()).then_some(nodes)
    })
    .await;
    let nodes = with_placement(client, run, namespace, job, placed).await?;
    let mut bound: BTreeMap<String, u64> = BTreeMap::new();
    for node in &nodes {
        *bound.entry(node.clone()).or_insert(0) += 1;
    }
    println!("{job}: pods bound to {bound:?}");
    ensure(&bound == assigned, || {
        format!("{job}'s pods are bound to {bound:?}, not its topology assignment {assigned:?}")
    })
}

/// `waited`, or its error followed by [`describe_placement`] of Job `job`.
async fn with_placement<T>(
    client: &Client,
    run: &Run,
    namespace: &str,
    job: &str,
    waited: Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    match waited {
        Ok(value) => Ok(value),
        Err(error) => Err(format!("{error}\n{}", describe_placement(client, run, namespace, job).await).into()),
    }
}

/// What tells why Job `job` is not where a wait wants it, read now: the Job (suspended, queue, rule); each of its
/// Workloads (every condition, the ClusterQueue and flavors admitting it, the topology assignment by node); each
/// pod (phase, node, scheduling gates, hostname selector, PodScheduled); both ClusterQueues; and the run's nodes
/// (rack, Ready, taints, unschedulable, allocatable GPUs), which Kueue's topology cache is built from.
async fn describe_placement(client: &Client, run: &Run, namespace: &str, job: &str) -> String {
    let mut lines = vec![format!("state now of Job {namespace}/{job}:")];
    match Api::<Job>::namespaced(client.clone(), namespace).get_opt(job).await {
        Ok(Some(found)) => lines.push(format!(
            "  Job: suspend {:?}, queue {:?}, rule {:?}, deleting {}",
            found.spec.as_ref().and_then(|spec| spec.suspend),
            found.labels().get(QUEUE_NAME_LABEL),
            template_topology_rule(&found),
            found.metadata.deletion_timestamp.is_some()
        )),
        Ok(None) => lines.push("  Job: none".to_owned()),
        Err(error) => lines.push(format!("  Job: failed to read: {error}")),
    }
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &tiergate::live::fetch::workload_resource());
    match workloads.list(&ListParams::default()).await {
        Ok(list) => {
            let owned: Vec<DynamicObject> = list
                .items
                .into_iter()
                .filter(|workload| {
                    workload.owner_references().iter().any(|owner| owner.kind == "Job" && owner.name == job)
                })
                .collect();
            if owned.is_empty() {
                lines.push("  Workload: none".to_owned());
            }
            for workload in owned {
                let value = serde_json::to_value(&workload).unwrap_or_default();
                let admission = &value["status"]["admission"];
                let flavors: Vec<&Value> = admission["podSetAssignments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|set| &set["flavors"])
                    .collect();
                lines.push(format!(
                    "  Workload {}: deleting {}, admitted by {}, flavors {flavors:?}, topology assignment (pods per \
                     node) {:?}",
                    workload.name_any(),
                    workload.metadata.deletion_timestamp.is_some(),
                    admission["clusterQueue"],
                    pods_per_node(&value)
                ));
                lines.extend(conditions_lines(&value, "    "));
            }
        }
        Err(error) => lines.push(format!("  Workloads: failed to list: {error}")),
    }
    match job_pods(client, namespace, job).await {
        Ok(pods) if pods.is_empty() => lines.push("  pods: none".to_owned()),
        Ok(pods) => {
            for pod in pods {
                let value = serde_json::to_value(&pod).unwrap_or_default();
                let gates: Vec<&str> = value["spec"]["schedulingGates"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|gate| gate["name"].as_str())
                    .collect();
                lines.push(format!(
                    "  pod {}: phase {}, node {}, scheduling gates {gates:?}, {HOSTNAME_LABEL} selector {}, deleting {}",
                    pod.name_any(),
                    value["status"]["phase"],
                    value["spec"]["nodeName"],
                    value["spec"]["nodeSelector"][HOSTNAME_LABEL],
                    pod.metadata.deletion_timestamp.is_some()
                ));
                lines.extend(conditions_lines(&value, "    ").into_iter().filter(|line| line.contains("PodScheduled")));
            }
        }
        Err(error) => lines.push(format!("  pods: failed to list: {error}")),
    }
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    for tier in &run.policy.spec.tiers {
        let name = cluster_queue_name(&tier.name);
        match queues.get_opt(&name).await {
            Ok(Some(queue)) => {
                let value = serde_json::to_value(&queue).unwrap_or_default();
                lines.push(format!(
                    "  ClusterQueue {name}: pending {}, admitted {}",
                    value["status"]["pendingWorkloads"], value["status"]["admittedWorkloads"]
                ));
                lines.extend(conditions_lines(&value, "    "));
            }
            Ok(None) => lines.push(format!("  ClusterQueue {name}: none")),
            Err(error) => lines.push(format!("  ClusterQueue {name}: failed to read: {error}")),
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list(&ListParams::default().labels(&format!("{CLASS_LABEL}={}", run.class()))).await {
        Ok(list) => {
            lines.push(format!("  the run's {} nodes of class {}:", list.items.len(), run.class()));
            for node in list.items {
                let value = serde_json::to_value(&node).unwrap_or_default();
                let ready = status_condition(&value, "Ready").map(|ready| ready["status"].clone());
                lines.push(format!(
                    "    {}: rack {}, Ready {:?}, taints {}, unschedulable {}, allocatable GPUs {}",
                    node.name_any(),
                    value["metadata"]["labels"][RACK_LABEL],
                    ready,
                    value["spec"]["taints"],
                    value["spec"]["unschedulable"],
                    value["status"]["allocatable"]["nvidia.com/gpu"]
                ));
            }
        }
        Err(error) => lines.push(format!("  nodes: failed to list: {error}")),
    }
    lines.join("\n")
}

/// `<indent>type=status (reason: message)` of each of an object's conditions.
fn conditions_lines(object: &Value, indent: &str) -> Vec<String> {
    let conditions = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions
        .iter()
        .map(|condition| {
            format!(
                "{indent}{}={} ({}: {})",
                condition["type"].as_str().unwrap_or_default(),
                condition["status"].as_str().unwrap_or_default(),
                condition["reason"].as_str().unwrap_or_default(),
                condition["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}
