//! The accounting ledger: the admission intervals of Kueue Workloads as the watch reports them, and the step that
//! adds them to the last checkpoint's counts; pure, no I/O.
//!
//! A checkpoint holds the counts up to its instant `T`. The next one at `now` adds, for every admission interval
//! the ledger knows, the resources Kueue charged (`resourceUsage`) times the seconds the interval overlaps
//! `(T, now]`, split at the period boundary. A workload's interval is its `Admitted` condition's
//! `lastTransitionTime` to its `Finished` one (or the moment it stopped being admitted, or was deleted, or `now`
//! while it runs), so a replica that starts from a checkpoint recounts `(T, now]` from the Workloads that exist.
//! Usage is attributed by the ClusterQueue Kueue admitted the workload in (`status.admission.clusterQueue`, which
//! only Kueue writes) and by the workload's namespace, never by a label a tenant sets. The same step adds the
//! overlap to the time buckets of the tiers whose budget has a rolling window (`ledger::window`).

use std::collections::{BTreeMap, BTreeSet};

use super::period::{PeriodBounds, format_instant, parse_instant, period_bounds};
use crate::plan::names::cluster_queue_name;
use crate::policy::budget::{BudgetError, DEFAULT_TIME_ZONE, format_resource_seconds, parse_resource_seconds};
use crate::policy::{Accounting, AccountingPeriod, TierPolicySpec, UsageStatus, UsageTotals};

mod window;

/// Milli-resource-seconds per resource name.
pub type ResourceMillis = BTreeMap<String, i128>;

/// What the watch read from one Workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadObservation {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// Its admission, when Kueue admitted it (`Admitted=True`).
    pub admission: Option<Admission>,
    /// When it stopped being admitted (`Admitted=False`'s `lastTransitionTime`), when it is not admitted now.
    pub stopped_at: Option<i64>,
}

/// An admission of a Workload: where, what for, since when and, once it finished, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// `status.admission.clusterQueue`.
    pub cluster_queue: String,
    /// The sum over pod sets of `status.admission.podSetAssignments[].resourceUsage`, milli-units.
    pub usage: ResourceMillis,
    /// `Admitted=True`'s `lastTransitionTime`.
    pub since: i64,
    /// `Finished=True`'s `lastTransitionTime`, once finished.
    pub finished_at: Option<i64>,
}

/// One admission interval of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Interval {
    cluster_queue: String,
    usage: ResourceMillis,
    start: i64,
    end: Option<i64>,
}

/// What the ledger keeps of one workload until a checkpoint has counted all of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct WorkloadRecord {
    namespace: String,
    intervals: Vec<Interval>,
}

impl WorkloadRecord {
    /// Ends the open interval (if any) at `at`, never before it began.
    fn close(&mut self, at: i64) {
        for interval in self.intervals.iter_mut().filter(|interval| interval.end.is_none()) {
            interval.end = Some(at.max(interval.start));
        }
    }
}

/// The admission intervals of every Workload seen since the last checkpoint counted them, by uid; kept for
/// workloads deleted meanwhile, so a Job deleted a second after it finished is still counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadLedger {
    records: BTreeMap<String, WorkloadRecord>,
    /// The uids of the list in progress (between a watch's `Init` and `InitDone`).
    relisting: Option<BTreeSet<String>>,
    /// Whether the watch has listed every Workload once: until then no checkpoint may be taken.
    listed: bool,
}

impl WorkloadLedger {
    /// Whether the watch has listed every Workload once.
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// How many workloads the ledger holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Records what the watch shows of a Workload at `now`.
    pub fn observe(&mut self, observation: WorkloadObservation, now: i64) {
        if let Some(seen) = &mut self.relisting {
            seen.insert(observation.uid.clone());
        }
        let Some(admission) = observation.admission else {
            if let Some(record) = self.records.get_mut(&observation.uid) {
                record.close(observation.stopped_at.unwrap_or(now));
            }
            return;
        };
        let record = self
            .records
            .entry(observation.uid)
            .or_insert_with(|| WorkloadRecord { namespace: observation.namespace.clone(), intervals: Vec::new() });
        let end = admission.finished_at.map(|finished| finished.max(admission.since));
        if let Some(same) = record.intervals.iter_mut().find(|interval| interval.start == admission.since) {
            same.end = end;
            same.cluster_queue = admission.cluster_queue;
            same.usage = admission.usage;
            return;
        }
        // A new admission: an earlier one still open was evicted unseen, no later than this one began.
        record.close(admission.since);
        record.intervals.push(Interval {
            cluster_queue: admission.cluster_queue,
            usage: admission.usage,
            start: admission.since,
            end,
        });
    }

    /// Records that a Workload was deleted at `now`: an admission still open ends there.
    pub fn forget(&mut self, uid: &str, now: i64) {
        if let Some(record) = self.records.get_mut(uid) {
            record.close(now);
        }
    }

    /// A (re)list of every Workload begins.
    pub fn begin_list(&mut self) {
        self.relisting = Some(BTreeSet::new());
    }

    /// The list ended at `now`: workloads it did not show were deleted while the watch was away.
    pub fn end_list(&mut self, now: i64) {
        if let Some(seen) = self.relisting.take() {
            for (uid, record) in &mut self.records {
                if !seen.contains(uid) {
                    record.close(now);
                }
            }
        }
        self.listed = true;
    }

    /// Drops what a checkpoint at `checkpoint` has counted in full: intervals that ended by then.
    pub fn prune(&mut self, checkpoint: i64) {
        for record in self.records.values_mut() {
            record.intervals.retain(|interval| interval.end.is_none_or(|end| end > checkpoint));
        }
        self.records.retain(|_, record| !record.intervals.is_empty());
    }
}

/// What one checkpoint step added, milli-resource-seconds, per tier and per namespace (the Prometheus counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageAdded {
    /// Per tier, per resource.
    pub tiers: BTreeMap<String, ResourceMillis>,
    /// Per namespace, per resource.
    pub namespaces: BTreeMap<String, ResourceMillis>,
}

/// The resources counted for a tier: those it has quota for (what Kueue charges its ClusterQueue) and those its
/// budget limits.
pub fn counted_resources(spec: &TierPolicySpec, tier: &str) -> BTreeSet<String> {
    let Some(tier) = spec.tier(tier) else { return BTreeSet::new() };
    let budgeted = tier.budget.iter().flat_map(|budget| budget.limits.keys());
    tier.quotas.keys().chain(budgeted).cloned().collect()
}

/// Seconds of `[start, end]` within `[from, to]`.
fn overlap(start: i64, end: i64, from: i64, to: i64) -> i64 {
    (end.min(to) - start.max(from)).max(0)
}

/// Counts by key and resource, as the step adds to them.
type Counts = BTreeMap<String, ResourceMillis>;

fn read_counts(entries: &BTreeMap<String, UsageTotals>, previous: bool) -> Counts {
    entries
        .iter()
        .map(|(key, totals)| {
            let side = if previous { &totals.previous } else { &totals.current };
            let parsed = side
                .iter()
                .filter_map(|(resource, text)| parse_resource_seconds(text).map(|millis| (resource.clone(), millis)))
                .collect();
            (key.clone(), parsed)
        })
        .collect()
}

fn add(counts: &mut Counts, key: &str, resource: &str, millis: i128) {
    if millis > 0 {
        *counts.entry(key.to_owned()).or_default().entry(resource.to_owned()).or_insert(0) += millis;
    }
}

fn write_counts(current: &Counts, previous: &Counts) -> BTreeMap<String, UsageTotals> {
    let text = |counts: Option<&ResourceMillis>| -> BTreeMap<String, String> {
        counts
            .into_iter()
            .flatten()
            .filter(|(_, millis)| **millis > 0)
            .map(|(resource, millis)| (resource.clone(), format_resource_seconds(*millis)))
            .collect()
    };
    let keys: BTreeSet<&String> = current.keys().chain(previous.keys()).collect();
    keys.into_iter()
        .map(|key| (key.clone(), UsageTotals { current: text(current.get(key)), previous: text(previous.get(key)) }))
        .filter(|(_, totals)| !totals.current.is_empty() || !totals.previous.is_empty())
        .collect()
}

/// The policy and the period a checkpoint step counts in.
#[derive(Clone, Debug)]
pub struct CheckpointFrame<'a> {
    /// The policy (tiers, their quotas and budgets, the accounting setting).
    pub spec: &'a TierPolicySpec,
    /// The policy's period (`Month` unless set).
    pub period: AccountingPeriod,
    /// The policy's time zone name (`UTC` unless set).
    pub time_zone: &'a str,
    /// The period `now` falls in, in that time zone.
    pub bounds: PeriodBounds,
}

impl<'a> CheckpointFrame<'a> {
    /// The frame of a checkpoint of `spec` at `now`; fails when the time zone is unknown (validation refuses it).
    pub fn at(spec: &'a TierPolicySpec, now: i64) -> Result<Self, BudgetError> {
        let accounting = spec.accounting.as_ref();
        let period = accounting.map(Accounting::period).unwrap_or_default();
        let time_zone = accounting.map_or(DEFAULT_TIME_ZONE, Accounting::time_zone_name);
        let zone = crate::syntax::find_time_zone(time_zone)
            .ok_or_else(|| BudgetError::UnknownTimeZone { name: time_zone.to_owned() })?;
        let bounds = period_bounds(period, &zone, now)
            .ok_or_else(|| BudgetError::UnknownTimeZone { name: time_zone.to_owned() })?;
        Ok(Self { spec, period, time_zone, bounds })
    }
}

/// The counts at `now`: `last` (the latest checkpoint) plus what `ledger` shows was admitted since, split at the
/// period boundary, and what this step added. Without a usable checkpoint (none yet, or one of another period or
/// time zone) the count starts at the previous period's start, from the Workloads the ledger holds. The rolling
/// windows' buckets advance likewise, independently of the period. A `now` not after the checkpoint
/// returns it unchanged.
pub fn advance_usage(
    last: Option<&UsageStatus>,
    ledger: &WorkloadLedger,
    frame: &CheckpointFrame<'_>,
    now: i64,
) -> (UsageStatus, UsageAdded) {
    let bounds = frame.bounds;
    let usable = last.filter(|last| {
        last.period == frame.period
            && last.time_zone == frame.time_zone
            && parse_instant(&last.checkpoint_time).is_some()
    });
    let checkpoint = usable.and_then(|last| parse_instant(&last.checkpoint_time)).unwrap_or(bounds.previous_start);
    if let Some(last) = usable
        && now <= checkpoint
    {
        return (last.clone(), UsageAdded::default());
    }
    let last_start = usable.and_then(|last| parse_instant(&last.period_start));
    // The counts carried over: this period's if the checkpoint is in it; the previous period's if the checkpoint
    // was taken in that one (its "current" becomes "previous"); nothing of periods further back.
    let carried = |entries: fn(&UsageStatus) -> &BTreeMap<String, UsageTotals>| -> (Counts, Counts) {
        match (usable, last_start) {
            (Some(last), Some(start)) if start == bounds.start => {
                (read_counts(entries(last), false), read_counts(entries(last), true))
            }
            (Some(last), Some(start)) if start == bounds.previous_start => {
                (Counts::new(), read_counts(entries(last), false))
            }
            _ => (Counts::new(), Counts::new()),
        }
    };
    let (mut tiers_now, mut tiers_before) = carried(|usage| &usage.tiers);
    let (mut spaces_now, mut spaces_before) = carried(|usage| &usage.namespaces);
    let mut added = UsageAdded::default();
    let tier_of_queue: BTreeMap<String, (&str, BTreeSet<String>)> = frame
        .spec
        .tiers
        .iter()
        .map(|tier| (cluster_queue_name(&tier.name), (tier.name.as_str(), counted_resources(frame.spec, &tier.name))))
        .collect();
    let current = (checkpoint.max(bounds.start), now);
    let previous = (checkpoint.max(bounds.previous_start), now.min(bounds.start));
    for record in ledger.records.values() {
        for interval in &record.intervals {
            let Some((tier, resources)) = tier_of_queue.get(&interval.cluster_queue) else { continue };
            let end = interval.end.unwrap_or(now);
            let seconds_now = i128::from(overlap(interval.start, end, current.0, current.1));
            let seconds_before = i128::from(overlap(interval.start, end, previous.0, previous.1));
            for (resource, amount) in interval.usage.iter().filter(|(resource, _)| resources.contains(*resource)) {
                let (now_millis, before_millis) = (amount * seconds_now, amount * seconds_before);
                add(&mut tiers_now, tier, resource, now_millis);
                add(&mut tiers_before, tier, resource, before_millis);
                add(&mut spaces_now, &record.namespace, resource, now_millis);
                add(&mut spaces_before, &record.namespace, resource, before_millis);
                add(&mut added.tiers, tier, resource, now_millis + before_millis);
                add(&mut added.namespaces, &record.namespace, resource, now_millis + before_millis);
            }
        }
    }
    let usage = UsageStatus {
        checkpoint_time: format_instant(now),
        period: frame.period,
        time_zone: frame.time_zone.to_owned(),
        period_start: format_instant(bounds.start),
        period_end: format_instant(bounds.end),
        previous_period_start: format_instant(bounds.previous_start),
        tiers: write_counts(&tiers_now, &tiers_before),
        namespaces: write_counts(&spaces_now, &spaces_before),
        windows: window::advance_windows(last, ledger, frame.spec, now),
    };
    (usage, added)
}

/// The checkpoint instant of `usage`, as a Unix second.
pub fn checkpoint_second(usage: &UsageStatus) -> Option<i64> {
    parse_instant(&usage.checkpoint_time)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod failover_tests;
