//! GPU-hour accounting and tier budgets in the TierPolicy: the accounting period (`spec.accounting`), a tier's
//! budget (`tiers[].budget`), the counts checkpointed in `status.usage`, and which budgets those counts have spent;
//! pure, no I/O. A budget's rolling window (`tiers[].budget.window`) is in [`window`].
//!
//! A count is in *resource-seconds*: one GPU for an hour is 3600 `nvidia.com/gpu`-seconds. A budget limit is
//! written as the time one unit of the resource may run (`2000h` of `nvidia.com/gpu` is 2000 GPU-hours), read by
//! jiff like `maxRunTime`. The status holds counts as decimal strings of resource-seconds (`"7200"`,
//! `"5400.5"`), exact to the milli-unit, so a count never overflows or rounds.

pub mod window;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::window::{UsageBucket, WindowCounts, WindowUsage, window_seconds};
use crate::syntax::{DurationProblem, format_instant, parse_instant, parse_positive_duration};

/// The time zone of the accounting period when `spec.accounting.timeZone` is unset.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// How tiergate counts resource use: the calendar period the counts (and every tier's budget) run over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accounting {
    /// The calendar period the counts and budgets run over: `Month` (default), `Week` (from Monday) or `Day`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<AccountingPeriod>,
    /// The IANA time zone the period turns in, e.g. `Europe/Berlin` (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A calendar period.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum AccountingPeriod {
    /// From the first of a month at midnight.
    #[default]
    Month,
    /// From Monday at midnight.
    Week,
    /// From midnight.
    Day,
}

impl AccountingPeriod {
    /// The name as the policy writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Month => "Month",
            Self::Week => "Week",
            Self::Day => "Day",
        }
    }
}

impl Accounting {
    /// The period, `Month` when unset.
    pub fn period(&self) -> AccountingPeriod {
        self.period.unwrap_or_default()
    }

    /// The time zone's name, `UTC` when unset.
    pub fn time_zone_name(&self) -> &str {
        self.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE)
    }

    /// The time zone from the bundled time zone database.
    pub fn time_zone(&self) -> Result<jiff::tz::TimeZone, BudgetError> {
        let name = self.time_zone_name();
        crate::syntax::find_time_zone(name).ok_or_else(|| BudgetError::UnknownTimeZone { name: name.to_owned() })
    }
}

/// What a tier may use per accounting period, or in any rolling window of a given length. When any limit is used
/// up, the tier's ClusterQueue is held (Kueue's `stopPolicy: Hold`): admitted workloads run on, new ones wait until
/// the period turns (or enough use leaves the window) or the limit is raised.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Per resource, how long one unit of it may run in a period (or in the window): `nvidia.com/gpu: 2000h` is
    /// 2000 GPU-hours (a number and a unit: `h`, `m`, `s`, e.g. `500h`, `90m`, `1h30m`).
    pub limits: BTreeMap<String, String>,
    /// A rolling window the limits apply to instead of the accounting period: `720h` limits the use of any 720
    /// hours (30 days), counted in time buckets of a 48th of the window (the use may be over-counted by at most one
    /// bucket, never under-counted). From `1m` to `2160h` (90 days); a number and a unit (`h`, `m`, `s`). Absent:
    /// the limits run over the accounting period. See docs/guides/gpu-budgets.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// Why a budget or accounting setting cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// A limit that is not a duration jiff reads.
    #[error("{text:?} is not an amount of time")]
    NotADuration {
        /// The text.
        text: String,
    },
    /// Zero or negative.
    #[error("{text:?} is not more than zero")]
    NotPositive {
        /// The text.
        text: String,
    },
    /// A budget window shorter than a minute.
    #[error("{text:?} is shorter than the shortest window, 1m")]
    WindowTooShort {
        /// The text.
        text: String,
    },
    /// A budget window longer than 90 days.
    #[error("{text:?} is longer than the longest window, 2160h (90 days)")]
    WindowTooLong {
        /// The text.
        text: String,
    },
    /// A budget window with a fraction of a second (its buckets are whole seconds).
    #[error("{text:?} is not a whole number of seconds")]
    WindowNotWholeSeconds {
        /// The text.
        text: String,
    },
    /// A time zone the bundled database does not know.
    #[error("{name:?} is not a time zone tiergate knows")]
    UnknownTimeZone {
        /// The name.
        name: String,
    },
}

impl BudgetError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotADuration { .. } => "budget_not_a_duration",
            Self::NotPositive { .. } => "budget_not_positive",
            Self::WindowTooShort { .. } => "budget_window_too_short",
            Self::WindowTooLong { .. } => "budget_window_too_long",
            Self::WindowNotWholeSeconds { .. } => "budget_window_not_whole_seconds",
            Self::UnknownTimeZone { .. } => "unknown_time_zone",
        }
    }
}

/// A budget's duration (a limit or a window) that is more than zero.
fn positive_duration(text: &str) -> Result<jiff::SignedDuration, BudgetError> {
    parse_positive_duration(text).map_err(|problem| match problem {
        DurationProblem::NotADuration => BudgetError::NotADuration { text: text.to_owned() },
        DurationProblem::NotPositive => BudgetError::NotPositive { text: text.to_owned() },
    })
}

/// A budget limit in milli-resource-seconds: `2000h` -> 2000 · 3600 · 1000.
pub fn limit_millis(text: &str) -> Result<i128, BudgetError> {
    Ok(positive_duration(text)?.as_millis())
}

impl Budget {
    /// The limits in milli-resource-seconds; those that do not parse are left out (validation refuses them).
    pub fn limits_millis(&self) -> BTreeMap<&str, i128> {
        self.limits
            .iter()
            .filter_map(|(resource, text)| limit_millis(text).ok().map(|millis| (resource.as_str(), millis)))
            .collect()
    }

    /// The window in seconds, when the budget has one that reads (validation refuses the others).
    pub fn window_seconds(&self) -> Option<i64> {
        self.window.as_deref().and_then(|text| window_seconds(text).ok())
    }
}

/// The counts of resource use, checkpointed by the leading replica at `checkpointTime` (written with a field
/// manager of their own, never by the reconcile's status writes).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageStatus {
    /// When the counts were taken (RFC 3339): everything admitted up to this instant is in them.
    pub checkpoint_time: String,
    /// The period they run over (`Month`, `Week` or `Day`).
    pub period: AccountingPeriod,
    /// The time zone the period turns in.
    pub time_zone: String,
    /// When the current period began (RFC 3339).
    pub period_start: String,
    /// When it ends, and every budget is renewed (RFC 3339).
    pub period_end: String,
    /// When the previous period began (RFC 3339); it ended at `periodStart`.
    pub previous_period_start: String,
    /// Per tier: resource-seconds this period and the previous one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tiers: BTreeMap<String, UsageTotals>,
    /// Per tenant namespace: resource-seconds this period and the previous one, in whichever tier they ran.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespaces: BTreeMap<String, UsageTotals>,
    /// Per tier whose budget has a rolling window: its use in time buckets over that window.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, WindowUsage>,
}

/// Resource-seconds of one tier or namespace, per resource, as decimal strings (`"7200"`, `"0.5"`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// This period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub current: BTreeMap<String, String>,
    /// The previous period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub previous: BTreeMap<String, String>,
}

/// Milli-resource-seconds as the status writes them: `7_200_000` -> `"7200"`, `500` -> `"0.5"`.
pub fn format_resource_seconds(millis: i128) -> String {
    let (whole, fraction) = (millis / 1000, (millis % 1000).abs());
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:03}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// The milli-resource-seconds of a status count: a plain decimal with at most three fractional digits.
pub fn parse_resource_seconds(text: &str) -> Option<i128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || whole.len() > 30 || fraction.len() > 3 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let padded = format!("{fraction:0<3}");
    Some(whole.parse::<i128>().ok()? * 1000 + padded.parse::<i128>().ok()?)
}

/// A resource-seconds count as time of one unit, for people: hours from an hour up (`7_200_000` -> `2h`,
/// `5_400_000` -> `1.5h`), minutes from a minute (`90_000` -> `1.5m`), seconds below (`30_000` -> `30s`).
pub fn format_unit_hours(millis: i128) -> String {
    let (unit, suffix) = match millis {
        3_600_000.. => (3_600_000, "h"),
        60_000.. => (60_000, "m"),
        _ => (1000, "s"),
    };
    let hundredths = (millis * 100 + unit / 2) / unit;
    let (whole, rest) = (hundredths / 100, hundredths % 100);
    match rest {
        0 => format!("{whole}{suffix}"),
        rest if rest % 10 == 0 => format!("{whole}.{}{suffix}", rest / 10),
        rest => format!("{whole}.{rest:02}{suffix}"),
    }
}

/// When a spent budget over `window` has room again, for people: `use leaves the 720h window, at <resets_at> if
/// nothing more runs` (the sentences of `why`, `status --usage` and the `BudgetSpent` Event end on it).
pub fn describe_window_release(window: &str, resets_at: &str) -> String {
    format!("use leaves the {window} window, at {resets_at} if nothing more runs")
}

/// A tier budget used up in the period (or the window) the status describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpentBudget {
    /// The tier.
    pub tier: String,
    /// The resource whose limit is used up (the first, by name, when several are).
    pub resource: String,
    /// Used this period (or in the window), milli-resource-seconds.
    pub used: i128,
    /// The limit, milli-resource-seconds.
    pub limit: i128,
    /// When the budget has room again with no further use (RFC 3339): the period's end, or when enough use leaves
    /// the window.
    pub resets_at: String,
    /// The budget's rolling window as the policy writes it (`720h`), when it has one.
    pub window: Option<String>,
}

impl UsageStatus {
    /// This period's count of `resource` in `tier`, milli-resource-seconds (0 when none).
    pub fn tier_used(&self, tier: &str, resource: &str) -> i128 {
        self.tiers
            .get(tier)
            .and_then(|totals| totals.current.get(resource))
            .and_then(|text| parse_resource_seconds(text))
            .unwrap_or(0)
    }
}

/// What one tier's budget is measured against in a `status.usage`: this period's counts, or the window's buckets
/// at the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetCounts<'a> {
    /// The calendar period's counts of the tier.
    Period {
        /// The tier.
        tier: &'a str,
        /// The counts.
        usage: &'a UsageStatus,
    },
    /// The rolling window's buckets.
    Window {
        /// The window as the policy writes it.
        window: &'a str,
        /// The buckets.
        counts: WindowCounts,
        /// The checkpoint instant (Unix second): the window ends there.
        now: i64,
    },
}

impl BudgetCounts<'_> {
    /// The use of `resource` the budget's limit applies to, milli-resource-seconds.
    pub fn used(&self, resource: &str) -> i128 {
        match self {
            Self::Period { tier, usage } => usage.tier_used(tier, resource),
            Self::Window { counts, now, .. } => counts.used(resource, *now),
        }
    }

    /// When a limit of `limit` on `resource` has room again with no further use (RFC 3339).
    pub fn resets_at(&self, resource: &str, limit: i128) -> String {
        match self {
            Self::Period { usage, .. } => usage.period_end.clone(),
            Self::Window { counts, now, .. } => {
                counts.falls_below_at(resource, limit, *now).map(format_instant).unwrap_or_default()
            }
        }
    }

    /// The window as the policy writes it, for a windowed budget.
    pub fn window(&self) -> Option<&str> {
        match self {
            Self::Period { .. } => None,
            Self::Window { window, .. } => Some(window),
        }
    }
}

/// What `tier`'s budget is measured against in `usage`, when the counts are of the policy's setting: for a budget
/// with a window, the buckets of that window; otherwise this period's counts, when they are of the policy's period
/// and time zone. `None` when the tier has no budget, or the counts are of another setting (it was just edited):
/// those spend nothing until the next checkpoint recounts them.
pub fn budget_counts<'a>(
    spec: &crate::policy::TierPolicySpec,
    tier: &'a crate::policy::Tier,
    usage: &'a UsageStatus,
) -> Option<BudgetCounts<'a>> {
    let budget = tier.budget.as_ref()?;
    if let Some(text) = budget.window.as_deref() {
        let seconds = budget.window_seconds()?;
        let counts = WindowCounts::read(usage.windows.get(&tier.name)?, seconds)?;
        let now = parse_instant(&usage.checkpoint_time)?;
        return Some(BudgetCounts::Window { window: text.trim(), counts, now });
    }
    let accounting = spec.accounting.clone().unwrap_or_default();
    (usage.period == accounting.period() && usage.time_zone == accounting.time_zone_name())
        .then_some(BudgetCounts::Period { tier: &tier.name, usage })
}

/// The budgets of `spec`'s tiers that `usage` shows used up: in this period, or in the window at the checkpoint for
/// a budget with a window. Counts of another setting than the policy's (the period, time zone or window was just
/// edited) spend nothing until the next checkpoint recounts them.
pub fn spent_budgets(spec: &crate::policy::TierPolicySpec, usage: Option<&UsageStatus>) -> Vec<SpentBudget> {
    let Some(usage) = usage else { return Vec::new() };
    spec.tiers
        .iter()
        .filter_map(|tier| {
            let counts = budget_counts(spec, tier, usage)?;
            let budget = tier.budget.as_ref()?;
            budget.limits_millis().into_iter().find_map(|(resource, limit)| {
                let used = counts.used(resource);
                (used >= limit).then(|| SpentBudget {
                    tier: tier.name.clone(),
                    resource: resource.to_owned(),
                    used,
                    limit,
                    resets_at: counts.resets_at(resource, limit),
                    window: counts.window().map(str::to_owned),
                })
            })
        })
        .collect()
}

/// The earliest instant (Unix second) at which a budget `usage` shows spent has room again with no further use:
/// the period's turn, or when enough use leaves a window. The checkpoint loop takes a checkpoint then, so a hold
/// lifts at that instant rather than up to a checkpoint interval later. `None` when no budget is spent.
pub fn next_release(spec: &crate::policy::TierPolicySpec, usage: &UsageStatus) -> Option<i64> {
    spent_budgets(spec, Some(usage)).iter().filter_map(|spent| parse_instant(&spent.resets_at)).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_unit_time_in_milli_resource_seconds() {
        assert_eq!(limit_millis("2000h"), Ok(2000 * 3600 * 1000));
        assert_eq!(limit_millis("90m"), Ok(5400 * 1000));
        assert_eq!(limit_millis("1h30m"), Ok(5400 * 1000));
        assert_eq!(limit_millis("1.5s"), Ok(1500));
        assert!(matches!(limit_millis("2000"), Err(BudgetError::NotADuration { .. })));
        assert!(matches!(limit_millis("lots"), Err(BudgetError::NotADuration { .. })));
        assert!(matches!(limit_millis("0h"), Err(BudgetError::NotPositive { .. })));
        assert!(matches!(limit_millis("-1h"), Err(BudgetError::NotPositive { .. })));
    }

    #[test]
    fn resource_seconds_round_trip_exactly_through_the_status_text() {
        for millis in [0, 1, 500, 999, 1000, 7_200_000, 5_400_500, 123_456_789_012_345] {
            assert_eq!(parse_resource_seconds(&format_resource_seconds(millis)), Some(millis), "{millis}");
        }
        assert_eq!(format_resource_seconds(7_200_000), "7200");
        assert_eq!(format_resource_seconds(500), "0.5");
        assert_eq!(format_resource_seconds(1_050), "1.05");
        for bad in ["", ".5", "1.2345", "-1", "1e3", "7200s", "1,5"] {
            assert_eq!(parse_resource_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn counts_print_as_unit_hours() {
        assert_eq!(format_unit_hours(7_200_000), "2h");
        assert_eq!(format_unit_hours(5_400_000), "1.5h");
        assert_eq!(format_unit_hours(60_000), "1m");
        assert_eq!(format_unit_hours(90_000), "1.5m");
        assert_eq!(format_unit_hours(30_000), "30s");
        assert_eq!(format_unit_hours(0), "0s");
    }

    #[test]
    fn time_zones_come_from_the_bundled_database() {
        let berlin = Accounting { period: None, time_zone: Some("Europe/Berlin".into()) };
        assert!(berlin.time_zone().is_ok());
        assert!(Accounting::default().time_zone().is_ok());
        let unknown = Accounting { period: None, time_zone: Some("Mars/Olympus".into()) };
        assert!(matches!(unknown.time_zone(), Err(BudgetError::UnknownTimeZone { .. })));
    }
}
