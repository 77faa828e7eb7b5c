//! A budget's rolling window: how long it may be, its time buckets as `status.usage.windows` holds them, and the
//! arithmetic on them (adding use, expiry, the window's use, when enough of it leaves); pure, no I/O.
//!
//! A window of length `W` is counted in buckets of `W / 48` whole seconds (at least one), aligned to multiples of
//! that length since the Unix epoch, so every replica cuts the same buckets. A bucket holds the exact use within it.
//! The window's use at `now` is the sum of every bucket that overlaps `(now - W, now]`, counted in full: it includes
//! the use of at most one bucket length before the window began, so it over-counts by at most one bucket (1/48 of
//! the window) and never under-counts.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BudgetError, format_resource_seconds, parse_resource_seconds, positive_duration};
use crate::syntax::{format_instant, parse_instant};

/// How many buckets a window is cut into: the over-count is at most one of them.
pub const WINDOW_BUCKETS: i64 = 48;
/// The shortest window: one minute.
pub const MIN_WINDOW_SECONDS: i64 = 60;
/// The longest window: 2160 hours (90 days), so its buckets stay few and the status small.
pub const MAX_WINDOW_SECONDS: i64 = 2160 * 3600;

/// A budget window's length in seconds, whole (its buckets are): from `1m` to `2160h`, read by jiff like the
/// limits.
pub fn window_seconds(text: &str) -> Result<i64, BudgetError> {
    let owned = || text.to_owned();
    let duration = positive_duration(text)?;
    if duration.subsec_nanos() != 0 {
        return Err(BudgetError::WindowNotWholeSeconds { text: owned() });
    }
    match duration.as_secs() {
        seconds if seconds < MIN_WINDOW_SECONDS => Err(BudgetError::WindowTooShort { text: owned() }),
        seconds if seconds > MAX_WINDOW_SECONDS => Err(BudgetError::WindowTooLong { text: owned() }),
        seconds => Ok(seconds),
    }
}

/// The bucket length of a window of `window` seconds: its 48th, whole seconds, at least one.
pub fn bucket_seconds(window: i64) -> i64 {
    (window / WINDOW_BUCKETS).max(1)
}

/// The start of the bucket of length `bucket` that the Unix second `at` falls in.
pub fn bucket_start(at: i64, bucket: i64) -> i64 {
    at.div_euclid(bucket) * bucket
}

/// A tier's use over its budget's rolling window, in time buckets (`status.usage.windows[tier]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowUsage {
    /// The budget's window the buckets count (`720h`). A checkpoint that finds another window (or bucket length) in
    /// the policy starts the tier's buckets again.
    pub window: String,
    /// The length of one bucket in seconds: the window's 48th, whole seconds.
    pub bucket_seconds: i64,
    /// The buckets with use, oldest first; those that ended a window or more before the checkpoint are dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<UsageBucket>,
}

/// The use within one bucket.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageBucket {
    /// When it begins (RFC 3339), a multiple of `bucketSeconds` since the Unix epoch; it ends `bucketSeconds` later.
    pub start: String,
    /// Resource-seconds used within it, per resource, as decimal strings (`"7200"`, `"0.5"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used: BTreeMap<String, String>,
}

/// A window's buckets as numbers: milli-resource-seconds per resource, by bucket start (Unix seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// The window, seconds.
    pub window: i64,
    /// The bucket length, seconds.
    pub bucket: i64,
    /// Per bucket start, per resource.
    pub buckets: BTreeMap<i64, BTreeMap<String, i128>>,
}

impl WindowCounts {
    /// No use yet in a window of `window` seconds.
    pub fn empty(window: i64) -> Self {
        Self { window, bucket: bucket_seconds(window), buckets: BTreeMap::new() }
    }

    /// The counts of `status` when they are of a window of `window` seconds cut as tiergate cuts it; `None` when
    /// the status counted another window or bucket length. Buckets whose start or counts do not read are left out.
    pub fn read(status: &WindowUsage, window: i64) -> Option<Self> {
        let matches = window_seconds(&status.window) == Ok(window) && status.bucket_seconds == bucket_seconds(window);
        if !matches {
            return None;
        }
        let mut counts = Self::empty(window);
        for bucket in &status.buckets {
            let Some(start) = parse_instant(&bucket.start) else { continue };
            let used = bucket
                .used
                .iter()
                .filter_map(|(resource, text)| parse_resource_seconds(text).map(|millis| (resource.clone(), millis)));
            let entry = counts.buckets.entry(bucket_start(start, counts.bucket)).or_default();
            for (resource, millis) in used {
                *entry.entry(resource).or_insert(0) += millis;
            }
        }
        Some(counts)
    }

    /// The status form, with `window` as the policy writes it; buckets without use are left out.
    pub fn write(&self, window: &str) -> WindowUsage {
        let buckets = self
            .buckets
            .iter()
            .map(|(start, used)| UsageBucket {
                start: format_instant(*start),
                used: used
                    .iter()
                    .filter(|(_, millis)| **millis > 0)
                    .map(|(resource, millis)| (resource.clone(), format_resource_seconds(*millis)))
                    .collect(),
            })
            .filter(|bucket| !bucket.used.is_empty())
            .collect();
        WindowUsage { window: window.trim().to_owned(), bucket_seconds: self.bucket, buckets }
    }

    /// The start of the oldest bucket that still overlaps the window ending at `now`.
    pub fn oldest_start(&self, now: i64) -> i64 {
        bucket_start(now - self.window, self.bucket)
    }

    /// Drops the buckets that ended a window or more before `now`: they no longer overlap `(now - window, now]`.
    pub fn expire(&mut self, now: i64) {
        let oldest = self.oldest_start(now);
        self.buckets.retain(|start, _| *start >= oldest);
    }

    /// Adds `amount` milli-units of `resource` running over `[from, to]` to the buckets that interval overlaps,
    /// each the seconds it overlaps them.
    pub fn add(&mut self, resource: &str, amount: i128, from: i64, to: i64) {
        let mut start = bucket_start(from, self.bucket);
        while start < to {
            let end = start + self.bucket;
            let seconds = i128::from(to.min(end) - from.max(start));
            if seconds > 0 && amount > 0 {
                *self.buckets.entry(start).or_default().entry(resource.to_owned()).or_insert(0) += amount * seconds;
            }
            start = end;
        }
    }

    /// The buckets overlapping `(now - window, now]`, oldest first: those that began before `now` (one that begins
    /// later, written by a replica whose clock ran ahead, counts once its time comes).
    fn in_window(&self, now: i64) -> impl Iterator<Item = (i64, &BTreeMap<String, i128>)> {
        self.buckets.range(self.oldest_start(now)..now).map(|(start, used)| (*start, used))
    }

    /// The window's use of `resource` at `now`, milli-resource-seconds: every bucket overlapping `(now - window,
    /// now]` in full.
    pub fn used(&self, resource: &str, now: i64) -> i128 {
        self.in_window(now).filter_map(|(_, used)| used.get(resource)).sum()
    }

    /// When, with no further use, the window's use of `resource` at `now` falls below `limit`: the earliest end of
    /// a bucket plus the window (when that bucket leaves it) by which enough use has left. `None` when it is below
    /// already.
    pub fn falls_below_at(&self, resource: &str, limit: i128, now: i64) -> Option<i64> {
        let mut used = self.used(resource, now);
        if used < limit {
            return None;
        }
        for (start, counts) in self.in_window(now) {
            used -= counts.get(resource).copied().unwrap_or(0);
            if used < limit {
                return Some(start + self.bucket + self.window);
            }
        }
        // Only when the limit is zero or less, which validation refuses: the last bucket's departure.
        self.buckets.keys().next_back().map(|start| start + self.bucket + self.window)
    }
}

#[cfg(test)]
mod tests;
