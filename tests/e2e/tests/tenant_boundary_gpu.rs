//! End-to-end red team of the tier boundary, classes 1 and 4 of issue 13 (GPU classes by any field, priority
//! ceilings): a bronze tenant's escalation attempts are created through a real API server, with the real webhook
//! in this process on the daemon's live snapshot (as in `webhook.rs`), and each is asserted refused or
//! neutralised in the stored object. Skipped (and passing) without a reachable cluster, without Kueue's v1beta2
//! CRDs or without `TIERGATE_E2E_WEBHOOK_HOST`. See docs/admission.md ("Tenant boundary").
//!
//! One test function: the webhook port and the cluster-scoped objects are per process.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tiergate::admission::TIER_ANNOTATION;
use tiergate::policy::{GpuClass, Tier, TierPolicy};
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, build_prefixed_policy, ensure, prefixed, random_name, start_tiergate,
    wait_for_local_queue, wait_until_admitted_as,
};
use tiergate_workloads::{PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL};

/// Kueue objects after the policy is applied.
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
    fn tier(&self, base: &str) -> Result<&Tier, HarnessError> {
        let name = prefixed(&self.prefix, base);
        Ok(self.policy.spec.tier(&name).ok_or_else(|| format!("the e2e policy has no tier {name}"))?)
    }

    fn class_of(&self, tier: &Tier) -> Result<&GpuClass, HarnessError> {
        Ok(self.policy.spec.gpu_class(&tier.gpu_class).ok_or_else(|| format!("no class {}", tier.gpu_class))?)
    }

    fn bucket(&self, base: &str) -> String {
        prefixed(&self.prefix, base)
    }
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, HarnessError> {
    Ok(serde_json::from_value(value)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bronze_escalation_attempts_on_gpu_classes_and_priority_are_refused_or_neutralised() {
    const TEST: &str = "bronze_escalation_attempts_on_gpu_classes_and_priority_are_refused_or_neutralised";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-gpu");
    let run = Run {
        system: format!("{prefix}-system"),
        bronze: format!("{prefix}-bronze"),
        policy: build_prefixed_policy(&prefix)?,
        prefix,
    };
    let bronze_tier = run.tier("bronze")?.name.clone();
    let bronze_queue = run.tier("bronze")?.local_queue();
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &bronze_tier), (RUN_LABEL, &run.prefix)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &[(&run.bronze, bronze_labels)]).await?;
    if let Err(error) = wait_for_local_queue(client, &run.bronze, &bronze_queue, CONVERGE).await {
        daemon.stop().await;
        return Err(error);
    }
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        attack(client, cleanup, endpoint, webhook, &run).await
    })
    .await
}

async fn attack(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
    wait_until_mutating(client, run).await?;
    let bronze = run.tier("bronze")?;
    let bronze_class = run.class_of(bronze)?;
    let gold_class = run.class_of(run.tier("gold")?)?;
    let (gold_key, gold_value) =
        gold_class.node_labels.iter().next().ok_or_else(|| format!("class {} has no label", gold_class.name))?;
    let cpu =
        json!([{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}]);
    let tier_part = format!("tier {}", bronze.name);

    // Class 1: a GPU class by any field, whatever the pod requests.
    let selector = json!({"containers": cpu, "nodeSelector": gold_class.node_labels});
    expect_pod_denied(client, run, "selector", selector, &tier_part).await?;
    let affinity = json!({"containers": cpu, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": gold_key, "operator": "In", "values": [gold_value]}]}]}}}});
    expect_pod_denied(client, run, "affinity", affinity, &tier_part).await?;
    let amd = json!({"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"amd.com/gpu": "1"}}}]});
    expect_pod_denied(client, run, "amd", amd, "amd.com/gpu").await?;
    let dra = json!({"containers": cpu, "resourceClaims": [{"name": "gpu", "resourceClaimName": "any"}]});
    expect_pod_denied(client, run, "dra", dra, "resourceClaims").await?;
    let strategy = pod(
        run,
        "strategy",
        json!({"containers": cpu}),
        Some(json!({
        "smart-scheduler.io/schedule-strategy": format!("base=1,weight=1,nodeSelector={gold_key}:{gold_value}")})),
    );
    expect_denied(create::<Pod>(client, run, strategy).await, "strategy", &tier_part)?;

    let tolerating = pod(run, "tolerating", json!({"containers": cpu, "tolerations": [{"operator": "Exists"}]}), None);
    let stored: Pod = create(client, run, tolerating).await?;
    let selector = stored.spec.and_then(|spec| spec.node_selector).unwrap_or_default();
    ensure(bronze_class.node_labels.iter().all(|(key, value)| selector.get(key) == Some(value)), || {
        format!(
            "a bronze pod tolerating every taint is stored with selector {selector:?}, not class {}'s",
            bronze_class.name
        )
    })?;

    // Class 4: priority is tied to the tier.
    let ceiling = bronze.max_priority_class.clone().ok_or("the sample bronze tier has no maxPriorityClass")?;
    let top = run.bucket("gpu-ultra");
    // The score (built-in scorer here) may pick a lower bucket than the ceiling; never one above it.
    let stored: Job = create(client, run, job(run, "priority-create", &top)).await?;
    expect_at_most(run, &stored.metadata.labels, &ceiling, "a bronze Job created with the top class")?;

    let default = run.bucket("gpu-default");
    let stored: Job = create(client, run, job(run, "priority-update", &default)).await?;
    expect_at_most(run, &stored.metadata.labels, &ceiling, "a bronze Job created with gpu-default")?;
    let raise = json!({"metadata": {"labels": {PRIORITY_CLASS_LABEL: top}}});
    let updated = Api::<Job>::namespaced(client.clone(), &run.bronze)
        .patch("priority-update", &PatchParams::default(), &Patch::Merge(&raise))
        .await?;
    // Priority is decided at creation: the update is undone (or, when scored again, held to the ceiling).
    expect_at_most(run, &updated.metadata.labels, &ceiling, "a bronze Job updated to the top class")
}

/// The priority-class label names a bucket of the policy at or below `ceiling`.
fn expect_at_most(
    run: &Run,
    labels: &Option<BTreeMap<String, String>>,
    ceiling: &str,
    what: &str,
) -> Result<(), HarnessError> {
    let buckets = &run.policy.spec.priority_buckets;
    let value = |name: &str| buckets.iter().find(|bucket| bucket.name == name).map(|bucket| bucket.value);
    let limit = value(ceiling).ok_or_else(|| format!("the e2e policy has no bucket {ceiling}"))?;
    let actual = labels.as_ref().and_then(|labels| labels.get(PRIORITY_CLASS_LABEL));
    ensure(actual.and_then(|name| value(name)).is_some_and(|actual| actual <= limit), || {
        format!("{what} is stored with {PRIORITY_CLASS_LABEL} {actual:?}, expected a bucket at or below {ceiling}")
    })
}

/// Waits until a dry-run bronze GPU Job comes back with a queue name and the webhook's tier annotation (the API server
/// calls the webhook; the in-server gate's mutating half sets the queue name alone).
async fn wait_until_mutating(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let probe: Job = typed(job(run, "probe", &run.bucket("gpu-default")))?;
    let queued = |stored: &Job| {
        stored.metadata.labels.as_ref().is_some_and(|labels| labels.contains_key(QUEUE_NAME_LABEL))
            && stored.metadata.annotations.as_ref().is_some_and(|annotations| annotations.contains_key(TIER_ANNOTATION))
    };
    wait_until_admitted_as(client, "the API server to call the webhook", WEBHOOK_PROPAGATION, &probe, queued).await
}

fn pod(run: &Run, name: &str, spec: Value, annotations: Option<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": run.bronze, "annotations": annotations.unwrap_or(json!({}))},
        "spec": spec})
}

fn job(run: &Run, name: &str, priority: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": run.bronze, "labels": {PRIORITY_CLASS_LABEL: priority}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main",
            "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
}

async fn create<T>(client: &Client, run: &Run, object: Value) -> Result<T, HarnessError>
where
    T: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + serde::Serialize,
    <T as kube::Resource>::DynamicType: Default,
{
    let typed: T = typed(object)?;
    Ok(Api::<T>::namespaced(client.clone(), &run.bronze).create(&PostParams::default(), &typed).await?)
}

async fn expect_pod_denied(
    client: &Client,
    run: &Run,
    name: &str,
    spec: Value,
    part: &str,
) -> Result<(), HarnessError> {
    expect_denied(create::<Pod>(client, run, pod(run, name, spec, None)).await, name, part)
}

fn expect_denied<T: std::fmt::Debug>(
    result: Result<T, HarnessError>,
    what: &str,
    part: &str,
) -> Result<(), HarnessError> {
    match result {
        Ok(stored) => Err(format!("bronze pod {what} was admitted: {stored:?}").into()),
        Err(error) => {
            let message = error.to_string();
            ensure(message.contains(part) && message.contains("denied the request"), || {
                format!("bronze pod {what}: the error {message:?} should be a denial containing {part:?}")
            })
        }
    }
}
