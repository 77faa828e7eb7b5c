//! End-to-end test of the quota cap (issue 19) against a real API server with Kueue v0.19+: a tier with a
//! primary class, a fallback class (with a share) and a two-rule placement strategy is filled past its quota with
//! one-GPU Jobs spread over its classes and rules, through the real webhook. Kueue must admit
//! exactly the tier's quota, leave the rest pending with its "insufficient quota" message, and charge each
//! admitted Job to the flavor of its class or rule. Skipped (and passing) without a reachable cluster, without
//! Kueue's v1beta2 CRDs or without `TIERGATE_E2E_WEBHOOK_HOST`; see docs/guides/placement.md ("Which flavor Kueue
//! charges") and docs/contributing.md ("End-to-end").
//!
//! The pods of these Jobs never need a node: Kueue admits by quota alone (no provisioning check in this tier),
//! so the test runs on any cluster; the admitted Jobs' pods stay Pending for want of GPU nodes.
//!
//! A second scenario gives the quota back by time (docs/guides/run-time-limits.md): a bronze tier of one GPU with a
//! run-time ceiling of [`RUN_TIME_CEILING`]. With no webhook registered, the in-server gate refuses a Job asking
//! for more than the ceiling (and, where MutatingAdmissionPolicy is served, gives one asking for nothing the
//! ceiling); through the webhook, a Job that never ends is admitted with the ceiling and deactivated by Kueue once
//! it has run that long, and the Job waiting behind it, which asked for less, is admitted on the GPU it gave back
//! with its own, shorter limit. A tenant's edits of the label on stored Jobs are held too: with the webhook down
//! the gate refuses raising or removing it; through the webhook a waiting Job's raise is lowered to the ceiling and
//! its removal gives the old value back, and a running Job's raise or removal is undone. The suite's scenarios run
//! one at a time ([`SERIAL`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::admission::TIER_ANNOTATION;
use tiergate::plan::quota::tier_quota;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, condition_status as object_condition_status,
    delete_job_and_wait, ensure, job_workload, random_name, serves_mutating_policies, start_tiergate, tenant_client,
    wait_for, wait_until_admitted_as, wait_until_refused,
};
use tiergate_workloads::{MAX_EXEC_TIME_LABEL, QUEUE_NAME_LABEL};

/// Kueue objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(30);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);
/// Kueue creates a Workload per Job and schedules in cycles; every Job is decided well within this.
const SCHEDULED: Duration = Duration::from_secs(90);
/// The API server compiles a new admission policy and starts enforcing it asynchronously (seconds).
const ENFORCEMENT: Duration = Duration::from_secs(120);
/// Node label the e2e classes and rules use (never one a real node carries).
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
const NODE_TYPE_LABEL: &str = "e2e.tiergate.io/node-type";
/// The tier's GPU quota: 2 for the fallback class, the rules split the other 6 (1:1), the primary class keeps 0
/// (so a rule's Job can only be charged to its rule's flavor; docs/guides/placement.md).
const TIER_GPUS: u32 = 8;
/// The run-time scenario's bronze ceiling: long enough to see the Job admitted, short enough to wait out.
const RUN_TIME_CEILING: &str = "40s";
/// [`RUN_TIME_CEILING`] in seconds, as the webhook writes it on the Job.
const CEILING_SECONDS: &str = "40";
/// What the Job that asks for less asks for, in seconds.
const ASKED_SECONDS: &str = "20";
/// Kueue deactivates a Workload once its limit has passed since its admission; its controller acts within seconds.
const DEACTIVATED: Duration = Duration::from_secs(120);
/// The scenarios share the webhook's port and the TierPolicy CRD: they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Jobs of one kind of workload: what the user writes on the pod template, and which flavor may charge it.
///
/// There are no Jobs without a class or rule: in a tier with fallbacks the webhook leaves a Job's class to Kueue
/// (docs/admission.md), so such a Job matches every flavor and would take whichever has room, making the
/// per-flavor counts depend on the order Kueue schedules in.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The fallback class, chosen by the user.
    Fallback,
    /// The on-demand rule's node type.
    OnDemand,
    /// The spot rule's node type (with its toleration).
    Spot,
}

impl Kind {
    const ALL: [Self; 3] = [Self::Fallback, Self::OnDemand, Self::Spot];

    fn name(self) -> &'static str {
        match self {
            Self::Fallback => "fallback",
            Self::OnDemand => "ondemand",
            Self::Spot => "spot",
        }
    }
}

/// The names of one run: everything cluster-scoped is prefixed, every namespace is new.
struct Run {
    prefix: String,
    system: String,
    tenant: String,
    policy: TierPolicy,
}

impl Run {
    fn new() -> Result<Self, HarnessError> {
        let prefix = random_name("e2e");
        Ok(Self {
            system: format!("{prefix}-system"),
            tenant: format!("{prefix}-capped"),
            policy: build_policy(&prefix)?,
            prefix,
        })
    }

    fn class(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    fn tier(&self) -> String {
        format!("{}-capped", self.prefix)
    }

    /// The one ResourceFlavor Kueue may charge a Job of `kind` to.
    fn flavor_for(&self, kind: Kind) -> String {
        let rule = |name: &str| format!("{}-{}-{name}", self.class("l4"), self.class("mix"));
        match kind {
            Kind::Fallback => self.class("h100"),
            Kind::OnDemand => rule("ondemand"),
            Kind::Spot => rule("spot"),
        }
    }
}

/// A tier with primary class l4 (no share), fallback h100 (share 2) and strategy mix (ondemand 1 : spot 1, the
/// remaining 6 GPUs); no cohort, so nothing can be borrowed and the quota is a hard cap.
fn build_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let class = |base: &str| format!("{prefix}-{base}");
    let buckets: Vec<Value> = [("high", 70, 700), ("default", 0, 100)]
        .iter()
        .map(|(name, min_score, value)| json!({"name": class(name), "minScore": min_score, "value": value}))
        .collect();
    let policy = json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [
                {"name": class("h100"), "nodeLabels": {CLASS_LABEL: class("h100")}},
                {"name": class("l4"), "nodeLabels": {CLASS_LABEL: class("l4")}},
            ],
            "placementStrategies": [{"name": class("mix"), "rules": [
                {"name": "ondemand", "weight": 1, "nodeSelector": {NODE_TYPE_LABEL: "ondemand"}},
                {"name": "spot", "weight": 1, "nodeSelector": {NODE_TYPE_LABEL: "spot"},
                 "tolerations": [{"key": NODE_TYPE_LABEL, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]},
            ]}],
            "priorityBuckets": buckets,
            "scoring": {"enabled": false},
            "tiers": [{
                "name": class("capped"),
                "gpuClass": class("l4"),
                "fallbackGpuClasses": [class("h100")],
                "placement": class("mix"),
                "quotas": {
                    "nvidia.com/gpu": {"nominal": TIER_GPUS.to_string()},
                    "cpu": {"nominal": "64"},
                    "memory": {"nominal": "64Gi"},
                },
                "quotaShares": {class("h100"): 2},
            }],
        }
    });
    Ok(serde_json::from_value(policy)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_admits_exactly_the_tier_quota_over_classes_and_rules_and_charges_each_job_to_its_flavor() {
    const TEST: &str = "kueue_admits_exactly_the_tier_quota_over_classes_and_rules_and_charges_each_job_to_its_flavor";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

/// Setup, checks, then cleanup while the webhook still answers, and only then the webhook and the daemon stop.
async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let run = Run::new()?;
    let daemon = start_daemon(client, cleanup, &run).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        fill_and_check(client, cleanup, endpoint, webhook, &run).await
    })
    .await
}

async fn start_daemon(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    let tenant_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.tier()), (RUN_LABEL, &run.prefix)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &[(&run.tenant, tenant_labels)]).await?;
    let local_queue = run.policy.spec.tiers[0].local_queue();
    let local_queues = KueueKind::LocalQueue.api_resource();
    let cluster_queues = KueueKind::ClusterQueue.api_resource();
    let cluster_queue = format!("tiergate-{}", run.tier());
    wait_for("the tier's LocalQueue and ClusterQueue", CONVERGE, || async {
        let queues: Api<DynamicObject> = Api::namespaced_with(client.clone(), &run.tenant, &local_queues);
        queues.get_opt(&local_queue).await.ok()??;
        let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &cluster_queues);
        clusters.get_opt(&cluster_queue).await.ok()??;
        Some(())
    })
    .await?;
    Ok(daemon)
}

/// A one-GPU Job of `kind`, `index`th of its kind; suspended and queued by the webhook.
fn build_job(run: &Run, kind: Kind, index: usize) -> Result<Job, HarnessError> {
    let mut node_selector = serde_json::Map::new();
    let mut tolerations = Vec::new();
    match kind {
        Kind::Fallback => {
            node_selector.insert(CLASS_LABEL.to_owned(), json!(run.class("h100")));
        }
        Kind::OnDemand => {
            node_selector.insert(NODE_TYPE_LABEL.to_owned(), json!("ondemand"));
        }
        Kind::Spot => {
            node_selector.insert(NODE_TYPE_LABEL.to_owned(), json!("spot"));
            tolerations
                .push(json!({"key": NODE_TYPE_LABEL, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}));
        }
    }
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": format!("{}-{index}", kind.name()), "namespace": run.tenant,
                     "labels": {"e2e.tiergate.io/kind": kind.name()}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "nodeSelector": node_selector,
                "tolerations": tolerations,
                "containers": [{
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }],
            }},
        },
    });
    Ok(serde_json::from_value(job)?)
}

/// Waits until a dry-run Job comes back queued and marked with its tier by the webhook: the API server reaches the
/// webhook and its snapshot knows the namespace. The queue label alone proves neither: the in-server gate's
/// mutating half, in effect since the daemon applied it, writes it too.
async fn wait_until_mutating(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let probe = build_job(run, Kind::OnDemand, 0)?;
    let tier = run.tier();
    let decided = |stored: &Job| {
        stored.labels().contains_key(QUEUE_NAME_LABEL) && stored.annotations().get(TIER_ANNOTATION) == Some(&tier)
    };
    let what = "the API server to call the webhook (a dry-run Job stored with its tier annotation)";
    wait_until_admitted_as(client, what, WEBHOOK_PROPAGATION, &probe, decided).await
}

/// What Kueue decided for one Job's Workload.
#[derive(Debug)]
struct Decision {
    job: String,
    kind: String,
    /// The GPU flavor of the first pod set when admitted.
    admitted_flavor: Option<String>,
    /// The QuotaReserved condition's message when not admitted.
    pending_message: Option<String>,
}

async fn decisions(client: &Client, run: &Run) -> Result<Vec<Decision>, HarnessError> {
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), &run.tenant, &workload_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.tenant);
    let kinds: BTreeMap<String, String> = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|job| (job.name_any(), job.labels().get("e2e.tiergate.io/kind").cloned().unwrap_or_default()))
        .collect();
    let mut found = Vec::new();
    for workload in workloads.list(&ListParams::default()).await?.items {
        let owners = workload.metadata.owner_references.clone().unwrap_or_default();
        let Some(job) = owners.iter().find(|owner| owner.kind == "Job").map(|owner| owner.name.clone()) else {
            continue;
        };
        let status = &workload.data["status"];
        let admitted = condition_status(status, "Admitted") == Some("True");
        let admitted_flavor = admitted
            .then(|| status["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"].as_str())
            .flatten()
            .map(str::to_owned);
        let pending_message = (!admitted)
            .then(|| condition(status, "QuotaReserved"))
            .flatten()
            .filter(|reserved| reserved["status"] == "False")
            .and_then(|reserved| reserved["message"].as_str().map(str::to_owned));
        let kind = kinds.get(&job).cloned().unwrap_or_default();
        found.push(Decision { job, kind, admitted_flavor, pending_message });
    }
    Ok(found)
}

/// The tier's ClusterQueue's `status.admittedWorkloads` and `status.pendingWorkloads`, as Kueue counts them.
async fn cluster_queue_counts(client: &Client, run: &Run) -> Result<(u64, u64), HarnessError> {
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    let queue = queues.get(&format!("tiergate-{}", run.tier())).await?;
    let count = |field: &str| queue.data["status"][field].as_u64().unwrap_or(0);
    Ok((count("admittedWorkloads"), count("pendingWorkloads")))
}

fn workload_resource() -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".to_owned(),
        version: "v1beta2".to_owned(),
        api_version: "kueue.x-k8s.io/v1beta2".to_owned(),
        kind: "Workload".to_owned(),
        plural: "workloads".to_owned(),
    }
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|condition| condition["type"] == type_)
}

fn condition_status<'a>(status: &'a Value, type_: &str) -> Option<&'a str> {
    condition(status, type_)?["status"].as_str()
}

/// Kueue's message for a pod set that does not fit, e.g. "couldn't assign flavors to pod set main: insufficient
/// unused quota for nvidia.com/gpu in flavor X, 1 more needed".
fn is_insufficient_quota(message: &str) -> bool {
    message.to_ascii_lowercase().contains("insufficient")
}

async fn fill_and_check(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
    wait_until_mutating(client, run).await?;
    // The tier's own arithmetic: the flavors' GPUs add up to the quota, and each flavor's nominal quota.
    let quota = tier_quota(&run.policy.spec, &run.policy.spec.tiers[0]);
    let nominal: BTreeMap<String, u64> =
        quota.flavors.iter().map(|flavor| (flavor.selector.flavor.clone(), flavor.gpus)).collect();
    ensure(nominal.values().sum::<u64>() == u64::from(TIER_GPUS), || format!("flavors offer {nominal:?}"))?;

    // 11 one-GPU Jobs against 8 GPUs: 5 fallback (2 GPUs), 3 on-demand (3 GPUs), 3 spot (3 GPUs). A rule's Job
    // matches its own flavor, the primary class's (0 GPUs, no fit) and the fallback's only when it names no class,
    // which it does (the webhook leaves the class to Kueue in a tier with fallbacks); its own flavor comes first
    // and has room for all of them, so only fallback Jobs wait.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.tenant);
    let mut created = 0;
    for kind in Kind::ALL {
        let count = match kind {
            Kind::Fallback => 5,
            Kind::OnDemand | Kind::Spot => 3,
        };
        for index in 0..count {
            let stored = jobs.create(&PostParams::default(), &build_job(run, kind, index)?).await?;
            let decided = stored.annotations().get(TIER_ANNOTATION) == Some(&run.tier());
            ensure(stored.labels().contains_key(QUEUE_NAME_LABEL) && decided, || {
                format!(
                    "Job {} was not queued by the webhook: labels {:?}, annotations {:?}",
                    stored.name_any(),
                    stored.labels(),
                    stored.annotations()
                )
            })?;
            created += 1;
        }
    }
    let expected_pending = created - usize::try_from(TIER_GPUS).unwrap_or(usize::MAX);
    // Kueue's own count says when it has decided: the ClusterQueue reports the quota's Jobs admitted and the rest
    // pending. Kueue writes its "insufficient quota" message only on the pending Workloads its scheduler has tried
    // (the head of the queue at least; the others may carry none until the queue moves), so those messages are
    // checked where present, and one is required.
    let settled = wait_for("Kueue to admit the quota and leave the rest pending", SCHEDULED, || async {
        let (admitted_count, pending_count) = cluster_queue_counts(client, run).await.ok()?;
        let found = decisions(client, run).await.ok()?;
        let admitted = found.iter().filter(|decision| decision.admitted_flavor.is_some()).count();
        let explained = found
            .iter()
            .filter(|decision| decision.pending_message.as_deref().is_some_and(is_insufficient_quota))
            .count();
        (found.len() == created
            && u32::try_from(admitted).ok() == Some(TIER_GPUS)
            && admitted_count == u64::from(TIER_GPUS)
            && usize::try_from(pending_count).ok() == Some(expected_pending)
            && explained >= 1)
            .then_some(found)
    })
    .await;
    let found = match settled {
        Ok(found) => found,
        Err(error) => {
            let last = decisions(client, run).await.unwrap_or_default();
            let counts = cluster_queue_counts(client, run).await.ok();
            return Err(format!("{error}; ClusterQueue (admitted, pending): {counts:?}; last seen: {last:#?}").into());
        }
    };

    let unexplained: Vec<&Decision> = found
        .iter()
        .filter(|decision| decision.pending_message.as_deref().is_some_and(|message| !is_insufficient_quota(message)))
        .collect();
    ensure(unexplained.is_empty(), || format!("pending for another reason than quota: {unexplained:#?}"))?;
    let mut charged: BTreeMap<String, u64> = BTreeMap::new();
    for decision in &found {
        let kind = Kind::ALL.into_iter().find(|kind| kind.name() == decision.kind);
        let Some(flavor) = &decision.admitted_flavor else {
            ensure(matches!(kind, Some(Kind::Fallback)), || {
                format!(
                    "Job {} ({}) is pending although its flavor has room: {decision:?}",
                    decision.job, decision.kind
                )
            })?;
            continue;
        };
        *charged.entry(flavor.clone()).or_insert(0) += 1;
        let expected = kind.map(|kind| run.flavor_for(kind)).unwrap_or_default();
        ensure(flavor == &expected, || {
            format!("Job {} ({}) was charged to flavor {flavor}, expected {expected}", decision.job, decision.kind)
        })?;
    }
    // Every flavor with quota is full, and none holds more than its nominal quota (nothing can be borrowed).
    for (flavor, offered) in &nominal {
        let used = charged.get(flavor).copied().unwrap_or(0);
        ensure(used == *offered, || {
            format!("flavor {flavor} holds {used} admitted GPUs of its {offered}: {charged:?}")
        })?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bronze_job_past_its_run_time_ceiling_is_stopped_by_kueue_and_its_gpu_goes_to_the_next_job() {
    const TEST: &str = "a_bronze_job_past_its_run_time_ceiling_is_stopped_by_kueue_and_its_gpu_goes_to_the_next_job";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_webhook_test(TEST, run_time_scenario).await {
        panic!("{error}");
    }
}

/// A bronze tier of one l4 GPU whose workloads run at most [`RUN_TIME_CEILING`]; the class's node label is one no
/// real node carries, so its pods stay Pending: Kueue counts the run time from admission, not from the pods' start.
fn build_run_time_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let name = |base: &str| format!("{prefix}-{base}");
    let policy = json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [{"name": name("l4"), "nodeLabels": {CLASS_LABEL: name("l4")}}],
            "priorityBuckets": [{"name": name("default"), "minScore": 0, "value": 100}],
            "scoring": {"enabled": false},
            "tiers": [{
                "name": name("bronze"),
                "gpuClass": name("l4"),
                "maxRunTime": {"ceiling": RUN_TIME_CEILING},
                "quotas": {"nvidia.com/gpu": {"nominal": "1"}, "cpu": {"nominal": "4"}, "memory": {"nominal": "4Gi"}},
            }],
        }
    });
    Ok(serde_json::from_value(policy)?)
}

/// A one-GPU Job `name` that never ends (pause), with `labels`; queued and suspended by the webhook, or, when
/// `as_the_webhook_leaves_it`, already queued, suspended and on the tier's class (what the gate alone judges).
fn run_time_job(
    namespace: &str,
    name: &str,
    labels: Value,
    as_the_webhook_leaves_it: Option<(&str, &str)>,
) -> Result<Job, HarnessError> {
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"}}}],
            }},
        },
    });
    if let Some((queue, class)) = as_the_webhook_leaves_it {
        job["metadata"]["labels"][QUEUE_NAME_LABEL] = json!(queue);
        job["spec"]["suspend"] = json!(true);
        job["spec"]["template"]["spec"]["nodeSelector"] = json!({CLASS_LABEL: class});
    }
    Ok(serde_json::from_value(job)?)
}

/// The run-time label of a stored Job.
fn run_time_label(job: &Job) -> Option<&str> {
    job.labels().get(MAX_EXEC_TIME_LABEL).map(String::as_str)
}

/// The Workload of Job `job` once `ready` holds for it.
async fn wait_for_workload(
    client: &Client,
    namespace: &str,
    job: &str,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value, HarnessError> {
    let waited = wait_for(what, timeout, || async {
        job_workload(client, namespace, job).await.filter(|workload| ready(workload))
    })
    .await;
    match waited {
        Ok(workload) => Ok(workload),
        Err(error) => {
            let last = job_workload(client, namespace, job).await;
            Err(format!("{error}; Job {job}'s Workload: {}", last.unwrap_or_default()).into())
        }
    }
}

fn admitted(workload: &Value) -> bool {
    object_condition_status(workload, "Admitted") == Some("True")
}

async fn run_time_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-rt");
    let policy = build_run_time_policy(&prefix)?;
    let tier = format!("{prefix}-bronze");
    let namespace = format!("{prefix}-bronze");
    let system = format!("{prefix}-system");
    let labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &tier), (RUN_LABEL, &prefix)];
    let daemon = start_tiergate(client, cleanup, &policy, &system, &[(&namespace, labels)]).await?;
    let local_queue = policy.spec.tiers[0].local_queue();
    wait_for("the bronze LocalQueue", CONVERGE, || async {
        let queues: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &KueueKind::LocalQueue.api_resource());
        queues.get_opt(&local_queue).await.ok()?
    })
    .await?;
    let class = format!("{prefix}-l4");
    let names = RunTimeNames { namespace: &namespace, tier: &tier, queue: &local_queue, class: &class };
    let tenant = tenant_client(client, cleanup, &[&namespace]).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        refused_with_the_webhook_down(client, &tenant, &names).await?;
        updates_refused_with_the_webhook_down(client, &tenant, &names).await?;
        register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &prefix).await?;
        stopped_at_the_ceiling(client, &tenant, &names).await
    })
    .await
}

/// The names of the run-time scenario.
struct RunTimeNames<'a> {
    namespace: &'a str,
    tier: &'a str,
    queue: &'a str,
    class: &'a str,
}

/// No webhook registered yet: the in-server gate refuses a tenant's Job asking for more than the ceiling, naming
/// the label and where the ceiling is; where the mutating half is served, a Job asking for nothing gets the ceiling.
async fn refused_with_the_webhook_down(
    client: &Client,
    tenant: &Client,
    names: &RunTimeNames<'_>,
) -> Result<(), HarnessError> {
    let leaves = Some((names.queue, names.class));
    let greedy = run_time_job(names.namespace, "greedy", json!({MAX_EXEC_TIME_LABEL: "3600"}), leaves)?;
    let what = "the in-server gate to refuse a run-time label above the ceiling";
    wait_until_refused(tenant, what, ENFORCEMENT, &greedy, MAX_EXEC_TIME_LABEL).await?;
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), names.namespace);
    let message = match jobs.create(&PostParams::default(), &greedy).await {
        Ok(stored) => return Err(format!("a Job asking 3600s was stored with the webhook down: {stored:?}").into()),
        Err(error) => error.to_string(),
    };
    let binding = format!("binding '{}'", tiergate::plan::gate::gate_name(names.tier));
    ensure(message.contains(&binding) && message.contains("ceiling") && message.contains("maxRunTime"), || {
        format!("refused without naming the label, the tier's binding and its ceiling: {message}")
    })?;
    println!("webhook down, refused: {message}");
    if serves_mutating_policies(client).await? {
        let plain = run_time_job(names.namespace, "plain", json!({}), leaves)?;
        let what = "the mutating half to give a Job without a limit the ceiling (dry run)";
        wait_until_admitted_as(tenant, what, ENFORCEMENT, &plain, |stored| {
            run_time_label(stored) == Some(CEILING_SECONDS)
        })
        .await?;
    }
    Ok(())
}

/// Through the webhook: a Job that never ends gets the ceiling, is admitted, and is deactivated by Kueue once the
/// ceiling has passed; the Job behind it keeps its own, shorter limit and is admitted on the GPU given back.
async fn stopped_at_the_ceiling(
    client: &Client,
    tenant: &Client,
    names: &RunTimeNames<'_>,
) -> Result<(), HarnessError> {
    let probe = run_time_job(names.namespace, "probe", json!({}), None)?;
    let tier = names.tier.to_owned();
    let what = "the API server to call the webhook (a dry-run Job stored with its tier annotation)";
    wait_until_admitted_as(client, what, WEBHOOK_PROPAGATION, &probe, |stored| {
        stored.annotations().get(TIER_ANNOTATION) == Some(&tier)
    })
    .await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), names.namespace);
    let endless =
        jobs.create(&PostParams::default(), &run_time_job(names.namespace, "endless", json!({}), None)?).await?;
    ensure(run_time_label(&endless) == Some(CEILING_SECONDS), || {
        format!("the Job asking for no limit was stored with {:?}, not the ceiling", run_time_label(&endless))
    })?;
    let workload =
        wait_for_workload(client, names.namespace, "endless", "Kueue to admit the endless Job", SCHEDULED, admitted)
            .await?;
    ensure(workload["spec"]["maximumExecutionTimeSeconds"] == json!(40), || {
        format!("its Workload carries no 40s limit: {}", workload["spec"])
    })?;
    running_job_edits_undone(client, tenant, names).await?;

    // Created once the endless Job holds the tier's only GPU, so it queues behind it.
    let modest = run_time_job(names.namespace, "modest", json!({MAX_EXEC_TIME_LABEL: ASKED_SECONDS}), None)?;
    let modest = jobs.create(&PostParams::default(), &modest).await?;
    ensure(run_time_label(&modest) == Some(ASKED_SECONDS), || {
        format!("the Job asking {ASKED_SECONDS}s was stored with {:?}", run_time_label(&modest))
    })?;
    let pending = job_workload(client, names.namespace, "modest").await;
    ensure(!pending.as_ref().is_some_and(admitted), || {
        format!("the modest Job was admitted while the endless one held the GPU: {pending:?}")
    })?;
    waiting_job_edits_held(client, tenant, names).await?;

    let deactivated = |workload: &Value| {
        let stopped = workload["status"]["conditions"].as_array().into_iter().flatten().any(|condition| {
            condition["message"].as_str().is_some_and(|message| message.contains("maximum execution time"))
        });
        workload["spec"]["active"] == json!(false) && stopped
    };
    let what = "Kueue to deactivate the endless Job for exceeding its maximum execution time";
    wait_for_workload(client, names.namespace, "endless", what, DEACTIVATED, deactivated).await?;
    wait_for("the endless Job suspended again", CONVERGE, || async {
        let job = jobs.get("endless").await.ok()?;
        job.spec.as_ref().and_then(|spec| spec.suspend).filter(|suspended| *suspended).map(|_| ())
    })
    .await?;
    let what = "Kueue to admit the modest Job on the GPU the endless one gave back";
    let workload = wait_for_workload(client, names.namespace, "modest", what, SCHEDULED, admitted).await?;
    ensure(workload["spec"]["maximumExecutionTimeSeconds"] == json!(20), || {
        format!("the modest Job's Workload does not keep its own 20s limit: {}", workload["spec"])
    })?;
    println!("the endless Job was stopped at {RUN_TIME_CEILING}; the modest Job runs with its own {ASKED_SECONDS}s");
    Ok(())
}

/// `labels: {<run-time label>: value}` as a JSON merge patch; `null` removes the label.
fn run_time_patch(value: Value) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"labels": {MAX_EXEC_TIME_LABEL: value}}}))
}

/// The two edits a tenant tries on a stored Job's limit: raised far above the ceiling, and removed.
fn run_time_edits() -> [(&'static str, Value); 2] {
    [("raised to 3600", json!("3600")), ("removed", Value::Null)]
}

/// With no webhook registered, a tenant's stored Job within the ceiling can have its label neither raised above
/// the ceiling nor removed: the gate refuses both UPDATEs, naming the label, and the stored value stays. The Job
/// is deleted afterwards, so the tier's one GPU is free for the scenario's next step.
async fn updates_refused_with_the_webhook_down(
    client: &Client,
    tenant: &Client,
    names: &RunTimeNames<'_>,
) -> Result<(), HarnessError> {
    let within = run_time_job(
        names.namespace,
        "within",
        json!({MAX_EXEC_TIME_LABEL: ASKED_SECONDS}),
        Some((names.queue, names.class)),
    )?;
    let what = "the in-server gate to admit a Job within the ceiling (dry run)";
    wait_until_admitted_as(tenant, what, ENFORCEMENT, &within, |stored| run_time_label(stored) == Some(ASKED_SECONDS))
        .await?;
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), names.namespace);
    jobs.create(&PostParams::default(), &within).await?;
    for (edit, value) in run_time_edits() {
        match jobs.patch("within", &PatchParams::default(), &run_time_patch(value)).await {
            Ok(stored) => {
                let label = run_time_label(&stored).map(str::to_owned);
                return Err(format!("webhook down: the label {edit} on UPDATE was stored as {label:?}").into());
            }
            Err(error) => {
                let message = error.to_string();
                ensure(message.contains(MAX_EXEC_TIME_LABEL) && message.contains("maxRunTime"), || {
                    format!("webhook down: the label {edit} on UPDATE was refused without naming the label: {message}")
                })?;
                println!("webhook down, UPDATE with the label {edit}: refused");
            }
        }
    }
    let stored = jobs.get("within").await?;
    ensure(run_time_label(&stored) == Some(ASKED_SECONDS), || {
        format!("after the refused UPDATEs the Job carries {:?}, not its own {ASKED_SECONDS}", run_time_label(&stored))
    })?;
    delete_job_and_wait(client, names.namespace, "within", SCHEDULED).await
}

/// Through the webhook, on a Job waiting behind the tier's only GPU (created after the modest Job, so it stays
/// suspended): removing its label gives the old value back, and raising it far above stores the ceiling.
async fn waiting_job_edits_held(
    client: &Client,
    tenant: &Client,
    names: &RunTimeNames<'_>,
) -> Result<(), HarnessError> {
    const OWN: &str = "10";
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), names.namespace);
    let waiting = run_time_job(names.namespace, "waiting", json!({MAX_EXEC_TIME_LABEL: OWN}), None)?;
    jobs.create(&PostParams::default(), &waiting).await?;
    let edits = run_time_edits();
    for ((edit, value), expected) in edits.into_iter().rev().zip([OWN, CEILING_SECONDS]) {
        let stored = jobs.patch("waiting", &PatchParams::default(), &run_time_patch(value)).await?;
        ensure(stored.spec.as_ref().and_then(|spec| spec.suspend) == Some(true), || {
            "the waiting Job was unsuspended: the tier's only GPU is held by the endless Job".to_owned()
        })?;
        ensure(run_time_label(&stored) == Some(expected), || {
            format!("webhook up, waiting Job, label {edit}: stored {:?}, not {expected}", run_time_label(&stored))
        })?;
        println!("webhook up, waiting Job, UPDATE with the label {edit}: stored {expected}");
    }
    let pending = job_workload(client, names.namespace, "waiting").await;
    ensure(!pending.as_ref().is_some_and(admitted), || format!("the waiting Job was admitted: {pending:?}"))
}

/// Through the webhook, on the endless Job Kueue has just admitted and unsuspended (its ceiling leaves some 40 s
/// for this): raising or removing its label is undone, since Kueue refuses any change to a running Job's limit,
/// and its Workload keeps the ceiling.
async fn running_job_edits_undone(
    client: &Client,
    tenant: &Client,
    names: &RunTimeNames<'_>,
) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), names.namespace);
    wait_for("Kueue to unsuspend the endless Job", CONVERGE, || async {
        let job = jobs.get("endless").await.ok()?;
        (job.spec.as_ref().and_then(|spec| spec.suspend) == Some(false)).then_some(())
    })
    .await?;
    for (edit, value) in run_time_edits() {
        let stored = jobs.patch("endless", &PatchParams::default(), &run_time_patch(value)).await?;
        ensure(stored.spec.as_ref().and_then(|spec| spec.suspend) == Some(false), || {
            format!("the endless Job was suspended again before the label {edit} could be tried on it running")
        })?;
        ensure(run_time_label(&stored) == Some(CEILING_SECONDS), || {
            format!(
                "webhook up, running Job, label {edit}: stored {:?}, not {CEILING_SECONDS}",
                run_time_label(&stored)
            )
        })?;
        println!("webhook up, running Job, UPDATE with the label {edit}: undone");
    }
    let workload = job_workload(client, names.namespace, "endless").await.unwrap_or_default();
    ensure(workload["spec"]["maximumExecutionTimeSeconds"] == json!(40), || {
        format!("after the undone edits the endless Job's Workload does not keep the 40s ceiling: {workload}")
    })
}
