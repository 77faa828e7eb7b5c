//! End-to-end red team of issue 33: a bronze tenant floods the API server with large GPU Jobs selecting a foreign
//! class while tiergate's webhook is up, registered as the chart registers it (`failurePolicy: Ignore`, 5 s) and
//! served with the chart's default budget (32Mi, 128 requests in flight). The webhook answers what it can afford,
//! refuses the rest with 429, the API server ignores those failures, and the in-server gate (the daemon's
//! ValidatingAdmissionPolicies) must refuse every GPU Job the webhook did not constrain: nothing stored is
//! unconstrained, CPU-only Jobs of the same size created after it are all stored, and the process (webhook, daemon
//! and the tenant's own client) stays under the chart's memory limit. Prints the outcomes, the flood's duration
//! and the memory; asserts no time. Skipped (and passing) without a reachable cluster, Kueue's v1beta2 CRDs or
//! `TIERGATE_E2E_WEBHOOK_HOST`. See docs/admission.md ("Over budget") and docs/performance.md ("Tenant flood
//! through the API server").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use serde_json::{Value, json};
use tiergate::plan::gate::gate_name;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::webhook::{
    FailurePolicy, InProcessWebhook, RUN_LABEL, WEBHOOK_NAME, WebhookEndpoint, register_webhook_with, run_webhook_test,
    serve_webhook_while,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, build_prefixed_policy, ensure, metric_sum, prefixed, random_name,
    start_tiergate, tenant_client, wait_for, wait_until_refused,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// The daemon's Kueue objects and gate after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(60);
/// The API server compiles a new policy, or picks up a webhook configuration, asynchronously (seconds).
const ENFORCEMENT: Duration = Duration::from_secs(120);
/// Concurrent GPU Jobs in the flood (the 150).
const GPU_JOBS: usize = 150;
/// Concurrent CPU-only Jobs of the same size in the same flood (counted), and again once it is over (all stored:
/// the webhook's refusals over budget block nothing that asks no GPU).
const CPU_JOBS: usize = 10;
/// Size of each Job's body, mostly a long `env` list (the issue's ~600 KiB).
const BODY_BYTES: usize = 600 * 1024;
/// Bound on one create (not an assertion: a create that takes longer is counted and reported as timed out).
const CREATE_BOUND: Duration = Duration::from_secs(180);
/// The chart's memory limit (`resources.limits.memory`), which the webhook's default budget is derived from.
const CHART_MEMORY_LIMIT_KIB: u64 = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bronze_tenants_flood_of_large_foreign_class_gpu_jobs_stores_none_unconstrained() {
    const TEST: &str = "a_bronze_tenants_flood_of_large_foreign_class_gpu_jobs_stores_none_unconstrained";
    if let Err(error) = run_webhook_test(TEST, run_scenario).await {
        panic!("{error}");
    }
}

struct Run {
    prefix: String,
    /// The flooded namespace: tiered bronze and selected by the webhook configuration.
    bronze: String,
    /// A bronze namespace the webhook does not select: where the gate's enforcement is probed.
    probe: String,
    tier: String,
    local_queue: String,
    l4: BTreeMap<String, String>,
    h100: BTreeMap<String, String>,
}

async fn run_scenario(client: &Client, cleanup: &Cleanup, endpoint: &WebhookEndpoint) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-flood");
    let policy = build_prefixed_policy(&prefix)?;
    let system = format!("{prefix}-system");
    let tier = prefixed(&prefix, "bronze");
    let run = Run {
        bronze: format!("{prefix}-bronze"),
        probe: format!("{prefix}-probe"),
        local_queue: policy.spec.tier(&tier).ok_or("the e2e policy has no bronze tier")?.local_queue(),
        l4: policy.spec.gpu_class(&prefixed(&prefix, "l4")).ok_or("no class l4")?.node_labels.clone(),
        h100: policy.spec.gpu_class(&prefixed(&prefix, "h100")).ok_or("no class h100")?.node_labels.clone(),
        tier,
        prefix: prefix.clone(),
    };
    let bronze_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.tier), (RUN_LABEL, &prefix)];
    let probe_labels: &[(&str, &str)] = &[(E2E_TIER_LABEL, &run.tier)];
    let tenants = [(run.bronze.as_str(), bronze_labels), (run.probe.as_str(), probe_labels)];
    let daemon = start_tiergate(client, cleanup, &policy, &system, &tenants).await?;
    let metrics = daemon.metrics.clone();
    serve_webhook_while(daemon, endpoint, cleanup, async |webhook: &InProcessWebhook| {
        let tenant = tenant_client(client, cleanup, &[&run.bronze, &run.probe]).await?;
        prepare(client, &tenant, cleanup, endpoint, webhook, &run).await?;
        let burst = flood(&tenant, &run, "flood", GPU_JOBS, CPU_JOBS).await?;
        let refused = metric_sum(&metrics, "tiergate_admission_refused_total");
        let cpu_after = flood(&tenant, &run, "after", 0, CPU_JOBS).await?;
        check_stored(client, &run, &burst, refused, &cpu_after).await
    })
    .await
}

/// Waits for the bronze LocalQueue and gate binding, registers the webhook as the chart does, and waits until the
/// webhook mutates (a dry-run Job in the flooded namespace comes back queued) and the API server enforces the gate
/// (a dry-run GPU Job in the probe namespace, which the webhook does not see, is refused with the gate's message).
async fn prepare(
    client: &Client,
    tenant: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    webhook: &InProcessWebhook,
    run: &Run,
) -> Result<(), HarnessError> {
    let binding = gate_name(&run.tier);
    wait_for("the bronze LocalQueue and gate binding", CONVERGE, || async {
        let bindings: Api<DynamicObject> =
            Api::all_with(client.clone(), &KueueKind::ValidatingAdmissionPolicyBinding.api_resource());
        bindings.get_opt(&binding).await.ok()??;
        let queues: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &run.bronze, &KueueKind::LocalQueue.api_resource());
        queues.get_opt(&run.local_queue).await.ok()?
    })
    .await?;
    register_webhook_with(client, cleanup, endpoint, &webhook.ca_pem, &run.prefix, FailurePolicy::Ignore).await?;
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    wait_for("the webhook to queue a dry-run bronze Job", ENFORCEMENT, || async {
        let job: Job = serde_json::from_value(job_body(run, "probe", &json!({}), true, 0)).ok()?;
        let created = Api::<Job>::namespaced(tenant.clone(), &run.bronze).create(&dry_run, &job).await.ok()?;
        created.metadata.labels?.get(QUEUE_NAME_LABEL).filter(|queue| **queue == run.local_queue).map(|_| ())
    })
    .await?;
    let tier_part = format!("binding '{}'", gate_name(&run.tier));
    let mut probe = job_body(run, "probe", &json!(run.h100), true, 0);
    probe["metadata"]["namespace"] = json!(run.probe);
    let probe: Job = serde_json::from_value(probe)?;
    wait_until_refused(tenant, "the API server to enforce the gate", ENFORCEMENT, &probe, &tier_part).await?;
    Ok(())
}

/// How the API server answered one create.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Stored,
    DeniedByWebhook,
    RefusedByGate,
    Status(u16),
    Transport,
    TimedOut,
}

struct Flood {
    /// Per outcome, how many GPU Jobs and how many CPU Jobs got it.
    outcomes: BTreeMap<Outcome, (usize, usize)>,
    /// One message per outcome other than stored (the first seen), for the report.
    samples: BTreeMap<Outcome, String>,
    took: Duration,
    /// `VmRSS` before the flood and the peak RSS during it (`VmHWM`, reset before it), KiB.
    memory_kib: (u64, u64),
}

/// Creates `gpu_jobs` GPU Jobs selecting h100 and `cpu_jobs` CPU-only Jobs, each ~[`BODY_BYTES`] and named
/// `<gpu|cpu>-<label>-<n>-job`, all at once as the tenant, and counts how each create was answered.
async fn flood(
    tenant: &Client,
    run: &Run,
    label: &str,
    gpu_jobs: usize,
    cpu_jobs: usize,
) -> Result<Flood, HarnessError> {
    let template = |gpu: bool| -> Result<String, HarnessError> {
        let selector = if gpu { json!(run.h100) } else { json!({}) };
        Ok(serde_json::to_string(&job_body(run, "NAME", &selector, gpu, BODY_BYTES))?)
    };
    let (gpu_body, cpu_body) = (template(true)?, template(false)?);
    println!("{label}: {gpu_jobs} GPU Jobs and {cpu_jobs} CPU Jobs of {} bytes each", gpu_body.len());
    let rss_before = proc_status_kib("VmRSS:").unwrap_or(0);
    reset_peak_rss();
    let path = format!("/apis/batch/v1/namespaces/{}/jobs", run.bronze);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..gpu_jobs + cpu_jobs {
        let gpu = index < gpu_jobs;
        let name = format!("{}-{label}-{index:03}-job", if gpu { "gpu" } else { "cpu" });
        let template = if gpu { gpu_body.clone() } else { cpu_body.clone() };
        let (tenant, path) = (tenant.clone(), path.clone());
        tasks.spawn(async move {
            let body = template.replacen("NAME-job", &name, 1).into_bytes();
            drop(template);
            let request = http::Request::post(path).header("content-type", "application/json").body(body);
            let outcome = match request {
                Ok(request) => tokio::time::timeout(CREATE_BOUND, tenant.request_text(request)).await,
                Err(error) => return (gpu, Outcome::Transport, error.to_string()),
            };
            match outcome {
                Err(_) => (gpu, Outcome::TimedOut, String::new()),
                Ok(Ok(_)) => (gpu, Outcome::Stored, String::new()),
                Ok(Err(error)) => {
                    let outcome = classify(&error);
                    (gpu, outcome, error.to_string())
                }
            }
        });
    }
    let mut outcomes: BTreeMap<Outcome, (usize, usize)> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (gpu, outcome, message) = joined?;
        let counts = outcomes.entry(outcome.clone()).or_default();
        if gpu {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        if outcome != Outcome::Stored {
            samples.entry(outcome).or_insert(message);
        }
    }
    let took = started.elapsed();
    let peak_rss = proc_status_kib("VmHWM:").unwrap_or(0);
    Ok(Flood { outcomes, samples, took, memory_kib: (rss_before, peak_rss) })
}

fn classify(error: &kube::Error) -> Outcome {
    match error {
        kube::Error::Api(status) if status.message.contains("ValidatingAdmissionPolicy") => Outcome::RefusedByGate,
        kube::Error::Api(status) if status.message.contains(WEBHOOK_NAME) && status.message.contains("denied") => {
            Outcome::DeniedByWebhook
        }
        kube::Error::Api(status) => Outcome::Status(status.code),
        _ => Outcome::Transport,
    }
}

/// Lists every Job stored in the flooded namespace: each GPU Job must be constrained (the tier's queue, the tier's
/// class and no other, suspended), and every CPU Job must have been stored.
async fn check_stored(
    client: &Client,
    run: &Run,
    flood: &Flood,
    refused: f64,
    cpu_after: &Flood,
) -> Result<(), HarnessError> {
    let api: Api<Job> = Api::namespaced(client.clone(), &run.bronze);
    let mut stored = Vec::new();
    let mut params = ListParams::default().limit(20);
    loop {
        let page = api.list(&params).await?;
        stored.extend(
            page.items.iter().map(|job| (job.metadata.name.clone().unwrap_or_default(), constrained(run, job))),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    let gpu_stored: Vec<&(String, Result<(), String>)> =
        stored.iter().filter(|(name, _)| name.starts_with("gpu-")).collect();
    let unconstrained: Vec<String> = gpu_stored
        .iter()
        .filter_map(|(name, verdict)| verdict.as_ref().err().map(|why| format!("{name}: {why}")))
        .collect();
    let cpu_stored = |label: &str| stored.iter().filter(|(name, _)| name.starts_with(&format!("cpu-{label}-"))).count();
    let (cpu_in_flood, cpu_after_flood) = (cpu_stored("flood"), cpu_stored("after"));
    let (rss_before, peak_rss) = flood.memory_kib;
    println!("flood took {:.1} s", flood.took.as_secs_f64());
    for (outcome, (gpu, cpu)) in &flood.outcomes {
        println!("  {outcome:?}: {gpu} GPU Jobs, {cpu} CPU Jobs");
    }
    println!("CPU Jobs after the flood: {:?}", cpu_after.outcomes);
    for (outcome, message) in &flood.samples {
        println!("  e.g. {outcome:?}: {}", message.chars().take(400).collect::<String>());
    }
    println!(
        "stored: {} GPU Jobs ({} unconstrained), {cpu_in_flood} CPU Jobs in the flood and {cpu_after_flood} of \
         {CPU_JOBS} after it; webhook 429/413 refusals during the flood: {refused}",
        gpu_stored.len(),
        unconstrained.len()
    );
    println!(
        "process memory (daemon, webhook and the tenant's client holding its {} MiB of bodies): VmRSS before {} MiB, \
         peak during the flood {} MiB; the chart's limit for the webhook alone {} MiB",
        (GPU_JOBS + CPU_JOBS) * BODY_BYTES / (1024 * 1024),
        rss_before / 1024,
        peak_rss / 1024,
        CHART_MEMORY_LIMIT_KIB / 1024
    );
    ensure(unconstrained.is_empty(), || format!("GPU Jobs stored unconstrained: {unconstrained:?}"))?;
    // The whole process, the tenant's client and its bodies included, bounds the webhook's share from above.
    ensure(peak_rss < CHART_MEMORY_LIMIT_KIB, || {
        format!("the process peaked at {} MiB during the flood, past the chart's limit", peak_rss / 1024)
    })?;
    ensure(cpu_after_flood == CPU_JOBS, || {
        format!(
            "only {cpu_after_flood} of {CPU_JOBS} CPU-only Jobs were stored after the flood ({:?})",
            cpu_after.samples
        )
    })
}

/// Why `job` is not constrained to the bronze tier, if it is not.
fn constrained(run: &Run, job: &Job) -> Result<(), String> {
    let queue = job.metadata.labels.as_ref().and_then(|labels| labels.get(QUEUE_NAME_LABEL));
    if queue != Some(&run.local_queue) {
        return Err(format!("queue label {queue:?}, not {}", run.local_queue));
    }
    let spec = job.spec.as_ref().ok_or("no spec")?;
    if spec.suspend != Some(true) {
        return Err(format!("suspend {:?}", spec.suspend));
    }
    let selector = spec.template.spec.as_ref().and_then(|pod| pod.node_selector.clone()).unwrap_or_default();
    for (key, value) in &run.l4 {
        if selector.get(key) != Some(value) {
            return Err(format!("nodeSelector {selector:?} does not select the tier's class"));
        }
    }
    if run.h100.iter().all(|(key, value)| selector.get(key) == Some(value)) {
        return Err(format!("nodeSelector {selector:?} selects h100"));
    }
    Ok(())
}

/// A bronze Job named `<name>-job` whose pods select `selector`, ask `nvidia.com/gpu: 1` when `gpu`, and carry
/// an `env` list that brings the body to about `bytes` (none when 0).
fn job_body(run: &Run, name: &str, selector: &Value, gpu: bool, bytes: usize) -> Value {
    let entry_value = "x".repeat(80);
    let entries = bytes / (entry_value.len() + 40);
    let env: Vec<Value> =
        (0..entries).map(|index| json!({"name": format!("FLOOD_VAR_{index:05}"), "value": entry_value})).collect();
    let resources = if gpu { json!({"limits": {"nvidia.com/gpu": "1"}}) } else { json!({"requests": {"cpu": "10m"}}) };
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{name}-job"), "namespace": run.bronze},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeSelector": selector,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env,
                "resources": resources}]}}}})
}

/// A `/proc/self/status` field in KiB (`VmHWM:`, `VmRSS:`), where the platform has one.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resets the process's `VmHWM` to its current RSS (`/proc/self/clear_refs`, Linux 4.0+), so that it reads the
/// peak of what follows; where that is not possible the peak includes what came before (an overestimate).
fn reset_peak_rss() {
    if let Err(error) = std::fs::write("/proc/self/clear_refs", "5") {
        println!("failed to reset VmHWM ({error}): the peak printed includes the setup");
    }
}
