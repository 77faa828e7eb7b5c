//! Policy checks of a tier's run-time limit (`maxRunTime`): durations Kueue's label can hold, at least one of
//! `default` and `ceiling`, the default no longer than the ceiling; pure, no I/O.

use super::Problems;
use crate::policy::run_time::{MAX_RUN_TIME_SECONDS, RunTimeError, format_run_time, run_time_seconds};
use crate::policy::{Tier, TierPolicySpec};

/// Every tier's `maxRunTime`.
pub(super) fn check_run_times(spec: &TierPolicySpec, problems: &mut Problems) {
    for (index, tier) in spec.tiers.iter().enumerate() {
        check_run_time(&format!("spec.tiers[{index}].maxRunTime"), tier, problems);
    }
}

fn check_run_time(path: &str, tier: &Tier, problems: &mut Problems) {
    let Some(limits) = &tier.max_run_time else { return };
    if limits.default.is_none() && limits.ceiling.is_none() {
        problems.push(
            path,
            "neither `default` nor `ceiling` is set, so the tier's workloads get no limit",
            "set `ceiling` (the most a workload may ask for), `default` (the limit of one that asks for none) or \
             both, e.g. `maxRunTime: {ceiling: 4h}`; or remove maxRunTime",
        );
        return;
    }
    let mut parse = |field: &str, text: &Option<String>| -> Option<u32> {
        let text = text.as_deref()?;
        run_time_seconds(text)
            .map_err(|error| problems.push(format!("{path}.{field}"), error.to_string(), fix(&error)))
            .ok()
    };
    let default = parse("default", &limits.default);
    let ceiling = parse("ceiling", &limits.ceiling);
    if let (Some(default), Some(ceiling)) = (default, ceiling)
        && default > ceiling
    {
        problems.push(
            format!("{path}.default"),
            format!(
                "the default {} is longer than the ceiling {}, so a workload that asks for nothing would get more \
                 than one may ask for",
                format_run_time(default),
                format_run_time(ceiling)
            ),
            format!("set the default to {} or less, or raise the ceiling", format_run_time(ceiling)),
        );
    }
}

/// How to fix a duration.
fn fix(error: &RunTimeError) -> String {
    match error {
        RunTimeError::NotADuration { .. } => {
            "write a number and a unit (h, m, s), e.g. `4h`, `90m` or `1h30m` (days are not a unit: write `24h`)"
                .to_owned()
        }
        RunTimeError::NotPositive { .. } => "set a duration longer than zero, e.g. `4h`".to_owned(),
        RunTimeError::NotWholeSeconds { .. } => {
            "use whole seconds (Kueue's label holds seconds), e.g. `90s` rather than `90.5s`".to_owned()
        }
        RunTimeError::TooLong { .. } => format!(
            "use at most {} (Kueue's largest), or remove the ceiling for no limit",
            format_run_time(MAX_RUN_TIME_SECONDS)
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::inputs::load_policy;
    use crate::policy::MaxRunTime;
    use crate::validation::validate;

    fn problems_with(default: Option<&str>, ceiling: Option<&str>) -> Vec<String> {
        let mut spec = load_policy(None).unwrap().spec;
        spec.tiers[1].max_run_time =
            Some(MaxRunTime { default: default.map(str::to_owned), ceiling: ceiling.map(str::to_owned) });
        match validate(&spec) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_default_a_ceiling_or_both_as_go_durations_are_valid() {
        for (default, ceiling) in
            [(Some("2h"), Some("4h")), (None, Some("4h")), (Some("90m"), None), (Some("1h30m"), Some("1h30m"))]
        {
            assert_eq!(problems_with(default, ceiling), Vec::<String>::new(), "{default:?} {ceiling:?}");
        }
    }

    #[test]
    fn a_default_above_the_ceiling_names_the_default_and_the_fix() {
        assert_eq!(
            problems_with(Some("8h"), Some("4h")),
            ["spec.tiers[1].maxRunTime.default: the default 8h is longer than the ceiling 4h, so a workload that \
              asks for nothing would get more than one may ask for; fix: set the default to 4h or less, or raise \
              the ceiling"]
        );
    }

    #[test]
    fn an_unreadable_zero_or_fractional_duration_names_its_field() {
        assert_eq!(
            problems_with(Some("2 days"), Some("0s")),
            [
                "spec.tiers[1].maxRunTime.default: \"2 days\" is not a duration; fix: write a number and a unit (h, \
                 m, s), e.g. `4h`, `90m` or `1h30m` (days are not a unit: write `24h`)",
                "spec.tiers[1].maxRunTime.ceiling: \"0s\" is not longer than zero; fix: set a duration longer than \
                 zero, e.g. `4h`"
            ]
        );
        let fraction = problems_with(None, Some("90.5s"));
        assert!(fraction[0].starts_with("spec.tiers[1].maxRunTime.ceiling: \"90.5s\" is not a whole number"));
        let long = problems_with(None, Some("100000000h"));
        assert!(long[0].contains("longer than Kueue's largest limit"), "{long:?}");
    }

    #[test]
    fn an_empty_max_run_time_is_refused_rather_than_read_as_no_limit() {
        let problems = problems_with(None, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("spec.tiers[1].maxRunTime: neither `default` nor `ceiling` is set"));
    }
}
