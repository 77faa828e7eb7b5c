//! The rolling windows' part of the checkpoint step: per tier whose budget has a window, the last checkpoint's
//! buckets, expired up to `now`, plus what the ledger shows was admitted since that checkpoint; pure, no I/O.
//!
//! A tier whose window (or bucket length) differs from the checkpoint's, or that has no buckets there yet, starts
//! them again from the ledger, as a change of the accounting period restarts the period's counts: the admissions
//! the ledger holds (those still running, and those that ended since the last checkpoint) are counted as far back
//! as the window reaches; use that ended before the last checkpoint is not in the new buckets.

use std::collections::BTreeMap;

use super::{WorkloadLedger, counted_resources};
use crate::plan::names::cluster_queue_name;
use crate::policy::budget::{WindowCounts, WindowUsage};
use crate::policy::{Tier, TierPolicySpec, UsageStatus};
use crate::syntax::parse_instant;

/// The buckets of every tier of `spec` whose budget has a window, at `now`, from `last` (the latest checkpoint)
/// and `ledger`.
pub(super) fn advance_windows(
    last: Option<&UsageStatus>,
    ledger: &WorkloadLedger,
    spec: &TierPolicySpec,
    now: i64,
) -> BTreeMap<String, WindowUsage> {
    spec.tiers
        .iter()
        .filter_map(|tier| {
            let budget = tier.budget.as_ref()?;
            let (text, window) = (budget.window.as_deref()?, budget.window_seconds()?);
            Some((tier.name.clone(), advance_window(last, ledger, spec, tier, window, now).write(text)))
        })
        .collect()
}

/// One tier's buckets of a `window`-second window at `now`.
fn advance_window(
    last: Option<&UsageStatus>,
    ledger: &WorkloadLedger,
    spec: &TierPolicySpec,
    tier: &Tier,
    window: i64,
    now: i64,
) -> WindowCounts {
    let kept = last.and_then(|last| {
        let checkpoint = parse_instant(&last.checkpoint_time)?;
        Some((checkpoint, WindowCounts::read(last.windows.get(&tier.name)?, window)?))
    });
    // Counted up to the checkpoint when the buckets are kept; from the oldest bucket still in the window otherwise.
    let (counted_to, mut counts) = kept.unwrap_or((i64::MIN, WindowCounts::empty(window)));
    counts.expire(now);
    let from = counted_to.max(counts.oldest_start(now));
    let queue = cluster_queue_name(&tier.name);
    let resources = counted_resources(spec, &tier.name);
    let intervals = ledger.records.values().flat_map(|record| &record.intervals);
    for interval in intervals.filter(|interval| interval.cluster_queue == queue) {
        let (start, end) = (interval.start.max(from), interval.end.unwrap_or(now).min(now));
        if end <= start {
            continue;
        }
        for (resource, amount) in interval.usage.iter().filter(|(resource, _)| resources.contains(*resource)) {
            counts.add(resource, *amount, start, end);
        }
    }
    counts
}

#[cfg(test)]
mod tests;
