//! The repeating log of active blockers: each is logged at its severity when it appears, then again with
//! exponential backoff (10 s doubling to 5 min, backon) while it lasts, and once at info when it clears. The
//! schedule ([`LogSchedule`]) is pure; [`run_blocker_log`] logs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{BlockedReason, Blocker, Blockers, Severity};

/// First repeat of a blocker's log line.
const FIRST_REPEAT: Duration = Duration::from_secs(10);
/// Longest gap between two log lines of a blocker that lasts.
const LONGEST_REPEAT: Duration = Duration::from_secs(300);
/// How often the log loop looks at the blockers (besides on every change).
const TICK: Duration = Duration::from_secs(1);

/// When each active blocker is logged next.
#[derive(Debug, Default)]
pub struct LogSchedule {
    entries: BTreeMap<BlockedReason, (Instant, backon::ExponentialBackoff)>,
}

/// What to log now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogPlan {
    /// Active blockers whose line is due (new ones at once, lasting ones on their backoff).
    pub due: Vec<BlockedReason>,
    /// Blockers that cleared since the last plan.
    pub cleared: Vec<BlockedReason>,
}

impl LogSchedule {
    /// What is due at `now`, given the active reasons; advances each logged reason's backoff.
    pub fn plan(&mut self, active: &[BlockedReason], now: Instant) -> LogPlan {
        let cleared: Vec<BlockedReason> =
            self.entries.keys().filter(|reason| !active.contains(reason)).copied().collect();
        for reason in &cleared {
            self.entries.remove(reason);
        }
        let mut due = Vec::new();
        for reason in active {
            let (next, backoff) = self.entries.entry(*reason).or_insert_with(|| (now, build_backoff()));
            if *next <= now {
                due.push(*reason);
                *next = now + backoff.next().unwrap_or(LONGEST_REPEAT);
            }
        }
        LogPlan { due, cleared }
    }
}

fn build_backoff() -> backon::ExponentialBackoff {
    backon::ExponentialBuilder::new()
        .with_min_delay(FIRST_REPEAT)
        .with_max_delay(LONGEST_REPEAT)
        .with_factor(2.0)
        .without_max_times()
        .build()
}

/// Logs active blockers on their schedule until `shutdown`.
pub async fn run_blocker_log(blockers: Arc<Blockers>, shutdown: CancellationToken) {
    let mut schedule = LogSchedule::default();
    // Notices are logged once while they last, not repeated.
    let mut noted = std::collections::BTreeSet::new();
    let mut changes = blockers.subscribe();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let active = blockers.active();
        let reasons: Vec<BlockedReason> = active.iter().map(|blocker| blocker.reason).collect();
        let plan = schedule.plan(&reasons, Instant::now());
        for blocker in active.iter().filter(|blocker| plan.due.contains(&blocker.reason)) {
            if blocker.reason.severity() != Severity::Notice || noted.insert(blocker.reason) {
                log_blocker(blocker);
            }
        }
        noted.retain(|reason| reasons.contains(reason));
        for reason in plan.cleared {
            tracing::info!(reason = reason.label(), "no longer blocked: {}", reason.summary());
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
            Ok(()) = changes.changed() => {}
        }
    }
}

fn log_blocker(blocker: &Blocker) {
    let reason = blocker.reason.label();
    let fix = blocker.reason.fix();
    let detail = blocker.detail.as_str();
    match blocker.reason.severity() {
        Severity::Error => tracing::error!(reason, detail, fix, "blocked: {}", blocker.reason.summary()),
        Severity::Warn => tracing::warn!(reason, detail, fix, "blocked: {}", blocker.reason.summary()),
        Severity::Notice => tracing::info!(reason, detail, fix, "not served here: {}", blocker.reason.summary()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_blocker_is_logged_at_once_then_with_growing_gaps_capped_at_five_minutes() {
        let mut schedule = LogSchedule::default();
        let start = Instant::now();
        let reason = [BlockedReason::LeaseNamespaceMissing];
        let mut logged_at = Vec::new();
        for second in 0..3600 {
            let now = start + Duration::from_secs(second);
            if schedule.plan(&reason, now).due == reason {
                logged_at.push(second);
            }
        }
        assert_eq!(&logged_at[..6], &[0, 10, 30, 70, 150, 310], "{logged_at:?}");
        let gaps: Vec<u64> = logged_at.windows(2).map(|pair| pair[1] - pair[0]).collect();
        assert!(gaps.iter().all(|gap| *gap <= 300), "{gaps:?}");
        assert!(logged_at.len() > 12, "a lasting blocker keeps being logged: {logged_at:?}");
    }

    #[test]
    fn a_cleared_blocker_is_reported_once_and_starts_over_when_it_returns() {
        let mut schedule = LogSchedule::default();
        let start = Instant::now();
        let reason = [BlockedReason::PolicyNotFound];
        assert_eq!(schedule.plan(&reason, start).due, reason);
        assert!(schedule.plan(&reason, start + Duration::from_secs(1)).due.is_empty());
        let cleared = schedule.plan(&[], start + Duration::from_secs(2));
        assert_eq!(cleared.cleared, reason);
        assert!(schedule.plan(&[], start + Duration::from_secs(3)).cleared.is_empty());
        assert_eq!(schedule.plan(&reason, start + Duration::from_secs(4)).due, reason);
    }
}
