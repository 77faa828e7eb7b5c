//! Property test of the counts across leader changes: two replicas watch the same Workloads, the leader
//! checkpoints, leaders are killed and restarted at any moment (a killed replica lists the Workloads again when it
//! comes back), and whatever the sequence, the last checkpoint counts exactly each workload's admitted seconds × GPUs
//! and no checkpoint ever counts less than the one before.

use proptest::prelude::*;

use super::*;
use crate::inputs::load_policy;
use crate::usage::period::parse_instant;

const GPU: &str = "nvidia.com/gpu";

/// A one-queue workload: admitted at `start` (seconds after the base instant), finished `run` seconds later
/// unless its Workload is deleted first, `deleted` seconds after its admission (never, when `None`).
#[derive(Clone, Debug)]
struct Job {
    start: i64,
    run: i64,
    deleted: Option<i64>,
    gpus: i128,
}

impl Job {
    /// When it stopped using its GPUs: its finish, or its deletion while it ran (offsets from the base instant).
    fn end(&self) -> i64 {
        self.start + self.deleted.map_or(self.run, |deleted| deleted.min(self.run))
    }
}

/// What happens `gap` seconds after the previous step.
#[derive(Clone, Debug)]
enum Step {
    /// The leader checkpoints.
    Checkpoint,
    /// The leader's process dies (its ledger with it); the standby leads at once, and the killed replica lists the
    /// Workloads `restart_after` seconds later and stands by. Skipped while the standby has not listed before the
    /// last checkpoint (until then it would lead without what that checkpoint did not count: the documented loss
    /// of a restart of every replica, not of a leader change).
    Kill { restart_after: i64 },
}

/// A replica's ledger and when it listed the Workloads.
struct Replica {
    ledger: WorkloadLedger,
    listed_at: i64,
}

/// The state of one job's Workload at `now` as a list shows it (`None` once deleted or before admission).
fn observation(uid: usize, job: &Job, queue: &str, base: i64, now: i64) -> Option<WorkloadObservation> {
    let (start, end) = (base + job.start, base + job.start + job.run);
    let deleted = job.deleted.is_some_and(|deleted| now >= start + deleted);
    (now >= start && !deleted).then(|| WorkloadObservation {
        uid: format!("w{uid}"),
        namespace: "team-a".to_owned(),
        admission: Some(Admission {
            cluster_queue: queue.to_owned(),
            usage: BTreeMap::from([(GPU.to_owned(), job.gpus * 1000)]),
            since: start,
            finished_at: (now >= end).then_some(end),
        }),
        stopped_at: None,
    })
}

fn list(jobs: &[Job], queue: &str, base: i64, now: i64) -> Replica {
    let mut ledger = WorkloadLedger::default();
    ledger.begin_list();
    for (uid, job) in jobs.iter().enumerate() {
        if let Some(seen) = observation(uid, job, queue, base, now) {
            ledger.observe(seen, now);
        }
    }
    ledger.end_list(now);
    Replica { ledger, listed_at: now }
}

/// What a running replica's watch shows at `now` of the jobs' changes at that second.
fn watch(replica: &mut Replica, jobs: &[Job], queue: &str, base: i64, now: i64) {
    for (uid, job) in jobs.iter().enumerate() {
        let changed = now == base + job.start || now == base + job.start + job.run;
        if job.deleted.is_some_and(|deleted| now == base + job.start + deleted) {
            replica.ledger.forget(&format!("w{uid}"), now);
        } else if changed && let Some(seen) = observation(uid, job, queue, base, now) {
            replica.ledger.observe(seen, now);
        }
    }
}

fn jobs() -> impl Strategy<Value = Vec<Job>> {
    let job = (0..3000i64, 1..3000i64, proptest::option::of(0..3600i64), 1..4i128)
        .prop_map(|(start, run, deleted, gpus)| Job { start, run, deleted, gpus });
    proptest::collection::vec(job, 1..6)
}

fn steps() -> impl Strategy<Value = Vec<(i64, Step)>> {
    let step = prop_oneof![
        3 => Just(Step::Checkpoint),
        1 => (0..120i64).prop_map(|restart_after| Step::Kill { restart_after }),
    ];
    proptest::collection::vec((1..600i64, step), 1..30)
}

proptest! {
    #[test]
    fn counts_match_the_admitted_time_whichever_replica_leads_and_never_go_back(jobs in jobs(), steps in steps()) {
        let spec = load_policy(None).unwrap().spec;
        let tier = spec.tiers[0].name.clone();
        let queue = cluster_queue_name(&tier);
        let base = parse_instant("2026-12-02T08:00:00Z").unwrap();
        let mut leader = list(&jobs, &queue, base, base);
        let mut standby = Some(list(&jobs, &queue, base, base));
        let mut restarting: Option<i64> = None;
        let mut last: Option<UsageStatus> = None;
        let mut last_checkpoint = base;
        let mut counted = 0;
        let mut now = base;
        let last_step = steps.len() - 1;
        for (index, (gap, step)) in steps.into_iter().enumerate() {
            let until = now + gap;
            while now < until {
                now += 1;
                if restarting == Some(now) {
                    standby = Some(list(&jobs, &queue, base, now));
                    restarting = None;
                }
                watch(&mut leader, &jobs, &queue, base, now);
                if let Some(standby) = standby.as_mut().filter(|standby| standby.listed_at < now) {
                    watch(standby, &jobs, &queue, base, now);
                }
            }
            // The last step is a checkpoint, whatever was drawn.
            let step = if index == last_step { Step::Checkpoint } else { step };
            match step {
                Step::Checkpoint => {
                    let frame = CheckpointFrame::at(&spec, now).unwrap();
                    let (usage, _) = advance_usage(last.as_ref(), &leader.ledger, &frame, now);
                    let count = usage.tier_used(&tier, GPU);
                    prop_assert!(count >= counted, "the count went back from {counted} to {count}");
                    counted = count;
                    leader.ledger.prune(now);
                    if let Some(standby) = standby.as_mut() {
                        standby.ledger.prune(now);
                    }
                    last = Some(usage);
                    last_checkpoint = now;
                }
                Step::Kill { restart_after } => {
                    let ready = standby.as_ref().is_some_and(|standby| standby.listed_at <= last_checkpoint);
                    if let (true, Some(next)) = (ready, standby.take()) {
                        leader = next;
                        restarting = Some(now + restart_after.max(1));
                    }
                }
            }
        }
        let expected: i128 = jobs
            .iter()
            .map(|job| job.gpus * 1000 * i128::from(((base + job.end()).min(now) - (base + job.start)).max(0)))
            .sum();
        prop_assert_eq!(counted, expected, "jobs {:?}", jobs);
        let usage = last.unwrap();
        let namespace = usage.namespaces.get("team-a").and_then(|totals| totals.current.get(GPU));
        let namespace = namespace.and_then(|text| crate::policy::budget::parse_resource_seconds(text)).unwrap_or(0);
        prop_assert_eq!(namespace, expected);
    }
}
