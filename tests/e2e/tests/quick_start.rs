//! End-to-end: README's quick start, step by step, on the plane's real node: the chart installed by the real Helm
//! library with its defaults (2 replicas, self-managed certificates), the sample policy applied, a namespace labelled
//! bronze, the sample GPU Job submitted as written, queued to bronze's LocalQueue on the l4 class and admitted by
//! Kueue on bronze's quota, `tiergate status` answering from the live cluster, and the uninstall. The names README
//! uses are kept but for the namespace and the policy, which are random so that the suite runs beside others.
//! Skipped (and passing) where helm_install is: no real node, no tiergate binary, no test venv.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use tiergate::policy::TierPolicy;
use tiergate_e2e::release::{Release, install_release, prerequisites_or_skip, run_with_release};
use tiergate_e2e::{
    Cleanup, HarnessError, create_namespace, ensure, is_admitted, job_workload, load_sample_workload, random_name,
    repository_file, run_cluster_test, wait_for,
};

const TEST: &str = "readmes_quick_start_queues_a_plain_gpu_job_in_its_tier";
/// README's tier label and tier.
const TIER_LABEL: &str = "tenant.kubenexus.io/tier";
const TIER: &str = "bronze";
/// The class README shows on the Job's pods.
const CLASS_LABEL: &str = "gpu.nvidia.com/class";
/// Kueue's queue label.
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The daemon makes the LocalQueue, and Kueue admits the Job, within seconds; generous for a busy machine.
const STEP: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readmes_quick_start_queues_a_plain_gpu_job_in_its_tier() {
    let Some(prerequisites) = prerequisites_or_skip(TEST) else { return };
    let outcome = run_cluster_test(TEST, async |client, cleanup| {
        let release = Release::new(&prerequisites, "quick-start", "tg-quick", "quick-start");
        run_with_release(client, cleanup, &prerequisites, &release, async |release| {
            quick_start(client, cleanup, release, &prerequisites.binary).await
        })
        .await
    })
    .await;
    if let Err(error) = outcome {
        panic!("{error}");
    }
}

async fn quick_start(
    client: &Client,
    cleanup: &Cleanup,
    release: &Release,
    binary: &std::path::Path,
) -> Result<(), HarnessError> {
    // 3 and 4: install tiergate, apply the sample policy (under the release's policy name).
    let policy = sample_policy(&release.policy)?;
    let installed = install_release(client, cleanup, release, &policy).await?;
    println!("quick_start: installed in {:.1} s (Helm), replicas {:?}", installed.helm_seconds, installed.pods);
    let namespace = random_name("ml-team-dev");
    create_namespace(client, cleanup, &namespace, &[(TIER_LABEL, TIER)]).await?;
    let queue = format!("tiergate-{TIER}");
    let queues = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &namespace,
        &tiergate::reconcile::kinds::KueueKind::LocalQueue.api_resource(),
    );
    wait_for(&format!("LocalQueue {queue} in {namespace}"), STEP, || async { queues.get_opt(&queue).await.ok()? })
        .await?;
    // 5: the plain GPU Job, as written.
    let job: Job = load_sample_workload("job-bronze.yaml", &namespace)?;
    let name = job.name_any();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let stored = jobs.create(&PostParams::default(), &job).await?;
    let label = stored.labels().get(QUEUE_LABEL).cloned();
    let selector = stored.spec.as_ref().and_then(|spec| spec.template.spec.as_ref()?.node_selector.clone());
    let class = selector.as_ref().and_then(|selector| selector.get(CLASS_LABEL).cloned());
    ensure(label.as_deref() == Some(queue.as_str()) && class.as_deref() == Some("l4"), || {
        format!("Job {name} was stored with queue label {label:?} and node selector {selector:?}, not {queue} on l4")
    })?;
    let workload = wait_for(&format!("Job {name}'s Workload admitted by Kueue"), STEP, || async {
        job_workload(client, &namespace, &name).await.filter(is_admitted)
    })
    .await?;
    println!(
        "quick_start: Job {name} queued to {queue} on l4 and admitted (Workload {})",
        workload["metadata"]["name"].as_str().unwrap_or_default()
    );
    // `kubectl tiergate status`: the binary as the plugin, against the live cluster.
    let output = tokio::process::Command::new(binary)
        .args(["status", "--policy-name", &release.policy, "--tier", TIER])
        .output()
        .await?;
    let text = String::from_utf8_lossy(&output.stdout);
    ensure(output.status.success() && text.contains(TIER), || {
        format!("tiergate status failed or did not show {TIER}: {text}{}", String::from_utf8_lossy(&output.stderr))
    })?;
    println!("quick_start: tiergate status --tier {TIER}:\n{text}");
    // Uninstall, as README does: the Job, the policy (the daemon prunes its objects), then the release.
    jobs.delete(&name, &Default::default()).await?;
    Api::<TierPolicy>::all(client.clone()).delete(&release.policy, &Default::default()).await?;
    let cluster_queues = Api::<DynamicObject>::all_with(
        client.clone(),
        &tiergate::reconcile::kinds::KueueKind::ClusterQueue.api_resource(),
    );
    wait_for(&format!("ClusterQueue {queue} pruned with the policy"), STEP, || async {
        cluster_queues.get_opt(&queue).await.ok()?.is_none().then_some(())
    })
    .await?;
    release.helm("uninstall", None).await?;
    Ok(())
}

/// samples/kubenexus/policy.yaml, as README applies it, named `name`.
fn sample_policy(name: &str) -> Result<TierPolicy, HarnessError> {
    let path = repository_file("samples/kubenexus/policy.yaml")?;
    let mut policy = tiergate::inputs::parse_policy(&std::fs::read_to_string(&path)?, &path.display().to_string())?;
    policy.metadata.name = Some(name.to_owned());
    Ok(policy)
}
