//! End-to-end chaos: the installed chart never stores a GPU Job unconstrained while one of its replicas crashes or
//! hangs. charts/tiergate is installed once as helm_install installs it (the real Helm library, the chart's
//! defaults, 2 replicas, on the plane's real node, from an image around `TIERGATE_E2E_IMAGE_BINARY`), then trials
//! run one after another, each under a tenant's dry-run create (`dryRun=All`) of a plain 1-GPU Job every 100 ms:
//! - SIGKILL (`TIERGATE_E2E_CHAOS_KILLS` trials, default 3): the target replica's tiergate process is killed; the
//!   load runs until the kubelet has restarted it, both replicas are Ready and the Lease has a live holder (one
//!   that renewed it after the kill, in a Ready pod), then 2 s more;
//! - SIGSTOP (`TIERGATE_E2E_CHAOS_STOPS` trials, default 2): the process hangs for 20 s, then SIGCONT; the load
//!   runs until both replicas are Ready again and the Lease has a live holder, then 2 s more.
//!
//! The target alternates: leader, follower. The real node is this machine, so the container's process is found here,
//! by its pod's UID in `/proc/<pid>/cgroup`. Every create is judged: mutated (stored confined to bronze: its queue,
//! its class's node selector and toleration), refused (an API error: with the webhook unreachable, the in-server
//! gate refuses a plain GPU Job; docs/admission.md, "The in-server gate") or stored unconstrained (printed whole the
//! moment it is seen). One line per trial, a table at the end; the suite fails only if a create was stored
//! unconstrained (or a replica never recovers). Refusals and times are printed, never asserted. The full run is
//! `TIERGATE_E2E_CHAOS_KILLS=50 TIERGATE_E2E_CHAOS_STOPS=20`; a killed container restarts after the kubelet's
//! crash-loop back-off, which doubles with each kill of the same pod up to 5 minutes, so that run takes hours.
//! Skipped, saying why, where helm_install is.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Client, ResourceExt};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tiergate_e2e::release::fault::{Stopped, find_pod_process, send_signal};
use tiergate_e2e::release::load::{Creates, Load, LoadReport};
use tiergate_e2e::release::{
    BOUND, CONTAINER, LeaseHistory, LeaseHolder, Release, WEBHOOK_IGNORE_LABEL, build_real_node_policy,
    container_restarts, holder_pod, install_release, is_pod_ready, lease_holder, prerequisites_or_skip, ready_pods,
    run_with_release, wait_until_gated, wait_until_mutated,
};
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, create_namespace, ensure, random_name, run_cluster_test, tenant_client,
    wait_for,
};

const TEST: &str = "the_installed_chart_never_stores_a_gpu_job_unconstrained_while_a_replica_crashes_or_hangs";

/// How many SIGKILL trials.
const KILLS_ENV: &str = "TIERGATE_E2E_CHAOS_KILLS";
/// How many SIGSTOP trials.
const STOPS_ENV: &str = "TIERGATE_E2E_CHAOS_STOPS";
/// The trials CI runs: short.
const DEFAULT_KILLS: usize = 3;
const DEFAULT_STOPS: usize = 2;
/// How long a SIGSTOP trial keeps the process stopped: longer than the Lease (15 s), so a stopped leader loses it,
/// and than two failed readiness checks (5 s apart), so the kubelet takes the replica out of the Service.
const STOPPED_FOR: Duration = Duration::from_secs(20);
/// The load's creates after the replicas have recovered.
const AFTERMATH: Duration = Duration::from_secs(2);
/// How long a replica may take to come back: a killed container restarts after the kubelet's crash-loop back-off
/// (10 s, doubling with each restart of the same container, at most 5 minutes), then starts and syncs.
const RECOVERY_BOUND: Duration = Duration::from_secs(600);
/// Creates answered before the fault: the load runs and the baseline is seen.
const ANSWERED_BEFORE_FAULT: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_installed_chart_never_stores_a_gpu_job_unconstrained_while_a_replica_crashes_or_hangs() {
    let Some(prerequisites) = prerequisites_or_skip(TEST) else { return };
    let trials = match (trial_count(KILLS_ENV, DEFAULT_KILLS), trial_count(STOPS_ENV, DEFAULT_STOPS)) {
        (Ok(kills), Ok(stops)) => build_trials(kills, stops),
        (Err(error), _) | (_, Err(error)) => panic!("{error}"),
    };
    let outcome = run_cluster_test(TEST, async |client, cleanup| {
        let release = Release::new(&prerequisites, "chaos", "tg-chaos", "e2e-chaos");
        run_with_release(client, cleanup, &prerequisites, &release, async |release| {
            scenario(client, cleanup, release, &trials).await
        })
        .await
    })
    .await;
    if let Err(error) = outcome {
        panic!("{error}");
    }
}

/// The signal a trial sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: the process dies at once; the kubelet restarts the container.
    Kill,
    /// SIGSTOP for [`STOPPED_FOR`], then SIGCONT: the process hangs, sockets open, answering nothing.
    Stop,
}

impl Fault {
    fn signal(self) -> &'static str {
        match self {
            Self::Kill => "SIGKILL",
            Self::Stop => "SIGSTOP",
        }
    }
}

/// Which replica a trial targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Leader,
    Follower,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Follower => "follower",
        }
    }
}

/// The trial count in `env`, or `default` when it is unset or empty.
fn trial_count(env: &str, default: usize) -> Result<usize, HarnessError> {
    match std::env::var(env) {
        Ok(value) if !value.trim().is_empty() => {
            Ok(value.trim().parse().map_err(|error| format!("{env}={value:?} is not a count: {error}"))?)
        }
        _ => Ok(default),
    }
}

/// `kills` SIGKILL trials, then `stops` SIGSTOP trials, each kind alternating leader, follower.
fn build_trials(kills: usize, stops: usize) -> Vec<(Fault, Role)> {
    let alternate = |index: usize| if index.is_multiple_of(2) { Role::Leader } else { Role::Follower };
    let killed = (0..kills).map(|index| (Fault::Kill, alternate(index)));
    killed.chain((0..stops).map(|index| (Fault::Stop, alternate(index)))).collect()
}

async fn scenario(
    client: &Client,
    cleanup: &Cleanup,
    release: &Release,
    trials: &[(Fault, Role)],
) -> Result<(), HarnessError> {
    let policy = build_real_node_policy(&release.policy)?;
    let namespace = random_name("e2e-chaos-bronze");
    let unhooked = random_name("e2e-chaos-unhooked");
    let bronze = (E2E_TIER_LABEL, release.bronze.as_str());
    create_namespace(client, cleanup, &namespace, &[bronze]).await?;
    create_namespace(client, cleanup, &unhooked, &[bronze, (WEBHOOK_IGNORE_LABEL, "true")]).await?;
    let tenant = tenant_client(client, cleanup, &[&namespace, &unhooked]).await?;
    let began = Instant::now();
    let installed = install_release(client, cleanup, release, &policy).await?;
    let queue = release.bronze_queue();
    wait_until_mutated(&tenant, &namespace, &queue).await?;
    let mutated = began.elapsed();
    // The trials start once the install is whole: the webhook mutates, and the in-server gate that holds the line
    // when it does not answer is in effect. The leader applies the gate after it reads the policy, so for a moment
    // after the first mutated Job a webhook failure still lets a plain GPU Job through; printed, not asserted.
    wait_until_gated(&tenant, &unhooked).await?;
    let gated = began.elapsed();
    let kills = trials.iter().filter(|(fault, _)| *fault == Fault::Kill).count();
    println!(
        "chaos: installed (Helm {:.1} s; replicas {:?}, leader {}); after the install began, a bronze GPU Job was \
         mutated through the Service at {:.1} s and the in-server gate refused one the webhook never sees at {:.1} s; \
         {} trials: {kills} SIGKILL ({KILLS_ENV}), {} SIGSTOP ({STOPS_ENV})",
        installed.helm_seconds,
        installed.pods,
        installed.leader.pod,
        mutated.as_secs_f64(),
        gated.as_secs_f64(),
        trials.len(),
        trials.len() - kills,
    );
    let mut done = Vec::new();
    let mut failure = None;
    for (index, (fault, role)) in trials.iter().enumerate() {
        let heading = format!("trial {}/{}: {} {}", index + 1, trials.len(), fault.signal(), role.name());
        match run_trial(client, &tenant, release, &namespace, &queue, *fault, *role).await {
            Ok(trial) => {
                println!("chaos: {heading} {}", trial.describe());
                if let Err(error) = &trial.recovery {
                    failure = Some(format!("{heading}: {error}"));
                }
                done.push(trial);
            }
            Err(error) => failure = Some(format!("{heading}: {error}")),
        }
        if failure.is_some() {
            break;
        }
    }
    print_summary(&done);
    if let Some(failure) = failure {
        return Err(failure.into());
    }
    let unconstrained: usize = done.iter().map(|trial| trial.report.unconstrained.len()).sum();
    ensure(unconstrained == 0, || {
        format!("{unconstrained} GPU Job(s) were stored unconstrained during the trials (each printed above)")
    })
}

/// What one trial did and saw.
struct Trial {
    fault: Fault,
    role: Role,
    pod: String,
    pid: Pid,
    report: LoadReport,
    /// How the replica came back, or why it did not.
    recovery: Result<Recovery, String>,
}

/// How the target came back, timed from the signal.
struct Recovery {
    /// SIGSTOP: when the pod was first seen not Ready while stopped (`None`: never, within [`STOPPED_FOR`]).
    not_ready_after: Option<Duration>,
    /// SIGSTOP: when SIGCONT was sent, and whether the process was still there to get it.
    resumed: Option<(Duration, bool)>,
    /// When the target pod was Ready again (after a restart of its container, for SIGKILL).
    ready_after: Duration,
    /// The container's restart count before the signal and once Ready again.
    restarts: (i32, i32),
    /// The first holder other than the one before the signal, and when (`None`: the Lease stayed).
    passed: Option<(Duration, String)>,
    /// Whether the Lease was seen without a holder (released).
    released: bool,
    /// When the Lease had a live holder (renewed after the fault, by a Ready pod), and that pod.
    live: (Duration, String),
}

impl Trial {
    fn describe(&self) -> String {
        let mut line = format!("of {} (pid {}): {}", self.pod, self.pid, self.report.summary());
        match &self.recovery {
            Ok(recovery) => line.push_str(&format!("; {}", recovery.describe(&self.pod))),
            Err(error) => line.push_str(&format!("; the replica did not recover: {error}")),
        }
        line
    }

    fn lease_column(&self) -> String {
        match &self.recovery {
            Ok(Recovery { passed: Some((after, _)), .. }) => format!("passed after {:.1} s", after.as_secs_f64()),
            Ok(Recovery { passed: None, .. }) => "stayed".to_owned(),
            Err(_) => "-".to_owned(),
        }
    }
}

impl Recovery {
    /// What the trial's line says of the recovery of `target` (the pod signalled).
    fn describe(&self, target: &str) -> String {
        let seconds = |duration: Duration| format!("{:.1} s", duration.as_secs_f64());
        let mut parts = Vec::new();
        if let Some((after, delivered)) = self.resumed {
            let not_ready = self.not_ready_after.map_or("never seen not Ready while stopped".to_owned(), |after| {
                format!("not Ready after {}", seconds(after))
            });
            let gone = if delivered { "" } else { " (the process was gone: its container restarted)" };
            parts.push(format!("{not_ready}, SIGCONT at {}{gone}", seconds(after)));
        }
        parts.push(format!(
            "Ready again after {} (restarts {} -> {})",
            seconds(self.ready_after),
            self.restarts.0,
            self.restarts.1
        ));
        let lease = match &self.passed {
            Some((after, pod)) => format!(
                "the Lease passed to {pod}{} after {}{}",
                if pod == target { " (a new process of the same pod)" } else { "" },
                seconds(*after),
                if self.released { " (released first)" } else { "" }
            ),
            None => "the Lease stayed with its holder".to_owned(),
        };
        parts.push(format!("{lease}; live holder {} after {}", self.live.1, seconds(self.live.0)));
        parts.join("; ")
    }
}

/// One trial: the target's process found, the load started, the fault injected and waited out, the load stopped.
async fn run_trial(
    client: &Client,
    tenant: &Client,
    release: &Release,
    namespace: &str,
    queue: &str,
    fault: Fault,
    role: Role,
) -> Result<Trial, HarnessError> {
    let pods = ready_pods(client, release).await?;
    let leader = lease_holder(client, release, &pods).await?;
    let target = match role {
        Role::Leader => leader.pod.clone(),
        Role::Follower => pods.iter().find(|pod| **pod != leader.pod).cloned().ok_or("no follower replica")?,
    };
    let pod = Api::<Pod>::namespaced(client.clone(), &release.namespace).get(&target).await?;
    let uid = pod.metadata.uid.clone().ok_or_else(|| format!("pod {target} has no UID"))?;
    let pid = find_pod_process(&uid, CONTAINER)?;
    let load = Load::start(tenant, namespace, queue, Creates::DryRun);
    let target_process = Target { pod: target.clone(), pid, restarts: container_restarts(&pod), leader };
    let recovery = inject_and_recover(client, release, &load, &target_process, fault).await;
    let report = load.finish().await?;
    Ok(Trial { fault, role, pod: target, pid, report, recovery: recovery.map_err(|error| error.to_string()) })
}

/// The replica a trial hits.
struct Target {
    pod: String,
    pid: Pid,
    /// Its container's restarts before the fault.
    restarts: i32,
    /// The Lease's holder before the fault.
    leader: LeaseHolder,
}

/// Once the load has answers, sends the fault and waits (observing the pod and the Lease) until the target is
/// Ready again and the Lease has a live holder, then lets the load run [`AFTERMATH`] more.
async fn inject_and_recover(
    client: &Client,
    release: &Release,
    load: &Load,
    target: &Target,
    fault: Fault,
) -> Result<Recovery, HarnessError> {
    wait_for("the load's first answers", BOUND, || async { (load.judged() >= ANSWERED_BEFORE_FAULT).then_some(()) })
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.namespace);
    let history = LeaseHistory::watch(client, release);
    let signaled = Instant::now();
    let (not_ready_after, resumed) = match fault {
        Fault::Kill => {
            send_signal(target.pid, Signal::SIGKILL)?;
            (None, None)
        }
        Fault::Stop => {
            let stopped = Stopped::stop(target.pid)?;
            // Observed while stopped: when the kubelet's readiness checks take the replica out of the Service.
            let not_ready = wait_for("the stopped replica to be seen not Ready", STOPPED_FOR, || async {
                let pod = pods.get(&target.pod).await.ok()?;
                (!is_pod_ready(&pod)).then(|| signaled.elapsed())
            })
            .await
            .ok();
            tokio::time::sleep(STOPPED_FOR.saturating_sub(signaled.elapsed())).await;
            let delivered = stopped.resume()?;
            (not_ready, Some((signaled.elapsed(), delivered)))
        }
    };
    let fault_ended = k8s_openapi::jiff::Timestamp::now();
    let restarted = |pod: &Pod| fault == Fault::Stop || container_restarts(pod) > target.restarts;
    let what = format!("{} to be Ready again", target.pod);
    let ready = wait_for(&what, RECOVERY_BOUND, || async {
        let pod = pods.get(&target.pod).await.ok()?;
        let ready = pod.metadata.deletion_timestamp.is_none() && is_pod_ready(&pod) && restarted(&pod);
        ready.then(|| (signaled.elapsed(), container_restarts(&pod)))
    });
    let leases: Api<Lease> = Api::namespaced(client.clone(), &release.namespace);
    let live = wait_for("the Lease to have a live holder", RECOVERY_BOUND, || async {
        let spec = leases.get(&release.lease()).await.ok()?.spec?;
        let holder = spec.holder_identity.filter(|holder| !holder.is_empty())?;
        (spec.renew_time?.0 > fault_ended).then_some(())?;
        let pod = pods.get(holder_pod(&holder)?).await.ok()?;
        (pod.metadata.deletion_timestamp.is_none() && is_pod_ready(&pod)).then(|| (signaled.elapsed(), pod.name_any()))
    });
    let (ready, live) = tokio::join!(ready, live);
    let events = history.stop().await;
    let ((ready_after, restarts_after), live) = (ready?, live?);
    ready_pods(client, release).await?;
    tokio::time::sleep(AFTERMATH).await;
    let passed = events
        .iter()
        .find(|(_, holder)| !holder.is_empty() && *holder != target.leader.identity)
        .map(|(at, holder)| (*at, holder_pod(holder).unwrap_or(holder).to_owned()));
    let released = events.iter().any(|(_, holder)| holder.is_empty());
    Ok(Recovery {
        not_ready_after,
        resumed,
        ready_after,
        restarts: (target.restarts, restarts_after),
        passed,
        released,
        live,
    })
}

/// The table of every trial, the totals, and each distinct refusal with its count.
fn print_summary(trials: &[Trial]) {
    println!("chaos: summary of {} trial(s)", trials.len());
    let header = ["#", "fault", "target", "creates", "mutated", "refused", "unconstrained", "ready again", "lease"];
    println!("{}", table_row(header.map(str::to_owned)));
    for (index, trial) in trials.iter().enumerate() {
        let ready = trial
            .recovery
            .as_ref()
            .map_or("-".to_owned(), |recovery| format!("{:.1} s", recovery.ready_after.as_secs_f64()));
        let report = &trial.report;
        println!(
            "{}",
            table_row([
                (index + 1).to_string(),
                trial.fault.signal().to_owned(),
                trial.role.name().to_owned(),
                report.created.to_string(),
                report.mutated.to_string(),
                report.refused.len().to_string(),
                report.unconstrained.len().to_string(),
                ready,
                trial.lease_column(),
            ])
        );
    }
    let total = |count: fn(&LoadReport) -> usize| trials.iter().map(|trial| count(&trial.report)).sum::<usize>();
    println!(
        "{}",
        table_row([
            "all".to_owned(),
            String::new(),
            String::new(),
            total(|report| report.created).to_string(),
            total(|report| report.mutated).to_string(),
            total(|report| report.refused.len()).to_string(),
            total(|report| report.unconstrained.len()).to_string(),
            String::new(),
            String::new(),
        ])
    );
    let mut refusals = std::collections::BTreeMap::<String, usize>::new();
    for trial in trials {
        for (message, count) in trial.report.refusal_kinds() {
            *refusals.entry(message).or_default() += count;
        }
    }
    for (message, count) in &refusals {
        println!("chaos: refused {count} time(s): {message}");
    }
}

/// One line of the summary table: the trial's number, fault and target left-aligned, the rest right-aligned.
fn table_row(cells: [String; 9]) -> String {
    let [number, fault, target, creates, mutated, refused, unconstrained, ready, lease] = cells;
    format!(
        "chaos:   {number:>3}  {fault:<7}  {target:<8}  {creates:>7}  {mutated:>7}  {refused:>7}  {unconstrained:>13}  \
         {ready:>11}  {lease}"
    )
    .trim_end()
    .to_owned()
}
