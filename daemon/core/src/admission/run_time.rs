//! What a queued workload's `kueue.x-k8s.io/max-exec-time-seconds` label ends as under its tier's `maxRunTime`:
//! the default where it is missing, the ceiling where it is above it or unusable, on CREATE and across UPDATE
//! sequences; pure, no I/O.
//!
//! Kueue lets the label change only while the workload is suspended, before and after the update
//! (jobframework's `validateUpdateForMaxExecTime`), and deletes and re-creates a suspended workload whose label
//! changed. So an UPDATE that leaves the label as it was is never touched (an object created before the tier had a
//! limit keeps running without one); a change on a suspended workload is held to the tier like a CREATE, a dropped
//! label getting its old value back; a change on a running or unsuspending workload is undone (Kueue would refuse
//! it, and accepts the old value, being no change).

use tiergate_workloads::MAX_EXEC_TIME_LABEL;

use crate::policy::RunTimeLimits;
use crate::policy::run_time::{format_run_time, label_seconds};

/// The facts the decision is made from.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunTimeFacts<'a> {
    /// Decided as an UPDATE (a kind that carries the label itself; a CronJob's template is decided as a CREATE).
    pub update: bool,
    /// The label on the incoming object.
    pub current: Option<&'a str>,
    /// The label on the old object (UPDATE only).
    pub old: Option<&'a str>,
    /// The workload was suspended before the update and still is: Kueue lets the label change.
    pub stays_suspended: bool,
    /// The tier's limits.
    pub limits: RunTimeLimits,
    /// The tier's name, for messages.
    pub tier: &'a str,
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RunTimeOutcome {
    /// The label stays as it is.
    Keep {
        /// Why (for the decision's reasons).
        reason: String,
    },
    /// The label is set to `seconds`.
    Set {
        /// The label value.
        seconds: String,
        /// Said to the user (a clamp, an undone change).
        warning: Option<String>,
        /// Why.
        reason: String,
    },
    /// The label is removed (an update added it to a running workload that had none).
    Remove {
        /// Said to the user.
        warning: String,
    },
}

/// Decides the label.
pub(super) fn run_time_outcome(facts: RunTimeFacts<'_>) -> RunTimeOutcome {
    let RunTimeFacts { update, current, old, stays_suspended, limits, tier } = facts;
    let field = format!("metadata.labels[\"{MAX_EXEC_TIME_LABEL}\"]");
    let described = |value: Option<&str>| value.map_or_else(|| "(none)".to_owned(), str::to_owned);
    if update && current == old {
        let reason = match current {
            Some(value) => format!("run-time limit {value}s kept: this update leaves {MAX_EXEC_TIME_LABEL} as it was"),
            None => format!(
                "no run-time limit: the workload was created without {MAX_EXEC_TIME_LABEL} and this update leaves it \
                 so"
            ),
        };
        return RunTimeOutcome::Keep { reason };
    }
    if update && !stays_suspended {
        let warning = format!(
            "{field} is fixed while the workload runs or is being started (Kueue refuses the change): this update's \
             change from {} to {} was undone",
            described(old),
            described(current)
        );
        return match old {
            Some(old) => RunTimeOutcome::Set {
                seconds: old.to_owned(),
                warning: Some(warning),
                reason: format!("UPDATE: run-time limit restored to {old}s"),
            },
            None => RunTimeOutcome::Remove { warning },
        };
    }
    let ceiling = limits.ceiling.map(format_run_time);
    let Some(value) = current else {
        if let Some(old) = old.filter(|old| limits.allows(old)) {
            return RunTimeOutcome::Set {
                seconds: old.to_owned(),
                warning: Some(format!("{field} {old} restored: this update removed it; tier {tier} keeps a limit")),
                reason: format!("UPDATE: run-time limit restored to {old}s (the update removed it)"),
            };
        }
        let seconds = limits.when_missing();
        let source = match limits.default {
            Some(_) => "default",
            None => "ceiling",
        };
        return RunTimeOutcome::Set {
            seconds: seconds.to_string(),
            warning: update.then(|| format!("{field} set to {seconds}: this update removed it")),
            reason: format!("run-time limit {seconds}s ({}), tier {tier}'s {source}", format_run_time(seconds)),
        };
    };
    if limits.allows(value) {
        let within = ceiling.map(|ceiling| format!(", within tier {tier}'s ceiling {ceiling}")).unwrap_or_default();
        return RunTimeOutcome::Keep { reason: format!("the workload's own run-time limit {value}s kept{within}") };
    }
    let seconds = match label_seconds(value) {
        Some(_) => limits.highest(),
        None => limits.when_unusable(),
    };
    let why = match (label_seconds(value), &ceiling) {
        (Some(_), Some(ceiling)) => format!("above tier {tier}'s ceiling {ceiling}"),
        _ => "not a whole number of seconds from 1 to 2147483647, which Kueue needs (it refuses the workload or \
              enforces no limit at all)"
            .to_owned(),
    };
    RunTimeOutcome::Set {
        seconds: seconds.to_string(),
        warning: Some(format!("{field} {value} replaced by {seconds}: {why}")),
        reason: format!("run-time limit lowered to {seconds}s ({}): {value} is {why}", format_run_time(seconds)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOUR_HOURS: RunTimeLimits = RunTimeLimits { default: Some(3_600), ceiling: Some(14_400) };

    fn create(current: Option<&str>) -> RunTimeOutcome {
        run_time_outcome(RunTimeFacts {
            update: false,
            current,
            old: None,
            stays_suspended: false,
            limits: FOUR_HOURS,
            tier: "bronze",
        })
    }

    fn update(current: Option<&str>, old: Option<&str>, stays_suspended: bool) -> RunTimeOutcome {
        run_time_outcome(RunTimeFacts {
            update: true,
            current,
            old,
            stays_suspended,
            limits: FOUR_HOURS,
            tier: "bronze",
        })
    }

    fn set_to(outcome: &RunTimeOutcome) -> Option<&str> {
        match outcome {
            RunTimeOutcome::Set { seconds, .. } => Some(seconds),
            _ => None,
        }
    }

    #[test]
    fn a_create_without_the_label_gets_the_default_silently() {
        let outcome = create(None);
        assert_eq!(set_to(&outcome), Some("3600"));
        assert!(matches!(&outcome, RunTimeOutcome::Set { warning: None, reason, .. } if reason.contains("default")));
    }

    #[test]
    fn a_create_asking_for_less_keeps_it_and_more_or_garbage_gets_the_ceiling_with_a_warning() {
        assert!(matches!(create(Some("600")), RunTimeOutcome::Keep { .. }));
        assert!(matches!(create(Some("14400")), RunTimeOutcome::Keep { .. }));
        for (value, why) in [
            ("14401", "above tier bronze's ceiling 4h"),
            ("99999999999", "not a whole number of seconds"),
            ("abc", "not a whole number"),
            ("0", "not a whole number"),
            ("-1", "not a whole number"),
        ] {
            let outcome = create(Some(value));
            assert_eq!(set_to(&outcome), Some("14400"), "{value}");
            assert!(
                matches!(&outcome, RunTimeOutcome::Set { warning: Some(warning), .. } if warning.contains(why)),
                "{value}: {outcome:?}"
            );
        }
    }

    #[test]
    fn without_a_ceiling_any_usable_limit_is_kept_and_garbage_gets_the_default() {
        let limits = RunTimeLimits { default: Some(3_600), ceiling: None };
        let facts = |current| RunTimeFacts {
            update: false,
            current,
            old: None,
            stays_suspended: false,
            limits,
            tier: "bronze",
        };
        assert!(matches!(run_time_outcome(facts(Some("2147483647"))), RunTimeOutcome::Keep { .. }));
        assert_eq!(set_to(&run_time_outcome(facts(Some("99999999999")))), Some("3600"));
        let ceiling_only = RunTimeLimits { default: None, ceiling: Some(7_200) };
        let missing = run_time_outcome(RunTimeFacts { limits: ceiling_only, ..facts(None) });
        assert!(
            matches!(&missing, RunTimeOutcome::Set { seconds, reason, .. } if seconds == "7200" && reason.contains("ceiling"))
        );
    }

    #[test]
    fn an_update_leaving_the_label_as_it_was_is_never_touched() {
        for (label, suspended) in [(None, false), (None, true), (Some("99999"), false), (Some("600"), true)] {
            assert!(matches!(update(label, label, suspended), RunTimeOutcome::Keep { .. }), "{label:?}");
        }
    }

    #[test]
    fn a_suspended_workloads_update_is_held_to_the_tier_and_a_removal_restores_the_old_value() {
        assert_eq!(set_to(&update(Some("86400"), Some("600"), true)), Some("14400"));
        assert!(matches!(update(Some("7200"), Some("600"), true), RunTimeOutcome::Keep { .. }));
        assert_eq!(set_to(&update(None, Some("600"), true)), Some("600"));
        assert_eq!(set_to(&update(None, Some("99999"), true)), Some("3600"), "an old value above the ceiling is not");
    }

    #[test]
    fn a_running_workloads_change_is_undone_as_kueue_requires() {
        let raised = update(Some("86400"), Some("600"), false);
        assert_eq!(set_to(&raised), Some("600"));
        assert!(matches!(&raised, RunTimeOutcome::Set { warning: Some(warning), .. } if warning.contains("undone")));
        assert_eq!(set_to(&update(None, Some("600"), false)), Some("600"));
        assert_eq!(set_to(&update(Some("60"), Some("600"), false)), Some("600"), "lowering too: Kueue refuses it");
        assert!(matches!(update(Some("60"), None, false), RunTimeOutcome::Remove { .. }));
    }
}
