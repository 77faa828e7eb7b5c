//! Tests of the rolling windows' checkpoint step: an admission split across buckets and checkpoints, expiry, a
//! deleted job's use staying in the window, a changed window restarting from the ledger, the period turning beside
//! it, and the budget a window spends and renews.

use std::collections::BTreeMap;

use crate::policy::budget::{WindowCounts, spent_budgets};
use crate::policy::{Budget, TierPolicySpec, UsageStatus};
use crate::usage::ledger::tests::{GPU, HOUR, admitted, at, listed, queue, spec, step};
use crate::usage::ledger::{WorkloadLedger, checkpoint_second};

/// The sample policy with a budget on tier 0 of `limit` of GPU over `window`.
fn windowed(limit: &str, window: &str) -> TierPolicySpec {
    let mut spec = spec();
    spec.tiers[0].budget =
        Some(Budget { limits: BTreeMap::from([(GPU.to_owned(), limit.to_owned())]), window: Some(window.to_owned()) });
    spec
}

fn window_use(spec: &TierPolicySpec, usage: &UsageStatus) -> i128 {
    let tier = &spec.tiers[0].name;
    let seconds = spec.tiers[0].budget.as_ref().and_then(Budget::window_seconds).unwrap();
    let counts = WindowCounts::read(&usage.windows[tier], seconds).unwrap();
    counts.used(GPU, checkpoint_second(usage).unwrap())
}

/// Checkpoints every `every` seconds from `from` to `to`, pruning the ledger as the daemon does.
fn run(spec: &TierPolicySpec, mut usage: UsageStatus, ledger: &mut WorkloadLedger, every: i64, to: i64) -> UsageStatus {
    let mut now = checkpoint_second(&usage).unwrap();
    while now < to {
        now = (now + every).min(to);
        usage = step(spec, Some(&usage), ledger, now);
        ledger.prune(now);
    }
    usage
}

#[test]
fn an_admission_is_split_into_aligned_buckets_across_checkpoints_exactly() {
    let spec = windowed("100h", "48h");
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:30:00Z");
    let first = step(&spec, None, &ledger, start);
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 2, start, None), start);
    let usage = run(&spec, first, &mut ledger, 7 * 60, start + 2 * HOUR);
    let window = &usage.windows[&tier];
    assert_eq!((window.window.as_str(), window.bucket_seconds), ("48h", HOUR));
    let buckets: Vec<(&str, &str)> =
        window.buckets.iter().map(|bucket| (bucket.start.as_str(), bucket.used[GPU].as_str())).collect();
    assert_eq!(
        buckets,
        [("2026-12-02T08:00:00Z", "3600"), ("2026-12-02T09:00:00Z", "7200"), ("2026-12-02T10:00:00Z", "3600")],
        "2 GPUs from 08:30 to 10:30, cut at the hours whatever the checkpoints"
    );
    assert_eq!(window_use(&spec, &usage), 4 * HOUR as i128 * 1000);
    assert_eq!(usage.tiers[&tier].current[GPU], "14400", "the period's count is kept beside the window");
    assert!(!usage.windows.contains_key(&spec.tiers[1].name), "only tiers with a window have buckets");
}

#[test]
fn a_deleted_jobs_use_stays_in_the_window_until_its_buckets_leave_it() {
    let spec = windowed("1m", "2m");
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    for uid in ["a", "b"] {
        ledger.observe(admitted(uid, "team-a", &queue(&spec, 0), 1, start, None), start);
    }
    let usage = run(&spec, first, &mut ledger, 2, start + 40);
    assert_eq!(window_use(&spec, &usage), 80_000);
    assert_eq!(spent_budgets(&spec, Some(&usage)).len(), 1, "80 GPU-seconds of 60");
    ledger.forget("a", start + 40);
    ledger.forget("b", start + 40);
    assert!(!ledger.is_empty(), "the deletions wait for the next checkpoint");
    let usage = run(&spec, usage, &mut ledger, 2, start + 100);
    assert!(ledger.is_empty(), "counted, then dropped from the ledger");
    assert_eq!(window_use(&spec, &usage), 80_000, "deleting the jobs removes nothing from the window");
    // 4 GPU-seconds a bucket; below 60 once six have left, the sixth ending at 08:00:12: at 08:02:12.
    let spent = spent_budgets(&spec, Some(&usage));
    assert_eq!((spent[0].resets_at.as_str(), spent[0].window.as_deref()), ("2026-12-02T08:02:12Z", Some("2m")));
    let before = run(&spec, usage, &mut ledger, 2, start + 130);
    assert_eq!(window_use(&spec, &before), 60_000);
    assert_eq!(spent_budgets(&spec, Some(&before)).len(), 1, "at the limit is spent");
    let renewed = run(&spec, before, &mut ledger, 2, start + 132);
    assert_eq!(window_use(&spec, &renewed), 56_000);
    assert!(spent_budgets(&spec, Some(&renewed)).is_empty(), "the first checkpoint at the reset lifts the hold");
    let later = run(&spec, renewed, &mut ledger, 2, start + 200);
    assert!(later.windows[&spec.tiers[0].name].buckets.is_empty(), "every bucket expired");
    assert_eq!(later.tiers[&spec.tiers[0].name].current[GPU], "80", "the period's count keeps it all");
}

#[test]
fn a_changed_window_restarts_its_buckets_from_the_ledger() {
    let spec = windowed("100h", "48h");
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = step(&spec, None, &ledger, start);
    ledger.observe(admitted("done", "team-a", &queue(&spec, 0), 1, start, Some(start + HOUR)), start + HOUR);
    ledger.observe(admitted("running", "team-a", &queue(&spec, 0), 1, start, None), start);
    let usage = run(&spec, first, &mut ledger, 60, start + 2 * HOUR);
    assert_eq!(window_use(&spec, &usage), 3 * HOUR as i128 * 1000);
    // The same window continues: nothing is counted twice.
    let same = step(&spec, Some(&usage), &ledger, start + 2 * HOUR + 60);
    assert_eq!(window_use(&spec, &same), (3 * HOUR + 60) as i128 * 1000);
    // Another window restarts: the running job from its admission, the finished one (counted and dropped) not.
    let shorter = windowed("100h", "24h");
    let restarted = step(&shorter, Some(&usage), &ledger, start + 2 * HOUR + 60);
    assert_eq!(restarted.windows[&tier].window, "24h");
    assert_eq!(restarted.windows[&tier].bucket_seconds, 1800);
    assert_eq!(window_use(&shorter, &restarted), (2 * HOUR + 60) as i128 * 1000);
    // So does another bucket length under the same window (a status written otherwise).
    let mut recut = usage.clone();
    recut.windows.get_mut(&tier).unwrap().bucket_seconds = 60;
    let from_ledger = step(&spec, Some(&recut), &ledger, start + 2 * HOUR + 60);
    assert_eq!(window_use(&spec, &from_ledger), (2 * HOUR + 60) as i128 * 1000);
    // Until the next checkpoint recounts them, counts of another window spend nothing.
    let tight = windowed("1h", "24h");
    assert!(spent_budgets(&tight, Some(&usage)).is_empty());
    assert_eq!(spent_budgets(&tight, Some(&restarted)).len(), 1);
}

#[test]
fn a_restart_counts_a_running_admission_only_as_far_back_as_the_window_reaches() {
    let spec = windowed("100h", "1h");
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("long", "team-a", &queue(&spec, 0), 1, start, None), start);
    let usage = step(&spec, None, &ledger, start + 10 * HOUR + 30);
    // 75 s buckets: the window's use is its last hour of the ten, and at most one bucket more.
    let used = window_use(&spec, &usage);
    assert!((HOUR as i128 * 1000..(HOUR + 75) as i128 * 1000).contains(&used), "{used}");
    let buckets = usage.windows[&spec.tiers[0].name].buckets.len();
    assert!((48..=49).contains(&buckets), "{buckets} buckets");
}

#[test]
fn the_windows_run_on_across_a_period_turn_and_a_change_of_period() {
    let spec = windowed("100h", "48h");
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let before = at("2026-11-30T23:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, before, None), before);
    let november = step(&spec, None, &ledger, before + 1800);
    let december = step(&spec, Some(&november), &ledger, at("2026-12-01T00:30:00Z"));
    assert_eq!(december.tiers[&tier].current[GPU], "1800");
    assert_eq!(window_use(&spec, &december), 5400 * 1000, "the window does not turn with the month");
    // A new accounting period restarts the period's counts, not the window's.
    let mut daily = spec.clone();
    daily.accounting =
        Some(crate::policy::Accounting { period: Some(crate::policy::AccountingPeriod::Day), time_zone: None });
    let next = step(&daily, Some(&december), &ledger, at("2026-12-01T01:00:00Z"));
    assert_eq!(window_use(&daily, &next), 7200 * 1000, "counted on from the checkpoint, once");
}

#[test]
fn removing_the_window_drops_its_buckets_and_the_calendar_period_spends_again() {
    let spec = windowed("1h", "48h");
    let tier = spec.tiers[0].name.clone();
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 1, start, None), start);
    let usage = step(&spec, None, &ledger, start + 2 * HOUR);
    assert!(usage.windows.contains_key(&tier));
    let mut calendar = spec.clone();
    if let Some(budget) = calendar.tiers[0].budget.as_mut() {
        budget.window = None;
    }
    let spent = spent_budgets(&calendar, Some(&usage));
    assert_eq!((spent.len(), spent[0].window.as_deref()), (1, None));
    assert_eq!(spent[0].resets_at, "2027-01-01T00:00:00Z");
    let next = step(&calendar, Some(&usage), &ledger, start + 2 * HOUR + 60);
    assert!(next.windows.is_empty(), "{:?}", next.windows);
}

#[test]
fn the_usage_status_with_windows_round_trips_and_one_without_them_still_reads() {
    let spec = windowed("100h", "720h");
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(admitted("a", "team-a", &queue(&spec, 0), 3, start, None), start);
    let usage = step(&spec, None, &ledger, start + 20 * HOUR);
    let json = serde_json::to_value(&usage).unwrap();
    let window = &json["windows"][&spec.tiers[0].name];
    assert_eq!(window["window"], "720h");
    assert_eq!(window["bucketSeconds"], 54_000);
    assert_eq!(window["buckets"][0]["start"], "2026-12-01T18:00:00Z");
    assert_eq!(window["buckets"][0]["used"][GPU], "10800", "3 GPUs from 08:00 to the bucket's end at 09:00");
    assert_eq!(serde_json::from_value::<UsageStatus>(json.clone()).unwrap(), usage);
    let mut without = json;
    without.as_object_mut().unwrap().remove("windows");
    let old: UsageStatus = serde_json::from_value(without).unwrap();
    assert!(old.windows.is_empty());
    assert!(spent_budgets(&spec, Some(&old)).is_empty(), "no buckets yet: nothing spent until they are counted");
}
