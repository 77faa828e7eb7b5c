//! End-to-end test of `kubectl tiergate why` and `status` against a real cluster with Kueue: a tiered Job is
//! admitted by Kueue, `why` names its queue and Kueue's admission, `status` shows the tier's usage. The answers
//! are built by the same library calls the commands make, over a client built from KUBECONFIG the way the plugin
//! builds it. Skipped (and passing) when KUBECONFIG is unset/unreachable or Kueue's v1beta2 CRDs are absent.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::json;
use tiergate::answers::kueue::{ADMITTED, KueueWorkload};
use tiergate::answers::{Hold, StatusInputs, build_status_answer};
use tiergate::cmd::build_live_answer;
use tiergate::live::fetch::workload_resource;
use tiergate::live::{KubectlConnection, connect, fetch_status_inputs};
use tiergate::policy::TierPolicy;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, build_prefixed_policy, create_namespace,
    install_tierpolicy_crd, random_name, run_cluster_test, wait_for,
};

/// How long the daemon may take to create the tier's queues.
const CONVERGE: Duration = Duration::from_secs(10);
/// How long Kueue may take to create and admit the Workload.
const ADMISSION: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_names_the_queue_and_kueues_admission_and_status_shows_the_tiers_usage() {
    const TEST: &str = "why_names_the_queue_and_kueues_admission_and_status_shows_the_tiers_usage";
    if let Err(error) = run_cluster_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

/// A Job Kueue can admit into the bronze tier without a GPU node: CPU and memory only, tolerating the flavor's
/// taint, in the tier's LocalQueue, suspended (as tiergate's webhook would create it).
fn build_job(namespace: &str, queue: &str) -> Result<Job, HarnessError> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": true,
            "template": {"spec": {
                "restartPolicy": "Never",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
            }}
        }
    }))?)
}

async fn run_scenario(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    install_tierpolicy_crd(client, cleanup).await?;
    let system = format!("{prefix}-system");
    create_namespace(client, cleanup, &system, &[]).await?;
    let policy = build_prefixed_policy(&prefix)?;
    let daemon = InProcessDaemon::start(client, &prefix, &system, &format!("{prefix}-lease"));
    apply_policy(client, &policy).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &prefix);
    let tier = format!("{prefix}-bronze");
    let namespace = format!("{prefix}-team");
    create_namespace(client, cleanup, &namespace, &[(E2E_TIER_LABEL, &tier)]).await?;
    let queue = policy.spec.tier(&tier).ok_or("no bronze tier")?.local_queue();
    let cluster_queue = tiergate::plan::names::cluster_queue_name(&tier);
    wait_for("the bronze LocalQueue", CONVERGE, || async {
        let queues: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &namespace,
            &tiergate::reconcile::kinds::KueueKind::LocalQueue.api_resource(),
        );
        queues.get_opt(&queue).await.ok()?.map(|_| ())
    })
    .await?;

    // A tiered Job, admitted by Kueue.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    jobs.create(&PostParams::default(), &build_job(&namespace, &queue)?).await?;
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &workload_resource());
    wait_for("Kueue to admit the Job's Workload", ADMISSION, || async {
        let list = workloads.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|item| {
            let workload: KueueWorkload = serde_json::from_value(serde_json::to_value(item).ok()?).ok()?;
            workload.is_true(ADMITTED).then_some(())
        })
    })
    .await?;

    // `why job/train -n NS`, through a client built from KUBECONFIG as the plugin builds it.
    let (live, _) = connect(&KubectlConnection::default()).await?;
    let answer = build_live_answer(&live, "job/train", &namespace, &prefix).await?;
    let table = answer.to_table();
    if answer.tier.tier.as_deref() != Some(tier.as_str()) || !answer.tier.local_queue_exists {
        return Err(format!("why did not find tier {tier} and its LocalQueue:\n{table}").into());
    }
    let workload = answer.workload.as_ref().ok_or_else(|| format!("why found no Workload:\n{table}"))?;
    if workload.queue_name.as_deref() != Some(queue.as_str()) {
        return Err(format!("why does not name the queue {queue}:\n{table}").into());
    }
    if !matches!(&answer.hold, Hold::Admitted { cluster_queue: admitted, .. } if *admitted == cluster_queue) {
        return Err(format!("why does not report Kueue's admission in {cluster_queue}:\n{table}").into());
    }
    if !answer.summary.starts_with(&format!("Admitted by Kueue in ClusterQueue {cluster_queue} (tier {tier})")) {
        return Err(format!("unexpected sentence: {}", answer.summary).into());
    }

    // `status --tier bronze` shows the Job's usage in the tier's ClusterQueue.
    let usage = wait_for("the bronze ClusterQueue to report the Job's usage", CONVERGE, || async {
        let fetched = fetch_status_inputs(&live, Some(&prefix), false).await.ok()?;
        let inputs = StatusInputs {
            policy: &fetched.policy,
            other_policies: &fetched.other_policies,
            cluster_queues: &fetched.cluster_queues,
            cohorts: &fetched.cohorts,
            pools: &[],
            local_queues: &[],
            tier: Some(&tier),
        };
        let answer = build_status_answer(&inputs).ok()?;
        let bronze = answer.tiers.first()?;
        let cpu = bronze.flavors.iter().find(|flavor| flavor.resource == "cpu")?;
        (bronze.admitted_workloads >= 1 && cpu.used != "0").then(|| answer.to_table())
    })
    .await?;
    if !usage.contains(&cluster_queue) {
        return Err(format!("status does not name {cluster_queue}:\n{usage}").into());
    }
    println!("{table}\n{usage}");
    jobs.delete("train", &kube::api::DeleteParams::background()).await?;
    daemon.stop().await;
    Ok(())
}
