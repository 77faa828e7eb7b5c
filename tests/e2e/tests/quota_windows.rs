//! End-to-end test of quota windows against a real API server with Kueue v0.19+: a one-minute window raises a bronze
//! tier's GPUs from one to two. A Job pending for want of quota is admitted when the window opens (at its boundary, by
//! the daemon's timer, not by a policy edit), and after the window closes no new Job is admitted beyond the base
//! quota, while the Jobs already admitted keep running. The policy's status, `kubectl tiergate status` and the
//! `QuotaWindowChanged` Events say which window is in force. Skipped (and passing) without a reachable cluster or
//! Kueue's v1beta2 CRDs; see docs/guides/quota-windows.md.
//!
//! Jobs carry their tier's queue label themselves (no webhook runs); they ask for one GPU and their pods never need a
//! node: Kueue admits by quota alone. Where the API server serves no MutatingAdmissionPolicy (before 1.36), they also
//! carry their class's node selector, which the gate's mutating half gives them otherwise. Every step waits for a
//! state it observes; the window's instants are only compared with the times Kueue and the daemon recorded.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use tiergate::answers::{StatusInputs, build_status_answer};
use tiergate::live::fetch_status_inputs;
use tiergate::plan::gate::gate_name;
use tiergate::policy::{TierPolicy, TierQuotaWindowStatus};
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, condition_status, create_namespace, ensure,
    install_tierpolicy_crd, is_admitted, job_workload, random_name, run_cluster_test, status_condition, wait_for,
    wait_until_admitted_as, wait_until_refused,
};

/// Kueue objects after the policy is applied, and the gate's policies enforced.
const CONVERGE: Duration = Duration::from_secs(60);
/// Kueue creates a Workload per Job and schedules in cycles; each step settles well within this.
const SCHEDULED: Duration = Duration::from_secs(90);
/// How long after the policy edit the window opens: time for the daemon to record the next change first.
const OPENS_AFTER: SignedDuration = SignedDuration::from_secs(30);
/// How long the window lasts.
const LASTS: SignedDuration = SignedDuration::from_secs(60);
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
const GPU: &str = "nvidia.com/gpu";
const WINDOW: &str = "burst";

/// One run's names: everything cluster-scoped is prefixed, the namespace is new.
struct Run {
    prefix: String,
    system: String,
    namespace: String,
    tier: String,
    class: String,
    /// Whether the Jobs carry their class themselves (no MutatingAdmissionPolicy to give it).
    pins_class: bool,
}

impl Run {
    fn new(pins_class: bool) -> Self {
        let prefix = random_name("e2e-qw");
        Self {
            system: format!("{prefix}-system"),
            namespace: format!("{prefix}-bronze"),
            tier: format!("{prefix}-bronze"),
            class: format!("{prefix}-l4"),
            prefix,
            pins_class,
        }
    }

    fn cluster_queue(&self) -> String {
        format!("tiergate-{}", self.tier)
    }

    /// Bronze with one GPU, and the one-off window `window` (begin, end) raising it to two.
    fn policy(&self, window: Option<(Timestamp, Timestamp)>) -> Result<TierPolicy, HarnessError> {
        let mut tier = json!({
            "name": self.tier,
            "gpuClass": self.class,
            "quotas": {GPU: {"nominal": "1"}, "cpu": {"nominal": "4"}, "memory": {"nominal": "4Gi"}},
        });
        if let Some((begin, end)) = window {
            tier["quotaWindows"] = json!([{
                "name": WINDOW,
                "once": {"begin": begin.to_string(), "end": end.to_string()},
                "quotas": {GPU: {"nominal": "2"}},
            }]);
        }
        Ok(serde_json::from_value(json!({
            "apiVersion": "tiergate.io/v1alpha1",
            "kind": "TierPolicy",
            "metadata": {"name": self.prefix},
            "spec": {
                "tierLabel": E2E_TIER_LABEL,
                "gpuClasses": [{"name": self.class, "nodeLabels": {CLASS_LABEL: self.class}}],
                "priorityBuckets": [{"name": format!("{}-default", self.prefix), "minScore": 0, "value": 100}],
                "scoring": {"enabled": false},
                "tiers": [tier],
            }
        }))?)
    }

    /// A suspended one-GPU Job `name` queued to bronze's LocalQueue (selecting its class where `pins_class`).
    fn job(&self, name: &str) -> Result<Job, HarnessError> {
        let mut job = tiergate_e2e::one_gpu_job(&self.namespace, name, &self.cluster_queue())?;
        if self.pins_class {
            let template =
                job.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("the Job has no pod template")?;
            template.node_selector = Some([(CLASS_LABEL.to_owned(), self.class.clone())].into());
        }
        Ok(job)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_minute_window_admits_a_pending_job_when_it_opens_and_nothing_beyond_the_base_quota_after_it_closes() {
    const TEST: &str =
        "a_one_minute_window_admits_a_pending_job_when_it_opens_and_nothing_beyond_the_base_quota_after_it_closes";
    if let Err(error) = run_cluster_test(TEST, async |client: &Client, cleanup: &Cleanup| {
        let pins_class = !tiergate_e2e::serves_mutating_policies(client).await?;
        let run = Run::new(pins_class);
        let daemon = start(client, cleanup, &run).await?;
        let result = window_steps(client, &run).await;
        daemon.stop().await;
        result
    })
    .await
    {
        panic!("{error}");
    }
}

/// Installs the CRD, creates the namespace, starts the daemon, applies the policy without a window and waits for the
/// queues and for the in-server gate to let bronze's Jobs through.
async fn start(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<InProcessDaemon, HarnessError> {
    install_tierpolicy_crd(client, cleanup).await?;
    create_namespace(client, cleanup, &run.system, &[]).await?;
    create_namespace(client, cleanup, &run.namespace, &[(E2E_TIER_LABEL, &run.tier)]).await?;
    let daemon = InProcessDaemon::start(client, &run.prefix, &run.system, &format!("{}-lease", run.prefix));
    apply_policy(client, &run.policy(None)?).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &run.prefix);
    wait_for("bronze's LocalQueue, and its ClusterQueue Active in Kueue", CONVERGE, || async {
        let queues: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &run.namespace, &KueueKind::LocalQueue.api_resource());
        queues.get_opt(&run.cluster_queue()).await.ok()??;
        let queue = cluster_queues(client).get_opt(&run.cluster_queue()).await.ok()??;
        (condition_status(&queue.data, "Active") == Some("True")).then_some(())
    })
    .await?;
    let mut foreign = run.job("probe-foreign")?;
    let template =
        foreign.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("the Job has no pod template")?;
    template.node_selector = Some([(CLASS_LABEL.to_owned(), format!("{}-h100", run.prefix))].into());
    let refusal = format!("binding '{}'", gate_name(&run.tier));
    wait_until_refused(client, "the in-server gate to refuse a foreign class", CONVERGE, &foreign, &refusal).await?;
    let what = "the in-server gate to let bronze's GPU Jobs through";
    wait_until_admitted_as(client, what, CONVERGE, &run.job("probe")?, |_| true).await?;
    Ok(daemon)
}

fn cluster_queues(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource())
}

/// The GPU nominal quota of bronze's ClusterQueue, as Kueue holds it.
async fn gpu_nominal(client: &Client, run: &Run) -> Option<String> {
    let queue = cluster_queues(client).get_opt(&run.cluster_queue()).await.ok()??;
    let groups = queue.data["spec"]["resourceGroups"].as_array()?;
    groups.iter().flat_map(|group| group["flavors"].as_array().into_iter().flatten()).find_map(|flavor| {
        let resources = flavor["resources"].as_array()?;
        let gpu = resources.iter().find(|resource| resource["name"] == GPU)?;
        match &gpu["nominalQuota"] {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        }
    })
}

/// The policy's `status.quotaWindows` entry of bronze.
async fn window_status(client: &Client, run: &Run) -> Option<TierQuotaWindowStatus> {
    let policy = Api::<TierPolicy>::all(client.clone()).get(&run.prefix).await.ok()?;
    policy.status?.quota_windows.into_iter().find(|entry| entry.tier == run.tier)
}

/// Waits for Job `name`'s Workload to satisfy `ready`; fails with the last Workload seen.
async fn wait_for_workload(
    client: &Client,
    run: &Run,
    name: &str,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value, HarnessError> {
    let waited =
        wait_for(what, timeout, || async { job_workload(client, &run.namespace, name).await.filter(|w| ready(w)) })
            .await;
    match waited {
        Ok(workload) => Ok(workload),
        Err(error) => {
            let last = job_workload(client, &run.namespace, name).await;
            Err(format!("{error}; Job {name}'s Workload: {}", last.unwrap_or_default()).into())
        }
    }
}

/// Kueue tried the Workload and left it pending for want of quota ("insufficient unused quota ...").
fn pending_for_quota(workload: &Value) -> bool {
    let reserved = status_condition(workload, "QuotaReserved");
    !is_admitted(workload)
        && reserved.is_some_and(|condition| {
            condition["status"] == "False"
                && condition["message"].as_str().is_some_and(|message| message.to_lowercase().contains("insufficient"))
        })
}

/// When the Workload was admitted, from its `Admitted` condition.
fn admitted_at(workload: &Value) -> Option<Timestamp> {
    status_condition(workload, "Admitted")?["lastTransitionTime"].as_str()?.parse().ok()
}

async fn window_steps(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.namespace);
    // The base quota: one Job admitted, the next pending for want of quota.
    jobs.create(&PostParams::default(), &run.job("first")?).await?;
    wait_for_workload(client, run, "first", "Kueue to admit the first Job", SCHEDULED, is_admitted).await?;
    jobs.create(&PostParams::default(), &run.job("second")?).await?;
    let what = "Kueue to leave the second Job pending for want of quota";
    wait_for_workload(client, run, "second", what, SCHEDULED, pending_for_quota).await?;

    // A one-minute window that opens 30 s from now, whole seconds (Kueue's condition times have no fraction).
    let begin = Timestamp::from_second(Timestamp::now().as_second())?.checked_add(OPENS_AFTER)?;
    let end = begin.checked_add(LASTS)?;
    apply_policy(client, &run.policy(Some((begin, end)))?).await?;
    let expected_next = begin.to_string();
    let recorded = wait_for("the status to name the window's opening as the next change", CONVERGE, || async {
        let entry = window_status(client, run).await?;
        (entry.in_force.is_none()
            && entry.next_change.as_deref() == Some(expected_next.as_str())
            && entry.next_in_force.as_deref() == Some(WINDOW))
        .then_some(entry)
    })
    .await;
    let recorded = match recorded {
        Ok(entry) => entry,
        Err(error) => {
            let last = window_status(client, run).await;
            return Err(
                format!("{error}; expected next change {expected_next}; the last status entry: {last:?}").into()
            );
        }
    };
    println!("before the window: {recorded:?}");
    let second = job_workload(client, &run.namespace, "second").await;
    if Timestamp::now() < begin {
        ensure(!second.as_ref().is_some_and(is_admitted), || {
            format!("the second Job was admitted before the window opened at {begin}: {second:?}")
        })?;
    }

    // The window opens: the daemon's timer applies two GPUs, and Kueue admits the pending Job then, not before.
    let until_open = Duration::try_from(begin.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
    let what = "Kueue to admit the pending Job once the window opens";
    let workload = wait_for_workload(client, run, "second", what, until_open + SCHEDULED, is_admitted).await?;
    let admitted = admitted_at(&workload).ok_or("the admitted Workload has no Admitted time")?;
    ensure(admitted >= begin && admitted < end, || {
        format!("the second Job was admitted at {admitted}, outside the window {begin} to {end}")
    })?;
    println!("the window opened at {begin}; the pending Job was admitted at {admitted}");
    let shown = wait_for("`kubectl tiergate status` to show the window and its quota", SCHEDULED, || async {
        let fetched = fetch_status_inputs(client, Some(&run.prefix), false).await.ok()?;
        let answer = build_status_answer(&StatusInputs {
            policy: &fetched.policy,
            other_policies: &fetched.other_policies,
            cluster_queues: &fetched.cluster_queues,
            cohorts: &fetched.cohorts,
            pools: &[],
            local_queues: &[],
            tier: None,
        })
        .ok()?;
        let row = answer.quota_windows.iter().find(|row| row.tier == run.tier)?;
        let shows = row.in_force.as_deref() == Some(WINDOW)
            && row.quota.iter().any(|quota| quota == &format!("{GPU} 2"))
            && row.next_change.as_deref() == Some(end.to_string().as_str());
        shows.then(|| answer.to_table())
    })
    .await;
    match shown {
        Ok(table) => println!("{table}"),
        Err(error) if Timestamp::now() >= end => println!("note: the window closed before status was read: {error}"),
        Err(error) => return Err(error),
    }

    // The window closes: back to one GPU. Both admitted Jobs keep running; a new Job waits.
    let until_closed = Duration::try_from(end.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
    let closed = wait_for(
        "the daemon to apply the base quota again when the window closes",
        until_closed + CONVERGE,
        || async {
            let entry = window_status(client, run).await?;
            let nominal = gpu_nominal(client, run).await?;
            (entry.in_force.is_none() && entry.next_change.is_none() && nominal == "1").then_some(entry)
        },
    )
    .await;
    if let Err(error) = closed {
        let entry = window_status(client, run).await;
        let nominal = gpu_nominal(client, run).await;
        return Err(format!("{error}; status entry {entry:?}, ClusterQueue GPU nominal {nominal:?}").into());
    }
    ensure(Timestamp::now() >= end, || format!("the base quota came back before the window's end {end}"))?;
    jobs.create(&PostParams::default(), &run.job("third")?).await?;
    let what = "Kueue to leave the third Job pending for want of quota after the window";
    wait_for_workload(client, run, "third", what, SCHEDULED, pending_for_quota).await?;
    for name in ["first", "second"] {
        let workload = job_workload(client, &run.namespace, name).await;
        ensure(workload.as_ref().is_some_and(is_admitted), || {
            format!("Job {name} lost its admission when the window closed: {workload:?}")
        })?;
    }

    // The daemon announced both changes on the policy.
    let events: Api<Event> = Api::all(client.clone());
    let selector = format!("involvedObject.name={}", run.prefix);
    let announced = wait_for("two QuotaWindowChanged Events on the policy", CONVERGE, || async {
        let listed = events.list(&ListParams::default().fields(&selector)).await.ok()?;
        let notes: Vec<String> = listed
            .items
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("QuotaWindowChanged"))
            .filter_map(|event| event.message)
            .collect();
        let opened = notes.iter().any(|note| note.contains(&format!("quota window \"{WINDOW}\" in force")));
        let closed = notes.iter().any(|note| note.contains("base quota in force"));
        (opened && closed).then_some(notes)
    })
    .await?;
    for note in announced {
        println!("event: {note}");
    }
    Ok(())
}
