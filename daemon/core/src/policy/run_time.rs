//! A tier's run-time limit (`maxRunTime`): its durations, read as the seconds Kueue's
//! `kueue.x-k8s.io/max-exec-time-seconds` label holds, and which label values Kueue can use; pure, no I/O.
//!
//! Kueue deactivates a workload once it has been admitted for longer than the label says (Workload
//! `spec.maximumExecutionTimeSeconds`, an int32). The durations are read by jiff, the parser k8s-openapi already
//! uses: Go's and Kubernetes' duration strings (`4h`, `90m`, `1h30m`, `1.5h`) and jiff's longer spellings
//! (`4 hours`) and ISO 8601 (`PT4H`). The webhook and the in-server gate hold the label with the seconds read here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::syntax::{DurationProblem, parse_positive_duration};

/// The largest limit Kueue keeps: a label above it is not an int32, and Kueue then enforces no limit at all.
pub const MAX_RUN_TIME_SECONDS: u32 = i32::MAX as u32;

/// How long a tier's workloads may run once Kueue admits them: the label a workload carries, given a default where
/// it has none and held to a ceiling. At least one of the two; durations such as `4h`, `90m` or `1h30m`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaxRunTime {
    /// The limit of a workload that asks for none (no `kueue.x-k8s.io/max-exec-time-seconds` label), at most
    /// `ceiling`. Unset: the ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The longest a workload may ask for: a larger label (or one that is not a whole number of seconds) is lowered
    /// to it. Unset: a workload may ask for any limit, and one without a label gets `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<String>,
}

/// Why a `maxRunTime` duration cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunTimeError {
    /// Not a duration jiff reads.
    #[error("{text:?} is not a duration")]
    NotADuration {
        /// The text.
        text: String,
    },
    /// Zero or negative.
    #[error("{text:?} is not longer than zero")]
    NotPositive {
        /// The text.
        text: String,
    },
    /// A fraction of a second left over: the label holds whole seconds.
    #[error("{text:?} is not a whole number of seconds")]
    NotWholeSeconds {
        /// The text.
        text: String,
    },
    /// Longer than Kueue's int32 seconds.
    #[error("{text:?} is longer than Kueue's largest limit ({MAX_RUN_TIME_SECONDS} seconds, about 68 years)")]
    TooLong {
        /// The text.
        text: String,
    },
}

impl RunTimeError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotADuration { .. } => "run_time_not_a_duration",
            Self::NotPositive { .. } => "run_time_not_positive",
            Self::NotWholeSeconds { .. } => "run_time_not_whole_seconds",
            Self::TooLong { .. } => "run_time_too_long",
        }
    }
}

/// The seconds of the duration `text` (`4h` -> 14400), from 1 to [`MAX_RUN_TIME_SECONDS`].
pub fn run_time_seconds(text: &str) -> Result<u32, RunTimeError> {
    let owned = || text.to_owned();
    let duration = parse_positive_duration(text).map_err(|problem| match problem {
        DurationProblem::NotADuration => RunTimeError::NotADuration { text: owned() },
        DurationProblem::NotPositive => RunTimeError::NotPositive { text: owned() },
    })?;
    if duration.subsec_nanos() != 0 {
        return Err(RunTimeError::NotWholeSeconds { text: owned() });
    }
    u32::try_from(duration.as_secs())
        .ok()
        .filter(|seconds| *seconds <= MAX_RUN_TIME_SECONDS)
        .ok_or(RunTimeError::TooLong { text: owned() })
}

/// `seconds` as a Go duration: `14400` -> `4h`, `5400` -> `1h30m`, `90` -> `1m30s` (jiff's compact friendly
/// format, which writes hours as the largest unit of a duration).
pub fn format_run_time(seconds: u32) -> String {
    use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
    let printer = SpanPrinter::new().designator(Designator::Compact).spacing(Spacing::None);
    printer.duration_to_string(&jiff::SignedDuration::from_secs(i64::from(seconds)))
}

/// The seconds a `kueue.x-k8s.io/max-exec-time-seconds` value stands for, when Kueue can use it: a positive whole
/// number written plainly (`[1-9][0-9]*`), at most [`MAX_RUN_TIME_SECONDS`]. Anything else (`abc`, `0`, `-5`,
/// `+5`, `007`, `99999999999`) is `None`: Kueue refuses it, or reads no limit from it.
pub fn label_seconds(value: &str) -> Option<u32> {
    let plain = value.len() <= 10
        && value.bytes().all(|byte| byte.is_ascii_digit())
        && value.bytes().next().is_some_and(|first| first != b'0');
    plain.then(|| value.parse::<u32>().ok()).flatten().filter(|seconds| *seconds <= MAX_RUN_TIME_SECONDS)
}

/// The `[1-9][0-9]*` of [`label_seconds`], as the in-server gate's CEL matches it (with its `int()` bound).
pub const LABEL_SECONDS_PATTERN: &str = "^[1-9][0-9]{0,9}$";

/// A tier's limits in seconds, as the webhook and the in-server gate apply them. At least one is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTimeLimits {
    /// `maxRunTime.default`.
    pub default: Option<u32>,
    /// `maxRunTime.ceiling`.
    pub ceiling: Option<u32>,
}

impl RunTimeLimits {
    /// The limit given to a workload without the label: the default, else the ceiling.
    pub fn when_missing(&self) -> u32 {
        self.default.or(self.ceiling).unwrap_or(MAX_RUN_TIME_SECONDS)
    }

    /// The limit that replaces a label Kueue cannot use: the ceiling, else the default.
    pub fn when_unusable(&self) -> u32 {
        self.ceiling.or(self.default).unwrap_or(MAX_RUN_TIME_SECONDS)
    }

    /// The highest label a workload may keep: the ceiling, else Kueue's largest.
    pub fn highest(&self) -> u32 {
        self.ceiling.unwrap_or(MAX_RUN_TIME_SECONDS)
    }

    /// Whether a workload may keep the label `value`: Kueue can use it and it is at most the ceiling.
    pub fn allows(&self, value: &str) -> bool {
        label_seconds(value).is_some_and(|seconds| seconds <= self.highest())
    }
}

impl MaxRunTime {
    /// The limits in seconds; `None` when neither is set or one does not parse (validation refuses both).
    pub fn limits(&self) -> Option<RunTimeLimits> {
        let parse = |text: &Option<String>| text.as_deref().map(run_time_seconds).transpose();
        let limits = RunTimeLimits { default: parse(&self.default).ok()?, ceiling: parse(&self.ceiling).ok()? };
        (limits.default.is_some() || limits.ceiling.is_some()).then_some(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_and_kubernetes_durations_read_as_seconds() {
        for (text, seconds) in
            [("4h", 14_400), ("90m", 5_400), ("1h30m", 5_400), ("1.5h", 5_400), ("45s", 45), ("2h45m30s", 9_930)]
        {
            assert_eq!(run_time_seconds(text), Ok(seconds), "{text}");
        }
        assert_eq!(run_time_seconds("PT4H"), Ok(14_400), "ISO 8601 too");
        assert_eq!(run_time_seconds(" 4h "), Ok(14_400), "surrounding spaces are ignored");
    }

    #[test]
    fn durations_kueue_cannot_hold_are_refused_saying_why() {
        assert!(matches!(run_time_seconds("4 days"), Err(RunTimeError::NotADuration { .. })));
        assert!(matches!(run_time_seconds("14400"), Err(RunTimeError::NotADuration { .. })));
        assert!(matches!(run_time_seconds("soon"), Err(RunTimeError::NotADuration { .. })));
        assert!(matches!(run_time_seconds("0s"), Err(RunTimeError::NotPositive { .. })));
        assert!(matches!(run_time_seconds("-1h"), Err(RunTimeError::NotPositive { .. })));
        assert!(matches!(run_time_seconds("1.5s"), Err(RunTimeError::NotWholeSeconds { .. })));
        assert!(matches!(run_time_seconds("600000h"), Err(RunTimeError::TooLong { .. })));
        assert_eq!(run_time_seconds("596523h14m7s"), Ok(MAX_RUN_TIME_SECONDS));
    }

    #[test]
    fn seconds_print_as_go_durations() {
        assert_eq!(format_run_time(14_400), "4h");
        assert_eq!(format_run_time(5_400), "1h30m");
        assert_eq!(format_run_time(90), "1m30s");
        assert_eq!(format_run_time(3_601), "1h1s");
        assert_eq!(format_run_time(86_400), "24h", "hours are the largest unit, as in Go");
        for seconds in [1, 59, 61, 3_599, 86_400, MAX_RUN_TIME_SECONDS] {
            assert_eq!(run_time_seconds(&format_run_time(seconds)), Ok(seconds), "{seconds}");
        }
    }

    #[test]
    fn only_plain_positive_int32_labels_are_usable() {
        assert_eq!(label_seconds("14400"), Some(14_400));
        assert_eq!(label_seconds("2147483647"), Some(MAX_RUN_TIME_SECONDS));
        for bad in ["", "0", "-5", "+5", "007", "1e3", "4h", "abc", " 60", "2147483648", "99999999999"] {
            assert_eq!(label_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_missing_label_gets_the_default_and_an_unusable_one_the_ceiling() {
        let both = RunTimeLimits { default: Some(3_600), ceiling: Some(14_400) };
        assert_eq!((both.when_missing(), both.when_unusable(), both.highest()), (3_600, 14_400, 14_400));
        let ceiling = RunTimeLimits { default: None, ceiling: Some(14_400) };
        assert_eq!((ceiling.when_missing(), ceiling.when_unusable()), (14_400, 14_400));
        let default = RunTimeLimits { default: Some(3_600), ceiling: None };
        assert_eq!((default.when_missing(), default.when_unusable()), (3_600, 3_600));
        assert!(default.allows("86400") && !default.allows("99999999999"));
        assert!(both.allows("14400") && !both.allows("14401") && !both.allows("abc"));
    }

    #[test]
    fn limits_need_one_duration_that_parses() {
        assert_eq!(MaxRunTime::default().limits(), None);
        let bad = MaxRunTime { default: Some("soon".into()), ceiling: Some("4h".into()) };
        assert_eq!(bad.limits(), None);
        let good = MaxRunTime { default: None, ceiling: Some("4h".into()) };
        assert_eq!(good.limits(), Some(RunTimeLimits { default: None, ceiling: Some(14_400) }));
    }
}
