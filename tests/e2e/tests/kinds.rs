//! End-to-end test of issue 16 against a real API server with Kueue: the CRDs of RayJob, PyTorchJob and
//! LeaderWorkerSet are installed when absent (from `../shared/workload-crds/`, removed again afterwards), the real
//! webhook runs in this process on the daemon's live snapshot, and one sample of each kind is created in a bronze
//! namespace: each must carry the bronze LocalQueue after admission, and where Kueue's configuration enables that
//! integration, Kueue's Workload for it must sit in that LocalQueue. Skipped (and passing) without a reachable
//! cluster, without Kueue's v1beta2 CRDs or without `TIERGATE_E2E_WEBHOOK_HOST`. See docs/contributing.md
//! ("End-to-end").
//!
//! One test function: the webhook port and the cluster-scoped objects are per process.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, RuleWithOperations};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use tiergate_e2e::webhook::{
    InProcessWebhook, RUN_LABEL, WebhookEndpoint, build_webhook_configuration, run_webhook_test, serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HARNESS_MANAGER, HarnessError, build_prefixed_policy, prefixed, random_name,
    start_tiergate, wait_for, wait_for_crd_established, wait_for_local_queue,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

const CONVERGE: Duration = Duration::from_secs(30);
/// A guard against a hang, not a timing assertion: besides the webhook configuration, the in-server gate's
/// mutating half needs the API server's type converter to have fetched a CRD installed moments before (it polls
/// OpenAPI every 5 s and answers 503 for the kind until then), which takes long on a loaded machine.
const WEBHOOK_PROPAGATION: Duration = Duration::from_secs(240);
/// Kueue creates a Workload for a queued object within seconds once its integration is enabled.
const WORKLOAD_CREATED: Duration = Duration::from_secs(60);

/// One kind under test: its CRD file, resource and Kueue framework name, and the sample created.
struct KindCase {
    crd_file: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// The name in Kueue's `integrations.frameworks`.
    framework: &'static str,
    sample: &'static str,
    /// Fields the kind's own controller webhook defaults, which the plane does not run, as (field under `spec`,
    /// value) set where the sample leaves them out. Kueue's LeaderWorkerSet webhook re-serialises the object from
    /// its Go types, writing `spec.rolloutStrategy.type: ""`; in a cluster LeaderWorkerSet's webhook (called after
    /// Kueue's) defaults it to `RollingUpdate`, without it the API server refuses the empty value.
    own_controller_defaults: &'static [(&'static str, &'static str, &'static str)],
}

const CASES: &[KindCase] = &[
    KindCase {
        crd_file: "ray.io_rayjobs.yaml",
        group: "ray.io",
        version: "v1",
        kind: "RayJob",
        plural: "rayjobs",
        framework: "ray.io/rayjob",
        sample: "rayjob-bronze.yaml",
        own_controller_defaults: &[],
    },
    KindCase {
        crd_file: "kubeflow.org_pytorchjobs.yaml",
        group: "kubeflow.org",
        version: "v1",
        kind: "PyTorchJob",
        plural: "pytorchjobs",
        framework: "kubeflow.org/pytorchjob",
        sample: "pytorchjob-bronze.yaml",
        own_controller_defaults: &[],
    },
    KindCase {
        crd_file: "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        group: "leaderworkerset.x-k8s.io",
        version: "v1",
        kind: "LeaderWorkerSet",
        plural: "leaderworkersets",
        framework: "leaderworkerset.x-k8s.io/leaderworkerset",
        sample: "lws-bronze.yaml",
        own_controller_defaults: &[("rolloutStrategy", "type", "RollingUpdate")],
    },
];

impl KindCase {
    fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(self.group, self.version, self.kind), self.plural)
    }

    fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayjob_pytorchjob_and_leaderworkerset_in_a_bronze_namespace_land_in_the_bronze_queue() {
    const TEST: &str = "rayjob_pytorchjob_and_leaderworkerset_in_a_bronze_namespace_land_in_the_bronze_queue";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    for case in CASES {
        install_crd_if_absent(client, cleanup, case).await?;
    }
    let prefix = random_name("e2e-kinds");
    let policy = build_prefixed_policy(&prefix)?;
    let bronze_tier = policy.spec.tier(&prefixed(&prefix, "bronze")).ok_or("the e2e policy has no bronze tier")?;
    let local_queue = bronze_tier.local_queue();
    let (system, bronze) = (format!("{prefix}-system"), format!("{prefix}-bronze"));
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &bronze_tier.name), (RUN_LABEL, &prefix)];
    let daemon = start_tiergate(client, cleanup, &policy, &system, &[(&bronze, bronze_labels)]).await?;
    wait_for_local_queue(client, &bronze, &local_queue, CONVERGE).await?;
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        check_kinds(client, cleanup, endpoint, webhook, &prefix, &bronze, &local_queue).await
    })
    .await
}

/// Server-side applies the kind's CRD from `shared/workload-crds/` when the cluster does not have it, tracked for
/// removal, and waits until it is established.
async fn install_crd_if_absent(client: &Client, cleanup: &Cleanup, case: &KindCase) -> Result<(), HarnessError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = case.crd_name();
    if crds.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let path = workload_crds()?.join(case.crd_file);
    let text = std::fs::read_to_string(&path).map_err(|error| format!("failed to read {}: {error}", path.display()))?;
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&text).map_err(|error| format!("failed to parse {}: {error}", path.display()))?;
    crds.patch(&name, &PatchParams::apply(HARNESS_MANAGER).force(), &Patch::Apply(&crd)).await?;
    cleanup.track(ApiResource::erase::<CustomResourceDefinition>(&()), None, &name);
    wait_for_crd_established(client, &name, CONVERGE).await
}

/// `shared/workload-crds`, the repository's sibling (also from a worktree one level deeper).
fn workload_crds() -> Result<PathBuf, HarnessError> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = manifest.ancestors().map(|dir| dir.join("shared/workload-crds")).find(|dir| dir.is_dir());
    Ok(found.ok_or_else(|| format!("no shared/workload-crds above {}", manifest.display()))?)
}

/// The harness's webhook configuration, with the rules of the kinds under test instead of the built-in kinds.
fn kinds_configuration(
    name: &str,
    endpoint: &WebhookEndpoint,
    ca_pem: &str,
    run: &str,
) -> MutatingWebhookConfiguration {
    let mut configuration = build_webhook_configuration(name, endpoint, ca_pem, run);
    let rules = CASES
        .iter()
        .map(|case| RuleWithOperations {
            api_groups: Some(vec![case.group.to_owned()]),
            api_versions: Some(vec![case.version.to_owned()]),
            operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
            resources: Some(vec![case.plural.to_owned()]),
            scope: Some("Namespaced".to_owned()),
        })
        .collect();
    if let Some(webhook) = configuration.webhooks.iter_mut().flatten().next() {
        webhook.rules = Some(rules);
        webhook.match_policy = Some("Equivalent".to_owned());
    }
    configuration
}

fn sample(case: &KindCase, namespace: &str) -> Result<DynamicObject, HarnessError> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples/workloads").join(case.sample);
    let text = std::fs::read_to_string(&path).map_err(|error| format!("failed to read {}: {error}", path.display()))?;
    let mut value: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|error| format!("failed to parse {}: {error}", path.display()))?;
    value["metadata"]["namespace"] = namespace.into();
    for (field, key, default) in case.own_controller_defaults {
        let spec = value.get_mut("spec").and_then(serde_json::Value::as_object_mut).ok_or("the sample has no spec")?;
        let parent = spec.entry(*field).or_insert_with(|| serde_json::json!({}));
        if let Some(parent) = parent.as_object_mut() {
            parent.entry(*key).or_insert_with(|| (*default).into());
        }
    }
    Ok(serde_json::from_value(value)?)
}

async fn check_kinds(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &str,
    bronze: &str,
    local_queue: &str,
) -> Result<(), HarnessError> {
    let name = random_name("tiergate-e2e-kinds");
    let configuration = kinds_configuration(&name, endpoint, &webhook.ca_pem, run);
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &configuration).await?;
    cleanup.track(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &name);
    let frameworks = kueue_frameworks(client).await;
    for case in CASES {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), bronze, &case.resource());
        let object = sample(case, bronze)?;
        let what = format!("{} {bronze}/{}", case.kind, object.metadata.name.as_deref().unwrap_or_default());
        // The first create waits for the configuration to reach the API server (a dry run until it is mutated).
        let dry_run = PostParams { dry_run: true, ..PostParams::default() };
        let last_error = std::sync::Mutex::new(String::new());
        let propagated =
            wait_for(&format!("the API server to send {what} to the webhook"), WEBHOOK_PROPAGATION, || async {
                let stored = match api.create(&dry_run, &object).await {
                    Ok(stored) => stored,
                    Err(error) => {
                        *last_error.lock().ok()? = error.to_string();
                        return None;
                    }
                };
                stored.metadata.labels.as_ref()?.contains_key(QUEUE_NAME_LABEL).then_some(())
            })
            .await;
        if let Err(error) = propagated {
            let last = last_error.lock().map(|last| last.clone()).unwrap_or_default();
            return Err(format!("{error} (the last dry run answered: {last})").into());
        }
        let stored = api.create(&PostParams::default(), &object).await?;
        let queue = stored.metadata.labels.as_ref().and_then(|labels| labels.get(QUEUE_NAME_LABEL)).cloned();
        if queue.as_deref() != Some(local_queue) {
            return Err(format!("{what} has queue {queue:?} after admission, expected {local_queue}").into());
        }
        match &frameworks {
            Some(enabled) if enabled.iter().any(|framework| framework == case.framework) => {
                check_workload_in_queue(client, bronze, &stored, &what, local_queue).await?;
            }
            Some(_) => {
                println!("{what}: Kueue's configuration does not enable {}; Workload not checked", case.framework)
            }
            None => println!("{what}: Kueue's configuration is not readable; Workload not checked"),
        }
    }
    Ok(())
}

/// Kueue's `integrations.frameworks` from its manager configuration (`kueue-system/kueue-manager-config`).
async fn kueue_frameworks(client: &Client) -> Option<Vec<String>> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kueue-system");
    let map = maps.get_opt("kueue-manager-config").await.ok()??;
    let text = map.data?.get("controller_manager_config.yaml")?.clone();
    let config: serde_json::Value = serde_saphyr::from_str(&text).ok()?;
    let frameworks = config.pointer("/integrations/frameworks")?.as_array()?;
    Some(frameworks.iter().filter_map(|framework| framework.as_str().map(str::to_owned)).collect())
}

/// A Kueue Workload owned by `owner` appears with `spec.queueName` = the tier's LocalQueue.
async fn check_workload_in_queue(
    client: &Client,
    namespace: &str,
    owner: &DynamicObject,
    what: &str,
    local_queue: &str,
) -> Result<(), HarnessError> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"), "workloads");
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    let queue = wait_for(&format!("Kueue's Workload for {what}"), WORKLOAD_CREATED, || async {
        let listed = workloads.list(&Default::default()).await.ok()?.items;
        listed.into_iter().find_map(|workload| {
            let owned = workload.metadata.owner_references.as_deref()?.iter().any(|reference| reference.uid == uid);
            owned.then(|| workload.data.pointer("/spec/queueName").and_then(|queue| queue.as_str()).map(str::to_owned))
        })
    })
    .await?;
    match queue.as_deref() {
        Some(queue) if queue == local_queue => Ok(()),
        other => Err(format!("Kueue's Workload for {what} is in queue {other:?}, expected {local_queue}").into()),
    }
}
