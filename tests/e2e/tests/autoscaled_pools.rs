//! End-to-end tests of autoscaled nodepools (issue 43) against a real API server with Kueue v0.19+, kube-scheduler
//! and a real cluster-autoscaler (kwok cloud provider) that this suite starts: one node group per GPU class of the
//! shipped `samples/spot-mix` policy, min 0 and empty at start, with Jobs through the real webhook.
//! 1. The mission's claim: a 1-GPU Job of silver, then of bronze (tiers without provisioning) grows exactly its
//!    class's group by one node, no other group, and its pod is bound to the new node.
//! 2. A gold Job of 2 × 1 GPU goes through Kueue's ProvisioningRequest (best-effort-atomic scale-up): the h100
//!    group grows by both nodes in one scale-up, and the Workload is admitted only once it is Provisioned.
//! 3. Atomicity: a gold Job of more GPUs than the h100 group can ever hold stays unadmitted, its
//!    ProvisioningRequest is not Provisioned, and no group grows.
//! 4. A check-capacity provisioning class on an `Autoscaled` class is refused: the TierPolicy's Ready condition is
//!    False and names the field.
//!
//! Each policy is the sample with only what isolation needs changed: names prefixed by the run, tiers chosen by
//! [`E2E_TIER_LABEL`], and a run-unique node label on each GPU class, so only this run's node templates match.
//! Timings are printed, never asserted. Skipped (and passing), saying why, without a reachable cluster, Kueue's
//! v1beta2 CRDs, `TIERGATE_E2E_WEBHOOK_HOST`, kube-scheduler, the `cluster-autoscaler` binary or a served
//! ProvisioningRequest CRD (scenario 4 needs only the cluster and Kueue). One test runs at a time, so never two
//! autoscalers; each stops its autoscaler and deletes the nodes it grew, its namespaces and its policy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use serde_json::Value;
use tiergate::admission::TIER_ANNOTATION;
use tiergate::cmd::build_live_answer;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate::validation::validate_policy;
use tiergate_e2e::autoscaler::{self, Autoscaler, NodeGroup};
use tiergate_e2e::control_plane::provisioning::provisioning_request_resource;
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, SCHEDULER_SKIP_ENV, condition_status, ensure, is_admitted,
    job_workload, plain_gpu_job, random_name, repository_file, run_cluster_test, skip, start_tiergate,
    status_condition, wait_for, wait_until_admitted_as,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// The shipped sample the suite serves.
const SAMPLE: &str = "samples/spot-mix/policy.yaml";
/// The node label each GPU class gains, valued `<run>-<class>`: only this run's templates carry it.
const POOL_LABEL: &str = "e2e.tiergate.io/gpu-pool";
const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
/// Kueue objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(90);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);
/// Kueue admits, the scheduler marks pods unschedulable, the autoscaler (5 s loop) grows a group, the scheduler
/// binds: every step comes well within this on a busy two-CPU machine.
const GROWN: Duration = Duration::from_secs(240);
/// `(class, GPUs per node, most nodes)` of each node group: h100 nodes hold one GPU each, so a gold Job of two
/// 1-GPU pods needs both of its group's nodes and one of three can never fit.
const GROUPS: [(&str, u32, u32); 3] = [("h100", 1, 2), ("a100", 8, 2), ("l4", 4, 2)];

/// One test at a time in this binary: one webhook port, and never two autoscalers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One run's names and policy.
struct Run {
    prefix: String,
    system: String,
    policy: TierPolicy,
}

impl Run {
    /// A run serving the sample, gold's provisioning class replaced by `provisioning_class` when given.
    fn new(provisioning_class: Option<&str>) -> Result<Self, HarnessError> {
        let prefix = random_name("e2e");
        let policy = build_policy(&prefix, provisioning_class)?;
        Ok(Self { system: format!("{prefix}-system"), policy, prefix })
    }

    fn name(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    /// The namespace of tier `base` (named like the prefixed tier).
    fn namespace(&self, tier: &str) -> String {
        self.name(tier)
    }

    /// The node group of GPU class `base` (named like the prefixed class).
    fn group(&self, class: &str) -> String {
        self.name(class)
    }

    /// The tenant namespaces with their labels (the tier label and the webhook's run label).
    fn tenants(&self) -> Vec<(String, Vec<(&'static str, String)>)> {
        ["gold", "silver", "bronze"]
            .iter()
            .map(|tier| {
                (self.namespace(tier), vec![(E2E_TIER_LABEL, self.name(tier)), (RUN_LABEL, self.prefix.clone())])
            })
            .collect()
    }

    /// A node group per GPU class: the class's node labels (the pool label among them) and taints, plus the node
    /// labels of the first rule of a tier's placement strategy on it (bronze's `od-spot` pins a Job's first pod
    /// to `node-type: ondemand`).
    fn node_groups(&self) -> Result<Vec<NodeGroup>, HarnessError> {
        let spec = &self.policy.spec;
        GROUPS
            .iter()
            .map(|(base, gpus_per_node, max_count)| {
                let class =
                    spec.gpu_class(&self.name(base)).ok_or_else(|| format!("the policy has no class {base}"))?;
                let mut labels = class.node_labels.clone();
                for tier in spec.tiers.iter().filter(|tier| tier.gpu_class == class.name) {
                    let strategy = tier
                        .placement
                        .as_ref()
                        .and_then(|name| spec.placement_strategies.iter().find(|strategy| &strategy.name == name));
                    if let Some(rule) = strategy.and_then(|strategy| strategy.rules.first()) {
                        labels.extend(rule.node_selector.clone());
                    }
                }
                Ok(NodeGroup {
                    name: self.group(base),
                    max_count: *max_count,
                    gpus_per_node: *gpus_per_node,
                    gpu_type: format!("NVIDIA-{}", base.to_ascii_uppercase()),
                    labels,
                    taints: class.node_taints.clone(),
                })
            })
            .collect()
    }
}

/// The sample named `prefix`, its tiers, classes, cohorts and priority buckets renamed `<prefix>-<name>`, tiers
/// chosen by [`E2E_TIER_LABEL`], each class's nodes also labelled [`POOL_LABEL`]: `<prefix>-<class>`. Everything
/// else is the sample's as shipped (h100 `capacity: Autoscaled`, gold's best-effort-atomic provisioning), except
/// gold's provisioning class when `provisioning_class` is given.
fn build_policy(prefix: &str, provisioning_class: Option<&str>) -> Result<TierPolicy, HarnessError> {
    let mut policy = tiergate::inputs::load_policy(Some(&repository_file(SAMPLE)?))?;
    let name = |base: &str| format!("{prefix}-{base}");
    policy.metadata.name = Some(prefix.to_owned());
    policy.spec.tier_label = E2E_TIER_LABEL.to_owned();
    for class in &mut policy.spec.gpu_classes {
        class.name = name(&class.name);
        class.node_labels.insert(POOL_LABEL.to_owned(), class.name.clone());
    }
    for bucket in &mut policy.spec.priority_buckets {
        bucket.name = name(&bucket.name);
    }
    for tier in &mut policy.spec.tiers {
        if let (Some(provisioning), Some(class)) = (&mut tier.provisioning, provisioning_class) {
            provisioning.provisioning_class_name = class.to_owned();
        }
        tier.name = name(&tier.name);
        tier.gpu_class = name(&tier.gpu_class);
        tier.fallback_gpu_classes = tier.fallback_gpu_classes.iter().map(|class| name(class)).collect();
        tier.cohort = tier.cohort.as_deref().map(name);
        tier.default_priority_class = tier.default_priority_class.as_deref().map(name);
        tier.max_priority_class = tier.max_priority_class.as_deref().map(name);
    }
    Ok(policy)
}

/// Runs `scenario` with the cluster, the webhook, kube-scheduler, the autoscaler binary and ProvisioningRequests,
/// or prints why it is skipped; one test at a time.
async fn run_autoscaled_test(
    test: &str,
    scenario: impl AsyncFnOnce(&Client, &Cleanup, &WebhookEndpoint, &Path) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let _serial = SERIAL.lock().await;
    run_webhook_test(test, async |client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint| {
        if let Ok(reason) = std::env::var(SCHEDULER_SKIP_ENV)
            && !reason.is_empty()
        {
            skip(test, &format!("pods are never marked unschedulable, so nothing makes the autoscaler grow: {reason}"));
            return Ok(());
        }
        let binary = match autoscaler::find_binary() {
            Ok(binary) => binary,
            Err(missing) => {
                skip(test, &format!("no cluster-autoscaler (kwok provider) to grow node groups: {missing}"));
                return Ok(());
            }
        };
        if let Err(reason) = autoscaler::provisioning_requests_served(client).await {
            skip(test, &reason);
            return Ok(());
        }
        scenario(client, cleanup, endpoint, &binary).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_gpu_job_of_a_tier_without_provisioning_grows_exactly_its_class_node_group() {
    const TEST: &str = "a_one_gpu_job_of_a_tier_without_provisioning_grows_exactly_its_class_node_group";
    if let Err(error) = run_autoscaled_test(TEST, async |client, cleanup, endpoint, binary| {
        with_autoscaler(client, cleanup, endpoint, binary, mission_claim).await
    })
    .await
    {
        panic!("{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gold_two_node_job_is_admitted_only_after_its_provisioning_request_grew_both_nodes_at_once() {
    const TEST: &str = "a_gold_two_node_job_is_admitted_only_after_its_provisioning_request_grew_both_nodes_at_once";
    if let Err(error) = run_autoscaled_test(TEST, async |client, cleanup, endpoint, binary| {
        with_autoscaler(client, cleanup, endpoint, binary, gold_two_nodes).await
    })
    .await
    {
        panic!("{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gold_job_larger_than_its_node_group_stays_unadmitted_and_grows_nothing() {
    const TEST: &str = "a_gold_job_larger_than_its_node_group_stays_unadmitted_and_grows_nothing";
    if let Err(error) = run_autoscaled_test(TEST, async |client, cleanup, endpoint, binary| {
        with_autoscaler(client, cleanup, endpoint, binary, gold_too_large).await
    })
    .await
    {
        panic!("{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_capacity_on_an_autoscaled_class_is_refused_naming_the_field() {
    const TEST: &str = "check_capacity_on_an_autoscaled_class_is_refused_naming_the_field";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_cluster_test(TEST, check_capacity_refused).await {
        panic!("{error}");
    }
}

/// What a scenario runs against.
struct Live<'a> {
    client: &'a Client,
    run: &'a Run,
    autoscaler: &'a mut Autoscaler,
}

/// Starts the autoscaler (its groups empty), tiergate with the run's policy, the webhook (registered for the
/// run's namespaces), runs `checks`, then stops the autoscaler (deleting its nodes) before everything else is
/// cleaned up. On failure the autoscaler's log tail is part of the error.
async fn with_autoscaler(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    binary: &Path,
    checks: impl AsyncFnOnce(&mut Live<'_>) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let run = Run::new(None)?;
    validate_policy(&run.policy).map_err(|errors| format!("the e2e copy of {SAMPLE} is invalid: {errors}"))?;
    let began = Instant::now();
    let mut autoscaler = Autoscaler::start(client, cleanup, binary, run.node_groups()?).await?;
    println!(
        "autoscaler: started in {:.1} s, groups {:?}",
        began.elapsed().as_secs_f64(),
        autoscaler.group_sizes().await?
    );
    let daemon = match start_daemon(client, cleanup, &run).await {
        Ok(daemon) => daemon,
        Err(error) => {
            autoscaler.stop().await;
            return Err(error);
        }
    };
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        let outcome = async {
            register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
            wait_until_mutating(client, &run).await?;
            let mut live = Live { client, run: &run, autoscaler: &mut autoscaler };
            checks(&mut live).await
        }
        .await;
        // The pods are bound to the autoscaler's nodes, and no kubelet confirms their deletion: delete the Jobs
        // and force the pods out, so the namespaces go at once instead of waiting for the pod GC's orphan sweep.
        force_delete_jobs(client, &run).await;
        let outcome = outcome.map_err(|error| {
            let kept = autoscaler.keep_log();
            format!("{error}\nautoscaler (its whole log kept in {}) {}", kept.display(), autoscaler.log_tail()).into()
        });
        autoscaler.stop().await;
        outcome
    })
    .await
}

/// Deletes every Job of the run's tenant namespaces and their pods at once (grace period 0), reporting failures.
async fn force_delete_jobs(client: &Client, run: &Run) {
    for (namespace, _) in run.tenants() {
        let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::background() };
        if let Err(error) = jobs.delete_collection(&DeleteParams::background(), &ListParams::default()).await {
            println!("cleanup: failed to delete the Jobs of {namespace}: {error}");
        }
        if let Err(error) = pods.delete_collection(&now, &ListParams::default()).await {
            println!("cleanup: failed to delete the pods of {namespace}: {error}");
        }
    }
}

/// The policy, the tenant namespaces and the daemon; waits until every tier's LocalQueue exists.
async fn start_daemon(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    let tenants = run.tenants();
    let labels: Vec<Vec<(&str, &str)>> =
        tenants.iter().map(|(_, labels)| labels.iter().map(|(key, value)| (*key, value.as_str())).collect()).collect();
    let tenants: Vec<(&str, &[(&str, &str)])> =
        tenants.iter().zip(&labels).map(|((namespace, _), labels)| (namespace.as_str(), labels.as_slice())).collect();
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &tenants).await?;
    let began = Instant::now();
    let local_queues = KueueKind::LocalQueue.api_resource();
    let admission_checks = KueueKind::AdmissionCheck.api_resource();
    let converged = wait_for("every tier's LocalQueue and gold's active AdmissionCheck", CONVERGE, || async {
        for tier in &run.policy.spec.tiers {
            let base = tier.name.strip_prefix(&format!("{}-", run.prefix)).unwrap_or(&tier.name);
            let queues: Api<DynamicObject> = Api::namespaced_with(client.clone(), &run.namespace(base), &local_queues);
            queues.get_opt(&tier.local_queue()).await.ok()??;
        }
        let checks: Api<DynamicObject> = Api::all_with(client.clone(), &admission_checks);
        let selector = format!("tiergate.io/policy={}", run.prefix);
        let listed = checks.list(&ListParams::default().labels(&selector)).await.ok()?;
        let active = listed.items.iter().any(|check| condition_status(&check.data, "Active") == Some("True"));
        active.then_some(())
    })
    .await;
    match converged {
        Ok(()) => {
            println!("tiergate: LocalQueues and an active AdmissionCheck in {:.1} s", began.elapsed().as_secs_f64());
            Ok(daemon)
        }
        Err(error) => {
            daemon.stop().await;
            Err(error)
        }
    }
}

/// Waits until a dry-run Job in each tier's namespace comes back queued and marked with its tier by the webhook.
/// The queue label alone would not show the webhook: the in-server gate's mutating half writes it too.
async fn wait_until_mutating(client: &Client, run: &Run) -> Result<(), HarnessError> {
    for tier in ["gold", "silver", "bronze"] {
        let probe = plain_gpu_job(&run.namespace(tier), "probe", 1, 1)?;
        let name = run.name(tier);
        let decided = |stored: &Job| {
            stored.labels().contains_key(QUEUE_NAME_LABEL) && stored.annotations().get(TIER_ANNOTATION) == Some(&name)
        };
        let what = format!("the API server to call the webhook for {tier} (a dry-run Job stored with its tier)");
        wait_until_admitted_as(client, &what, WEBHOOK_PROPAGATION, &probe, decided).await?;
    }
    Ok(())
}

async fn create_job(client: &Client, namespace: &str, name: &str, pods: u32, gpus: u32) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    jobs.create(&PostParams::default(), &plain_gpu_job(namespace, name, pods, gpus)?).await?;
    Ok(())
}

/// The newest ProvisioningRequest Kueue made for Workload `workload` in `namespace`, as JSON.
async fn provisioning_request_of(client: &Client, namespace: &str, workload: &str) -> Option<Value> {
    let requests: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &provisioning_request_resource());
    let list = requests.list(&ListParams::default()).await.ok()?;
    let newest = list
        .items
        .into_iter()
        .filter(|request| {
            request
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.kind == "Workload" && owner.name == workload)
        })
        .max_by_key(|request| request.metadata.creation_timestamp.clone().map(|time| time.0))?;
    serde_json::to_value(newest).ok()
}

/// `type=status (reason: message)` of each condition, one a line.
fn conditions_text(object: &Value) -> String {
    let conditions = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let lines: Vec<String> = conditions
        .iter()
        .map(|c| {
            format!(
                "  {}={} ({}: {})",
                str_of(&c["type"]),
                str_of(&c["status"]),
                str_of(&c["reason"]),
                str_of(&c["message"])
            )
        })
        .collect();
    if lines.is_empty() { "  (no conditions)".to_owned() } else { lines.join("\n") }
}

/// `name: state (message)` of each of the Workload's admission checks, one a line.
fn admission_checks_text(workload: &Value) -> String {
    let checks = workload["status"]["admissionChecks"].as_array().cloned().unwrap_or_default();
    let lines: Vec<String> = checks
        .iter()
        .map(|c| format!("  {}: {} ({})", str_of(&c["name"]), str_of(&c["state"]), str_of(&c["message"])))
        .collect();
    if lines.is_empty() { "  (no admission checks)".to_owned() } else { lines.join("\n") }
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// The nodes the Job's pods are bound to, once every one of its `pods` pods is bound.
async fn bound_nodes(client: &Client, namespace: &str, job: &str, pods: usize) -> Option<Vec<String>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = api.list(&ListParams::default().labels(&format!("job-name={job}"))).await.ok()?;
    let nodes: Vec<String> = listed.items.iter().filter_map(|pod| pod.spec.as_ref()?.node_name.clone()).collect();
    (listed.items.len() == pods && nodes.len() == pods).then_some(nodes)
}

/// Waits until every one of the Job's `pods` pods is bound; on timeout the error shows each pod's node selector,
/// tolerations and PodScheduled condition (what the autoscaler had to match).
async fn wait_for_bound(client: &Client, namespace: &str, job: &str, pods: usize) -> Result<Vec<String>, HarnessError> {
    let waited =
        wait_for(&format!("{job}'s {pods} pod(s) to be bound"), GROWN, || bound_nodes(client, namespace, job, pods))
            .await;
    match waited {
        Ok(nodes) => Ok(nodes),
        Err(error) => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let listed = api.list(&ListParams::default().labels(&format!("job-name={job}"))).await?;
            let shown: Vec<String> = listed
                .items
                .iter()
                .map(|pod| {
                    let spec = pod.spec.as_ref();
                    let scheduled =
                        pod.status.as_ref().and_then(|status| status.conditions.as_ref()).and_then(|conditions| {
                            conditions.iter().find(|condition| condition.type_ == "PodScheduled").cloned()
                        });
                    format!(
                        "{}: nodeSelector {:?}, tolerations {:?}, PodScheduled {:?}",
                        pod.name_any(),
                        spec.and_then(|spec| spec.node_selector.clone()),
                        spec.and_then(|spec| spec.tolerations.clone()),
                        scheduled.map(|condition| (condition.status, condition.reason, condition.message)),
                    )
                })
                .collect();
            Err(format!("{error}; pods:\n{}", shown.join("\n")).into())
        }
    }
}

/// The group label of node `name`.
async fn group_of(client: &Client, name: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get_opt(name).await.ok()??;
    node.labels().get(autoscaler::NODE_GROUP_LABEL).cloned()
}

fn elapsed(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

/// 1. A 1-GPU Job of silver, then of bronze: each grows its class's group by one node and no other group, and its
///    pod is bound to the new node.
async fn mission_claim(live: &mut Live<'_>) -> Result<(), HarnessError> {
    let (client, run) = (live.client, live.run);
    for (tier, class) in [("silver", "a100"), ("bronze", "l4")] {
        let namespace = run.namespace(tier);
        let job = format!("{tier}-one-gpu");
        let group = run.group(class);
        let before = live.autoscaler.group_sizes().await?;
        let plans_before = live.autoscaler.scale_up_plans().len();
        let began = Instant::now();
        create_job(client, &namespace, &job, 1, 1).await?;
        let admitted = wait_for(&format!("Kueue to admit {job}"), GROWN, || async {
            let workload = job_workload(client, &namespace, &job).await?;
            is_admitted(&workload).then_some(workload)
        })
        .await;
        let admitted = with_workload_state(client, &namespace, &job, admitted).await?;
        println!(
            "{job}: admitted after {} (no admission check: {})",
            elapsed(began),
            admission_checks_text(&admitted).trim()
        );
        let nodes = wait_for_bound(client, &namespace, &job, 1)
            .await
            .map_err(|error| format!("{error}\ngroups before the Job: {before:?}"))?;
        let created = creation_times(client, &nodes).await?;
        println!("{job}: pod bound to {nodes:?} (created at {created:?}) after {}", elapsed(began));
        let node_group = group_of(client, &nodes[0]).await;
        ensure(node_group.as_deref() == Some(group.as_str()), || {
            format!("{job}'s pod is bound to {nodes:?} of group {node_group:?}, not a new node of {group}")
        })?;
        // Two more loops: a second scale-up the first one's decision might have been followed by would show.
        live.autoscaler.wait_for_more_loops(2, GROWN).await?;
        let after = live.autoscaler.group_sizes().await?;
        let plans: Vec<String> = live.autoscaler.scale_up_plans().split_off(plans_before);
        println!("{job}: groups {before:?} -> {after:?}; scale-up decisions: {plans:?}");
        for (name, size) in &after {
            let expected = before.get(name).copied().unwrap_or(0) + usize::from(name == &group);
            ensure(*size == expected, || {
                format!("{job} should grow {group} by one node and nothing else: groups {before:?} -> {after:?}")
            })?;
        }
    }
    Ok(())
}

/// Polls the gold Job's Workload and ProvisioningRequest until the Workload is admitted; fails if it is ever seen
/// admitted while its ProvisioningRequest, read after it, is not Provisioned. Returns both, last read.
async fn admitted_after_provisioned(
    client: &Client,
    namespace: &str,
    job: &str,
    began: Instant,
) -> Result<(Value, Value), HarnessError> {
    let mut seen_request = false;
    let mut seen_provisioned = false;
    let deadline = tokio::time::Instant::now() + GROWN;
    loop {
        let workload = job_workload(client, namespace, job).await;
        let request = match &workload {
            Some(workload) => provisioning_request_of(client, namespace, str_of(&workload["metadata"]["name"])).await,
            None => None,
        };
        if let (Some(workload), Some(request)) = (&workload, &request) {
            if !seen_request {
                seen_request = true;
                println!(
                    "{job}: ProvisioningRequest {} of class {} after {}",
                    str_of(&request["metadata"]["name"]),
                    str_of(&request["spec"]["provisioningClassName"]),
                    elapsed(began)
                );
            }
            let provisioned = condition_status(request, "Provisioned") == Some("True");
            if provisioned && !seen_provisioned {
                seen_provisioned = true;
                println!("{job}: Provisioned=True after {}:\n{}", elapsed(began), conditions_text(request));
            }
            if is_admitted(workload) {
                ensure(provisioned, || {
                    format!(
                        "{job} was admitted while its ProvisioningRequest was not Provisioned:\n{}\nchecks:\n{}",
                        conditions_text(request),
                        admission_checks_text(workload)
                    )
                })?;
                return Ok((workload.clone(), request.clone()));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            let workload = workload.map_or("no Workload".to_owned(), |w| {
                format!("{}\nchecks:\n{}", conditions_text(&w), admission_checks_text(&w))
            });
            let request = request.map_or("no ProvisioningRequest".to_owned(), |r| conditions_text(&r));
            return Err(format!(
                "failed to observe {job} admitted within {GROWN:?}; Workload:\n{workload}\nProvisioningRequest:\n{request}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The RFC 3339 `lastTransitionTime` of condition `type_` (second precision, so ordering is `<=`).
fn transition_time<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    status_condition(object, type_)?["lastTransitionTime"].as_str()
}

/// 2. A gold Job of 2 × 1 GPU: its ProvisioningRequest grows the h100 group by both nodes in one decision, and the
///    Workload is admitted only once the request is Provisioned.
async fn gold_two_nodes(live: &mut Live<'_>) -> Result<(), HarnessError> {
    let (client, run) = (live.client, live.run);
    let namespace = run.namespace("gold");
    let job = "gold-two-nodes";
    let group = run.group("h100");
    let before = live.autoscaler.group_sizes().await?;
    let began = Instant::now();
    create_job(client, &namespace, job, 2, 1).await?;
    let (workload, request) = admitted_after_provisioned(client, &namespace, job, began).await?;
    println!(
        "{job}: admitted after {}; admission checks:\n{}\nProvisioningRequest conditions:\n{}",
        elapsed(began),
        admission_checks_text(&workload),
        conditions_text(&request)
    );
    let (provisioned_at, admitted_at) =
        (transition_time(&request, "Provisioned"), transition_time(&workload, "Admitted"));
    ensure(provisioned_at.is_some() && provisioned_at <= admitted_at, || {
        format!("{job} was admitted at {admitted_at:?}, before its request was Provisioned at {provisioned_at:?}")
    })?;
    let nodes = wait_for_bound(client, &namespace, job, 2).await?;
    println!("{job}: pods bound to {nodes:?} after {}", elapsed(began));
    live.autoscaler.wait_for_more_loops(2, GROWN).await?;
    let by_group = live.autoscaler.nodes_by_group().await?;
    let grown = by_group.get(&group).cloned().unwrap_or_default();
    let plans: Vec<String> = live.autoscaler.scale_up_plans();
    let h100_plans: Vec<&String> = plans.iter().filter(|plan| plan.contains(&format!("{group} "))).collect();
    println!("{job}: groups {before:?} -> {by_group:?}; scale-up decisions: {plans:?}");
    ensure(grown.len() == 2 && nodes.iter().all(|node| grown.contains(node)), || {
        format!("{job}'s pods {nodes:?} are not on the two new nodes of {group}: {by_group:?}")
    })?;
    ensure(h100_plans.len() == 1 && h100_plans[0].contains(&format!("{group} 0->2")), || {
        format!("{group} did not grow 0->2 in one scale-up: decisions {plans:?}")
    })?;
    for (name, nodes) in &by_group {
        ensure(name == &group || nodes.len() == before.get(name).copied().unwrap_or(0), || {
            format!("{job} grew {name} as well: {before:?} -> {by_group:?}")
        })?;
    }
    let node_times = creation_times(client, &grown).await?;
    println!("{job}: nodes created at {node_times:?}, Provisioned at {provisioned_at:?}, admitted at {admitted_at:?}");
    Ok(())
}

/// The creation timestamps of `nodes`.
async fn creation_times(client: &Client, nodes: &[String]) -> Result<BTreeMap<String, String>, HarnessError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut times = BTreeMap::new();
    for name in nodes {
        let node = api.get(name).await?;
        let created = node.metadata.creation_timestamp.map(|time| time.0.to_string()).unwrap_or_default();
        times.insert(name.clone(), created);
    }
    Ok(times)
}

/// 3. A gold Job of 3 × 1 GPU, more than the h100 group's two 1-GPU nodes can ever hold (and well within gold's
///    quota): the autoscaler answers its ProvisioningRequest without provisioning it; for two more of its loops
///    the Workload stays unadmitted and no group grows.
async fn gold_too_large(live: &mut Live<'_>) -> Result<(), HarnessError> {
    let (client, run) = (live.client, live.run);
    let namespace = run.namespace("gold");
    let job = "gold-too-large";
    let before = live.autoscaler.group_sizes().await?;
    let began = Instant::now();
    create_job(client, &namespace, job, 3, 1).await?;
    let answered = wait_for(&format!("the autoscaler to answer {job}'s ProvisioningRequest"), GROWN, || async {
        let workload = job_workload(client, &namespace, job).await?;
        let request = provisioning_request_of(client, &namespace, str_of(&workload["metadata"]["name"])).await?;
        let answered = ["Provisioned", "Failed", "BookingExpired", "CapacityRevoked"]
            .iter()
            .any(|type_| status_condition(&request, type_).is_some());
        answered.then_some((workload, request))
    })
    .await;
    let (_, request) = with_workload_state(client, &namespace, job, answered).await?;
    println!(
        "{job}: ProvisioningRequest {} (class {}) answered after {}:\n{}",
        str_of(&request["metadata"]["name"]),
        str_of(&request["spec"]["provisioningClassName"]),
        elapsed(began),
        conditions_text(&request)
    );
    live.autoscaler.wait_for_more_loops(2, GROWN).await?;
    let workload = job_workload(client, &namespace, job).await.ok_or("the Workload is gone")?;
    let request =
        provisioning_request_of(client, &namespace, str_of(&workload["metadata"]["name"])).await.unwrap_or(request);
    let after = live.autoscaler.group_sizes().await?;
    println!(
        "{job}: two autoscaler loops later ({}): Workload\n{}\nadmission checks:\n{}\nProvisioningRequest {}:\n{}\n\
         groups {before:?} -> {after:?}; scale-up decisions: {:?}",
        elapsed(began),
        conditions_text(&workload),
        admission_checks_text(&workload),
        str_of(&request["metadata"]["name"]),
        conditions_text(&request),
        live.autoscaler.scale_up_plans()
    );
    ensure(!is_admitted(&workload), || format!("{job} was admitted although no group can hold it"))?;
    ensure(condition_status(&request, "Provisioned") != Some("True"), || {
        format!("{job}'s ProvisioningRequest is Provisioned although the group cannot hold it")
    })?;
    ensure(after == before, || format!("a group grew for {job}: {before:?} -> {after:?}"))?;
    // `why` reads the request itself: Kueue leaves the check's message empty here.
    let answer = build_live_answer(client, &format!("job/{job}"), &namespace, &run.prefix).await?;
    println!("why job/{job}: {}", answer.summary);
    ensure(
        answer.summary.contains("cannot be met (CapacityIsNotFound")
            && answer.summary.contains("Raise the node group's maximum size"),
        || format!("why does not name the autoscaler's answer and the fix:\n{}", answer.to_table()),
    )
}

/// 4. Gold's provisioning of class check-capacity on the `Autoscaled` h100 class: the daemon refuses the policy,
///    its Ready condition False naming `provisioningClassName` (or the API server refuses it, naming the field).
async fn check_capacity_refused(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let run = Run::new(Some(CHECK_CAPACITY))?;
    let tenants = run.tenants();
    let labels: Vec<Vec<(&str, &str)>> =
        tenants.iter().map(|(_, labels)| labels.iter().map(|(key, value)| (*key, value.as_str())).collect()).collect();
    let tenants: Vec<(&str, &[(&str, &str)])> =
        tenants.iter().zip(&labels).map(|((namespace, _), labels)| (namespace.as_str(), labels.as_slice())).collect();
    let began = Instant::now();
    let daemon = match start_tiergate(client, cleanup, &run.policy, &run.system, &tenants).await {
        Ok(daemon) => daemon,
        Err(error) if error.to_string().contains("provisioningClassName") => {
            println!("the API server refused the policy: {error}");
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    let policies: Api<TierPolicy> = Api::all(client.clone());
    // The end state, not the first Ready=False: a reconcile that failed for a passing reason (an API call timing
    // out on a busy machine) also writes Ready=False, and the refusal replaces it at the next reconcile.
    let last = std::sync::Mutex::new(None);
    let refused = wait_for("the TierPolicy's Ready condition to say it is refused as invalid", CONVERGE, || async {
        let policy = policies.get_opt(&run.prefix).await.ok()??;
        let ready = policy.status?.conditions.into_iter().find(|condition| condition.type_ == "Ready")?;
        let invalid = ready.status == "False" && ready.reason == "InvalidPolicy";
        if let Ok(mut last) = last.lock() {
            *last = Some(ready.clone());
        }
        invalid.then_some(ready)
    })
    .await;
    daemon.stop().await;
    let ready = refused.map_err(|error| {
        let last = last.lock().ok().and_then(|last| last.clone());
        let last = last.map_or("no Ready condition".to_owned(), |ready| {
            format!("Ready={} ({}: {})", ready.status, ready.reason, ready.message)
        });
        format!("{error}; the policy's last Ready condition: {last}")
    })?;
    println!("{}: Ready=False after {} ({}): {}", run.prefix, elapsed(began), ready.reason, ready.message);
    ensure(ready.message.contains("provisioningClassName") && ready.message.contains(CHECK_CAPACITY), || {
        format!("the refusal does not name gold's provisioningClassName and {CHECK_CAPACITY}: {}", ready.message)
    })
}

/// `waited`, or its error with the state of Job `job`'s Workload (conditions and admission checks) and its newest
/// ProvisioningRequest's conditions, read now.
async fn with_workload_state<T>(
    client: &Client,
    namespace: &str,
    job: &str,
    waited: Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    let Err(error) = waited else { return waited };
    let Some(workload) = job_workload(client, namespace, job).await else {
        return Err(format!("{error}; {job} has no Workload").into());
    };
    let request = provisioning_request_of(client, namespace, str_of(&workload["metadata"]["name"])).await;
    let request = request.map_or("  (none)".to_owned(), |request| conditions_text(&request));
    Err(format!(
        "{error}; {job}'s Workload {}:\n{}\nadmission checks:\n{}\nProvisioningRequest:\n{request}",
        str_of(&workload["metadata"]["name"]),
        conditions_text(&workload),
        admission_checks_text(&workload)
    )
    .into())
}
