//! End-to-end test of `tiergate run`'s reconciler against a real cluster with Kueue: objects appear, follow a
//! relabel and a policy edit, survive a restart with zero writes, and are pruned with the policy. Skipped (and
//! passing) when KUBECONFIG is unset/unreachable or Kueue's v1beta2 CRDs are absent. See docs/contributing.md.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::json;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::{KueueKind, build_ownership_selector};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, build_prefixed_policy, create_namespace,
    install_tierpolicy_crd, random_name, run_cluster_test, wait_for,
};

/// A guard against a hang while Kueue objects appear after a change, not a speed bar: on an idle machine they take
/// about a second (docs/performance.md), under full CPU load over ten; each wait prints how long it took.
const CONVERGE: Duration = Duration::from_secs(120);
/// The first reconcile's in-server gate: its policies are compiled by the API server on apply (seconds each).
const GATE_APPLIED: Duration = Duration::from_secs(180);
/// Garbage collection after the policy is deleted runs in the controller-manager, not in tiergate.
const GARBAGE_COLLECTION: Duration = Duration::from_secs(60);

struct Names {
    policy: String,
    prefix: String,
    lease: String,
}

impl Names {
    fn cluster_queue(&self, tier: &str) -> String {
        format!("tiergate-{}-{tier}", self.prefix)
    }
    fn local_queue(&self, tier: &str) -> String {
        format!("tiergate-{}-{tier}", self.prefix)
    }
}

fn api_for(client: &Client, kind: KueueKind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = kind.api_resource();
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn get_object(client: &Client, kind: KueueKind, namespace: Option<&str>, name: &str) -> Option<DynamicObject> {
    api_for(client, kind, namespace).get_opt(name).await.ok().flatten()
}

/// Every owned object of the policy, with what a write of tiergate's would change: its generation, labels,
/// annotations, owners and body without `status`. Not the resourceVersion: Kueue rewrites every LocalQueue's status
/// each `admissionFairSharing.usageSamplingInterval` (a second in the throwaway plane), which no tiergate write is.
async fn owned_versions(client: &Client, policy: &str) -> Result<BTreeMap<String, String>, HarnessError> {
    let mut versions = BTreeMap::new();
    let params = ListParams::default().labels(&build_ownership_selector(policy));
    for kind in KueueKind::ALL {
        let listed = match api_for(client, kind, None).list(&params).await {
            Ok(list) => list.items,
            // MutatingAdmissionPolicy before Kubernetes 1.36: not served, so nothing of the kind is owned.
            Err(kube::Error::Api(status)) if status.code == 404 && kind.is_optional() => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        for object in listed {
            let key = format!("{} {}/{}", kind.name(), object.namespace().unwrap_or_default(), object.name_any());
            let mut body = object.data.clone();
            if let Some(map) = body.as_object_mut() {
                map.remove("status");
            }
            let written = serde_json::json!({"generation": object.metadata.generation, "labels": object.metadata.labels,
                "annotations": object.metadata.annotations, "owners": object.metadata.owner_references, "body": body});
            versions.insert(key, written.to_string());
        }
    }
    Ok(versions)
}

async fn label_namespace(client: &Client, namespace: &str, tier: &str) -> Result<(), HarnessError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {E2E_TIER_LABEL: tier}}});
    api.patch(namespace, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_converges_follows_changes_restarts_without_writes_and_prunes_with_the_policy() {
    const TEST: &str = "daemon_converges_follows_changes_restarts_without_writes_and_prunes_with_the_policy";
    if let Err(error) = run_cluster_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

async fn run_scenario(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let names = Names { policy: prefix.clone(), prefix: prefix.clone(), lease: format!("{prefix}-lease") };
    install_tierpolicy_crd(client, cleanup).await?;
    let system = format!("{prefix}-system");
    create_namespace(client, cleanup, &system, &[]).await?;
    let (gold, bronze) = (format!("{prefix}-gold"), format!("{prefix}-bronze"));
    let mut policy = build_prefixed_policy(&names.prefix)?;
    let daemon = InProcessDaemon::start(client, &names.policy, &system, &names.lease);

    // 1. The sample policy and two tiered namespaces converge within 10 s.
    apply_policy(client, &policy).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &names.policy);
    create_namespace(client, cleanup, &gold, &[(E2E_TIER_LABEL, &format!("{prefix}-gold"))]).await?;
    create_namespace(client, cleanup, &bronze, &[(E2E_TIER_LABEL, &format!("{prefix}-bronze"))]).await?;
    wait_for("the gold and bronze LocalQueues", CONVERGE, || async {
        let gold_queue = get_object(client, KueueKind::LocalQueue, Some(&gold), &names.local_queue("gold")).await?;
        get_object(client, KueueKind::LocalQueue, Some(&bronze), &names.local_queue("bronze")).await?;
        (gold_queue.data["spec"]["clusterQueue"] == json!(names.cluster_queue("gold"))).then_some(())
    })
    .await?;
    for tier in ["gold", "silver", "bronze"] {
        get_object(client, KueueKind::ClusterQueue, None, &names.cluster_queue(tier))
            .await
            .ok_or_else(|| format!("ClusterQueue {} is missing", names.cluster_queue(tier)))?;
    }

    // The first reconcile ends with the in-server gate's policies, which the API server takes seconds each to
    // compile (docs/admission.md): the relabel below measures the steady state, so it waits for the end of that
    // reconcile (the policy Ready at generation 1).
    wait_for("the first reconcile, in-server gate included, to report Ready", GATE_APPLIED, || async {
        let api: Api<TierPolicy> = Api::all(client.clone());
        let status = api.get_opt(&names.policy).await.ok()??.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.observed_generation == Some(1))
            .then_some(())
    })
    .await?;

    // 2. A relabel moves the namespace: new queue created, the empty old one deleted.
    label_namespace(client, &gold, &format!("{prefix}-silver")).await?;
    wait_for("the relabeled namespace's LocalQueue to move to silver", CONVERGE, || async {
        get_object(client, KueueKind::LocalQueue, Some(&gold), &names.local_queue("silver")).await?;
        get_object(client, KueueKind::LocalQueue, Some(&gold), &names.local_queue("gold")).await.is_none().then_some(())
    })
    .await?;

    // 3. A policy edit converges: bronze's GPU quota drops to 8.
    let bronze_tier =
        policy.spec.tiers.iter_mut().find(|tier| tier.name.ends_with("-bronze")).ok_or("no bronze tier")?;
    if let Some(quota) = bronze_tier.quotas.get_mut("nvidia.com/gpu") {
        quota.nominal = k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".to_owned());
    }
    apply_policy(client, &policy).await?;
    wait_for("the bronze ClusterQueue to carry the edited quota", CONVERGE, || async {
        let queue = get_object(client, KueueKind::ClusterQueue, None, &names.cluster_queue("bronze")).await?;
        let text = queue.data["spec"]["resourceGroups"].to_string();
        text.contains(r#""name":"nvidia.com/gpu","nominalQuota":"8""#).then_some(())
    })
    .await?;

    // 4. A restart over an unchanged cluster makes zero writes.
    wait_for("the policy to report Ready", CONVERGE, || async {
        let api: Api<TierPolicy> = Api::all(client.clone());
        let status = api.get_opt(&names.policy).await.ok()??.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.observed_generation == Some(2))
            .then_some(())
    })
    .await?;
    let before = owned_versions(client, &names.policy).await?;
    daemon.stop().await;
    let restarted = InProcessDaemon::start(client, &names.policy, &system, &names.lease);
    wait_for("the restarted daemon to lead, sync and reconcile", Duration::from_secs(30), || async {
        let reconciled = restarted.metric_sum("tiergate_owned_objects") > 0.0;
        (restarted.is_leading_and_synced() && reconciled).then_some(())
    })
    .await?;
    let writes = restarted.writes_besides_checkpoints();
    let after = owned_versions(client, &names.policy).await?;
    if writes != 0.0 || before != after {
        return Err(format!(
            "restart made {writes} writes besides usage checkpoints; owned objects before {before:?} after {after:?}"
        )
        .into());
    }

    // 5. Deleting the policy prunes everything it owned (owner references -> garbage collector).
    Api::<TierPolicy>::all(client.clone()).delete(&names.policy, &DeleteParams::background()).await?;
    wait_for("every owned Kueue object to be removed", GARBAGE_COLLECTION, || async {
        owned_versions(client, &names.policy).await.ok()?.is_empty().then_some(())
    })
    .await?;
    restarted.stop().await;
    Ok(())
}
