//! charts/tiergate installed as a platform team installs it, for the suites that run it on the throwaway plane's
//! real node (helm_install, chaos): what they need besides the cluster (or why they are skipped), the image built
//! around the tiergate binary and imported into the node's containerd, the release installed and uninstalled with
//! the real Helm library (`tests/e2e/helm_release.py`), the policy it serves, its pods and its Lease. Does I/O (the
//! API, containerd, Helm's Python).

pub mod fault;
pub mod load;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tiergate::policy::TierPolicy;
use tiergate_workloads::QUEUE_NAME_LABEL;

use crate::control_plane::assets::find_in_environment;
use crate::control_plane::images::{build_image_archive, import_image_archive, linked_libraries, tiergate_image};
use crate::control_plane::node::{CONTAINERD_SOCKET_ENV, GPU_RESOURCE, REAL_NODE_LABEL, REAL_NODE_TAINT};
use crate::real_node::{busybox_pod_spec, real_node_or_skip};
use crate::{
    Cleanup, HarnessError, apply_policy, build_prefixed_policy, ensure, prefixed, random_name, repository_file, skip,
    wait_for, wait_until_refused,
};

/// The tiergate binary the image carries (tests/run.sh builds and names it).
pub const IMAGE_BINARY_ENV: &str = "TIERGATE_E2E_IMAGE_BINARY";
/// The Python with helm-python-sdk (default: the test venv tests/run.sh makes, `target/test-venv/bin/python`).
pub const PYTHON_ENV: &str = "TIERGATE_E2E_PYTHON";
/// The image repository of the chart's default values; the tag is each run's.
pub const IMAGE_REPOSITORY: &str = "ghcr.io/tiergate/tiergate";
/// How long a rollout, a Lease handover or a Job's pods may take on a small, busy machine.
pub const BOUND: Duration = Duration::from_secs(300);
/// The bronze tier's GPU quota in [`build_real_node_policy`].
pub const BRONZE_GPUS: u32 = 2;
/// The release's replicas (`replicaCount`).
pub const REPLICAS: usize = 2;
/// The chart's container, the process in it and the binary's name.
pub const CONTAINER: &str = "tiergate";
/// The chart's default `webhook.ignoreLabel`: a namespace labelled so is never sent to the webhook, while the
/// in-server gate's bindings still select it by its tier label (docs/operations.md, "Which namespaces").
pub const WEBHOOK_IGNORE_LABEL: &str = "tiergate.io/ignore";

/// What a real-node release suite needs besides the cluster.
#[derive(Debug)]
pub struct Prerequisites {
    /// The tiergate binary the image carries ([`IMAGE_BINARY_ENV`]).
    pub binary: PathBuf,
    python: PathBuf,
    helm_script: PathBuf,
    ctr: PathBuf,
    socket: PathBuf,
}

/// Every prerequisite of suite `test`, or `None` after printing the first one missing: a real node, its
/// containerd, the binary, a Python with helm-python-sdk and `ctr`.
pub fn prerequisites_or_skip(test: &str) -> Option<Prerequisites> {
    real_node_or_skip(test)?;
    let set = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty()).map(PathBuf::from);
    let Some(socket) = set(CONTAINERD_SOCKET_ENV) else {
        skip(test, &format!("{CONTAINERD_SOCKET_ENV} is not set: no containerd to import tiergate's image into"));
        return None;
    };
    let Some(binary) = set(IMAGE_BINARY_ENV).or_else(workspace_binary).filter(|binary| binary.is_file()) else {
        skip(
            test,
            &format!(
                "no tiergate binary for the image: {IMAGE_BINARY_ENV} is unset or names no file, and this workspace \
                 has no debug build; run `cargo build -p tiergate --bin tiergate` (tests/run.sh does) or name one \
                 in {IMAGE_BINARY_ENV} (e.g. target/release/tiergate)"
            ),
        );
        return None;
    };
    if set(IMAGE_BINARY_ENV).is_none() {
        println!("{test}: {IMAGE_BINARY_ENV} is unset: the image carries this workspace's {}", binary.display());
    }
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
            test,
            &format!(
                "no Python with helm-python-sdk: tests/run.sh makes target/test-venv, or name one in {PYTHON_ENV}"
            ),
        );
        return None;
    };
    let ctr = match find_in_environment("ctr") {
        Ok(ctr) => ctr,
        Err(missing) => {
            skip(test, &missing.to_string());
            return None;
        }
    };
    Some(Prerequisites { binary, python, helm_script, ctr, socket })
}

/// This workspace's debug build of tiergate (in `CARGO_TARGET_DIR` when set), if it exists: what the image carries
/// when [`IMAGE_BINARY_ENV`] names nothing, as tests/run.sh names it.
fn workspace_binary() -> Option<PathBuf> {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    };
    let binary = target.join("debug/tiergate");
    binary.is_file().then_some(binary)
}

/// One release of the chart and the names around it.
#[derive(Debug)]
pub struct Release {
    /// What the suite's lines start with (`helm`, `chaos`).
    pub label: String,
    /// The release's name (and `fullnameOverride`).
    pub name: String,
    /// The release's namespace (Helm creates it).
    pub namespace: String,
    /// The image tag of this run.
    pub tag: String,
    /// The TierPolicy's name (`policyName`), also the prefix of its tiers and classes.
    pub policy: String,
    /// The bronze tier's name.
    pub bronze: String,
    python: PathBuf,
    helm_script: PathBuf,
}

impl Release {
    /// A release `<name_prefix>-xxxxxxxx` in a namespace of that name, image tag `e2e-xxxxxxxx`, serving the policy
    /// `<policy_prefix>-yyyyyyyy`; `label` starts the lines it prints.
    pub fn new(prerequisites: &Prerequisites, label: &str, name_prefix: &str, policy_prefix: &str) -> Self {
        let name = random_name(name_prefix);
        let policy = random_name(policy_prefix);
        Self {
            label: label.to_owned(),
            namespace: name.clone(),
            tag: format!("e2e-{}", name.trim_start_matches(name_prefix).trim_start_matches('-')),
            bronze: prefixed(&policy, "bronze"),
            policy,
            python: prerequisites.python.clone(),
            helm_script: prerequisites.helm_script.clone(),
            name,
        }
    }

    /// The chart's values: the defaults but [`REPLICAS`] replicas, this run's image (never pulled), the policy's
    /// name and the real node's selector and toleration; `extra`'s keys added or replaced.
    pub fn values(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut values = json!({
            "fullnameOverride": self.name,
            "replicaCount": REPLICAS,
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
    pub async fn helm(&self, action: &str, values: Option<serde_json::Value>) -> Result<f64, HarnessError> {
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

    /// The chart's MutatingWebhookConfiguration.
    pub fn webhook_configuration(&self) -> String {
        format!("00-{}", self.name)
    }

    /// The replicas' Lease.
    pub fn lease(&self) -> String {
        format!("{}-leader", self.name)
    }

    /// The self-managed certificates' Secret.
    pub fn secret(&self) -> String {
        format!("{}-webhook-tls", self.name)
    }

    /// Bronze's LocalQueue (in each bronze namespace).
    pub fn bronze_queue(&self) -> String {
        format!("tiergate-{}", self.bronze)
    }
}

/// The whole life of a release: its image imported, then `scenario`, then `helm uninstall` whatever happened (a
/// no-op once the scenario uninstalled it). The CRDs the chart brings that were absent, and the release's
/// namespace, are tracked in `cleanup` (Helm keeps CRDs).
pub async fn run_with_release(
    client: &Client,
    cleanup: &Cleanup,
    prerequisites: &Prerequisites,
    release: &Release,
    scenario: impl AsyncFnOnce(&Release) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let image_built = Instant::now();
    import_tiergate_image(prerequisites, release).await?;
    println!(
        "{}: image {IMAGE_REPOSITORY}:{} built from {} and imported in {:.1} s",
        release.label,
        release.tag,
        prerequisites.binary.display(),
        image_built.elapsed().as_secs_f64()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in ["tierpolicies.tiergate.io", "tiergateparameters.tiergate.io"] {
        if crds.get_opt(crd).await?.is_none() {
            cleanup.track(ApiResource::erase::<CustomResourceDefinition>(&()), None, crd);
        }
    }
    // Helm creates the release's namespace; it goes after the release.
    cleanup.track(ApiResource::erase::<Namespace>(&()), None, &release.namespace);
    let outcome = scenario(release).await;
    if let Err(error) = release.helm("uninstall", None).await {
        println!("cleanup: {error}");
    }
    outcome
}

/// The binary named in [`IMAGE_BINARY_ENV`] in the Dockerfile's layout, imported into the node's containerd.
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

/// What an install gave.
#[derive(Debug)]
pub struct Installed {
    /// The seconds Helm took.
    pub helm_seconds: f64,
    /// The Ready replicas.
    pub pods: Vec<String>,
    /// The one holding the Lease.
    pub leader: LeaseHolder,
}

/// `helm install` with [`Release::values`] and nothing more, then `policy` applied (tracked in `cleanup`): once
/// both replicas are Ready and one holds the Lease.
pub async fn install_release(
    client: &Client,
    cleanup: &Cleanup,
    release: &Release,
    policy: &TierPolicy,
) -> Result<Installed, HarnessError> {
    install_release_with(client, cleanup, release, policy, json!({})).await
}

/// [`install_release`] with `extra` values added to [`Release::values`] (e.g. a short `usageCheckpointInterval`).
pub async fn install_release_with(
    client: &Client,
    cleanup: &Cleanup,
    release: &Release,
    policy: &TierPolicy,
    extra: serde_json::Value,
) -> Result<Installed, HarnessError> {
    let helm_seconds = release.helm("install", Some(release.values(extra))).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &release.policy);
    apply_policy(client, policy).await?;
    let pods = ready_pods(client, release).await?;
    let leader = lease_holder(client, release, &pods).await?;
    Ok(Installed { helm_seconds, pods, leader })
}

/// The sample policy, renamed `prefix` ([`build_prefixed_policy`]), with bronze's GPU class on the real node (its
/// label and taint) and quota for [`BRONZE_GPUS`].
pub fn build_real_node_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
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

/// The release's pods once exactly [`REPLICAS`] of them are Ready, none is terminating and its Deployment has
/// settled: their names.
pub async fn ready_pods(client: &Client, release: &Release) -> Result<Vec<String>, HarnessError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    let replicas = i32::try_from(REPLICAS).ok();
    wait_for("the release's 2 replicas to be Ready (and no other pod)", BOUND, || {
        let (deployments, pods) = (deployments.clone(), pods.clone());
        async move {
            let deployment = deployments.get(&release.name).await.ok()?;
            let status = deployment.status?;
            let settled = status.ready_replicas == replicas
                && status.updated_replicas == replicas
                && status.replicas == replicas
                && status.observed_generation == deployment.metadata.generation;
            let listed = pods.list(&ListParams::default()).await.ok()?.items;
            let ready: Vec<String> = listed
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none() && is_pod_ready(pod))
                .map(ResourceExt::name_any)
                .collect();
            (settled && listed.len() == REPLICAS && ready.len() == REPLICAS).then_some(ready)
        }
    })
    .await
}

/// Whether `pod` has condition `Ready` True.
pub fn is_pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// How often the chart's container of `pod` has restarted.
pub fn container_restarts(pod: &Pod) -> i32 {
    let statuses = pod.status.as_ref().and_then(|status| status.container_statuses.as_ref());
    statuses.into_iter().flatten().filter(|status| status.name == CONTAINER).map(|status| status.restart_count).sum()
}

/// Who holds the release's Lease: the process's identity and its pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHolder {
    /// `holderIdentity` (`<pod name>_<suffix>`, new for each process).
    pub identity: String,
    /// The pod it runs in.
    pub pod: String,
}

/// The holder of the release's Lease once one of `pods` holds it.
pub async fn lease_holder(client: &Client, release: &Release, pods: &[String]) -> Result<LeaseHolder, HarnessError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    wait_for("a replica to hold the Lease", BOUND, || {
        let leases = leases.clone();
        async move {
            let identity = leases.get(&release.lease()).await.ok()?.spec?.holder_identity?;
            let pod = pods.iter().find(|pod| holder_is_pod(&identity, pod))?.clone();
            Some(LeaseHolder { identity, pod })
        }
    })
    .await
}

/// The pod of Lease holder identity `holder` (`<pod name>_<suffix>`).
pub fn holder_pod(holder: &str) -> Option<&str> {
    holder.rsplit_once('_').map(|(pod, _)| pod)
}

/// Whether Lease holder identity `holder` is pod `pod`'s.
pub fn holder_is_pod(holder: &str, pod: &str) -> bool {
    holder_pod(holder) == Some(pod)
}

/// The Lease's holders as a watch sees them, each with the time since the watch began (until stopped or dropped).
#[derive(Debug)]
pub struct LeaseHistory {
    task: tokio::task::JoinHandle<()>,
    events: Arc<Mutex<Vec<(Duration, String)>>>,
}

impl LeaseHistory {
    /// Starts watching the release's Lease: each change of holder (an empty one: released) is recorded.
    pub fn watch(client: &Client, release: &Release) -> Self {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", release.lease()));
        let events = Arc::new(Mutex::new(Vec::new()));
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

    /// Stops the watch: every holder seen, in order, with when.
    pub async fn stop(mut self) -> Vec<(Duration, String)> {
        self.task.abort();
        let _ = (&mut self.task).await;
        self.events.lock().map(|events| events.clone()).unwrap_or_default()
    }
}

impl Drop for LeaseHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A tenant's plain Job of one pod asking one GPU, running `script` in busybox: no queue, class or suspend.
pub fn build_gpu_job(namespace: &str, name: &str, script: &str) -> Result<Job, HarnessError> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {"spec": busybox_pod_spec(script, Some("1"))}},
    }))?)
}

/// Creates (with `params`: stored, or a dry run) a [`build_gpu_job`] sleeping a second, as `tenant`.
pub async fn create_gpu_job(
    tenant: &Client,
    namespace: &str,
    name: &str,
    params: &PostParams,
) -> Result<Job, kube::Error> {
    let job = build_gpu_job(namespace, name, "sleep 1").map_err(kube::Error::Service)?;
    Api::<Job>::namespaced(tenant.clone(), namespace).create(params, &job).await
}

/// Whether a stored Job is confined as tiergate confines a bronze GPU Job of [`build_real_node_policy`]: bronze's
/// queue label `queue`, and the class's node selector and a toleration of its taint in its pod template.
pub fn is_confined(job: &Job, queue: &str) -> bool {
    let spec = job.spec.as_ref().and_then(|spec| spec.template.spec.as_ref());
    let selected = spec
        .and_then(|spec| spec.node_selector.as_ref())
        .is_some_and(|selector| selector.get(REAL_NODE_LABEL).map(String::as_str) == Some("true"));
    let tolerated = spec.and_then(|spec| spec.tolerations.as_ref()).is_some_and(|tolerations| {
        tolerations.iter().any(|toleration| {
            let value = match toleration.operator.as_deref() {
                Some("Exists") => true,
                _ => toleration.value.as_deref() == Some("true"),
            };
            let effect = toleration.effect.as_deref().is_none_or(|effect| effect == "NoSchedule");
            toleration.key.as_deref() == Some(REAL_NODE_TAINT) && value && effect
        })
    });
    job.labels().get(QUEUE_NAME_LABEL).map(String::as_str) == Some(queue) && selected && tolerated
}

/// Waits until a bronze GPU Job `tenant` creates in `namespace` is stored confined to `queue` (the webhook,
/// through the release's Service): that Job (deleted again).
pub async fn wait_until_mutated(tenant: &Client, namespace: &str, queue: &str) -> Result<Job, HarnessError> {
    wait_for("a bronze GPU Job mutated through the Service", BOUND, || async {
        let created = create_gpu_job(tenant, namespace, &random_name("first"), &PostParams::default()).await.ok()?;
        let jobs: Api<Job> = Api::namespaced(tenant.clone(), namespace);
        let _ = jobs.delete(&created.name_any(), &DeleteParams::background()).await;
        is_confined(&created, queue).then_some(created)
    })
    .await
}

/// Waits until the in-server gate is in effect for bronze: a plain GPU Job `tenant` dry-run creates in
/// `namespace` (a bronze namespace labelled [`WEBHOOK_IGNORE_LABEL`], so the webhook never confines it) is refused by
/// the ValidatingAdmissionPolicy. Until then, a create the webhook fails to answer would be stored as written.
pub async fn wait_until_gated(tenant: &Client, namespace: &str) -> Result<(), HarnessError> {
    let probe = build_gpu_job(namespace, "gate-probe", "true")?;
    let what = "the in-server gate to refuse a plain GPU Job in a bronze namespace the webhook ignores";
    wait_until_refused(tenant, what, BOUND, &probe, "ValidatingAdmissionPolicy").await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(labels: serde_json::Value, placement: serde_json::Value) -> Job {
        let mut spec = busybox_pod_spec("true", Some("1"));
        if let (Some(spec), Some(placement)) = (spec.as_object_mut(), placement.as_object()) {
            spec.extend(placement.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "n", "labels": labels},
            "spec": {"template": {"spec": spec}},
        }))
        .unwrap()
    }

    fn confined_placement() -> serde_json::Value {
        json!({
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        })
    }

    #[test]
    fn a_job_with_the_queue_selector_and_toleration_is_confined() {
        assert!(is_confined(&job(json!({QUEUE_NAME_LABEL: "q"}), confined_placement()), "q"));
    }

    #[test]
    fn a_job_missing_the_queue_the_selector_or_the_toleration_is_not_confined() {
        assert!(!is_confined(&job(json!({}), confined_placement()), "q"));
        assert!(!is_confined(&job(json!({QUEUE_NAME_LABEL: "other"}), confined_placement()), "q"));
        let mut no_selector = confined_placement();
        no_selector["nodeSelector"] = json!({});
        assert!(!is_confined(&job(json!({QUEUE_NAME_LABEL: "q"}), no_selector), "q"));
        let mut wrong_toleration = confined_placement();
        wrong_toleration["tolerations"][0]["value"] = json!("false");
        assert!(!is_confined(&job(json!({QUEUE_NAME_LABEL: "q"}), wrong_toleration), "q"));
        let mut wrong_effect = confined_placement();
        wrong_effect["tolerations"][0]["effect"] = json!("NoExecute");
        assert!(!is_confined(&job(json!({QUEUE_NAME_LABEL: "q"}), wrong_effect), "q"));
    }

    #[test]
    fn a_lease_holder_is_the_pod_before_the_last_underscore() {
        assert!(holder_is_pod("tg-helm-1-abc_0000beef", "tg-helm-1-abc"));
        assert!(!holder_is_pod("tg-helm-1-abc_0000beef", "tg-helm-1"));
        assert!(!holder_is_pod("", "tg-helm-1-abc"));
    }
}
