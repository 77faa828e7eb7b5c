//! End-to-end: tiergate as a platform team meets it. charts/tiergate is installed with the real Helm library
//! (helm-python-sdk, `tests/e2e/helm_release.py`) onto the throwaway plane's real node, from an image built here in
//! the Dockerfile's final layout (`/tiergate`, uid 65532) and imported into the node's containerd, with the chart's
//! defaults and 2 replicas: its own certificates, its webhook called through its Service, its RBAC and its
//! PodDisruptionBudget. Then, in order, on one release:
//! - install: both pods Ready, one holds the Lease, a bronze tenant's plain GPU Job is mutated through the Service;
//! - lifecycle: 6 one-GPU Jobs on a 2-GPU quota run their pods to completion on the node, never more than 2 holding
//!   quota, and `tiergate status` shows the tier's usage back at 0;
//! - handover: the leader pod is deleted under a create every 100 ms; it hands its Lease over, the other replica
//!   reconciles, and no create fails or is stored unconstrained;
//! - upgrade: `helm upgrade` with a changed value rolls both pods under the same load, with the same result;
//! - certificates: a CA rotation is forced (`tiergate.io/rotate-ca-before` on the Secret) under the same load; the
//!   caBundle gains the new CA and each replica serves a certificate it signed;
//! - uninstall: `helm uninstall` alone, the TierPolicy still there, leaves no webhook registration, admission policy,
//!   binding or parameters, and a GPU Job is then accepted as it would be without tiergate.
//!
//! The times (install to first mutated Job, the Lease's gap, each phase) are printed, never asserted. Skipped,
//! saying why, without a real node, without a tiergate binary (`TIERGATE_E2E_IMAGE_BINARY`) or without the Helm
//! library (tests/run.sh provides all three on a machine with the node's pieces).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::json;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::control_plane::node::GPU_RESOURCE;
use tiergate_e2e::real_node::job_condition_true;
use tiergate_e2e::release::load::{Creates, Load};
use tiergate_e2e::release::{
    BOUND, BRONZE_GPUS, LeaseHistory, Prerequisites, Release, build_gpu_job, build_real_node_policy, holder_is_pod,
    install_release, is_confined, lease_holder, prerequisites_or_skip, ready_pods, run_with_release,
    wait_until_mutated,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, create_namespace, ensure, random_name, run_cluster_test, tenant_client,
    wait_for, wait_for_local_queue,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

const TEST: &str = "the_chart_installed_by_helm_serves_runs_hands_over_upgrades_rotates_and_uninstalls_cleanly";

/// The CA rotation waits for two certificate checks of each replica (60 s apart) and their reloads.
const ROTATION_BOUND: Duration = Duration::from_secs(420);
/// The one-GPU Jobs of the lifecycle (on bronze's [`BRONZE_GPUS`]-GPU quota).
const LIFECYCLE_JOBS: usize = 6;
/// The annotation that forces a CA rotation (docs/operations.md, "Certificates").
const ROTATE_CA_ANNOTATION: &str = "tiergate.io/rotate-ca-before";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_installed_by_helm_serves_runs_hands_over_upgrades_rotates_and_uninstalls_cleanly() {
    let Some(prerequisites) = prerequisites_or_skip(TEST) else { return };
    let outcome = run_cluster_test(TEST, async |client, cleanup| {
        let release = Release::new(&prerequisites, "helm", "tg-helm", "e2e-helm");
        run_with_release(client, cleanup, &prerequisites, &release, async |release| {
            scenario(client, cleanup, &prerequisites, release).await
        })
        .await
    })
    .await;
    if let Err(error) = outcome {
        panic!("{error}");
    }
}

async fn scenario(
    client: &Client,
    cleanup: &Cleanup,
    prerequisites: &Prerequisites,
    release: &Release,
) -> Result<(), HarnessError> {
    let policy = build_real_node_policy(&release.policy)?;
    let bronze_namespace = random_name("e2e-helm-bronze");
    let load_namespace = random_name("e2e-helm-load");
    let tier_label = [(E2E_TIER_LABEL, release.bronze.as_str())];
    create_namespace(client, cleanup, &bronze_namespace, &tier_label).await?;
    create_namespace(client, cleanup, &load_namespace, &tier_label).await?;
    let tenant = tenant_client(client, cleanup, &[&bronze_namespace, &load_namespace]).await?;

    // Install.
    let installed = Instant::now();
    let install = install_release(client, cleanup, release, &policy).await?;
    let queue = release.bronze_queue();
    let first = wait_until_mutated(&tenant, &bronze_namespace, &queue).await?;
    println!(
        "helm: install took {:.1} s in Helm (both replicas Ready: {:?}, leader {}); the first bronze GPU Job was \
         mutated through the Service {:.1} s after the install began (queue {}, selector {:?})",
        install.helm_seconds,
        install.pods,
        install.leader.pod,
        installed.elapsed().as_secs_f64(),
        first.labels().get(QUEUE_NAME_LABEL).cloned().unwrap_or_default(),
        first.spec.as_ref().and_then(|spec| spec.template.spec.as_ref()).and_then(|spec| spec.node_selector.clone()),
    );

    lifecycle(client, &tenant, prerequisites, release, &bronze_namespace, &queue).await?;
    handover(client, &tenant, release, &load_namespace, &queue).await?;
    upgrade(client, &tenant, release, &load_namespace, &queue).await?;
    rotate_certificates(client, &tenant, release, &load_namespace, &queue).await?;
    uninstall(client, &tenant, release, &bronze_namespace).await
}

/// 6 one-GPU Jobs on bronze's 2-GPU quota: each runs its pod to completion on the node, never more than 2 hold
/// quota at once, and `tiergate status --tier` shows the tier's usage back at 0.
async fn lifecycle(
    client: &Client,
    tenant: &Client,
    prerequisites: &Prerequisites,
    release: &Release,
    namespace: &str,
    queue: &str,
) -> Result<(), HarnessError> {
    let began = Instant::now();
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), namespace);
    let names: Vec<String> = (0..LIFECYCLE_JOBS).map(|index| format!("train-{index}")).collect();
    for name in &names {
        let job = build_gpu_job(namespace, name, "sleep 2")?;
        let created = jobs.create(&PostParams::default(), &job).await?;
        ensure(is_confined(&created, queue), || format!("Job {name} was stored unconfined: {:?}", created.spec))?;
    }
    let workloads_resource = tiergate::live::fetch::workload_resource();
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &workloads_resource);
    let most_holding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let completed = wait_for("the 6 bronze Jobs to complete on the real node", BOUND, || {
        let (jobs, workloads, most_holding) = (jobs.clone(), workloads.clone(), Arc::clone(&most_holding));
        async move {
            let listed = workloads.list(&ListParams::default()).await.ok()?.items;
            let holding = listed.iter().filter(|workload| holds_quota(workload)).count();
            most_holding.fetch_max(holding, Ordering::Relaxed);
            let jobs = jobs.list(&ListParams::default()).await.ok()?.items;
            let failed: Vec<String> =
                jobs.iter().filter(|job| job_condition_true(job, "Failed")).map(ResourceExt::name_any).collect();
            if !failed.is_empty() {
                return Some(Err(format!("Jobs {failed:?} failed")));
            }
            let done = jobs.iter().filter(|job| job_condition_true(job, "Complete")).count();
            (done == LIFECYCLE_JOBS).then_some(Ok(()))
        }
    })
    .await?;
    completed?;
    let most_holding = most_holding.load(Ordering::Relaxed);
    ensure(most_holding <= BRONZE_GPUS as usize, || {
        format!("{most_holding} Workloads held bronze's quota at once; its quota is {BRONZE_GPUS} GPUs")
    })?;
    // Kueue marks each Workload Finished, and the tier's usage falls back to 0 (`kubectl tiergate status`).
    let status = wait_for("`tiergate status` to show bronze's GPUs back at 0", BOUND, || async {
        let answer = tiergate_status(&prerequisites.binary, release).await.ok()?;
        let tier = answer["tiers"].as_array()?.iter().find(|tier| tier["tier"] == release.bronze.as_str())?.clone();
        let gpus = tier["flavors"].as_array()?.iter().find(|flavor| flavor["resource"] == GPU_RESOURCE)?.clone();
        let idle = tier["admittedWorkloads"] == 0 && tier["reservingWorkloads"] == 0 && gpus["used"] == "0";
        idle.then_some((tier["clusterQueue"].clone(), gpus))
    })
    .await?;
    let finished = workloads
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|workload| tiergate_e2e::condition_status(&workload.data, "Finished") == Some("True"))
        .count();
    ensure(finished == LIFECYCLE_JOBS, || format!("Kueue marked {finished} of {LIFECYCLE_JOBS} Workloads Finished"))?;
    println!(
        "helm: lifecycle: {LIFECYCLE_JOBS} one-GPU Jobs ran to completion on the node in {:.1} s, at most \
         {most_holding} holding bronze's {BRONZE_GPUS}-GPU quota at once; {finished} Workloads Finished; \
         `tiergate status --tier {}`: ClusterQueue {} uses {} of {} GPUs",
        began.elapsed().as_secs_f64(),
        release.bronze,
        status.0,
        status.1["used"],
        status.1["quota"],
    );
    for name in &names {
        let _ = jobs.delete(name, &DeleteParams::background()).await;
    }
    Ok(())
}

/// Whether a Workload holds quota now: reserved, not yet finished.
fn holds_quota(workload: &DynamicObject) -> bool {
    let condition = |type_: &str| tiergate_e2e::condition_status(&workload.data, type_) == Some("True");
    condition("QuotaReserved") && !condition("Finished")
}

/// `tiergate status --tier <bronze> -o json`, the answer `kubectl tiergate status` gives (the plugin is this
/// binary), as JSON.
async fn tiergate_status(binary: &Path, release: &Release) -> Result<serde_json::Value, HarnessError> {
    let output = tokio::process::Command::new(binary)
        .args(["status", "--tier", &release.bronze, "--policy-name", &release.policy, "-o", "json"])
        .output()
        .await?;
    ensure(output.status.success(), || {
        format!("tiergate status failed: {}", String::from_utf8_lossy(&output.stderr).trim())
    })?;
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// The leader pod is deleted (gracefully, as `kubectl delete pod` does) under the load: it hands its Lease over,
/// the other replica takes it and reconciles a new tiered namespace, and no create fails or goes unconstrained.
async fn handover(
    client: &Client,
    tenant: &Client,
    release: &Release,
    load_namespace: &str,
    queue: &str,
) -> Result<(), HarnessError> {
    let pods = ready_pods(client, release).await?;
    let leader = lease_holder(client, release, &pods).await?.pod;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    let before = leases.get(&release.lease()).await?.spec.unwrap_or_default();
    let history = LeaseHistory::watch(client, release);
    let load = Load::start(tenant, load_namespace, queue, Creates::Stored);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), &release.namespace).delete(&leader, &DeleteParams::default()).await?;
    let successor = wait_for("another replica to take the Lease", BOUND, || {
        let leases = leases.clone();
        let leader = leader.clone();
        async move {
            let holder = leases.get(&release.lease()).await.ok()?.spec?.holder_identity?;
            (!holder.is_empty() && !holder_is_pod(&holder, &leader)).then_some(holder)
        }
    })
    .await?;
    let taken = deleted.elapsed();
    // The new leader reconciles: a namespace labelled for bronze now gets its LocalQueue.
    let probe_namespace = random_name("e2e-helm-after");
    let cleanup_probe = Cleanup::new(client.clone());
    create_namespace(client, &cleanup_probe, &probe_namespace, &[(E2E_TIER_LABEL, release.bronze.as_str())]).await?;
    let local_queue = format!("tiergate-{}", release.bronze);
    let reconciled = wait_for_local_queue(client, &probe_namespace, &local_queue, BOUND).await;
    let reconciled_after = deleted.elapsed();
    cleanup_probe.run().await;
    reconciled?;
    let pods_after = ready_pods(client, release).await?;
    let report = load.finish().await?;
    let events = history.stop().await;
    let released = events.iter().any(|(_, holder)| holder.is_empty());
    println!(
        "helm: handover: leader {leader} deleted; the Lease passed to {successor} {:.2} s later (released by the \
         leaving leader: {released}; Lease history {:?}), and the new leader reconciled a new namespace {:.2} s after \
         the delete; both replicas Ready again ({pods_after:?}); load: {}",
        taken.as_secs_f64(),
        events.iter().map(|(at, holder)| format!("{:.2}s {holder:?}", at.as_secs_f64())).collect::<Vec<_>>(),
        reconciled_after.as_secs_f64(),
        report.summary()
    );
    report.ensure_clean("handover")?;
    // The leaving leader stepped down: the Lease was released (no holder) before anyone else took it, or taken
    // before the leaving holder's last renewal would have expired.
    let expiry = before
        .renew_time
        .as_ref()
        .map(|renewed| renewed.0)
        .zip(before.lease_duration_seconds)
        .map(|(renewed, seconds)| renewed + std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0)));
    let after = leases.get(&release.lease()).await?.spec.unwrap_or_default();
    let acquired = after.acquire_time.as_ref().map(|time| time.0);
    ensure(released || acquired.zip(expiry).is_some_and(|(acquired, expiry)| acquired < expiry), || {
        format!("the leaving leader did not hand its Lease over: {events:?}, before {before:?}, after {after:?}")
    })
}

/// `helm upgrade` with a changed value rolls both pods under the load: no create fails or goes unconstrained.
async fn upgrade(
    client: &Client,
    tenant: &Client,
    release: &Release,
    load_namespace: &str,
    queue: &str,
) -> Result<(), HarnessError> {
    let before = ready_pods(client, release).await?;
    let load = Load::start(tenant, load_namespace, queue, Creates::Stored);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let began = Instant::now();
    let helm_seconds = release
        .helm("upgrade", Some(release.values(json!({"podAnnotations": {"e2e.tiergate.io/revision": "2"}}))))
        .await?;
    let after = ready_pods(client, release).await?;
    let rolled = began.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = load.finish().await?;
    println!(
        "helm: upgrade: Helm took {helm_seconds:.1} s; pods {before:?} replaced by {after:?} in {:.1} s; load: {}",
        rolled.as_secs_f64(),
        report.summary()
    );
    ensure(after.iter().all(|pod| !before.contains(pod)), || {
        format!("the upgrade kept pods: {before:?} -> {after:?}")
    })?;
    report.ensure_clean("upgrade")
}

/// A CA rotation forced with [`ROTATE_CA_ANNOTATION`] under the load: the caBundle gains the new CA, the Secret's
/// serving certificate is reissued by it, every replica serves that certificate, and no create fails.
async fn rotate_certificates(
    client: &Client,
    tenant: &Client,
    release: &Release,
    load_namespace: &str,
    queue: &str,
) -> Result<(), HarnessError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &release.namespace);
    let old_ca = secret_field(&secrets.get(&release.secret()).await?, tiergate::certs::SECRET_CA_CERT)?;
    let load = Load::start(tenant, load_namespace, queue, Creates::Stored);
    let began = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {ROTATE_CA_ANNOTATION: now}}});
    secrets.patch(&release.secret(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    let service_host = format!("{}-webhook.{}.svc", release.name, release.namespace);
    let rotated = wait_for("the new CA to be published and served by every replica", ROTATION_BOUND, || {
        let (secrets, webhooks, pods) = (secrets.clone(), webhooks.clone(), pods.clone());
        let (old_ca, service_host) = (old_ca.clone(), service_host.clone());
        async move {
            let secret = secrets.get(&release.secret()).await.ok()?;
            let ca = secret_field(&secret, tiergate::certs::SECRET_CA_CERT).ok()?;
            if ca == old_ca {
                return None;
            }
            let registration = webhooks.get(&release.webhook_configuration()).await.ok()?;
            let bundles: Vec<String> = registration
                .webhooks
                .unwrap_or_default()
                .iter()
                .map(|webhook| {
                    let bundle = webhook.client_config.ca_bundle.as_ref().map(|bundle| bundle.0.clone());
                    String::from_utf8(bundle.unwrap_or_default()).unwrap_or_default()
                })
                .collect();
            let published = !bundles.is_empty() && bundles.iter().all(|bundle| bundle.contains(ca.trim()));
            let listed = pods.list(&ListParams::default()).await.ok()?.items;
            let addresses: Vec<String> = listed.iter().filter_map(|pod| pod.status.as_ref()?.pod_ip.clone()).collect();
            for address in &addresses {
                serves_certificate_signed_by(address, &ca, &service_host).await.ok()?;
            }
            (published && addresses.len() == 2).then_some(addresses)
        }
    })
    .await?;
    let took = began.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = load.finish().await?;
    println!(
        "helm: certificates: a CA rotation forced with {ROTATE_CA_ANNOTATION} was published and served by both \
         replicas ({rotated:?}) {:.1} s later; load: {}",
        took.as_secs_f64(),
        report.summary()
    );
    report.ensure_clean("certificate rotation")
}

fn secret_field(secret: &Secret, key: &str) -> Result<String, HarnessError> {
    let bytes = secret.data.as_ref().and_then(|data| data.get(key)).map(|bytes| bytes.0.clone());
    let bytes = bytes.ok_or_else(|| format!("Secret {} has no {key}", secret.name_any()))?;
    Ok(String::from_utf8(bytes)?)
}

/// Whether the replica at `address` serves, on its webhook port, a certificate for the Service's name that `ca_pem`
/// signed: a TLS handshake that trusts only that CA succeeds (any HTTP answer after it will do).
async fn serves_certificate_signed_by(address: &str, ca_pem: &str, service_host: &str) -> Result<(), HarnessError> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(certificate?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let socket: std::net::SocketAddr = format!("{address}:8443").parse()?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .resolve(service_host, socket)
        .timeout(Duration::from_secs(5))
        .build()?;
    client.get(format!("https://{service_host}:8443/healthz")).send().await?;
    Ok(())
}

/// `helm uninstall` alone, with the TierPolicy still there: nothing that refuses or holds a workload is left, and a
/// GPU Job is then accepted unchanged.
async fn uninstall(client: &Client, tenant: &Client, release: &Release, namespace: &str) -> Result<(), HarnessError> {
    print_log_findings(client, release).await?;
    let began = Instant::now();
    let helm_seconds = release.helm("uninstall", None).await?;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let gate_parameters = ApiResource::erase::<tiergate::plan::gate::params::TierGateParameters>(&());
    let parameters: Api<DynamicObject> = Api::all_with(client.clone(), &gate_parameters);
    let left = wait_for("the webhook registration and the in-server gate to be gone", BOUND, || {
        let (webhooks, policies, bindings, parameters) =
            (webhooks.clone(), policies.clone(), bindings.clone(), parameters.clone());
        async move {
            let mut left = Vec::new();
            if webhooks.get_opt(&release.webhook_configuration()).await.ok()?.is_some() {
                left.push(format!("MutatingWebhookConfiguration {}", release.webhook_configuration()));
            }
            let owned = |name: &str| name.contains(&release.policy);
            left.extend(
                policies
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .iter()
                    .map(ResourceExt::name_any)
                    .filter(|n| owned(n)),
            );
            left.extend(
                bindings
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .iter()
                    .map(ResourceExt::name_any)
                    .filter(|n| owned(n)),
            );
            if let Ok(listed) = parameters.list(&ListParams::default()).await {
                left.extend(listed.items.iter().map(ResourceExt::name_any).filter(|n| owned(n)));
            }
            left.is_empty().then_some(left)
        }
    })
    .await;
    left?;
    // A GPU Job now is stored as written: no queue, no class, no refusal. The API server learns of the deleted
    // policy, binding and parameters through its own informers, a moment after they are gone: until then a plain
    // GPU Job is refused by the gate, as with the webhook down (by its validation, or, where the parameters' informer
    // was first, with "no params found"). How long is printed.
    let gone_at = Instant::now();
    let job = build_gpu_job(namespace, "after-uninstall", "true")?;
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), namespace);
    let refusals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stored = wait_for("a GPU Job to be accepted unchanged after the uninstall", BOUND, || {
        let (jobs, job, refusals) = (jobs.clone(), job.clone(), Arc::clone(&refusals));
        async move {
            let dry_run = PostParams { dry_run: true, ..PostParams::default() };
            match jobs.create(&dry_run, &job).await {
                Ok(stored) => Some(stored),
                Err(error) => {
                    if let Ok(mut refusals) = refusals.lock() {
                        refusals.push(error.to_string());
                    }
                    None
                }
            }
        }
    })
    .await?;
    let accepted_after = gone_at.elapsed();
    let refusals = refusals.lock().map(|refusals| refusals.clone()).unwrap_or_default();
    let pod_spec = stored.spec.as_ref().and_then(|spec| spec.template.spec.as_ref());
    let unchanged = !stored.labels().contains_key(QUEUE_NAME_LABEL)
        && stored.spec.as_ref().and_then(|spec| spec.suspend) != Some(true)
        && pod_spec.is_some_and(|spec| spec.node_selector.is_none() && spec.tolerations.is_none());
    ensure(unchanged, || format!("after the uninstall a GPU Job is still changed: {stored:?}"))?;
    println!(
        "helm: uninstall: the API server still refused {} plain GPU Job(s) for {:.2} s after the gate's objects were \
         gone (its admission informers catching up): {:?}",
        refusals.len(),
        accepted_after.as_secs_f64(),
        refusals.iter().take(2).collect::<Vec<_>>()
    );
    // What stays is what docs/operations.md says stays: the CRDs, the TierPolicy and the Kueue objects it owns.
    let policy_kept = Api::<TierPolicy>::all(client.clone()).get_opt(&release.policy).await?.is_some();
    let cluster_queues = KueueKind::ClusterQueue.api_resource();
    let queue = Api::<DynamicObject>::all_with(client.clone(), &cluster_queues)
        .get_opt(&format!("tiergate-{}", release.bronze))
        .await?
        .is_some();
    println!(
        "helm: uninstall: Helm took {helm_seconds:.1} s; the webhook registration, admission policies, bindings and \
         parameters were gone {:.1} s after it began; a GPU Job is then stored unchanged; kept: the TierPolicy \
         ({policy_kept}), bronze's ClusterQueue ({queue}), the CRDs (Helm never deletes them)",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Prints what the replicas logged above INFO, each distinct message (and its error) once with its count: findings
/// for the chart, the image or the daemon (the log is JSON, the chart's default).
async fn print_log_findings(client: &Client, release: &Release) -> Result<(), HarnessError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    let mut findings: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for pod in pods.list(&ListParams::default()).await?.items {
        let log = pods.logs(&pod.name_any(), &kube::api::LogParams::default()).await?;
        for line in log.lines() {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let level = entry["level"].as_str().unwrap_or_default();
            if matches!(level, "WARN" | "ERROR") {
                // The chart's JSON log flattens each event's fields beside `message`.
                let message = entry["message"].as_str().unwrap_or_default();
                let error = entry["error"].as_str().map(|error| format!(": {error}")).unwrap_or_default();
                *findings.entry(format!("{level} {message}{error}")).or_default() += 1;
            }
        }
    }
    println!("helm: the replicas logged {} distinct warnings and errors: {findings:?}", findings.len());
    Ok(())
}
