//! End-to-end test of a fleet (issue 17) against two real API servers with Kueue: `tiergate run`'s reconciler,
//! started in this process on the management cluster (`KUBECONFIG`), reads the worker's kubeconfig Secret from
//! `kueue-system` and reconciles the worker (`TIERGATE_E2E_WORKER_KUBECONFIG`). It checks the management objects
//! exist and Kueue marks the MultiKueue AdmissionCheck Active, the worker has the same queues, and a Job created
//! in a tiered namespace on the management cluster is labelled by tiergate's webhook there and mirrored to the
//! worker by MultiKueue. Then the worker leaves the policy and is pruned. Random names, cleaned up on both sides.
//!
//! Skipped (and passing), with a message, unless `KUBECONFIG`, `TIERGATE_E2E_WORKER_KUBECONFIG` and
//! `TIERGATE_E2E_WEBHOOK_HOST` are set, both API servers answer and both serve Kueue's v1beta2 CRDs. The worker's
//! kubeconfig must name a server the management cluster's Kueue can reach (docs/contributing.md, "End-to-end").

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, Config};
use serde_json::json;
use tiergate::plan::names::{cluster_queue_name, multikueue_check_name, multikueue_cluster_name};
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::{KueueKind, build_ownership_selector};
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, register_webhook, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, WORKER_KUBECONFIG_ENV, WORKER_SKIP_ENV, apply_policy,
    build_prefixed_policy, create_namespace, ensure, install_tierpolicy_crd, kueue_served_or_skip, random_name, skip,
    wait_for,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// The worker cluster's kubeconfig file.
const WORKER_ENV: &str = WORKER_KUBECONFIG_ENV;
/// Where MultiKueue (and `InProcessDaemon`'s fleet) reads kubeconfig Secrets.
const KUEUE_NAMESPACE: &str = "kueue-system";
/// Objects appear on either cluster within this.
const CONVERGE: Duration = Duration::from_secs(30);
/// Kueue activating the check and MultiKueue copying a Job take their own controllers' time.
const MULTIKUEUE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatching_tier_reaches_the_worker_and_a_job_is_labelled_here_and_mirrored_there() {
    const TEST: &str = "a_dispatching_tier_reaches_the_worker_and_a_job_is_labelled_here_and_mirrored_there";
    if let Err(error) =
        run_webhook_test(TEST, async |client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint| {
            let Some((worker, kubeconfig)) = worker_or_skip(TEST).await? else { return Ok(()) };
            let worker_cleanup = Cleanup::new(worker.clone());
            let outcome = run_scenario(client, cleanup, endpoint, &worker, &worker_cleanup, &kubeconfig).await;
            worker_cleanup.run().await;
            outcome
        })
        .await
    {
        panic!("{error}");
    }
}

/// The worker's client and kubeconfig text, or `None` (after printing why) when it is not configured or usable.
async fn worker_or_skip(test: &str) -> Result<Option<(Client, String)>, HarnessError> {
    let Some(path) = std::env::var_os(WORKER_ENV) else {
        match std::env::var(WORKER_SKIP_ENV) {
            Ok(reason) if !reason.is_empty() => skip(test, &reason),
            _ => skip(
                test,
                &format!("{WORKER_ENV} is not set; point it at a second cluster with Kueue to run this test"),
            ),
        }
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|error| format!("failed to read {WORKER_ENV} ({}): {error}", path.to_string_lossy()))?;
    let config = Config::from_custom_kubeconfig(Kubeconfig::from_yaml(&text)?, &KubeConfigOptions::default()).await?;
    let worker = Client::try_from(config)?;
    match tokio::time::timeout(Duration::from_secs(5), worker.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            skip(test, &format!("the cluster in {WORKER_ENV} is unreachable: {error}"));
            return Ok(None);
        }
        Err(_) => {
            skip(test, &format!("the cluster in {WORKER_ENV} did not answer within 5 s"));
            return Ok(None);
        }
    }
    if !kueue_served_or_skip(&worker, test).await {
        return Ok(None);
    }
    Ok(Some((worker, text)))
}

fn object_api(client: &Client, kind: KueueKind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &kind.api_resource()),
        None => Api::all_with(client.clone(), &kind.api_resource()),
    }
}

async fn exists(client: &Client, kind: KueueKind, namespace: Option<&str>, name: &str) -> bool {
    object_api(client, kind, namespace).get_opt(name).await.ok().flatten().is_some()
}

async fn run_scenario(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    worker: &Client,
    worker_cleanup: &Cleanup,
    kubeconfig: &str,
) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let (cluster, secret) = (format!("{prefix}-w"), format!("{prefix}-worker-kubeconfig"));
    install_tierpolicy_crd(client, cleanup).await?;
    let mut policy = build_prefixed_policy(&prefix)?;
    policy.spec.clusters = vec![serde_json::from_value(json!({
        "name": cluster,
        "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}},
    }))?];
    let gold = policy.spec.tiers.iter_mut().find(|tier| tier.name.ends_with("-gold")).ok_or("no gold tier")?;
    gold.dispatch = Some(serde_json::from_value(json!({"clusters": [cluster]}))?);
    let gold = gold.clone();

    // The worker's kubeconfig, where MultiKueue and tiergate read it.
    let body = Secret {
        metadata: kube::core::ObjectMeta { name: Some(secret.clone()), ..Default::default() },
        string_data: Some([("kubeconfig".to_owned(), kubeconfig.to_owned())].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), KUEUE_NAMESPACE).create(&PostParams::default(), &body).await?;
    cleanup.track(ApiResource::erase::<Secret>(&()), Some(KUEUE_NAMESPACE), &secret);

    let (system, tenant) = (format!("{prefix}-system"), format!("{prefix}-gold"));
    create_namespace(client, cleanup, &system, &[]).await?;
    create_namespace(client, cleanup, &tenant, &[(E2E_TIER_LABEL, &gold.name), (RUN_LABEL, &prefix)]).await?;
    worker_cleanup.track(ApiResource::erase::<Namespace>(&()), None, &tenant);
    let daemon = InProcessDaemon::start(client, &prefix, &system, &format!("{prefix}-lease"));
    apply_policy(client, &policy).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &prefix);
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        let outcome = check_fleet(client, cleanup, endpoint, webhook, worker, &policy, &prefix, &cluster).await;
        // The worker leaves the policy: tiergate prunes what it applied there (the garbage collector only sees the
        // management cluster's owner references).
        let pruned = prune_worker(client, worker, &policy, &prefix, &cluster).await;
        outcome.and(pruned)
    })
    .await
}

#[expect(clippy::too_many_arguments, reason = "one scenario's shared state, passed explicitly")]
async fn check_fleet(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    worker: &Client,
    policy: &TierPolicy,
    prefix: &str,
    cluster: &str,
) -> Result<(), HarnessError> {
    let gold = policy.spec.tiers.iter().find(|tier| tier.name.ends_with("-gold")).ok_or("no gold tier")?;
    let tenant = format!("{prefix}-gold");
    let (queue, local_queue) = (cluster_queue_name(&gold.name), gold.local_queue());

    // 1. Management side: the MultiKueue objects, and Kueue marks the check Active (it reached the worker).
    let check = multikueue_check_name(&gold.name);
    wait_for("the MultiKueueCluster, the gold ClusterQueue and an Active MultiKueue check", MULTIKUEUE, || async {
        if !exists(client, KueueKind::MultiKueueCluster, None, &multikueue_cluster_name(cluster)).await
            || !exists(client, KueueKind::ClusterQueue, None, &queue).await
        {
            return None;
        }
        let check = object_api(client, KueueKind::AdmissionCheck, None).get_opt(&check).await.ok()??;
        let conditions = check.data["status"]["conditions"].as_array()?.clone();
        conditions.iter().any(|condition| condition["type"] == "Active" && condition["status"] == "True").then_some(())
    })
    .await?;

    // 2. Worker side: the same queues, and the tenant namespace with its tier label.
    wait_for("the gold ClusterQueue, LocalQueue and namespace on the worker", CONVERGE, || async {
        let namespace = Api::<Namespace>::all(worker.clone()).get_opt(&tenant).await.ok()??;
        let tier = namespace.metadata.labels.unwrap_or_default().get(E2E_TIER_LABEL).cloned();
        (exists(worker, KueueKind::ClusterQueue, None, &queue).await
            && exists(worker, KueueKind::LocalQueue, Some(&tenant), &local_queue).await
            && tier.as_deref() == Some(gold.name.as_str()))
        .then_some(())
    })
    .await?;

    // 3. A GPU Job created here is labelled by tiergate's webhook (a CPU-only one is not tiergate's), then MultiKueue
    // copies it to the worker once the worker's Kueue has admitted its copy of the Workload.
    register_webhook(client, cleanup, endpoint, &webhook.ca_pem, prefix).await?;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{prefix}-job"), "namespace": tenant},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi", "nvidia.com/gpu": "1"},
                                          "limits": {"nvidia.com/gpu": "1"}}}]}}},
    }))?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &tenant);
    let stored = wait_for("the webhook to label a Job in the gold namespace", CONVERGE, || async {
        let dry_run = PostParams { dry_run: true, ..PostParams::default() };
        let labelled = jobs.create(&dry_run, &job).await.ok()?;
        labelled.metadata.labels.unwrap_or_default().contains_key(QUEUE_NAME_LABEL).then_some(())
    })
    .await;
    stored?;
    let created = jobs.create(&PostParams::default(), &job).await?;
    cleanup.track(ApiResource::erase::<Job>(&()), Some(&tenant), &format!("{prefix}-job"));
    let labels = created.metadata.labels.unwrap_or_default();
    ensure(labels.get(QUEUE_NAME_LABEL) == Some(&local_queue), || {
        format!("the Job has queue {:?}, expected {local_queue}: labels {labels:?}", labels.get(QUEUE_NAME_LABEL))
    })?;
    let mirrored: Api<Job> = Api::namespaced(worker.clone(), &tenant);
    wait_for("MultiKueue to mirror the Job to the worker", MULTIKUEUE, || async {
        mirrored.get_opt(&format!("{prefix}-job")).await.ok()?.map(|_| ())
    })
    .await
}

/// Finishes the tenant's work (the Job is deleted here, and MultiKueue deletes its copy on the worker: a queue in
/// use stays, terminating, until its workloads are gone, as Kueue's `resource-in-use` finalizer keeps it), then
/// removes the worker from the policy and waits until tiergate pruned its queues there.
async fn prune_worker(
    client: &Client,
    worker: &Client,
    policy: &TierPolicy,
    prefix: &str,
    cluster: &str,
) -> Result<(), HarnessError> {
    let (tenant, job) = (format!("{prefix}-gold"), format!("{prefix}-job"));
    let background = kube::api::DeleteParams::background();
    if let Err(error) = Api::<Job>::namespaced(client.clone(), &tenant).delete(&job, &background).await
        && !matches!(&error, kube::Error::Api(status) if status.code == 404)
    {
        return Err(error.into());
    }
    let copies: Api<Job> = Api::namespaced(worker.clone(), &tenant);
    wait_for("MultiKueue to delete the Job's copy on the worker", MULTIKUEUE, || async {
        copies.get_opt(&job).await.ok()?.is_none().then_some(())
    })
    .await?;
    let mut local = policy.clone();
    local.spec.clusters.clear();
    for tier in &mut local.spec.tiers {
        tier.dispatch = None;
    }
    apply_policy(client, &local).await?;
    let gold = policy.spec.tiers.iter().find(|tier| tier.name.ends_with("-gold")).ok_or("no gold tier")?;
    let queue = cluster_queue_name(&gold.name);
    wait_for(&format!("the worker {cluster}'s gold ClusterQueue to be pruned"), CONVERGE, || async {
        (!exists(worker, KueueKind::ClusterQueue, None, &queue).await).then_some(())
    })
    .await?;
    // Nothing of the policy is left on the worker: its priority classes and flavors are pruned after the queue
    // (prune runs in reverse apply order, in the same or a following pass), so they are waited for too.
    let priority_classes = object_api(worker, KueueKind::WorkloadPriorityClass, None);
    let owned =
        ListParams::default().labels(&build_ownership_selector(policy.metadata.name.as_deref().unwrap_or_default()));
    wait_for("the worker's WorkloadPriorityClasses of the policy to be pruned", CONVERGE, || async {
        priority_classes.list(&owned).await.ok()?.items.is_empty().then_some(())
    })
    .await?;
    Ok(())
}
