//! The scheduler agent's circuit breaker: a small state machine (closed -> open after N consecutive failures ->
//! one half-open probe after a cool-down); pure, time is passed in.
//!
//! Hand-written rather than `failsafe` (the maintained option on crates.io) because failsafe's half-open state lets
//! every call through instead of one probe, and it reads a process-wide clock that tests cannot drive without
//! sleeping. Here `now` is an argument, so every transition is tested without waiting.

use std::time::{Duration, Instant};

/// Where the breaker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Calls go through; `failures` consecutive failures so far.
    Closed { failures: u32 },
    /// Calls are skipped until `until`.
    Open { until: Instant },
    /// One probe call is in flight since `since`; others are skipped. A probe that never reports (its request
    /// was dropped) is replaced by a new one after a cool-down.
    HalfOpen { since: Instant },
}

/// The breaker refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Time until a probe will be let through (zero while a probe is in flight).
    pub retry_in: Duration,
}

/// Opens after `threshold` consecutive failures and stays open for `cooldown`.
#[derive(Clone, Debug)]
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    state: State,
}

impl Breaker {
    /// A closed breaker; a `threshold` of 0 is treated as 1.
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self { threshold: threshold.max(1), cooldown, state: State::Closed { failures: 0 } }
    }

    /// Asks to make a call at `now`; when the cool-down is over this lets exactly one probe through.
    pub fn permit(&mut self, now: Instant) -> Result<(), Rejected> {
        match self.state {
            State::Closed { .. } => Ok(()),
            State::Open { until } if now < until => Err(Rejected { retry_in: until - now }),
            State::HalfOpen { since } if now < since + self.cooldown => Err(Rejected { retry_in: Duration::ZERO }),
            State::Open { .. } | State::HalfOpen { .. } => {
                self.state = State::HalfOpen { since: now };
                Ok(())
            }
        }
    }

    /// A call succeeded: the breaker closes.
    pub fn record_success(&mut self) {
        self.state = State::Closed { failures: 0 };
    }

    /// A call failed at `now`: count it, or (re)open after the threshold or a failed probe.
    pub fn record_failure(&mut self, now: Instant) {
        self.state = match self.state {
            State::Closed { failures } if failures + 1 < self.threshold => State::Closed { failures: failures + 1 },
            State::Closed { .. } | State::HalfOpen { .. } => State::Open { until: now + self.cooldown },
            open @ State::Open { .. } => open,
        };
    }

    /// True unless calls flow normally (open, or half-open waiting for its probe).
    pub fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(30);

    fn failed(breaker: &mut Breaker, times: u32, now: Instant) {
        for _ in 0..times {
            breaker.permit(now).unwrap();
            breaker.record_failure(now);
        }
    }

    #[test]
    fn stays_closed_below_the_threshold() {
        let now = Instant::now();
        let mut breaker = Breaker::new(3, COOLDOWN);
        failed(&mut breaker, 2, now);
        assert!(!breaker.is_open());
        assert_eq!(breaker.permit(now), Ok(()));
    }

    #[test]
    fn opens_at_the_threshold_and_skips_calls_for_the_cooldown() {
        let now = Instant::now();
        let mut breaker = Breaker::new(3, COOLDOWN);
        failed(&mut breaker, 3, now);
        assert!(breaker.is_open());
        assert_eq!(breaker.permit(now + Duration::from_secs(10)), Err(Rejected { retry_in: Duration::from_secs(20) }));
    }

    #[test]
    fn a_success_resets_the_count_of_consecutive_failures() {
        let now = Instant::now();
        let mut breaker = Breaker::new(3, COOLDOWN);
        failed(&mut breaker, 2, now);
        breaker.record_success();
        failed(&mut breaker, 2, now);
        assert!(!breaker.is_open());
    }

    #[test]
    fn after_the_cooldown_exactly_one_probe_goes_through() {
        let now = Instant::now();
        let mut breaker = Breaker::new(1, COOLDOWN);
        failed(&mut breaker, 1, now);
        let later = now + COOLDOWN;
        assert_eq!(breaker.permit(later), Ok(()));
        assert_eq!(breaker.permit(later), Err(Rejected { retry_in: Duration::ZERO }));
        assert!(breaker.is_open());
    }

    #[test]
    fn a_successful_probe_closes_the_breaker() {
        let now = Instant::now();
        let mut breaker = Breaker::new(1, COOLDOWN);
        failed(&mut breaker, 1, now);
        breaker.permit(now + COOLDOWN).unwrap();
        breaker.record_success();
        assert!(!breaker.is_open());
        assert_eq!(breaker.permit(now + COOLDOWN), Ok(()));
    }

    #[test]
    fn a_failed_probe_reopens_for_a_full_cooldown() {
        let now = Instant::now();
        let mut breaker = Breaker::new(1, COOLDOWN);
        failed(&mut breaker, 1, now);
        let probe_at = now + COOLDOWN;
        breaker.permit(probe_at).unwrap();
        breaker.record_failure(probe_at);
        assert_eq!(
            breaker.permit(probe_at + Duration::from_secs(1)),
            Err(Rejected { retry_in: COOLDOWN - Duration::from_secs(1) })
        );
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced_after_a_cooldown() {
        let now = Instant::now();
        let mut breaker = Breaker::new(1, COOLDOWN);
        failed(&mut breaker, 1, now);
        breaker.permit(now + COOLDOWN).unwrap();
        assert_eq!(breaker.permit(now + COOLDOWN * 2), Ok(()));
    }

    #[test]
    fn late_failures_of_calls_started_before_opening_do_not_extend_the_cooldown() {
        let now = Instant::now();
        let mut breaker = Breaker::new(1, COOLDOWN);
        failed(&mut breaker, 1, now);
        breaker.record_failure(now + Duration::from_secs(20));
        assert_eq!(breaker.permit(now + COOLDOWN), Ok(()));
    }

    #[test]
    fn a_zero_threshold_opens_on_the_first_failure() {
        let now = Instant::now();
        let mut breaker = Breaker::new(0, COOLDOWN);
        assert!(!breaker.is_open());
        failed(&mut breaker, 1, now);
        assert!(breaker.is_open());
    }
}
