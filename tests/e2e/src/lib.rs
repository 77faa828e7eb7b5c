//! Reusable end-to-end harness: a reachable cluster or a clear skip, random names, cleanup guards, polling
//! helpers and an in-process daemon. Shared by the daemon, webhook, placement and scoring e2e tests; does I/O.

use std::error::Error;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, ObjectMeta};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde::de::DeserializeOwned;
use tiergate::admission::server::AdmissionState;
use tiergate::metrics::Metrics;
use tiergate::placement::PlacementLedger;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate::reconcile::runtime::{ReconcilerOptions, RunningReconciler, start_reconciler};
use tiergate::scoring::Scorer;
use tiergate::view::SharedSnapshot;
use tokio_util::sync::CancellationToken;

pub mod autoscaler;
pub mod control_plane;
pub mod karpenter;
pub mod real_node;
pub mod release;
pub mod webhook;

/// Boxed error for harness results.
pub type HarnessError = Box<dyn Error + Send + Sync + 'static>;

/// The whole life of a cluster-gated test: skips (saying why) without a cluster or Kueue; otherwise runs `scenario`,
/// cleans up everything it tracked, and returns its outcome (the test panics on `Err`).
pub async fn run_cluster_test(
    test: &str,
    scenario: impl AsyncFnOnce(&Client, &Cleanup) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let Some(client) = connect_or_skip(test).await else { return Ok(()) };
    if !kueue_served_or_skip(&client, test).await {
        return Ok(());
    }
    let cleanup = Cleanup::new(client.clone());
    let result = scenario(&client, &cleanup).await;
    cleanup.run().await;
    result
}

/// `Ok` when `condition` holds, else the error `message()` describes: the assertion of a scenario that must clean
/// up before it fails.
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), HarnessError> {
    if condition { Ok(()) } else { Err(message().into()) }
}

/// Field manager the harness writes with (distinct from the daemon's `tiergate`).
pub const HARNESS_MANAGER: &str = "tiergate-e2e";

/// Namespace label naming a namespace's tier in the e2e policy (never the label a real installation uses).
pub const E2E_TIER_LABEL: &str = "e2e.tiergate.io/tier";

/// Set by `tests/run.sh` when it could not start the throwaway control plane: why (e.g. which binary is missing
/// and where it looked), printed as each suite's skip line.
pub const SKIP_ENV: &str = "TIERGATE_E2E_SKIP";

/// The worker cluster's kubeconfig for the fleet suite.
pub const WORKER_KUBECONFIG_ENV: &str = "TIERGATE_E2E_WORKER_KUBECONFIG";
/// Set by the throwaway control plane when it has no worker cluster to offer: why.
pub const WORKER_SKIP_ENV: &str = "TIERGATE_E2E_WORKER_SKIP";
/// Set by the throwaway control plane when it runs no kube-scheduler (its pods stay unbound): why, e.g. which
/// binary is missing and where it looked.
pub const SCHEDULER_SKIP_ENV: &str = "TIERGATE_E2E_SCHEDULER_SKIP";

/// Prints the skip line every e2e test uses, so CI logs show why nothing ran.
pub fn skip(test: &str, reason: &str) {
    println!("skipped: {test}: {reason}");
}

/// A client for the cluster `KUBECONFIG` points to, or `None` (after printing why) when it is unset or
/// unreachable.
pub async fn connect_or_skip(test: &str) -> Option<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        match std::env::var(SKIP_ENV) {
            Ok(reason) if !reason.is_empty() => skip(test, &reason),
            _ => skip(
                test,
                "KUBECONFIG is not set; run `bash tests/run.sh` (it starts a throwaway control plane when the \
                 binaries are found) or point KUBECONFIG at a cluster with Kueue v0.19+ installed",
            ),
        }
        return None;
    }
    let client = match Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            skip(test, &format!("failed to build a client from KUBECONFIG: {error}"));
            return None;
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await {
        Ok(Ok(_)) => Some(client),
        Ok(Err(error)) => {
            skip(test, &format!("the cluster in KUBECONFIG is unreachable: {error}"));
            None
        }
        Err(_) => {
            skip(test, "the cluster in KUBECONFIG did not answer within 5 s");
            None
        }
    }
}

/// Whether the cluster serves Kueue's `kueue.x-k8s.io/v1beta2` (prints a skip line when it does not).
pub async fn kueue_served_or_skip(client: &Client, test: &str) -> bool {
    match tiergate::reconcile::discovery::discover_kueue(client).await {
        Ok(()) => true,
        Err(error) => {
            skip(test, &format!("Kueue CRDs are not usable: {error}"));
            false
        }
    }
}

/// Whether the cluster serves MutatingAdmissionPolicy (Kubernetes 1.36+), so the gate has its mutating half: suites
/// whose expectations differ by it ask here.
pub async fn serves_mutating_policies(client: &Client) -> Result<bool, HarnessError> {
    let served = tiergate::reconcile::discovery::discover_admission_policies(client)
        .await
        .ok_or("failed to list admissionregistration.k8s.io/v1")?;
    Ok(served.mutating)
}

/// `prefix-xxxxxxxx`, unique enough for parallel runs on one cluster.
pub fn random_name(prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.subsec_nanos());
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mixed = nanos ^ std::process::id().rotate_left(16) ^ count.wrapping_mul(0x9e37_79b9);
    format!("{prefix}-{mixed:08x}")
}

/// A wait at least this long prints how long it took (`wait: <what> took 12.3s`; tests/stress.sh reports the slowest).
const REPORTED_WAIT: Duration = Duration::from_secs(5);

/// Polls `check` every 200 ms until it yields `Some`, or fails naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let report = || {
        let took = started.elapsed();
        if took >= REPORTED_WAIT {
            println!("wait: {what} took {:.1}s", took.as_secs_f64());
        }
    };
    loop {
        if let Some(value) = check().await {
            report();
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            report();
            return Err(format!("failed to observe {what} within {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the Jobs of `namespace`, then its pods at once (grace period 0), reporting (never failing on) errors:
/// fake nodes have no kubelet to finish a graceful deletion, so the pods would wait for the pod garbage collector
/// after the nodes go.
pub async fn release_pods(client: &Client, namespace: &str) {
    let params = kube::api::DeleteParams::default();
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    if let Err(error) = jobs.delete_collection(&kube::api::DeleteParams::background(), &Default::default()).await {
        println!("cleanup: failed to delete the Jobs of {namespace}: {error}");
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    if let Err(error) = pods.delete_collection(&params.grace_period(0), &Default::default()).await {
        println!("cleanup: failed to delete the pods of {namespace}: {error}");
    }
}

/// One object to delete at cleanup.
#[derive(Clone, Debug)]
struct Tracked {
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
}

/// Deletes everything tracked, in reverse order, when [`Cleanup::run`] is awaited or (as a fallback) on drop.
/// Drop needs a multi-thread runtime: use `#[tokio::test(flavor = "multi_thread")]`.
pub struct Cleanup {
    client: Client,
    tracked: Mutex<Vec<Tracked>>,
}

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Cleanup").field("tracked", &self.tracked).finish_non_exhaustive()
    }
}

/// How long cleanup waits for a TierPolicy's generated objects to be collected (Kueue's finalizers release a flavor
/// once no ClusterQueue names it).
const OWNED_CLEANUP: Duration = Duration::from_secs(60);

impl Cleanup {
    /// An empty guard.
    pub fn new(client: Client) -> Self {
        Self { client, tracked: Mutex::new(Vec::new()) }
    }

    /// Deletes `name` (of `resource`, in `namespace` when namespaced) at cleanup.
    pub fn track(&self, resource: ApiResource, namespace: Option<&str>, name: &str) {
        if let Ok(mut tracked) = self.tracked.lock() {
            tracked.push(Tracked { resource, namespace: namespace.map(str::to_owned), name: name.to_owned() });
        }
    }

    /// Deletes every tracked object now (missing ones are fine).
    pub async fn run(&self) {
        let tracked = self.tracked.lock().map(|mut tracked| std::mem::take(&mut *tracked)).unwrap_or_default();
        for item in tracked.into_iter().rev() {
            let api: Api<DynamicObject> = match &item.namespace {
                Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &item.resource),
                None => Api::all_with(self.client.clone(), &item.resource),
            };
            // A TierPolicy goes in the foreground and is waited out: the garbage collector deletes what it owns
            // only while it can resolve the owner's kind, which it cannot once the TierPolicy CRD (deleted after
            // it, tracked first) is gone; its ClusterQueues and flavors would stay behind.
            let owner = item.resource.kind == "TierPolicy";
            let params = if owner { DeleteParams::foreground() } else { DeleteParams::background() };
            if let Err(error) = api.delete(&item.name, &params).await
                && !matches!(&error, kube::Error::Api(status) if status.code == 404)
            {
                println!("cleanup: failed to delete {} {}: {error}", item.resource.kind, item.name);
            }
            if owner {
                let gone = wait_for("a TierPolicy's objects to be deleted", OWNED_CLEANUP, || {
                    let api = api.clone();
                    let name = item.name.clone();
                    async move { api.get_opt(&name).await.ok().flatten().is_none().then_some(()) }
                })
                .await;
                if let Err(error) = gone {
                    println!("cleanup: TierPolicy {} still has objects: {error}", item.name);
                }
            }
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let pending = self.tracked.lock().map(|tracked| !tracked.is_empty()).unwrap_or(false);
        if pending && let Ok(handle) = tokio::runtime::Handle::try_current() {
            tokio::task::block_in_place(|| handle.block_on(self.run()));
        }
    }
}

/// Creates a namespace with `labels`, tracked for cleanup.
pub async fn create_namespace(
    client: &Client,
    cleanup: &Cleanup,
    name: &str,
    labels: &[(&str, &str)],
) -> Result<(), HarnessError> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    cleanup.track(ApiResource::erase::<Namespace>(&()), None, name);
    Ok(())
}

/// Installs (server-side applies) the TierPolicy CRD and waits until TierPolicies are served; when it was absent
/// before, `cleanup` removes it at the end. A CRD still being deleted (an earlier suite's cleanup) is waited out
/// first: applying to it would only delay its removal, and the API server stops serving it once it goes.
pub async fn install_tierpolicy_crd(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    install_crd(client, cleanup, tiergate::plan::gate::params::TierGateParameters::crd()).await?;
    install_crd(client, cleanup, TierPolicy::crd()).await?;
    let policies: Api<TierPolicy> = Api::all(client.clone());
    wait_for("the API server to serve TierPolicies", Duration::from_secs(30), || {
        let policies = policies.clone();
        async move { policies.list(&kube::api::ListParams::default().limit(1)).await.ok().map(|_| ()) }
    })
    .await
}

/// Installs (server-side applies) `crd` and waits until it is established; when it was absent before, `cleanup`
/// removes it at the end.
pub async fn install_crd(
    client: &Client,
    cleanup: &Cleanup,
    crd: CustomResourceDefinition,
) -> Result<(), HarnessError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    wait_for("an earlier CRD of tiergate to finish terminating", Duration::from_secs(60), || {
        let crds = crds.clone();
        let name = name.clone();
        async move {
            let found = crds.get_opt(&name).await.ok()?;
            found.is_none_or(|crd| crd.metadata.deletion_timestamp.is_none()).then_some(())
        }
    })
    .await?;
    let existed = crds.get_opt(&name).await?.is_some();
    crds.patch(&name, &PatchParams::apply(HARNESS_MANAGER).force(), &Patch::Apply(&crd)).await?;
    wait_for_crd_established(client, &name, Duration::from_secs(30)).await?;
    if !existed {
        cleanup.track(ApiResource::erase::<CustomResourceDefinition>(&()), None, &name);
    }
    Ok(())
}

/// The user a tenant's requests are made as (impersonated): `edit` in its own namespaces, nothing more, as the
/// threat model's tenant.
pub const TENANT_USER: &str = "tiergate-e2e-tenant";

/// A client acting as [`TENANT_USER`] (impersonated, in group `system:authenticated`), bound to the `edit`
/// ClusterRole in each of `namespaces` (the bindings are tracked for cleanup).
pub async fn tenant_client(client: &Client, cleanup: &Cleanup, namespaces: &[&str]) -> Result<Client, HarnessError> {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    for namespace in namespaces {
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": TENANT_USER, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}]}))?;
        Api::<RoleBinding>::namespaced(client.clone(), namespace).create(&PostParams::default(), &binding).await?;
        cleanup.track(ApiResource::erase::<RoleBinding>(&()), Some(namespace), TENANT_USER);
    }
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(TENANT_USER.to_owned());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_owned()]);
    Ok(Client::try_from(config)?)
}

/// Waits until the API server reports CRD `name` `Established`, or fails naming it after `timeout`.
pub async fn wait_for_crd_established(client: &Client, name: &str, timeout: Duration) -> Result<(), HarnessError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(&format!("CRD {name} to be established"), timeout, || {
        let crds = crds.clone();
        async move {
            let crd = crds.get_opt(name).await.ok()??;
            let established = crd.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        }
    })
    .await
}

/// `<prefix>-<name>`: how the e2e policy renames tiers, GPU classes and priority buckets.
pub fn prefixed(prefix: &str, name: &str) -> String {
    format!("{prefix}-{name}")
}

/// The sample policy (`samples/kubenexus`) named `prefix`, with its tiers, GPU classes and priority buckets
/// renamed `<prefix>-<name>` and tiers chosen by [`E2E_TIER_LABEL`], so its Kueue objects never collide with a
/// real installation's or another run's. A namespace joins tier `bronze` with `E2E_TIER_LABEL:
/// <prefix>-bronze`; the GPU classes keep their node labels.
pub fn build_prefixed_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let mut policy = tiergate::inputs::load_policy(None)?;
    policy.metadata.name = Some(prefix.to_owned());
    policy.spec.tier_label = E2E_TIER_LABEL.to_owned();
    for class in &mut policy.spec.gpu_classes {
        class.name = prefixed(prefix, &class.name);
    }
    for bucket in &mut policy.spec.priority_buckets {
        bucket.name = prefixed(prefix, &bucket.name);
    }
    for tier in &mut policy.spec.tiers {
        tier.gpu_class = prefixed(prefix, &tier.gpu_class);
        tier.fallback_gpu_classes = tier.fallback_gpu_classes.iter().map(|class| prefixed(prefix, class)).collect();
        if let Some(class) = &tier.default_priority_class {
            tier.default_priority_class = Some(prefixed(prefix, class));
        }
        if let Some(class) = &tier.max_priority_class {
            tier.max_priority_class = Some(prefixed(prefix, class));
        }
        tier.name = prefixed(prefix, &tier.name);
    }
    Ok(policy)
}

/// Server-side applies `policy` (without status) as the harness's field manager.
pub async fn apply_policy(client: &Client, policy: &TierPolicy) -> Result<(), HarnessError> {
    let api: Api<TierPolicy> = Api::all(client.clone());
    let mut body = serde_json::to_value(policy)?;
    if let Some(object) = body.as_object_mut() {
        object.remove("status");
    }
    api.patch(&policy.name_any(), &PatchParams::apply(HARNESS_MANAGER).force(), &Patch::Apply(body)).await?;
    Ok(())
}

/// Starts one run's tiergate as the suites do: the TierPolicy CRD, the daemon's namespace `system`, the tenant
/// namespaces (name and labels), the in-process daemon (Lease `<policy>-lease` in `system`), then `policy`,
/// tracked for clean-up. Waits for nothing: each suite waits for the objects it needs.
pub async fn start_tiergate(
    client: &Client,
    cleanup: &Cleanup,
    policy: &TierPolicy,
    system: &str,
    tenants: &[(&str, &[(&str, &str)])],
) -> Result<InProcessDaemon, HarnessError> {
    install_tierpolicy_crd(client, cleanup).await?;
    create_namespace(client, cleanup, system, &[]).await?;
    for (namespace, labels) in tenants {
        create_namespace(client, cleanup, namespace, labels).await?;
    }
    let name = policy.name_any();
    let daemon = InProcessDaemon::start(client, &name, system, &format!("{name}-lease"));
    let applied = apply_policy(client, policy).await;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &name);
    if let Err(error) = applied {
        daemon.stop().await;
        return Err(error);
    }
    Ok(daemon)
}

/// Waits until the LocalQueue `queue` exists in `namespace`.
pub async fn wait_for_local_queue(
    client: &Client,
    namespace: &str,
    queue: &str,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let local_queues = KueueKind::LocalQueue.api_resource();
    wait_for(&format!("LocalQueue {namespace}/{queue}"), timeout, || async {
        let queues: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &local_queues);
        queues.get_opt(queue).await.ok()?.map(|_| ())
    })
    .await
}

/// A namespaced kind a probe can be dry-run created as.
pub trait Probe:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
    + Clone
    + DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<K> Probe for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// Waits until a server dry-run create of `probe` in its namespace comes back as `admitted` wants it: the
/// admission that changes it (the webhook, or the in-server gate) is in effect there. The API server learns of a new
/// webhook configuration, admission policy, binding or parameter object through its own informers, each on its own
/// time, so a policy just applied can refuse what its mutating half does not yet fix; tests wait here first.
pub async fn wait_until_admitted_as<K: Probe>(
    client: &Client,
    what: &str,
    timeout: Duration,
    probe: &K,
    admitted: impl Fn(&K) -> bool,
) -> Result<(), HarnessError> {
    wait_for_dry_run(client, what, timeout, probe, |answer| answer.as_ref().is_ok_and(&admitted)).await
}

/// Waits until a server dry-run create of `probe` in its namespace is refused with a message containing
/// `refusal`: the validating admission that refuses it is in effect there.
pub async fn wait_until_refused<K: Probe>(
    client: &Client,
    what: &str,
    timeout: Duration,
    probe: &K,
    refusal: &str,
) -> Result<(), HarnessError> {
    let refused =
        |answer: &Result<K, kube::Error>| answer.as_ref().is_err_and(|error| error.to_string().contains(refusal));
    wait_for_dry_run(client, what, timeout, probe, refused).await
}

/// Dry-run creates `probe` in its namespace until `accepted` takes the answer; on timeout the error says what the
/// last answer was.
async fn wait_for_dry_run<K: Probe>(
    client: &Client,
    what: &str,
    timeout: Duration,
    probe: &K,
    accepted: impl Fn(&Result<K, kube::Error>) -> bool,
) -> Result<(), HarnessError> {
    let namespace = probe.meta().namespace.clone().ok_or("the probe names no namespace")?;
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let last = Mutex::new(String::from("no answer yet"));
    let waited = wait_for(what, timeout, || async {
        let answer = api.create(&dry_run, probe).await;
        if accepted(&answer) {
            return Some(());
        }
        if let Ok(mut last) = last.lock() {
            *last = match answer {
                Ok(stored) => format!("stored as {}", serde_json::to_string(&stored).unwrap_or_default()),
                Err(error) => format!("refused: {error}"),
            };
        }
        None
    })
    .await;
    waited.map_err(|error| {
        let last = last.lock().map(|last| last.clone()).unwrap_or_default();
        format!("{error}; the last dry-run create was {last}").into()
    })
}

/// A suspended Job `name` in `namespace` of one pod asking one `nvidia.com/gpu`, queued to LocalQueue `queue`.
pub fn one_gpu_job(namespace: &str, name: &str, queue: &str) -> Result<k8s_openapi::api::batch::v1::Job, HarnessError> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {tiergate_workloads::QUEUE_NAME_LABEL: queue}},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0, "suspend": true,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
            }},
        },
    }))?)
}

/// A Job `name` in `namespace` of `pods` pods (parallelism = completions = `pods`) of `gpus` `nvidia.com/gpu` each,
/// with no queue, class or suspend of its own: left to the webhook or the in-server gate to confine and queue.
pub fn plain_gpu_job(
    namespace: &str,
    name: &str,
    pods: u32,
    gpus: u32,
) -> Result<k8s_openapi::api::batch::v1::Job, HarnessError> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": gpus.to_string()},
                    "limits": {"nvidia.com/gpu": gpus.to_string()},
                }}],
            }},
        },
    }))?)
}

/// The file `relative` (e.g. `samples/spot-mix/policy.yaml`) of the repository above this crate (also from a
/// worktree one level deeper).
pub fn repository_file(relative: &str) -> Result<std::path::PathBuf, HarnessError> {
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = manifest.ancestors().map(|dir| dir.join(relative)).find(|path| path.is_file());
    Ok(found.ok_or_else(|| format!("no {relative} above {}", manifest.display()))?)
}

/// The Kueue Workload of Job `job` in `namespace` (the one the Job owns), as JSON.
pub async fn job_workload(client: &Client, namespace: &str, job: &str) -> Option<serde_json::Value> {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &tiergate::live::fetch::workload_resource());
    let list = workloads.list(&kube::api::ListParams::default()).await.ok()?;
    let workload = list.items.into_iter().find(|workload| {
        workload.metadata.owner_references.iter().flatten().any(|owner| owner.kind == "Job" && owner.name == job)
    })?;
    serde_json::to_value(workload).ok()
}

/// Deletes Job `job` (background propagation) and waits until it and its Workload are gone, so what the Workload
/// held of its queue's quota is free again.
pub async fn delete_job_and_wait(
    client: &Client,
    namespace: &str,
    job: &str,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    jobs.delete(job, &DeleteParams::background()).await?;
    wait_for(&format!("Job {job} and its Workload to be gone"), timeout, || async {
        let job_gone = jobs.get_opt(job).await.ok()?.is_none();
        let workload_gone = job_workload(client, namespace, job).await.is_none();
        (job_gone && workload_gone).then_some(())
    })
    .await
}

/// The status condition of type `type_` of an object as JSON.
pub fn status_condition<'a>(object: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    object["status"]["conditions"].as_array()?.iter().find(|condition| condition["type"] == type_)
}

/// The status (`True`, `False`, `Unknown`) of an object's condition of type `type_`.
pub fn condition_status<'a>(object: &'a serde_json::Value, type_: &str) -> Option<&'a str> {
    status_condition(object, type_)?["status"].as_str()
}

/// Whether a Workload (as JSON) is `Admitted=True`.
pub fn is_admitted(workload: &serde_json::Value) -> bool {
    condition_status(workload, "Admitted") == Some("True")
}

/// When Job `job`'s Workload in `namespace` was admitted (its `Admitted=True` transition, Unix seconds).
pub async fn job_admitted_at(client: &Client, namespace: &str, job: &str) -> Option<i64> {
    let workload = job_workload(client, namespace, job).await?;
    let admitted = status_condition(&workload, "Admitted")?;
    (admitted["status"] == "True").then(|| tiergate::usage::parse_instant(admitted["lastTransitionTime"].as_str()?))?
}

/// The `status.usage` of TierPolicy `policy` as JSON, once a checkpoint wrote it.
pub async fn policy_usage(client: &Client, policy: &str) -> Option<serde_json::Value> {
    let policy = Api::<TierPolicy>::all(client.clone()).get_opt(policy).await.ok()??;
    serde_json::to_value(policy.status?.usage?).ok()
}

/// A workload from `samples/workloads/` (e.g. `job-bronze.yaml`) moved into `namespace`.
pub fn load_sample_workload<T: DeserializeOwned>(file: &str, namespace: &str) -> Result<T, HarnessError> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/workloads").join(file);
    let text = std::fs::read_to_string(&path).map_err(|error| format!("failed to read {}: {error}", path.display()))?;
    let mut value: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|error| format!("failed to parse {}: {error}", path.display()))?;
    value["metadata"]["namespace"] = namespace.into();
    serde_json::from_value(value)
        .map_err(|error| format!("failed to read {} as its kind: {error}", path.display()).into())
}

/// The reconciling half of the daemon running inside the test process, with its own metrics.
#[derive(Debug)]
pub struct InProcessDaemon {
    /// The daemon's metrics (e.g. `tiergate_api_writes_total`).
    pub metrics: Arc<Metrics>,
    ledger: Arc<PlacementLedger>,
    running: RunningReconciler,
    shutdown: CancellationToken,
}

/// How long [`InProcessDaemon::stop`] waits for the daemon's tasks.
const STOP_BOUND: Duration = Duration::from_secs(60);

impl InProcessDaemon {
    /// Starts caches, leader election and the controller for `policy_name`, its Lease in `namespace`, with a
    /// placement ledger kept in step with the pod cache and both halves of the in-server gate (as `tiergate run`
    /// wires it by default).
    pub fn start(client: &Client, policy_name: &str, namespace: &str, lease_name: &str) -> Self {
        Self::start_owned_by(client, policy_name, namespace, lease_name, None)
    }

    /// [`Self::start`], with the in-server gate owned by the MutatingWebhookConfiguration `gate_owner`
    /// (`--gate-owner`, as the chart runs it) instead of the TierPolicy.
    pub fn start_owned_by(
        client: &Client,
        policy_name: &str,
        namespace: &str,
        lease_name: &str,
        gate_owner: Option<&str>,
    ) -> Self {
        let metrics = Arc::new(Metrics::new());
        let ledger = Arc::new(PlacementLedger::new(metrics.clone()));
        let shutdown = CancellationToken::new();
        let options = ReconcilerOptions {
            policy_name: policy_name.to_owned(),
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            identity: random_name("e2e-daemon"),
            debounce: Duration::from_millis(100),
            ledger: Some(ledger.clone()),
            kueue_namespace: "kueue-system".to_owned(),
            create_lease_namespace: false,
            // The suites run both halves of the in-server gate (the default is the validating half alone), so the
            // mutating half stays tested against the real API server.
            mutating_gate: true,
            policy_choice: None,
            certificate: None,
            gate_owner: gate_owner.map(str::to_owned),
            // Short, so the suites see counts and budget holds within seconds.
            usage_checkpoint_interval: Duration::from_secs(2),
        };
        let running = start_reconciler(client, options, metrics.clone(), &shutdown);
        Self { metrics, ledger, running, shutdown }
    }

    /// Why the daemon is not doing its job, if anything keeps it from it.
    pub fn blockers(&self) -> Arc<tiergate::blockers::Blockers> {
        self.running.blockers.clone()
    }

    /// The snapshot the daemon's caches feed.
    pub fn snapshot(&self) -> SharedSnapshot {
        self.running.snapshot.clone()
    }

    /// What the webhook serves from, wired as `tiergate run` does: this daemon's snapshot, ledger and metrics
    /// and the built-in scorer (no `--agent-url`; the policy's `spec.scoring.url` still applies).
    pub fn admission_state(&self) -> AdmissionState {
        AdmissionState {
            snapshot: self.snapshot(),
            scorer: Arc::new(Scorer::new(None, self.metrics.clone())),
            ledger: self.ledger.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Gives the Lease up while the caches keep serving, as `tiergate run` does on SIGTERM.
    pub fn step_down(&self) {
        self.running.step_down();
    }

    /// Whether the caches have synced and this daemon holds the Lease.
    pub fn is_leading_and_synced(&self) -> bool {
        self.running.snapshot.load().synced && self.running.gate.is_open()
    }

    /// Stops it (releasing the Lease) and waits until it has stopped.
    pub async fn stop(self) {
        self.shutdown.cancel();
        // Bounded, so a task that misses the cancellation shows in the log instead of stalling the suite; the
        // runtime drops whatever is left when the test ends.
        if tokio::time::timeout(STOP_BOUND, self.running.stopped()).await.is_err() {
            println!("the in-process daemon's tasks did not all stop within {STOP_BOUND:?} of the shutdown");
        }
    }

    /// Sum of every series of the counter or gauge `family` (e.g. `tiergate_api_writes_total`).
    pub fn metric_sum(&self, family: &str) -> f64 {
        metric_sum(&self.metrics, family)
    }

    /// Its API writes other than the usage checkpoints, which the leader writes every interval whatever changed:
    /// what a restart that finds everything in place must leave at zero.
    pub fn writes_besides_checkpoints(&self) -> f64 {
        self.metric_sum("tiergate_api_writes_total") - self.metric_sum("tiergate_usage_checkpoints_total")
    }
}

/// Sum of every series of `family` in the metrics' text exposition.
pub fn metric_sum(metrics: &Metrics, family: &str) -> f64 {
    let text = metrics.encode().unwrap_or_default();
    text.lines()
        .filter(|line| line.starts_with(family) && !line.starts_with('#'))
        .filter(|line| line[family.len()..].starts_with(['{', ' ']))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_names_differ_and_are_dns_labels() {
        let first = random_name("tg");
        let second = random_name("tg");
        assert_ne!(first, second);
        assert!(first.len() <= 63 && first.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }

    #[test]
    fn metric_sum_adds_every_series_of_one_family_only() {
        let metrics = Metrics::new();
        metrics.api_writes.get_or_create(&tiergate::metrics::KindLabels { kind: "LocalQueue" }).inc_by(2);
        metrics.api_writes.get_or_create(&tiergate::metrics::KindLabels { kind: "ClusterQueue" }).inc();
        metrics.reconciles.inc();
        assert_eq!(metric_sum(&metrics, "tiergate_api_writes_total"), 3.0);
        assert_eq!(metric_sum(&metrics, "tiergate_reconciles_total"), 1.0);
    }

    #[test]
    fn usage_checkpoints_are_their_own_family_beside_the_api_writes() {
        let metrics = Metrics::new();
        metrics.api_writes.get_or_create(&tiergate::metrics::KindLabels { kind: "TierPolicy" }).inc_by(3);
        metrics.usage_checkpoints.inc_by(2);
        assert_eq!(metric_sum(&metrics, "tiergate_api_writes_total"), 3.0);
        assert_eq!(metric_sum(&metrics, "tiergate_usage_checkpoints_total"), 2.0);
    }
}
