//! Which quota window of each tier is in force at an instant, the tiers' quotas with it applied, and when that next
//! changes; pure, no I/O (the caller passes the clock).
//!
//! [`build_windows_in_force`] turns `(policy, now)` into the policy the plan translates (each tier's `quotas` with its
//! window in force applied) and, per tier with windows, the window in force and the next change, which the
//! reconciler shows in the status and requeues for. The precedence of overlapping windows is [`precedence`]: a `once`
//! window before a `recurring` one, then the later list entry; the winner's fields replace the base fields it names
//! (the windows are never merged, so every quota the cluster can see is the base with one window applied, which is
//! what validation checks).
//!
//! Local times follow the zone's daylight saving time with jiff's compatible rule: a start or end the clock skips
//! is read as the same time after the jump (02:30 on a spring-forward day is 03:30), one that happens twice as its
//! first occurrence.

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

use crate::policy::{QuotaWindow, RecurringWindow, Tier, TierPolicySpec, TierQuotaWindowStatus, Weekday};
use crate::syntax::{find_time_zone, parse_timestamp};

/// How far ahead the next change is looked for: two weeks covers every weekly pattern (a recurring window comes
/// back within seven days), with room for a one-off window that hides some of them.
pub const LOOKAHEAD: SignedDuration = SignedDuration::from_hours(24 * 14);

/// The policy with each tier's window in force applied, and what the status says of every tier with windows.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowsInForce {
    /// The spec the plan translates: each tier's `quotas` as in force at the instant.
    pub spec: TierPolicySpec,
    /// One entry per tier with quota windows, in the policy's order.
    pub tiers: Vec<TierWindows>,
}

/// One tier's windows at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierWindows {
    /// The tier.
    pub tier: String,
    /// The window in force; `None`: the base `quotas`.
    pub in_force: Option<String>,
    /// When the window in force next changes, within [`LOOKAHEAD`].
    pub next_change: Option<Timestamp>,
    /// The window in force from `next_change` (`None`: the base quotas).
    pub next_in_force: Option<String>,
}

impl WindowsInForce {
    /// The earliest next change of any tier: when the reconciler must run again.
    pub fn next_change(&self) -> Option<Timestamp> {
        self.tiers.iter().filter_map(|tier| tier.next_change).min()
    }

    /// `status.quotaWindows`.
    pub fn to_status(&self) -> Vec<TierQuotaWindowStatus> {
        self.tiers
            .iter()
            .map(|tier| TierQuotaWindowStatus {
                tier: tier.tier.clone(),
                in_force: tier.in_force.clone(),
                next_change: tier.next_change.map(|instant| instant.to_string()),
                next_in_force: tier.next_change.and(tier.next_in_force.clone()),
            })
            .collect()
    }
}

/// The spec as in force at `now`, with each tier's window and next change. Windows that cannot be read (an unknown
/// time zone, a malformed time; validation refuses them first) are never in force.
pub fn build_windows_in_force(spec: &TierPolicySpec, now: Timestamp) -> WindowsInForce {
    let mut effective = spec.clone();
    let mut tiers = Vec::new();
    for tier in effective.tiers.iter_mut().filter(|tier| !tier.quota_windows.is_empty()) {
        let in_force = window_in_force(tier, now).cloned();
        let (next_change, next_in_force) = match next_change(tier, now) {
            Some((instant, next)) => (Some(instant), next.map(|window| window.name.clone())),
            None => (None, None),
        };
        let name = in_force.as_ref().map(|window| window.name.clone());
        if let Some(window) = &in_force {
            apply_window(tier, window);
        }
        tiers.push(TierWindows { tier: tier.name.clone(), in_force: name, next_change, next_in_force });
    }
    WindowsInForce { spec: effective, tiers }
}

/// The window of `tier` in force at `at`: of those open then, the one first by [`precedence`].
pub fn window_in_force(tier: &Tier, at: Timestamp) -> Option<&QuotaWindow> {
    tier.quota_windows
        .iter()
        .enumerate()
        .filter(|(_, window)| is_open(window, at))
        .max_by_key(|(index, window)| precedence(window, *index))
        .map(|(_, window)| window)
}

/// The order overlapping windows win in, highest first: a `once` window over a `recurring` one, then the later entry
/// of `quotaWindows` (index `index`).
pub fn precedence(window: &QuotaWindow, index: usize) -> (bool, usize) {
    (window.once.is_some(), index)
}

/// Replaces the fields of the tier's `quotas` that `window` sets.
pub fn apply_window(tier: &mut Tier, window: &QuotaWindow) {
    for (resource, fields) in &window.quotas {
        let Some(quota) = tier.quotas.get_mut(resource) else { continue };
        if let Some(nominal) = &fields.nominal {
            quota.nominal = nominal.clone();
        }
        if let Some(limit) = &fields.borrowing_limit {
            quota.borrowing_limit = Some(limit.clone());
        }
        if let Some(limit) = &fields.lending_limit {
            quota.lending_limit = Some(limit.clone());
        }
    }
}

/// The first instant after `now` (within [`LOOKAHEAD`], or a one-off window's edge) at which the window in force
/// differs from the one at `now`, with the window from then on.
pub fn next_change(tier: &Tier, now: Timestamp) -> Option<(Timestamp, Option<&QuotaWindow>)> {
    let current = window_in_force(tier, now).map(|window| window.name.as_str());
    let until = now.checked_add(LOOKAHEAD).unwrap_or(Timestamp::MAX);
    let mut edges: Vec<Timestamp> = tier.quota_windows.iter().flat_map(|window| edges(window, now, until)).collect();
    edges.sort_unstable();
    edges.dedup();
    edges.into_iter().find_map(|edge| {
        let next = window_in_force(tier, edge);
        (next.map(|window| window.name.as_str()) != current).then_some((edge, next))
    })
}

/// The resources of which the tier's ClusterQueue holds more (`reserved`: per resource, in milli-units, its
/// `status.flavorsReservation` over all flavors) than the nominal quota `spec` now gives the tier, each with what is
/// held and the quota: a window lowered the quota below what Kueue admitted. Kueue keeps those workloads running;
/// new ones wait until enough of them finish.
pub fn admitted_above_quota(
    spec: &TierPolicySpec,
    tier: &Tier,
    reserved: &std::collections::BTreeMap<String, i128>,
) -> Vec<(String, i128, i128)> {
    let quota = super::quota::tier_quota(spec, tier);
    reserved
        .iter()
        .filter_map(|(resource, held)| {
            let nominal = quota.total_millis(resource)?;
            (*held > nominal).then(|| (resource.clone(), *held, nominal))
        })
        .collect()
}

/// One window for people: `burst (once 2026-12-02T10:00:00Z to 2026-12-02T10:01:00Z: nvidia.com/gpu nominal 20)`.
pub fn describe_window(window: &QuotaWindow) -> String {
    let when = match (&window.recurring, &window.once) {
        (Some(recurring), _) => {
            let days: Vec<String> = recurring.days.iter().map(|day| format!("{day:?}")).collect();
            format!("{} {}-{} {}", days.join(","), recurring.start, recurring.end, recurring.time_zone)
        }
        (None, Some(once)) => format!("once {} to {}", once.begin, once.end),
        (None, None) => "never".to_owned(),
    };
    let quotas: Vec<String> = window
        .quotas
        .iter()
        .map(|(resource, fields)| {
            let set: Vec<String> = [
                ("nominal", &fields.nominal),
                ("borrowingLimit", &fields.borrowing_limit),
                ("lendingLimit", &fields.lending_limit),
            ]
            .into_iter()
            .filter_map(|(field, value)| value.as_ref().map(|value| format!("{field} {}", value.0)))
            .collect();
            format!("{resource} {}", set.join(" "))
        })
        .collect();
    format!("{} ({when}: {})", window.name, quotas.join(", "))
}

/// A window's `HH:MM` time of day (24-hour clock, two digits each).
pub fn parse_clock(text: &str) -> Option<Time> {
    let (hours, minutes) = text.split_once(':')?;
    let two_digits = |part: &str| part.len() == 2 && part.bytes().all(|byte| byte.is_ascii_digit());
    if !two_digits(hours) || !two_digits(minutes) {
        return None;
    }
    Time::new(hours.parse().ok()?, minutes.parse().ok()?, 0, 0).ok()
}

/// Whether `window` is open at `at` (it opens at its begin and is closed at its end).
fn is_open(window: &QuotaWindow, at: Timestamp) -> bool {
    intervals_around(window, at, at).into_iter().any(|(begin, end)| begin <= at && at < end)
}

/// The instants in `(after, until]` at which `window` opens or closes; a one-off window's edges after `after`
/// whatever `until` says.
fn edges(window: &QuotaWindow, after: Timestamp, until: Timestamp) -> Vec<Timestamp> {
    let is_once = window.once.is_some();
    intervals_around(window, after, until)
        .into_iter()
        .flat_map(|(begin, end)| [begin, end])
        .filter(|edge| *edge > after && (is_once || *edge <= until))
        .collect()
}

/// The intervals of `window` that can touch `[from, until]`.
fn intervals_around(window: &QuotaWindow, from: Timestamp, until: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    if let Some(once) = &window.once {
        return match (parse_timestamp(&once.begin), parse_timestamp(&once.end)) {
            (Some(begin), Some(end)) if begin < end => vec![(begin, end)],
            _ => Vec::new(),
        };
    }
    window.recurring.as_ref().map(|recurring| recurring_intervals(recurring, from, until)).unwrap_or_default()
}

/// The occurrences of `recurring` that start on a local day from two days before `from` to the day of `until`
/// (an occurrence lasts at most a day and an hour, so none that touches `[from, until]` is missed).
fn recurring_intervals(recurring: &RecurringWindow, from: Timestamp, until: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    let (Some(zone), Some(start), Some(end)) =
        (find_time_zone(&recurring.time_zone), parse_clock(&recurring.start), parse_clock(&recurring.end))
    else {
        return Vec::new();
    };
    let first = from.to_zoned(zone.clone()).date().checked_sub(2.days()).ok();
    let last = until.to_zoned(zone.clone()).date();
    let mut intervals = Vec::new();
    let mut day = first;
    while let Some(date) = day.filter(|date| *date <= last) {
        if recurring.days.iter().any(|weekday| to_jiff_weekday(*weekday) == date.weekday())
            && let Some(interval) = occurrence(&zone, date, start, end)
        {
            intervals.push(interval);
        }
        day = date.tomorrow().ok();
    }
    intervals
}

/// The occurrence starting on `date`: to `end` the same day, or the next day when `end` is not after `start`.
/// `None` where daylight saving time leaves nothing of it (a window inside the skipped hour).
fn occurrence(zone: &TimeZone, date: Date, start: Time, end: Time) -> Option<(Timestamp, Timestamp)> {
    let end_date = if end > start { date } else { date.tomorrow().ok()? };
    let begin = date.to_datetime(start).to_zoned(zone.clone()).ok()?.timestamp();
    let end = end_date.to_datetime(end).to_zoned(zone.clone()).ok()?.timestamp();
    (begin < end).then_some((begin, end))
}

fn to_jiff_weekday(day: Weekday) -> jiff::civil::Weekday {
    match day {
        Weekday::Mon => jiff::civil::Weekday::Monday,
        Weekday::Tue => jiff::civil::Weekday::Tuesday,
        Weekday::Wed => jiff::civil::Weekday::Wednesday,
        Weekday::Thu => jiff::civil::Weekday::Thursday,
        Weekday::Fri => jiff::civil::Weekday::Friday,
        Weekday::Sat => jiff::civil::Weekday::Saturday,
        Weekday::Sun => jiff::civil::Weekday::Sunday,
    }
}

#[cfg(test)]
mod tests;
