//! End-to-end tenant-boundary attacks through a real API server (issue 13 classes 2 and 3): forged owner
//! references and UPDATE sequences that try to leave the tier's queue or priority. The real webhook runs in this
//! process on the daemon's live snapshot (owner index included), registered with a URL client config, as in
//! `webhook.rs`. Skipped (and passing) without a reachable cluster, without Kueue's v1beta2 CRDs or without
//! `TIERGATE_E2E_WEBHOOK_HOST`.
//!
//! One test function: the webhook port and the cluster-scoped objects are per process.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tiergate::admission::TIER_ANNOTATION;
use tiergate::policy::TierPolicy;
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, build_prefixed_policy, ensure, load_sample_workload, prefixed, random_name,
    start_tiergate, wait_for_local_queue, wait_until_admitted_as,
};
use tiergate_workloads::{PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL};

/// Kueue objects after the policy is applied (a fresh cluster may list slowly).
const CONVERGE: Duration = Duration::from_secs(30);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);

struct Run {
    prefix: String,
    system: String,
    bronze: String,
    policy: TierPolicy,
}

impl Run {
    fn queue(&self) -> Result<String, HarnessError> {
        let name = prefixed(&self.prefix, "bronze");
        let tier = self.policy.spec.tier(&name).ok_or_else(|| format!("the e2e policy has no tier {name}"))?;
        Ok(tier.local_queue())
    }

    fn gold_selector(&self) -> Result<BTreeMap<String, String>, HarnessError> {
        let name = prefixed(&self.prefix, "gold");
        let tier = self.policy.spec.tier(&name).ok_or_else(|| format!("the e2e policy has no tier {name}"))?;
        let class = self.policy.spec.gpu_class(&tier.gpu_class).ok_or("the gold tier has no class")?;
        Ok(class.node_labels.clone())
    }
}

fn queue_of(job: &Job) -> Option<String> {
    job.metadata.labels.as_ref().and_then(|labels| labels.get(QUEUE_NAME_LABEL)).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_owners_and_update_sequences_never_leave_the_bronze_tier() {
    const TEST: &str = "forged_owners_and_update_sequences_never_leave_the_bronze_tier";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let run = Run {
        system: format!("{prefix}-system"),
        bronze: format!("{prefix}-bronze"),
        policy: build_prefixed_policy(&prefix)?,
        prefix,
    };
    let bronze_tier = prefixed(&run.prefix, "bronze");
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &bronze_tier), (RUN_LABEL, &run.prefix)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &[(&run.bronze, bronze_labels)]).await?;
    wait_for_local_queue(client, &run.bronze, &run.queue()?, CONVERGE).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
        wait_until_mutating(client, &run).await?;
        check_forged_job_owner_on_a_gold_pod_is_denied(client, &run).await?;
        check_job_forging_a_jobset_owner_is_queued_and_suspended(client, &run).await?;
        check_update_sequences_keep_the_queue_and_priority(client, &run).await
    })
    .await
}

/// Waits until a dry-run bronze Job comes back queued and with the webhook's tier annotation (the API server calls the
/// webhook; the in-server gate's mutating half sets the queue name alone).
async fn wait_until_mutating(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let probe: Job = load_sample_workload("job-bronze.yaml", &run.bronze)?;
    let queued = |stored: &Job| {
        queue_of(stored).is_some()
            && stored.metadata.annotations.as_ref().is_some_and(|annotations| annotations.contains_key(TIER_ANNOTATION))
    };
    wait_until_admitted_as(client, "the API server to call the webhook", WEBHOOK_PROPAGATION, &probe, queued).await
}

/// Whether `message` is Kueue's own webhook refusing an object whose controller `owner` does not exist: on a
/// cluster running Kueue that refusal can come before tiergate's (the API server calls mutating webhooks in the
/// order of their configurations' names), and it keeps the object out just the same.
fn is_kueues_missing_owner_refusal(message: &str, owner: &str) -> bool {
    message.contains(".kb.io")
        && message.contains(owner)
        && (message.contains("not found") || message.contains("no matches"))
}

/// Class 2: a bronze Pod selecting the gold class and naming a Job that does not exist as its controller. tiergate
/// denies it (the owner is not in its index and the class is gold's), or Kueue's pod webhook does first.
async fn check_forged_job_owner_on_a_gold_pod_is_denied(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let mut pod: Pod = load_sample_workload("pod-override.yaml", &run.bronze)?;
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector = Some(run.gold_selector()?);
    }
    pod.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "name": "not-there",
        "uid": "00000000-0000-0000-0000-000000000001", "controller": true}))?]);
    match Api::<Pod>::namespaced(client.clone(), &run.bronze).create(&PostParams::default(), &pod).await {
        Ok(_) => Err("a bronze Pod with a forged Job owner and the gold class was admitted".into()),
        Err(kube::Error::Api(status)) => {
            let by_kueue = is_kueues_missing_owner_refusal(&status.message, "not-there");
            if by_kueue {
                println!("the forged-owner Pod was refused by Kueue's own webhook: {}", status.message);
            }
            ensure(status.message.contains("selects") || by_kueue, || format!("unexpected denial: {}", status.message))
        }
        Err(error) => Err(error.into()),
    }
}

/// Class 2 and issue 16: a Job naming a JobSet that does not exist is queued and suspended like any Job, or, on a
/// cluster running Kueue, refused by Kueue's Job webhook for its missing owner. Either way it never runs unqueued.
async fn check_job_forging_a_jobset_owner_is_queued_and_suspended(
    client: &Client,
    run: &Run,
) -> Result<(), HarnessError> {
    let mut job: Job = load_sample_workload("job-bronze.yaml", &run.bronze)?;
    job.metadata.name = Some("forged-child".to_owned());
    job.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "not-there",
        "uid": "00000000-0000-0000-0000-000000000002", "controller": true}))?]);
    let stored = match Api::<Job>::namespaced(client.clone(), &run.bronze).create(&PostParams::default(), &job).await {
        Ok(stored) => stored,
        Err(kube::Error::Api(status)) if is_kueues_missing_owner_refusal(&status.message, "not-there") => {
            println!("the Job forging a JobSet owner was refused by Kueue's own webhook: {}", status.message);
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    ensure(queue_of(&stored) == Some(run.queue()?), || format!("the forged child has queue {:?}", queue_of(&stored)))?;
    let suspend = stored.spec.as_ref().and_then(|spec| spec.suspend);
    ensure(suspend == Some(true), || format!("the forged child is stored with suspend {suspend:?}"))
}

/// Class 3: drop the queue, drop it again while unsuspending, raise the priority: the stored Job keeps the
/// tier's queue and its priority.
async fn check_update_sequences_keep_the_queue_and_priority(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.bronze);
    let mut job: Job = load_sample_workload("job-bronze.yaml", &run.bronze)?;
    job.metadata.name = Some("leaver".to_owned());
    let created = jobs.create(&PostParams::default(), &job).await?;
    let priority = created.metadata.labels.as_ref().and_then(|labels| labels.get(PRIORITY_CLASS_LABEL)).cloned();
    let params = PatchParams::default();
    let dropped =
        jobs.patch("leaver", &params, &Patch::Merge(json!({"metadata": {"labels": {QUEUE_NAME_LABEL: null}}}))).await?;
    ensure(queue_of(&dropped) == Some(run.queue()?), || format!("removing the queue left {:?}", queue_of(&dropped)))?;
    let unsuspended = jobs
        .patch(
            "leaver",
            &params,
            &Patch::Merge(json!({"metadata": {"labels": {QUEUE_NAME_LABEL: null}}, "spec": {"suspend": false}})),
        )
        .await?;
    ensure(queue_of(&unsuspended) == Some(run.queue()?), || {
        format!("removing the queue while unsuspending left {:?}", queue_of(&unsuspended))
    })?;
    let raised = jobs
        .patch("leaver", &params, &Patch::Merge(json!({"metadata": {"labels": {PRIORITY_CLASS_LABEL: "not-mine"}}})))
        .await?;
    let now = raised.metadata.labels.as_ref().and_then(|labels| labels.get(PRIORITY_CLASS_LABEL)).cloned();
    ensure(now == priority, || format!("the priority label became {now:?}, was {priority:?}"))
}
