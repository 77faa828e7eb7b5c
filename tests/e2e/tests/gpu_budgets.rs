//! End-to-end test of GPU-hour accounting and tier budgets (docs/guides/gpu-budgets.md) against a real API server
//! with Kueue v0.19+: a tier whose budget is one GPU-minute per period. Two one-GPU Jobs, admitted through the real
//! webhook, spend it in about thirty seconds; the daemon's checkpoint (every two seconds here) then holds the tier's
//! ClusterQueue (`stopPolicy: Hold`), so a third Job waits while the first two keep running, and `why` names the
//! budget, what was used and when it resets. The GPU-seconds in the policy's `status.usage` match the sum of the
//! Jobs' admitted durations at the checkpoint. Raising the budget lifts the hold and Kueue admits the third Job; the
//! edit's status write and the checkpoints after it keep each other's fields.
//! A second scenario gives the budget a rolling window of two minutes (Budget over a rolling window): two Jobs spend
//! it, the third is held, and once the first two are deleted the hold lifts by itself as their use leaves the
//! window, and Kueue admits the third. Skipped (and passing) without a reachable cluster, without Kueue's v1beta2
//! CRDs or without `TIERGATE_E2E_WEBHOOK_HOST`.
//!
//! Kueue counts by admission, so the Jobs spend the budget whether their pods run or not. With the throwaway
//! plane's real node (`TIERGATE_E2E_NODE`), the tier's class is that node: the Jobs' busybox pods run there, and the
//! first scenario checks the first two run while the third is held and that the third runs once the budget is
//! raised. Elsewhere the class is a label no node carries, and the admitted Jobs' pods stay Pending.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::admission::TIER_ANNOTATION;
use tiergate::cmd::build_live_answer;
use tiergate::live::{KubectlConnection, connect};
use tiergate::plan::names::cluster_queue_name;
use tiergate::policy::budget::{WindowCounts, parse_resource_seconds, window_seconds};
use tiergate::policy::{TierPolicy, UsageStatus};
use tiergate::reconcile::kinds::KueueKind;
use tiergate::usage::parse_instant;
use tiergate_e2e::control_plane::node::{NODE_ENV, REAL_NODE_LABEL, REAL_NODE_TAINT};
use tiergate_e2e::real_node::{busybox_pod_spec, job_pods};
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, delete_job_and_wait, ensure, is_admitted, job_admitted_at,
    job_workload, policy_usage, random_name, start_tiergate, wait_for, wait_until_admitted_as,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// Kueue objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(30);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);
/// Kueue creates a Workload per Job and schedules in cycles.
const SCHEDULED: Duration = Duration::from_secs(90);
/// Two GPUs spend [`BUDGET`] in 30 s; the checkpoint and the reconcile follow within seconds.
const SPENT: Duration = Duration::from_secs(150);
/// The tier's budget: one GPU-minute per period.
const BUDGET: &str = "1m";
/// The raised budget: room for hours.
const RAISED: &str = "100h";
/// The rolling window of the second scenario's budget (2 s buckets).
const WINDOW: &str = "2m";
/// Deleted Jobs' use leaves [`WINDOW`] within the window and a bucket of their deletion; the checkpoint and the
/// reconcile follow within seconds. Generous: the wait ends as soon as the hold lifts.
const LEFT_WINDOW: Duration = Duration::from_secs(300);
/// The daemon's checkpoint interval in the suites (tests/e2e/src/lib.rs), the bound of a count.
const CHECKPOINT_SECONDS: i128 = 2;
const GPU: &str = "nvidia.com/gpu";
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
/// The scenarios share the webhook's port: they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Jobs' busybox script on the real node: it runs until stopped and exits at once on SIGTERM, so a deleted
/// Job's pod gives its fake GPU back without waiting out the grace period.
const RUN_UNTIL_STOPPED: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

struct Run {
    prefix: String,
    system: String,
    tenant: String,
    policy: TierPolicy,
    /// The plane's real node, where the tier's class puts the Jobs' pods; `None` on other clusters.
    node: Option<String>,
}

impl Run {
    /// A run whose tier's budget is [`BUDGET`] per period, or over `window` when given.
    fn new(window: Option<&str>) -> Result<Self, HarnessError> {
        let prefix = random_name("e2e");
        let node = std::env::var(NODE_ENV).ok().filter(|name| !name.is_empty());
        Ok(Self {
            system: format!("{prefix}-system"),
            tenant: format!("{prefix}-metered"),
            policy: build_policy(&prefix, window, node.is_some())?,
            prefix,
            node,
        })
    }

    fn tier(&self) -> String {
        format!("{}-metered", self.prefix)
    }

    fn cluster_queue(&self) -> String {
        cluster_queue_name(&self.tier())
    }
}

/// One tier of 4 GPUs (room for three Jobs: only the budget can hold the third) and a budget of [`BUDGET`], per
/// period or over `window`; its class is the real node (its label and taint) `on_node`, else a label no node has.
fn build_policy(prefix: &str, window: Option<&str>, on_node: bool) -> Result<TierPolicy, HarnessError> {
    let mut policy = json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [{"name": format!("{prefix}-l4"), "nodeLabels": {CLASS_LABEL: format!("{prefix}-l4")}}],
            "priorityBuckets": [{"name": format!("{prefix}-default"), "minScore": 0, "value": 100}],
            "scoring": {"enabled": false},
            "tiers": [{
                "name": format!("{prefix}-metered"),
                "gpuClass": format!("{prefix}-l4"),
                "quotas": {GPU: {"nominal": "4"}, "cpu": {"nominal": "8"}, "memory": {"nominal": "8Gi"}},
                "budget": {"limits": {GPU: BUDGET}},
            }],
        }
    });
    if let Some(window) = window {
        policy["spec"]["tiers"][0]["budget"]["window"] = window.into();
    }
    if on_node {
        policy["spec"]["gpuClasses"][0]["nodeLabels"] = json!({REAL_NODE_LABEL: "true"});
        policy["spec"]["gpuClasses"][0]["nodeTaints"] =
            json!([{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}]);
    }
    Ok(serde_json::from_value(policy)?)
}

fn build_job(run: &Run, name: &str) -> Result<Job, HarnessError> {
    let pod = match run.node {
        Some(_) => busybox_pod_spec(RUN_UNTIL_STOPPED, Some("1")),
        None => json!({
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi", GPU: "1"}, "limits": {GPU: "1"}},
            }],
        }),
    };
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": run.tenant},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": pod}},
    });
    Ok(serde_json::from_value(job)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_holds_the_third_job_until_it_is_raised_and_the_count_matches_the_admitted_time() {
    const TEST: &str = "a_spent_budget_holds_the_third_job_until_it_is_raised_and_the_count_matches_the_admitted_time";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let run = Run::new(None)?;
    let daemon = start_daemon(client, cleanup, &run).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        spend_and_raise(client, cleanup, endpoint, webhook, &run).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_window_holds_the_third_job_until_the_deleted_jobs_use_leaves_the_window() {
    const TEST: &str = "a_spent_window_holds_the_third_job_until_the_deleted_jobs_use_leaves_the_window";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_webhook_test(TEST, run_window_scenario).await {
        panic!("{error}");
    }
}

async fn run_window_scenario(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
) -> Result<(), HarnessError> {
    let run = Run::new(Some(WINDOW))?;
    let daemon = start_daemon(client, cleanup, &run).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        spend_and_wait_out(client, cleanup, endpoint, webhook, &run).await
    })
    .await
}

async fn start_daemon(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    let tenant_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.tier()), (RUN_LABEL, &run.prefix)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &[(&run.tenant, tenant_labels)]).await?;
    let local_queue = run.policy.spec.tiers[0].local_queue();
    wait_for("the tier's LocalQueue and ClusterQueue", CONVERGE, || async {
        let queues: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &run.tenant, &KueueKind::LocalQueue.api_resource());
        queues.get_opt(&local_queue).await.ok()??;
        cluster_queue(client, run).await
    })
    .await?;
    Ok(daemon)
}

async fn cluster_queue(client: &Client, run: &Run) -> Option<DynamicObject> {
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    queues.get_opt(&run.cluster_queue()).await.ok()?
}

async fn stop_policy(client: &Client, run: &Run) -> Option<String> {
    let queue = cluster_queue(client, run).await?;
    Some(queue.data["spec"]["stopPolicy"].as_str().unwrap_or("None").to_owned())
}

async fn create_job(client: &Client, run: &Run, name: &str) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.tenant);
    let stored = jobs.create(&PostParams::default(), &build_job(run, name)?).await?;
    let queued = stored.labels().contains_key(QUEUE_NAME_LABEL)
        && stored.annotations().get(TIER_ANNOTATION) == Some(&run.tier());
    ensure(queued, || format!("Job {name} was not queued by the webhook: labels {:?}", stored.labels()))
}

/// The policy's `status.usage` as JSON, when written.
async fn usage(client: &Client, run: &Run) -> Option<Value> {
    policy_usage(client, &run.prefix).await
}

/// When Job `name`'s Workload was admitted (Unix seconds).
async fn admitted_at(client: &Client, run: &Run, name: &str) -> Option<i64> {
    job_admitted_at(client, &run.tenant, name).await
}

/// Registers the webhook and runs two one-GPU Jobs until the spent budget holds the tier's ClusterQueue; returns
/// when Kueue admitted each (Unix seconds).
async fn spend(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<Vec<i64>, HarnessError> {
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
    let probe = build_job(run, "probe")?;
    let tier = run.tier();
    let decided = |stored: &Job| stored.annotations().get(TIER_ANNOTATION) == Some(&tier);
    let what = "the API server to call the webhook (a dry-run Job stored with its tier annotation)";
    wait_until_admitted_as(client, what, WEBHOOK_PROPAGATION, &probe, decided).await?;

    for name in ["first", "second"] {
        create_job(client, run, name).await?;
    }
    let mut starts = Vec::new();
    for name in ["first", "second"] {
        let what = format!("Kueue to admit Job {name} (its Workload Admitted=True)");
        starts.push(wait_for(&what, SCHEDULED, || admitted_at(client, run, name)).await?);
    }
    let held = wait_for("the spent budget to hold the tier's ClusterQueue (stopPolicy Hold)", SPENT, || async {
        (stop_policy(client, run).await? == "Hold").then_some(())
    })
    .await;
    if let Err(error) = held {
        let found = usage(client, run).await;
        return Err(
            format!("{error}; status.usage is {found:?}, stopPolicy {:?}", stop_policy(client, run).await).into()
        );
    }
    Ok(starts)
}

/// Creates the third Job and checks that it waits while the first two run on; returns `why`'s sentence about it.
async fn hold_third(client: &Client, run: &Run) -> Result<String, HarnessError> {
    create_job(client, run, "third").await?;
    let workload =
        wait_for("Kueue to create the third Job's Workload", SCHEDULED, || job_workload(client, &run.tenant, "third"))
            .await?;
    ensure(!is_admitted(&workload), || format!("the third Job was admitted although the budget is spent: {workload}"))?;
    for name in ["first", "second"] {
        let running = job_workload(client, &run.tenant, name).await.is_some_and(|workload| is_admitted(&workload));
        ensure(running, || format!("Job {name} stopped being admitted when the budget was spent (Hold must keep it)"))?;
    }
    let (live, _) = connect(&KubectlConnection::default()).await?;
    let answer = build_live_answer(&live, "job/third", &run.tenant, &run.prefix).await?;
    println!("why job/third: {}", answer.summary);
    Ok(answer.summary)
}

async fn spend_and_raise(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    let tier = run.tier();
    let starts = spend(client, cleanup, endpoint, webhook, run).await?;

    // The count at the checkpoint is the two Jobs' admitted seconds up to it (both still run): exact up to the
    // checkpoint bound.
    let counted = usage(client, run).await.ok_or("status.usage is gone")?;
    let checkpoint =
        counted["checkpointTime"].as_str().and_then(parse_instant).ok_or("status.usage has no checkpointTime")?;
    let gpu_seconds = counted["tiers"][&tier]["current"][GPU]
        .as_str()
        .and_then(parse_resource_seconds)
        .ok_or_else(|| format!("status.usage counts no {GPU} for tier {tier}: {counted}"))?;
    let expected: i128 = starts.iter().map(|start| i128::from((checkpoint - start).max(0)) * 1000).sum();
    let bound = CHECKPOINT_SECONDS * 1000 * 2;
    ensure((gpu_seconds - expected).abs() <= bound, || {
        format!(
            "counted {gpu_seconds} milli-GPU-seconds at {checkpoint}, but the Jobs admitted at {starts:?} ran \
             {expected}: {counted}"
        )
    })?;
    ensure(gpu_seconds >= 60_000, || format!("the hold came before the budget was spent: {counted}"))?;
    let namespace_seconds =
        counted["namespaces"][&run.tenant]["current"][GPU].as_str().and_then(parse_resource_seconds);
    ensure(namespace_seconds == Some(gpu_seconds), || {
        format!("the tenant's count differs from its tier's: {counted}")
    })?;

    // The third Job waits while the first two run on (on the real node, their pods are running there).
    for name in ["first", "second"] {
        runs_on_the_node(client, run, name).await?;
    }
    let summary = hold_third(client, run).await?;
    let names_budget = summary.contains("budget of 1m of nvidia.com/gpu")
        || (summary.contains("budget") && summary.contains("is spent"));
    ensure(names_budget && summary.contains("until the period turns at"), || {
        format!("why does not name the spent budget and its reset: {summary}")
    })?;

    // Raising the budget lifts the hold; Kueue admits the third Job.
    let policies: Api<TierPolicy> = Api::all(client.clone());
    let patch = json!([{"op": "replace", "path": "/spec/tiers/0/budget/limits/nvidia.com~1gpu", "value": RAISED}]);
    policies.patch(&run.prefix, &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(patch)?)).await?;
    wait_for("the raised budget to lift the hold (no stopPolicy)", SPENT, || async {
        (stop_policy(client, run).await? == "None").then_some(())
    })
    .await?;
    wait_for("Kueue to admit the third Job once the budget is raised", SCHEDULED, || admitted_at(client, run, "third"))
        .await?;
    runs_on_the_node(client, run, "third").await?;

    // The edit's status write (field manager `tiergate`) and the checkpoints (`tiergate-usage`) keep each other's
    // fields: the status shows the edit's generation and a count no older than the one read above.
    let edited = policies.get(&run.prefix).await?.metadata.generation;
    let kept = wait_for("the status to show the edit and a later checkpoint", SPENT, || async {
        let status = policies.get_opt(&run.prefix).await.ok()??.status?;
        let usage = status.usage?;
        let later = parse_instant(&usage.checkpoint_time)? > checkpoint;
        (status.observed_generation == edited && later && !status.conditions.is_empty()).then_some(usage)
    })
    .await?;
    let recounted =
        kept.tiers.get(&tier).and_then(|totals| totals.current.get(GPU)).and_then(|text| parse_resource_seconds(text));
    ensure(recounted.is_some_and(|count| count >= gpu_seconds), || {
        format!("the count went back after the status write: {gpu_seconds} then {recounted:?}")
    })?;
    Ok(())
}

/// With the real node, waits until Job `name`'s pod runs there; without it, nothing to check.
async fn runs_on_the_node(client: &Client, run: &Run, name: &str) -> Result<(), HarnessError> {
    let Some(node) = &run.node else { return Ok(()) };
    let what = format!("Job {name}'s pod to run on node {node}");
    let running = wait_for(&what, SCHEDULED, || async {
        let pods = job_pods(client, &run.tenant, name).await;
        pods.iter()
            .any(|(pod, _)| {
                let on_node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_ref()) == Some(node);
                let phase = pod.status.as_ref().and_then(|status| status.phase.as_deref());
                on_node && phase == Some("Running")
            })
            .then_some(())
    })
    .await;
    if let Err(error) = running {
        let pods: Vec<String> = job_pods(client, &run.tenant, name).await.into_iter().map(|(_, why)| why).collect();
        return Err(format!("{error}; its pods: {pods:?}").into());
    }
    println!("Job {name}'s pod runs on node {node}");
    Ok(())
}

/// The window's use of the GPU at the checkpoint of `counted` (`status.usage` as JSON), milli-GPU-seconds, as the
/// daemon reads it.
fn window_gpu_millis(counted: &Value, tier: &str) -> Option<i128> {
    let usage: UsageStatus = serde_json::from_value(counted.clone()).ok()?;
    let counts = WindowCounts::read(usage.windows.get(tier)?, window_seconds(WINDOW).ok()?)?;
    Some(counts.used(GPU, parse_instant(&usage.checkpoint_time)?))
}

async fn spend_and_wait_out(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    let tier = run.tier();
    spend(client, cleanup, endpoint, webhook, run).await?;

    // The window's buckets are checkpointed beside the period's counts, and hold at least the limit.
    let counted = usage(client, run).await.ok_or("status.usage is gone")?;
    let window = &counted["windows"][&tier];
    ensure(window["window"] == WINDOW && window["bucketSeconds"] == 2, || {
        format!("status.usage has no {WINDOW} window of 2 s buckets for tier {tier}: {counted}")
    })?;
    let in_window = window_gpu_millis(&counted, &tier).unwrap_or(0);
    ensure(in_window >= 60_000, || format!("the hold came before the window's budget was spent: {counted}"))?;

    // The third Job waits; why says when the use leaves the window, not when the period turns.
    let summary = hold_third(client, run).await?;
    ensure(summary.contains(&format!("until use leaves the {WINDOW} window, at ")), || {
        format!("why does not say when the use leaves the window: {summary}")
    })?;
    ensure(!summary.contains("period turns"), || format!("why speaks of the period for a windowed budget: {summary}"))?;

    // Deleting the first two Jobs ends their use but keeps what they used in the window: the hold stays until that
    // use leaves the window, then lifts without any edit, and Kueue admits the third Job.
    for name in ["first", "second"] {
        delete_job_and_wait(client, &run.tenant, name, SCHEDULED).await?;
    }
    let held = stop_policy(client, run).await;
    println!("after deleting the first two Jobs: stopPolicy {held:?} (the window still holds their use)");
    wait_for("the deleted Jobs' use to leave the window and the hold to lift (no stopPolicy)", LEFT_WINDOW, || async {
        (stop_policy(client, run).await? == "None").then_some(())
    })
    .await?;
    wait_for("Kueue to admit the third Job once the window has room", SCHEDULED, || admitted_at(client, run, "third"))
        .await?;
    let after = usage(client, run).await.ok_or("status.usage is gone")?;
    // This period's and the last (should the month have turned meanwhile) keep what left the window.
    let period = |side: &str| after["tiers"][&tier][side][GPU].as_str().and_then(parse_resource_seconds).unwrap_or(0);
    let period_seconds = period("current") + period("previous");
    ensure(period_seconds >= in_window, || {
        format!("the period's count lost the use that left the window ({in_window} counted before): {after}")
    })?;
    Ok(())
}
