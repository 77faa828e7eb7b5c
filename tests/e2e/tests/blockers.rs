//! End-to-end tests of issue 32 against a real cluster: `tiergate run` never idles in silence. A missing Lease
//! namespace and a served policy that does not exist (while another does) are each reported as a blocker, with
//! the fix, and a Blocked condition reaches the served policy's status. A policy rendering Karpenter NodePools
//! where Karpenter is not installed gets everything else applied and the `karpenter_missing` blocker (issue 51). Skipped (and passing) without a cluster
//! or Kueue, like every e2e test. See docs/troubleshooting.md.

use std::time::Duration;

use kube::Client;
use kube::api::Api;
use kube::core::ApiResource;
use tiergate::blockers::BlockedReason;
use tiergate::policy::TierPolicy;
use tiergate_e2e::{
    Cleanup, HarnessError, InProcessDaemon, apply_policy, build_prefixed_policy, create_namespace, ensure,
    install_tierpolicy_crd, random_name, run_cluster_test, wait_for,
};

/// The bar: a person learns what is wrong within one minute; the monitor looks every 2 s.
const REPORTED: Duration = Duration::from_secs(30);

/// One test function running both scenarios in turn: each installs the TierPolicy CRD and its cleanup removes it
/// again, so two scenarios side by side in one process would pull the CRD from under each other's daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_lease_namespace_and_a_missing_served_policy_are_each_reported_with_their_fix() {
    const LEASE: &str = "a_missing_lease_namespace_is_reported_with_its_fix_and_clears_once_the_namespace_exists";
    if let Err(error) = run_cluster_test(LEASE, missing_lease_namespace).await {
        panic!("{LEASE}: {error}");
    }
    const SERVED: &str = "a_served_policy_that_does_not_exist_names_the_one_that_does_and_gets_no_write_on_it";
    if let Err(error) = run_cluster_test(SERVED, missing_served_policy).await {
        panic!("{SERVED}: {error}");
    }
    const KARPENTER: &str = "nodepools_without_karpenter_are_left_out_and_reported_while_the_rest_is_applied";
    if let Err(error) = run_cluster_test(KARPENTER, nodepools_without_karpenter).await {
        panic!("{KARPENTER}: {error}");
    }
}

async fn missing_lease_namespace(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-lease");
    install_tierpolicy_crd(client, cleanup).await?;
    let system = format!("{prefix}-system");
    let daemon = InProcessDaemon::start(client, &prefix, &system, &format!("{prefix}-lease"));
    let blockers = daemon.blockers();
    let detail = wait_for("the missing Lease namespace to be reported", REPORTED, || async {
        blockers
            .active()
            .into_iter()
            .find(|blocker| blocker.reason == BlockedReason::LeaseNamespaceMissing)
            .map(|blocker| blocker.detail)
    })
    .await?;
    ensure(detail.contains(&format!("kubectl create namespace {system}")), || format!("no fix in {detail:?}"))?;
    ensure(daemon.metric_sum("tiergate_blocked") >= 1.0, || "tiergate_blocked is 0".to_owned())?;
    create_namespace(client, cleanup, &system, &[]).await?;
    wait_for("the Lease blocker to clear once the namespace exists", REPORTED, || async {
        (!blockers.is_active(BlockedReason::LeaseNamespaceMissing)).then_some(())
    })
    .await?;
    daemon.stop().await;
    Ok(())
}

async fn missing_served_policy(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-served");
    install_tierpolicy_crd(client, cleanup).await?;
    let system = format!("{prefix}-system");
    create_namespace(client, cleanup, &system, &[]).await?;
    let existing = build_prefixed_policy(&prefix)?;
    apply_policy(client, &existing).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &prefix);
    let served = format!("{prefix}-absent");
    let daemon = InProcessDaemon::start(client, &served, &system, &format!("{prefix}-lease"));
    let blockers = daemon.blockers();
    let detail = wait_for("the missing served policy to be reported", REPORTED, || async {
        blockers
            .active()
            .into_iter()
            .find(|blocker| blocker.reason == BlockedReason::PolicyNotFound)
            .map(|blocker| blocker.detail)
    })
    .await?;
    ensure(detail.contains(&format!("--policy-name {prefix}")), || {
        format!("the existing policy is not named: {detail}")
    })?;
    // The instance leads (its Lease namespace exists) yet never writes the policy it does not serve.
    wait_for("the daemon to lead", REPORTED, || async { daemon.is_leading_and_synced().then_some(()) }).await?;
    let api: Api<TierPolicy> = Api::all(client.clone());
    let status = api.get(&prefix).await?.status;
    ensure(status.is_none(), || format!("a policy this instance does not serve got a status: {status:?}"))?;
    daemon.stop().await;
    Ok(())
}

async fn nodepools_without_karpenter(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    if tiergate_e2e::karpenter::already_served(client).await {
        tiergate_e2e::skip(
            "nodepools_without_karpenter_are_left_out_and_reported_while_the_rest_is_applied",
            "this cluster serves karpenter.sh NodePools",
        );
        return Ok(());
    }
    let prefix = random_name("e2e-nokarp");
    let mut policy = build_prefixed_policy(&prefix)?;
    let template =
        serde_json::json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}});
    policy.spec.gpu_classes[0].karpenter = Some(serde_json::from_value(template)?);
    let pool = tiergate::plan::names::node_pool_name(&policy.spec.gpu_classes[0].name);
    let system = format!("{prefix}-system");
    let daemon = tiergate_e2e::start_tiergate(client, cleanup, &policy, &system, &[]).await?;
    let blockers = daemon.blockers();
    let detail = wait_for("the karpenter_missing blocker", REPORTED, || async {
        blockers
            .active()
            .into_iter()
            .find(|blocker| blocker.reason == BlockedReason::KarpenterMissing)
            .map(|blocker| blocker.detail)
    })
    .await?;
    ensure(detail.contains(&pool), || format!("the blocker does not name NodePool {pool}: {detail}"))?;
    let queues = Api::<kube::core::DynamicObject>::all_with(
        client.clone(),
        &tiergate::reconcile::kinds::KueueKind::ClusterQueue.api_resource(),
    );
    let tier = &policy.spec.tiers[0].name;
    let queue = tiergate::plan::names::cluster_queue_name(tier);
    wait_for("the tier's ClusterQueue to be applied beside the left-out NodePool", REPORTED, || async {
        queues.get_opt(&queue).await.ok()?.map(|_| ())
    })
    .await?;
    println!("blockers: with no Karpenter, tiergate applied {queue} and reported: {detail}");
    daemon.stop().await;
    Ok(())
}
