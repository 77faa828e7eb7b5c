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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::control_plane::assets::find_in_environment;
use tiergate_e2e::control_plane::images::{
    build_image_archive, import_image_archive, linked_libraries, tiergate_image,
};
use tiergate_e2e::control_plane::node::{CONTAINERD_SOCKET_ENV, GPU_RESOURCE, REAL_NODE_LABEL, REAL_NODE_TAINT};
use tiergate_e2e::real_node::{busybox_pod_spec, job_condition_true, real_node_or_skip};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, apply_policy, build_prefixed_policy, create_namespace, ensure, prefixed,
    random_name, repository_file, run_cluster_test, skip, tenant_client, wait_for, wait_for_local_queue,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

const TEST: &str = "the_chart_installed_by_helm_serves_runs_hands_over_upgrades_rotates_and_uninstalls_cleanly";

/// The tiergate binary the image carries (tests/run.sh builds and names it).
const IMAGE_BINARY_ENV: &str = "TIERGATE_E2E_IMAGE_BINARY";
/// The Python with helm-python-sdk (default: the test venv tests/run.sh makes, `target/test-venv/bin/python`).
const PYTHON_ENV: &str = "TIERGATE_E2E_PYTHON";
/// The image repository of the chart's default values; the tag is this run's.
const IMAGE_REPOSITORY: &str = "ghcr.io/tiergate/tiergate";
/// How long a rollout, a rotation or a Job's pods may take on a small, busy machine.
const BOUND: Duration = Duration::from_secs(300);
/// The CA rotation waits for two certificate checks of each replica (60 s apart) and their reloads.
const ROTATION_BOUND: Duration = Duration::from_secs(420);
/// The time between two creates of the load.
const LOAD_PERIOD: Duration = Duration::from_millis(100);
/// The bronze tier's GPU quota: the lifecycle's ceiling.
const BRONZE_GPUS: u32 = 2;
/// The one-GPU Jobs of the lifecycle.
const LIFECYCLE_JOBS: usize = 6;
/// The annotation that forces a CA rotation (docs/operations.md, "Certificates").
const ROTATE_CA_ANNOTATION: &str = "tiergate.io/rotate-ca-before";

/// What the suite needs besides the cluster.
struct Prerequisites {
    binary: PathBuf,
    python: PathBuf,
    helm_script: PathBuf,
    ctr: PathBuf,
    socket: PathBuf,
}

/// Every prerequisite, or `None` after printing the first one missing.
fn prerequisites_or_skip() -> Option<Prerequisites> {
    real_node_or_skip(TEST)?;
    let set = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty()).map(PathBuf::from);
    let Some(socket) = set(CONTAINERD_SOCKET_ENV) else {
        skip(TEST, &format!("{CONTAINERD_SOCKET_ENV} is not set: no containerd to import tiergate's image into"));
        return None;
    };
    let Some(binary) = set(IMAGE_BINARY_ENV).filter(|binary| binary.is_file()) else {
        skip(
            TEST,
            &format!(
                "{IMAGE_BINARY_ENV} names no file: build the binary the image carries (`cargo build -p tiergate \
                 --bin tiergate`, or --release) and name it there (tests/run.sh does)"
            ),
        );
        return None;
    };
    let helm_script = repository_file("tests/e2e/helm_release.py").ok()?;
    let python = set(PYTHON_ENV).or_else(|| {
        let venv = helm_script.parent()?.parent()?.parent()?.join("target/test-venv/bin/python");
        venv.is_file().then_some(venv)
    });
    let Some(python) = python.filter(|python| {
        std::process::Command::new(python)
            .args(["-c", "import helm_python"])
            .output()
            .is_ok_and(|out| out.status.success())
    }) else {
        skip(
            TEST,
            &format!(
                "no Python with helm-python-sdk: tests/run.sh makes target/test-venv, or name one in {PYTHON_ENV}"
            ),
        );
        return None;
    };
    let ctr = match find_in_environment("ctr") {
        Ok(ctr) => ctr,
        Err(missing) => {
            skip(TEST, &missing.to_string());
            return None;
        }
    };
    Some(Prerequisites { binary, python, helm_script, ctr, socket })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_installed_by_helm_serves_runs_hands_over_upgrades_rotates_and_uninstalls_cleanly() {
    let Some(prerequisites) = prerequisites_or_skip() else { return };
    if let Err(error) = run_cluster_test(TEST, async |client, cleanup| run(client, cleanup, &prerequisites).await).await
    {
        panic!("{error}");
    }
}

/// One release of the chart and the names around it.
struct Release {
    name: String,
    namespace: String,
    tag: String,
    policy: String,
    bronze: String,
    python: PathBuf,
    helm_script: PathBuf,
}

impl Release {
    fn values(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut values = json!({
            "fullnameOverride": self.name,
            "replicaCount": 2,
            "policyName": self.policy,
            "image": {"repository": IMAGE_REPOSITORY, "tag": self.tag, "pullPolicy": "Never"},
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        });
        if let (Some(values), Some(extra)) = (values.as_object_mut(), extra.as_object()) {
            values.extend(extra.clone());
        }
        values
    }

    /// `helm <action>` through the Python helper: Helm's seconds, from its JSON line.
    async fn helm(&self, action: &str, values: Option<serde_json::Value>) -> Result<f64, HarnessError> {
        let mut command = tokio::process::Command::new(&self.python);
        command.arg(&self.helm_script).args([action, "--release", &self.name, "--namespace", &self.namespace]);
        if let Some(values) = values {
            command.args(["--values", &values.to_string()]);
        }
        let output = command.output().await?;
        ensure(output.status.success(), || {
            format!("helm {action} failed: {}", String::from_utf8_lossy(&output.stderr).trim())
        })?;
        let line: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        Ok(line["seconds"].as_f64().unwrap_or_default())
    }

    fn webhook_configuration(&self) -> String {
        format!("00-{}", self.name)
    }

    fn lease(&self) -> String {
        format!("{}-leader", self.name)
    }

    fn secret(&self) -> String {
        format!("{}-webhook-tls", self.name)
    }
}

async fn run(client: &Client, cleanup: &Cleanup, prerequisites: &Prerequisites) -> Result<(), HarnessError> {
    let name = random_name("tg-helm");
    let prefix = random_name("e2e-helm");
    let release = Release {
        namespace: name.clone(),
        tag: format!("e2e-{}", name.trim_start_matches("tg-helm-")),
        policy: prefix.clone(),
        bronze: prefixed(&prefix, "bronze"),
        python: prerequisites.python.clone(),
        helm_script: prerequisites.helm_script.clone(),
        name,
    };
    let image_built = Instant::now();
    import_tiergate_image(prerequisites, &release).await?;
    println!(
        "helm: image {IMAGE_REPOSITORY}:{} built from {} and imported in {:.1} s",
        release.tag,
        prerequisites.binary.display(),
        image_built.elapsed().as_secs_f64()
    );
    // CRDs the chart brings that were absent: removed at the end, as they were (Helm itself keeps them).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in ["tierpolicies.tiergate.io", "tiergateparameters.tiergate.io"] {
        if crds.get_opt(crd).await?.is_none() {
            cleanup.track(ApiResource::erase::<CustomResourceDefinition>(&()), None, crd);
        }
    }
    // Helm creates the release's namespace; it goes after the release.
    cleanup.track(ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()), None, &release.namespace);
    let outcome = scenario(client, cleanup, prerequisites, &release).await;
    // Whatever happened, the release goes (after the scenario's own uninstall, there is none left: a no-op).
    if let Err(error) = release.helm("uninstall", None).await {
        println!("cleanup: {error}");
    }
    outcome
}

/// The release binary (or the one named) in the Dockerfile's layout, imported into the node's containerd.
async fn import_tiergate_image(prerequisites: &Prerequisites, release: &Release) -> Result<(), HarnessError> {
    let binary = std::fs::read(&prerequisites.binary)?;
    let libraries = linked_libraries(&prerequisites.binary)?;
    let image = tiergate_image(&format!("{IMAGE_REPOSITORY}:{}", release.tag), &binary, &libraries);
    let archive = build_image_archive(&[image])?;
    let (ctr, socket) = (prerequisites.ctr.clone(), prerequisites.socket.clone());
    let dir = tempfile::tempdir()?;
    let dir_path = dir.path().to_owned();
    tokio::task::spawn_blocking(move || import_image_archive(&ctr, &socket, &dir_path, &archive)).await?
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
    let helm_seconds = release.helm("install", Some(release.values(json!({})))).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &release.policy);
    apply_policy(client, &policy).await?;
    let pods = ready_pods(client, release).await?;
    ensure(pods.len() == 2, || format!("expected 2 Ready replicas, found {pods:?}"))?;
    let leader = lease_holder_pod(client, release, &pods).await?;
    let queue = format!("tiergate-{}", release.bronze);
    let first = wait_for("a bronze GPU Job mutated through the Service", BOUND, || {
        let tenant = tenant.clone();
        let namespace = bronze_namespace.clone();
        let queue = queue.clone();
        async move {
            let created = create_gpu_job(&tenant, &namespace, &random_name("first")).await.ok()?;
            let confined = is_confined(&created, &queue);
            let jobs: Api<Job> = Api::namespaced(tenant.clone(), &namespace);
            let _ = jobs.delete(&created.name_any(), &DeleteParams::background()).await;
            confined.then_some(created)
        }
    })
    .await?;
    println!(
        "helm: install took {helm_seconds:.1} s in Helm (both replicas Ready: {pods:?}, leader {leader}); the first \
         bronze GPU Job was mutated through the Service {:.1} s after the install began (queue {}, selector {:?})",
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

/// The sample policy, renamed for this run, with bronze's GPU class on the real node (its label and taint) and
/// quota for [`BRONZE_GPUS`].
fn build_real_node_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let policy = build_prefixed_policy(prefix)?;
    let mut value = serde_json::to_value(&policy)?;
    let bronze = prefixed(prefix, "bronze");
    let class = prefixed(prefix, "l4");
    for gpu_class in value["spec"]["gpuClasses"].as_array_mut().into_iter().flatten() {
        if gpu_class["name"] == class.as_str() {
            gpu_class["nodeLabels"] = json!({REAL_NODE_LABEL: "true"});
            gpu_class["nodeTaints"] = json!([{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}]);
        }
    }
    for tier in value["spec"]["tiers"].as_array_mut().into_iter().flatten() {
        if tier["name"] == bronze.as_str() {
            tier["quotas"][GPU_RESOURCE] = json!({"nominal": BRONZE_GPUS.to_string()});
        }
    }
    Ok(serde_json::from_value(value)?)
}

/// The release's pods once exactly `replicaCount` of them are Ready and none is terminating: their names.
async fn ready_pods(client: &Client, release: &Release) -> Result<Vec<String>, HarnessError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    wait_for("the release's 2 replicas to be Ready (and no other pod)", BOUND, || {
        let (deployments, pods) = (deployments.clone(), pods.clone());
        async move {
            let deployment = deployments.get(&release.name).await.ok()?;
            let status = deployment.status?;
            let settled = status.ready_replicas == Some(2)
                && status.updated_replicas == Some(2)
                && status.replicas == Some(2)
                && status.observed_generation == deployment.metadata.generation;
            let listed = pods.list(&ListParams::default()).await.ok()?.items;
            let ready: Vec<String> = listed
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none() && is_pod_ready(pod))
                .map(ResourceExt::name_any)
                .collect();
            (settled && listed.len() == 2 && ready.len() == 2).then_some(ready)
        }
    })
    .await
}

fn is_pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// The pod (one of `pods`) whose identity holds the release's Lease, once one does.
async fn lease_holder_pod(client: &Client, release: &Release, pods: &[String]) -> Result<String, HarnessError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    wait_for("a replica to hold the Lease", BOUND, || {
        let leases = leases.clone();
        async move {
            let holder = leases.get(&release.lease()).await.ok()?.spec?.holder_identity?;
            pods.iter().find(|pod| holder_is_pod(&holder, pod)).cloned()
        }
    })
    .await
}

/// Whether Lease holder identity `holder` (`<pod name>_<suffix>`) is pod `pod`'s.
fn holder_is_pod(holder: &str, pod: &str) -> bool {
    holder.rsplit_once('_').is_some_and(|(name, _)| name == pod)
}

/// A tenant's plain Job of one pod asking one GPU, sleeping a second in busybox: no queue, class or suspend.
fn build_gpu_job(namespace: &str, name: &str, script: &str) -> Result<Job, HarnessError> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {"spec": busybox_pod_spec(script, Some("1"))}},
    }))?)
}

async fn create_gpu_job(tenant: &Client, namespace: &str, name: &str) -> Result<Job, kube::Error> {
    let job = build_gpu_job(namespace, name, "sleep 1").map_err(kube::Error::Service)?;
    Api::<Job>::namespaced(tenant.clone(), namespace).create(&PostParams::default(), &job).await
}

/// Whether a stored Job is confined as tiergate confines a bronze GPU Job: its tier's queue, and the class's
/// selector and toleration in its pod template.
fn is_confined(job: &Job, queue: &str) -> bool {
    let spec = job.spec.as_ref().and_then(|spec| spec.template.spec.as_ref());
    let selected = spec
        .and_then(|spec| spec.node_selector.as_ref())
        .is_some_and(|selector| selector.get(REAL_NODE_LABEL).map(String::as_str) == Some("true"));
    let tolerated = spec.and_then(|spec| spec.tolerations.as_ref()).is_some_and(|tolerations| {
        tolerations.iter().any(|toleration| toleration.key.as_deref() == Some(REAL_NODE_TAINT))
    });
    job.labels().get(QUEUE_NAME_LABEL).map(String::as_str) == Some(queue) && selected && tolerated
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

/// What the load saw: every create's outcome.
#[derive(Debug, Default)]
struct LoadReport {
    created: usize,
    confined: usize,
    refused: Vec<String>,
    unconstrained: Vec<String>,
    slowest: Duration,
}

impl LoadReport {
    fn summary(&self) -> String {
        format!(
            "{} creates: {} confined, {} refused, {} stored unconstrained; the slowest took {} ms",
            self.created,
            self.confined,
            self.refused.len(),
            self.unconstrained.len(),
            self.slowest.as_millis()
        )
    }

    fn ensure_clean(&self, phase: &str) -> Result<(), HarnessError> {
        ensure(self.created > 0 && self.refused.is_empty() && self.unconstrained.is_empty(), || {
            format!(
                "{phase}: {}; refused: {:?}; unconstrained: {:?}",
                self.summary(),
                self.refused.iter().take(5).collect::<Vec<_>>(),
                self.unconstrained.iter().take(5).collect::<Vec<_>>()
            )
        })
    }
}

/// A tenant creating a plain bronze GPU Job every [`LOAD_PERIOD`] (each create on its own task, so a slow answer
/// never delays the next) and deleting it once seen, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<LoadReport>,
}

impl Load {
    fn start(tenant: &Client, namespace: &str, queue: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tenant, namespace, queue, stopping) =
            (tenant.clone(), namespace.to_owned(), queue.to_owned(), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            let mut creates = tokio::task::JoinSet::new();
            let mut ticks = tokio::time::interval(LOAD_PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut index = 0_usize;
            while !stopping.load(Ordering::Relaxed) {
                ticks.tick().await;
                index += 1;
                let (tenant, namespace, queue) = (tenant.clone(), namespace.clone(), queue.clone());
                creates.spawn(async move {
                    let name = format!("load-{index}");
                    let began = Instant::now();
                    let created = create_gpu_job(&tenant, &namespace, &name).await;
                    let took = began.elapsed();
                    if created.is_ok() {
                        let jobs: Api<Job> = Api::namespaced(tenant, &namespace);
                        let _ = jobs.delete(&name, &DeleteParams::background()).await;
                    }
                    (name, took, created.map(|job| is_confined(&job, &queue)))
                });
            }
            let mut report = LoadReport::default();
            while let Some(outcome) = creates.join_next().await {
                let Ok((name, took, outcome)) = outcome else { continue };
                report.created += 1;
                report.slowest = report.slowest.max(took);
                match outcome {
                    Ok(true) => report.confined += 1,
                    Ok(false) => report.unconstrained.push(name),
                    Err(error) => report.refused.push(format!("{name}: {error}")),
                }
            }
            report
        });
        Self { stop, task }
    }

    async fn finish(self) -> Result<LoadReport, HarnessError> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(self.task.await?)
    }
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
    let leader = lease_holder_pod(client, release, &pods).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    let before = leases.get(&release.lease()).await?.spec.unwrap_or_default();
    let history = LeaseHistory::watch(client, release);
    let load = Load::start(tenant, load_namespace, queue);
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

/// The Lease's holders as a watch sees them, each with the time since the watch began.
struct LeaseHistory {
    task: tokio::task::JoinHandle<()>,
    events: Arc<std::sync::Mutex<Vec<(Duration, String)>>>,
}

impl LeaseHistory {
    fn watch(client: &Client, release: &Release) -> Self {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", release.lease()));
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        let began = Instant::now();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(leases, config));
            while let Some(event) = stream.next().await {
                let lease = match event {
                    Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease,
                    _ => continue,
                };
                let holder = lease.spec.and_then(|spec| spec.holder_identity).unwrap_or_default();
                if let Ok(mut events) = seen.lock()
                    && events.last().is_none_or(|(_, last): &(Duration, String)| *last != holder)
                {
                    events.push((began.elapsed(), holder));
                }
            }
        });
        Self { task, events }
    }

    async fn stop(self) -> Vec<(Duration, String)> {
        self.task.abort();
        let _ = self.task.await;
        self.events.lock().map(|events| events.clone()).unwrap_or_default()
    }
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
    let load = Load::start(tenant, load_namespace, queue);
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
    let load = Load::start(tenant, load_namespace, queue);
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
