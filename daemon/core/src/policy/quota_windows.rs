//! A tier's quota windows (`quotaWindows`): the times its quota differs from its base `quotas`, and the status that
//! says which window is in force; types only, no I/O. When each window is in force is decided by
//! [`crate::plan::quota_windows`], and the rules a window must follow are in `validation/quota_windows.rs`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A time the tier's quota differs from its base `quotas`: exactly one of `recurring` or `once`, and the quota
/// fields it changes. When windows overlap, one is in force: a `once` window before a `recurring` one, then the later
/// entry of the list. Admitted workloads keep running when a window lowers the quota (Kueue never evicts them for a
/// lower quota); only new admissions wait.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindow {
    /// DNS label, unique within the tier, e.g. `nights`; shown in the status and the Events.
    pub name: String,
    /// A window that comes back on days of the week, between two times of day in a named time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurring: Option<RecurringWindow>,
    /// A window between two instants, e.g. a training campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<OnceWindow>,
    /// The quota fields in force during the window, per resource the tier's `quotas` names; a field left out keeps
    /// the tier's base value.
    pub quotas: BTreeMap<String, WindowQuota>,
}

/// A window on days of the week: from `start` on each day listed to `end` the same day, or the next day when `end`
/// is not after `start` (`22:00` to `06:00` runs over midnight; equal times make a window of a whole day).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecurringWindow {
    /// The days the window starts on.
    #[schemars(length(min = 1))]
    pub days: Vec<Weekday>,
    /// Local time the window starts, `HH:MM` (24-hour clock), e.g. `20:00`.
    pub start: String,
    /// Local time the window ends, `HH:MM`; not after `start`: the next day.
    pub end: String,
    /// IANA time zone of `start` and `end`, e.g. `Europe/Berlin` or `UTC`. Daylight saving time is followed: a time
    /// the clock skips is read as the same time after the jump, a time that happens twice as its first occurrence.
    pub time_zone: String,
}

/// A window between two instants.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnceWindow {
    /// When the window opens, RFC 3339 with an offset, e.g. `2026-12-24T18:00:00+01:00`.
    pub begin: String,
    /// When it closes (after `begin`), RFC 3339 with an offset.
    pub end: String,
}

/// Quota fields of one resource during a window; at least one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowQuota {
    /// Kueue `nominalQuota` during the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal: Option<Quantity>,
    /// Kueue `borrowingLimit` during the window (needs a cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// Kueue `lendingLimit` during the window (needs a cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// A day of the week.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}

/// A tier's quota windows as the daemon last applied them (`status.quotaWindows`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierQuotaWindowStatus {
    /// The tier.
    pub tier: String,
    /// The window in force; absent: the tier's base `quotas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<String>,
    /// When the quota next changes (RFC 3339, UTC); absent: not within the next two weeks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_change: Option<String>,
    /// The window in force from `nextChange`; absent with a `nextChange`: the base `quotas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_in_force: Option<String>,
}
