//! Tests of the usage ledger: overlaps, checkpoints, deletions, readmissions, recounts and period turns (their
//! builders serve the rolling windows' tests too).

use super::*;
use crate::inputs::load_policy;
use crate::usage::period::parse_instant;

pub(super) const GPU: &str = "nvidia.com/gpu";
pub(super) const HOUR: i64 = 3600;

pub(super) fn at(text: &str) -> i64 {
    parse_instant(text).unwrap()
}

pub(super) fn spec() -> TierPolicySpec {
    load_policy(None).unwrap().spec
}

pub(super) fn queue(spec: &TierPolicySpec, tier: usize) -> String {
    cluster_queue_name(&spec.tiers[tier].name)
}

pub(super) fn admitted(
    uid: &str,
    namespace: &str,
    queue: &str,
    gpus: i128,
    since: i64,
    finished: Option<i64>,
) -> WorkloadObservation {
    WorkloadObservation {
        uid: uid.to_owned(),
        namespace: namespace.to_owned(),
        admission: Some(Admission {
            cluster_queue: queue.to_owned(),
            usage: BTreeMap::from([(GPU.to_owned(), gpus * 1000), ("cpu".to_owned(), 4000)]),
            since,
            finished_at: finished,
        }),
        stopped_at: None,
    }
}

pub(super) fn listed() -> WorkloadLedger {
    let mut ledger = WorkloadLedger::default();
    ledger.begin_list();
    ledger.end_list(0);
    ledger
}

pub(super) fn step(
    spec: &TierPolicySpec,
    last: Option<&UsageStatus>,
    ledger: &WorkloadLedger,
    now: i64,
) -> UsageStatus {
    let frame = CheckpointFrame::at(spec, now).unwrap();
    advance_usage(last, ledger, &frame, now).0
}

fn tier_gpu_seconds(usage: &UsageStatus, tier: &str, previous: bool) -> Option<String> {
    let totals = usage.tiers.get(tier)?;
    (if previous { &totals.previous } else { &totals.current }).get(GPU).cloned()
}

fn namespace_gpu_seconds(usage: &UsageStatus, namespace: &str) -> Option<String> {
    usage.namespaces.get(namespace)?.current.get(GPU).cloned()
}

#[test]
fn a_running_workload_is_counted_from_its_admission_to_now_per_tier_and_namespace() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 2, start, None), start);
    let usage = step(&spec, None, &ledger, start + HOUR);
    assert_eq!(tier_gpu_seconds(&usage, &tier, false).as_deref(), Some("7200"), "2 GPUs for an hour");
    assert_eq!(namespace_gpu_seconds(&usage, "team-a").as_deref(), Some("7200"));
    assert_eq!(usage.checkpoint_time, "2026-12-02T09:00:00Z");
    assert_eq!(
        (usage.period_start.as_str(), usage.period_end.as_str()),
        ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
    );
}

#[test]
fn successive_checkpoints_add_only_the_time_since_the_last_one() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start, None), start);
    let mut usage = step(&spec, None, &ledger, start + 60);
    for minute in 2..=60 {
        usage = step(&spec, Some(&usage), &ledger, start + 60 * minute);
        ledger.prune(checkpoint_second(&usage).unwrap());
    }
    assert_eq!(tier_gpu_seconds(&usage, &tier, false).as_deref(), Some("3600"));
    let unchanged = step(&spec, Some(&usage), &ledger, start + HOUR);
    assert_eq!(unchanged, usage, "a checkpoint at the same instant adds nothing");
}

#[test]
fn only_the_resources_the_tier_names_are_counted_and_other_queues_not_at_all() {
    let spec = spec();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start, None), start);
    ledger.observe(admitted("b", "team-b", "someone-elses-queue", 8, start, None), start);
    let usage = step(&spec, None, &ledger, start + HOUR);
    assert!(!usage.namespaces.contains_key("team-b"), "{usage:?}");
    let counted = counted_resources(&spec, &spec.tiers[0].name);
    let resources: BTreeSet<String> = usage.tiers.values().flat_map(|totals| totals.current.keys().cloned()).collect();
    assert!(resources.is_subset(&counted), "{resources:?} not within {counted:?}");
}

#[test]
fn a_finished_then_deleted_workload_is_counted_to_its_finish_once() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start + 10, None), start + 10);
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start + 10, Some(start + 40)), start + 40);
    ledger.forget("a", start + 41);
    let second = step(&spec, Some(&first), &ledger, start + 60);
    assert_eq!(tier_gpu_seconds(&second, &tier, false).as_deref(), Some("30"));
    ledger.prune(start + 60);
    assert!(ledger.is_empty(), "counted in full, then dropped");
    let third = step(&spec, Some(&second), &ledger, start + 120);
    assert_eq!(tier_gpu_seconds(&third, &tier, false).as_deref(), Some("30"), "never counted twice");
}

#[test]
fn a_workload_deleted_while_admitted_is_counted_until_its_deletion() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    ledger.observe(admitted("quick", "team-a", &queue(&spec, 0), 4, start + 1, None), start + 1);
    ledger.forget("quick", start + 3);
    let second = step(&spec, Some(&first), &ledger, start + 60);
    assert_eq!(tier_gpu_seconds(&second, &tier, false).as_deref(), Some("8"), "4 GPUs for 2 seconds");
}

#[test]
fn a_relist_that_misses_a_workload_ends_its_admission_at_the_relist() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    ledger.observe(admitted("gone", "team-a", &queue(&spec, 0), 1, start, None), start);
    ledger.begin_list();
    ledger.end_list(start + 20);
    let second = step(&spec, Some(&first), &ledger, start + 60);
    assert_eq!(tier_gpu_seconds(&second, &tier, false).as_deref(), Some("20"));
}

#[test]
fn an_evicted_then_readmitted_workload_counts_both_admissions_and_not_the_wait() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    let queue = queue(&spec, 0);
    ledger.observe(admitted("a", "team-a", &queue, 1, start, None), start);
    let evicted = WorkloadObservation {
        admission: None,
        stopped_at: Some(start + 100),
        ..admitted("a", "team-a", &queue, 1, 0, None)
    };
    ledger.observe(evicted, start + 100);
    ledger.observe(admitted("a", "team-a", &queue, 1, start + 300, None), start + 300);
    let second = step(&spec, Some(&first), &ledger, start + 400);
    assert_eq!(tier_gpu_seconds(&second, &tier, false).as_deref(), Some("200"), "100 s, then 100 s after readmission");
    // An eviction the watch missed: the readmission closes the first admission when it begins.
    let mut missed = listed();
    missed.observe(admitted("b", "team-a", &queue, 1, start, None), start);
    missed.observe(admitted("b", "team-a", &queue, 1, start + 300, None), start + 300);
    let counted = step(&spec, Some(&first), &missed, start + 400);
    assert_eq!(tier_gpu_seconds(&counted, &tier, false).as_deref(), Some("400"));
}

#[test]
fn a_new_replica_recounts_from_the_checkpoint_what_the_workloads_still_show() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let queue = queue(&spec, 0);
    let start = at("2026-12-02T08:00:00Z");
    // The old leader checkpointed at start + 600 and died at start + 650.
    let mut old = listed();
    old.observe(admitted("a", "team-a", &queue, 1, start, None), start);
    let checkpoint = step(&spec, None, &old, start + 600);
    // The new leader lists the same workload, now finished at start + 900, and counts on at start + 1000.
    let mut new = listed();
    new.observe(admitted("a", "team-a", &queue, 1, start, Some(start + 900)), start + 1000);
    let recounted = step(&spec, Some(&checkpoint), &new, start + 1000);
    assert_eq!(tier_gpu_seconds(&recounted, &tier, false).as_deref(), Some("900"), "admitted for 900 s, counted once");
}

#[test]
fn the_period_boundary_splits_an_admission_and_the_old_period_becomes_the_previous() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let queue = queue(&spec, 0);
    let mut ledger = listed();
    let before = at("2026-11-30T23:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue, 1, before, None), before);
    let november = step(&spec, None, &ledger, before + 1800);
    assert_eq!(tier_gpu_seconds(&november, &tier, false).as_deref(), Some("1800"));
    let december = step(&spec, Some(&november), &ledger, at("2026-12-01T00:30:00Z"));
    assert_eq!(tier_gpu_seconds(&december, &tier, true).as_deref(), Some("3600"), "all of November's hour");
    assert_eq!(tier_gpu_seconds(&december, &tier, false).as_deref(), Some("1800"), "December's half hour");
    assert_eq!(december.previous_period_start, "2026-11-01T00:00:00Z");
    // Two periods later November is gone, and December is the previous period.
    let january = step(&spec, Some(&december), &ledger, at("2027-01-01T00:00:00Z"));
    assert!(tier_gpu_seconds(&january, &tier, true).is_some());
    let february = step(&spec, Some(&december), &ledger, at("2027-02-01T00:00:10Z"));
    assert_eq!(tier_gpu_seconds(&february, &tier, false).as_deref(), Some("10"));
    assert_eq!(tier_gpu_seconds(&february, &tier, true).as_deref(), Some("2678400"), "January's 31 days, recounted");
}

#[test]
fn without_a_checkpoint_the_count_starts_at_the_previous_period() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let long_ago = at("2026-10-15T00:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, long_ago, None), long_ago);
    let usage = step(&spec, None, &ledger, at("2026-12-01T01:00:00Z"));
    assert_eq!(tier_gpu_seconds(&usage, &tier, false).as_deref(), Some("3600"));
    assert_eq!(tier_gpu_seconds(&usage, &tier, true).as_deref(), Some("2592000"), "all of November, not October");
}

#[test]
fn usage_is_attributed_by_the_admitting_cluster_queue_not_by_the_namespace_tier() {
    let spec = spec();
    let (first, second) = (spec.tiers[0].name.clone(), spec.tiers[1].name.clone());
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 1), 1, start, None), start);
    let usage = step(&spec, None, &ledger, start + 100);
    assert_eq!(tier_gpu_seconds(&usage, &second, false).as_deref(), Some("100"));
    assert_eq!(tier_gpu_seconds(&usage, &first, false), None);
}

#[test]
fn added_amounts_are_what_the_step_counted() {
    let spec = spec();
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start, None), start);
    let first = step(&spec, None, &ledger, start + 60);
    let frame = CheckpointFrame::at(&spec, start + 90).unwrap();
    let (_, added) = advance_usage(Some(&first), &ledger, &frame, start + 90);
    assert_eq!(added.tiers.get(&tier).and_then(|counts| counts.get(GPU)), Some(&30_000));
    assert_eq!(added.namespaces.get("team-a").and_then(|counts| counts.get(GPU)), Some(&30_000));
}
