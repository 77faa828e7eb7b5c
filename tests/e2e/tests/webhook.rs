//! End-to-end test of the admission webhook against a real API server with Kueue: the real webhook server runs in
//! this process on the daemon's live snapshot, is registered with a URL client config, and the sample workloads
//! are created for real: a bronze Job is queued, suspended, pinned to its tier's GPU class and given a scored
//! priority class that exists; a bronze Pod asking for the gold class is denied; the seed Deployments' pods are
//! split exactly across their node types. Skipped (and passing) without a reachable cluster, without Kueue's
//! v1beta2 CRDs or without `TIERGATE_E2E_WEBHOOK_HOST`. See docs/contributing.md ("End-to-end").
//!
//! One test function: the webhook port and the cluster-scoped objects are per process.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use tiergate::admission::TIER_ANNOTATION;
use tiergate::policy::{GpuClass, Tier, TierPolicy};
use tiergate::reconcile::kinds::KueueKind;
use tiergate::scoring::SCORE_SOURCE_ANNOTATION;
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, build_prefixed_policy, ensure, load_sample_workload,
    prefixed, random_name, start_tiergate, wait_for,
};
use tiergate_workloads::{PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL};

/// Kueue objects after the policy is applied (the daemon's bar is 10 s; a fresh cluster may list slowly).
const CONVERGE: Duration = Duration::from_secs(30);
/// The API server picks up a new webhook configuration within a few seconds.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(60);
/// The ReplicaSet controller creates pods in slow-start batches and backs off after a failed batch.
const PODS_CREATED: Duration = Duration::from_secs(90);

/// The names of one run: everything cluster-scoped is prefixed, every namespace is new.
struct Run {
    prefix: String,
    system: String,
    bronze: String,
    placement: String,
    policy: TierPolicy,
}

impl Run {
    fn new() -> Result<Self, HarnessError> {
        let prefix = random_name("e2e");
        Ok(Self {
            system: format!("{prefix}-system"),
            bronze: format!("{prefix}-bronze"),
            placement: format!("{prefix}-placement"),
            policy: build_prefixed_policy(&prefix)?,
            prefix,
        })
    }

    /// The policy's tier `base` (e.g. `bronze`, renamed `<prefix>-bronze`).
    fn tier(&self, base: &str) -> Result<&Tier, HarnessError> {
        let name = prefixed(&self.prefix, base);
        Ok(self.policy.spec.tier(&name).ok_or_else(|| format!("the e2e policy has no tier {name}"))?)
    }

    fn class_of(&self, tier: &Tier) -> Result<&GpuClass, HarnessError> {
        Ok(self
            .policy
            .spec
            .gpu_class(&tier.gpu_class)
            .ok_or_else(|| format!("the e2e policy has no class {}", tier.gpu_class))?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_workloads_are_queued_scored_and_placed_and_bronze_cannot_get_a_gold_class_gpu() {
    const TEST: &str = "sample_workloads_are_queued_scored_and_placed_and_bronze_cannot_get_a_gold_class_gpu";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

/// Setup, checks, then cleanup while the webhook still answers (namespace deletion updates pods, and the
/// configuration fails closed), and only then the webhook and the daemon stop.
async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let run = Run::new()?;
    let daemon = start_daemon(client, cleanup, &run).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        check_webhook(client, cleanup, endpoint, webhook, &run).await
    })
    .await
}

/// CRD, namespaces, the prefixed policy and the in-process daemon, until the bronze LocalQueue and every
/// bucket's WorkloadPriorityClass exist.
async fn start_daemon(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    let bronze_tier = run.tier("bronze")?.name.clone();
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &bronze_tier), (RUN_LABEL, &run.prefix)];
    let placement_labels: &[(&str, &str)] = &[(RUN_LABEL, &run.prefix)];
    let tenants = [(run.bronze.as_str(), bronze_labels), (run.placement.as_str(), placement_labels)];
    let daemon = start_tiergate(client, cleanup, &run.policy, &run.system, &tenants).await?;

    let local_queue = run.tier("bronze")?.local_queue();
    let local_queues = KueueKind::LocalQueue.api_resource();
    let priority_classes = KueueKind::WorkloadPriorityClass.api_resource();
    wait_for("the bronze LocalQueue and every priority bucket's WorkloadPriorityClass", CONVERGE, || async {
        let queues: Api<kube::core::DynamicObject> = Api::namespaced_with(client.clone(), &run.bronze, &local_queues);
        queues.get_opt(&local_queue).await.ok()??;
        let classes: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &priority_classes);
        for bucket in &run.policy.spec.priority_buckets {
            classes.get_opt(&bucket.name).await.ok()??;
        }
        Some(())
    })
    .await?;
    Ok(daemon)
}

async fn check_webhook(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix).await?;
    wait_until_mutating(client, endpoint, webhook, run).await?;
    check_bronze_job(client, run).await?;
    check_gold_class_denied_in_bronze(client, run).await?;
    let smart = [("node-type=ondemand", 3), ("node-type=spot", 3)];
    check_deployment_split(client, run, "deploy-smart.yaml", 6, &smart).await?;
    let custom = [("nodesize=od4vcpu16gb", 1), ("nodesize=spot4vcpu16gb", 4), ("nodesize=spot8vcpu32gb", 5)];
    check_deployment_split(client, run, "deploy-custom.yaml", 10, &custom).await
}

/// Waits until a dry-run bronze Job comes back with a queue name: the API server has picked up the
/// configuration, reaches the webhook, and the webhook's snapshot knows the namespace.
async fn wait_until_mutating(
    client: &Client,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.bronze);
    let job: Job = load_sample_workload("job-bronze.yaml", &run.bronze)?;
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let last = Mutex::new(String::new());
    let record = |message: String| {
        if let Ok(mut last) = last.lock() {
            *last = message;
        }
    };
    let waited =
        wait_for("the API server to call the webhook", WEBHOOK_PROPAGATION, || async {
            match jobs.create(&dry_run, &job).await {
            // The gate's mutating half sets the queue name too; only the webhook writes the tier annotation.
            Ok(stored)
                if labels(&stored.metadata).contains_key(QUEUE_NAME_LABEL)
                    && stored.metadata.annotations.as_ref().is_some_and(|notes| notes.contains_key(TIER_ANNOTATION)) =>
            {
                return Some(());
            }
            Ok(_) => record(
                "the last dry-run create came back without the webhook's tier annotation (the configuration is not \
                 active yet, or the daemon's snapshot does not show the namespace)"
                    .to_owned(),
            ),
            Err(error) => record(format!("the last dry-run create failed: {error}")),
        }
            None
        })
        .await;
    waited.map_err(|error| {
        let last = last.lock().map(|last| last.clone()).unwrap_or_default();
        let serving = if webhook.is_serving() { "is serving" } else { "has STOPPED" };
        format!(
            "{error}: {last}. The webhook {serving} on {}; can the API server reach {}? (kind: use the docker \
             network's gateway address)",
            webhook.listen,
            endpoint.url()
        )
        .into()
    })
}

/// Issues 4 and 6: queue, suspend, GPU class, tier annotation and a scored priority class that exists.
async fn check_bronze_job(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let tier = run.tier("bronze")?;
    let class = run.class_of(tier)?;
    let job: Job = load_sample_workload("job-bronze.yaml", &run.bronze)?;
    let stored = Api::<Job>::namespaced(client.clone(), &run.bronze).create(&PostParams::default(), &job).await?;
    let what = format!("Job {}/{}", run.bronze, job.metadata.name.as_deref().unwrap_or_default());
    let job_labels = labels(&stored.metadata);
    let queue = job_labels.get(QUEUE_NAME_LABEL);
    ensure(queue == Some(&tier.local_queue()), || {
        format!("{what} has queue {queue:?}, expected {}: labels {job_labels:?}", tier.local_queue())
    })?;
    let spec = stored.spec.clone().unwrap_or_default();
    ensure(spec.suspend == Some(true), || {
        format!("{what} is stored with spec.suspend {:?}, expected true", spec.suspend)
    })?;
    let pod_spec = spec.template.spec.unwrap_or_default();
    let selector = pod_spec.node_selector.unwrap_or_default();
    ensure(class.node_labels.iter().all(|(key, value)| selector.get(key) == Some(value)), || {
        format!(
            "{what}'s pod template selects {selector:?}, expected the labels of class {}: {:?}",
            class.name, class.node_labels
        )
    })?;
    let tolerations = pod_spec.tolerations.unwrap_or_default();
    ensure(class.pod_tolerations().iter().all(|wanted| tolerations.contains(wanted)), || {
        format!("{what}'s pod template tolerates {tolerations:?}, expected those of class {}", class.name)
    })?;
    let annotations = stored.metadata.annotations.clone().unwrap_or_default();
    ensure(annotations.get(TIER_ANNOTATION) == Some(&tier.name), || {
        format!("{what} has annotations {annotations:?}, expected {TIER_ANNOTATION}: {}", tier.name)
    })?;

    let priority = job_labels.get(PRIORITY_CLASS_LABEL).ok_or_else(|| {
        format!(
            "{what} (annotated app.kubernetes.io/job-type) carries no {PRIORITY_CLASS_LABEL}: labels {job_labels:?}"
        )
    })?;
    ensure(run.policy.spec.priority_buckets.iter().any(|bucket| &bucket.name == priority), || {
        format!("{what}'s priority class {priority} is none of the policy's buckets")
    })?;
    ensure(annotations.contains_key(SCORE_SOURCE_ANNOTATION), || {
        format!("{what} has no {SCORE_SOURCE_ANNOTATION} annotation: {annotations:?}")
    })?;
    let classes: Api<kube::core::DynamicObject> =
        Api::all_with(client.clone(), &KueueKind::WorkloadPriorityClass.api_resource());
    classes
        .get_opt(priority)
        .await?
        .ok_or_else(|| format!("{what} names WorkloadPriorityClass {priority}, which does not exist"))?;
    Ok(())
}

/// Issue 4: a bronze Pod selecting the gold tier's class is denied, naming the tier and the classes it may use.
async fn check_gold_class_denied_in_bronze(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let bronze = run.tier("bronze")?;
    let gold_class = run.class_of(run.tier("gold")?)?;
    let mut pod: Pod = load_sample_workload("pod-override.yaml", &run.bronze)?;
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector = Some(gold_class.node_labels.clone());
    }
    let denied = match Api::<Pod>::namespaced(client.clone(), &run.bronze).create(&PostParams::default(), &pod).await {
        Ok(_) => return Err(format!("a bronze Pod selecting class {} was admitted", gold_class.name).into()),
        Err(kube::Error::Api(status)) => status.message,
        Err(error) => return Err(error.into()),
    };
    let expected = [format!("tier {}", bronze.name), bronze.gpu_class.clone(), "denied the request".to_owned()];
    ensure(expected.iter().all(|part| denied.contains(part.as_str())), || {
        format!("the denial {denied:?} should contain each of {expected:?}")
    })
}

/// Issue 5: a seed Deployment created for real; its (Pending) pods are counted by nodeSelector.
async fn check_deployment_split(
    client: &Client,
    run: &Run,
    file: &str,
    replicas: usize,
    expected: &[(&str, usize)],
) -> Result<(), HarnessError> {
    let deployment: Deployment = load_sample_workload(file, &run.placement)?;
    let spec = &deployment.spec;
    ensure(spec.replicas == i32::try_from(replicas).ok(), || {
        format!("{file} has {:?} replicas, expected {replicas}", spec.replicas)
    })?;
    let app = spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default()
        .remove("app")
        .ok_or_else(|| format!("{file} selects no app label"))?;
    Api::<Deployment>::namespaced(client.clone(), &run.placement).create(&PostParams::default(), &deployment).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &run.placement);
    let params = ListParams::default().labels(&format!("app={app}"));
    let what = format!("the {replicas} pods of Deployment {}/{app}", run.placement);
    let created = wait_for(&what, PODS_CREATED, || async {
        let listed = pods.list(&params).await.ok()?.items;
        (listed.len() >= replicas).then_some(listed)
    })
    .await?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &created {
        let selector = pod.spec.as_ref().and_then(|spec| spec.node_selector.clone()).unwrap_or_default();
        let key = selector.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(",");
        *counts.entry(key).or_default() += 1;
    }
    let wanted: BTreeMap<String, usize> = expected.iter().map(|(key, count)| ((*key).to_owned(), *count)).collect();
    ensure(counts == wanted, || format!("{what} are split {counts:?} by nodeSelector, expected {wanted:?}"))
}

fn labels(metadata: &kube::core::ObjectMeta) -> BTreeMap<String, String> {
    metadata.labels.clone().unwrap_or_default()
}
