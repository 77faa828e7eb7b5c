//! Policy checks of accounting and tier budgets: a time zone tiergate knows, limits that are amounts of time
//! above zero, on resources the tier's quota names (the only ones Kueue charges its ClusterQueue), and a rolling
//! window from a minute to 90 days; pure, no I/O.

use super::Problems;
use crate::policy::TierPolicySpec;
use crate::policy::budget::{BudgetError, limit_millis, window_seconds};

/// `spec.accounting` and every tier's `budget`.
pub(super) fn check_budgets(spec: &TierPolicySpec, problems: &mut Problems) {
    if let Some(accounting) = &spec.accounting
        && let Err(error) = accounting.time_zone()
    {
        problems.push("spec.accounting.timeZone", error.to_string(), fix(&error));
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        let Some(budget) = &tier.budget else { continue };
        if let Some(Err(error)) = budget.window.as_deref().map(window_seconds) {
            problems.push(format!("spec.tiers[{index}].budget.window"), error.to_string(), window_fix(&error));
        }
        let path = format!("spec.tiers[{index}].budget.limits");
        if budget.limits.is_empty() {
            problems.push(
                path.as_str(),
                "no limit is set, so the budget never holds the tier",
                "limit a resource the tier has quota for, e.g. `limits: {nvidia.com/gpu: 2000h}` for 2000 GPU-hours \
                 a period; or remove the budget",
            );
            continue;
        }
        for (resource, text) in &budget.limits {
            let field = format!("{path}[{resource:?}]");
            if let Err(error) = limit_millis(text) {
                problems.push(field.as_str(), error.to_string(), fix(&error));
            }
            if !tier.quotas.contains_key(resource) {
                let known: Vec<&str> = tier.quotas.keys().map(String::as_str).collect();
                problems.push(
                    field,
                    format!(
                        "tier {} has no quota for {resource}, so Kueue never charges it to the tier and the limit is \
                         never reached",
                        tier.name
                    ),
                    format!("limit one of the tier's quota resources ({})", known.join(", ")),
                );
            }
        }
    }
}

/// How to fix a limit or a time zone.
fn fix(error: &BudgetError) -> String {
    match error {
        BudgetError::NotADuration { .. } => "write how long one unit may run, a number and a unit (h, m, s): \
            `2000h` is 2000 GPU-hours of nvidia.com/gpu (days are not a unit: write `48h`)"
            .to_owned(),
        BudgetError::NotPositive { .. } => "set a limit above zero, e.g. `100h`; or remove the budget".to_owned(),
        BudgetError::WindowTooShort { .. }
        | BudgetError::WindowTooLong { .. }
        | BudgetError::WindowNotWholeSeconds { .. } => window_fix(error),
        BudgetError::UnknownTimeZone { .. } => {
            "use an IANA time zone name such as `UTC`, `Europe/Berlin` or `America/New_York`".to_owned()
        }
    }
}

/// How to fix a budget's window.
fn window_fix(error: &BudgetError) -> String {
    let example = "e.g. `720h` for any 30 days";
    match error {
        BudgetError::NotADuration { .. } => format!(
            "write the window as a number and a unit (h, m, s), {example} (days are not a unit); or remove `window` \
             to apply the limits per accounting period"
        ),
        BudgetError::NotPositive { .. } | BudgetError::WindowTooShort { .. } => {
            format!("set a window of at least `1m`, {example}; or remove `window` to apply the limits per period")
        }
        BudgetError::WindowTooLong { .. } => "set a window of at most `2160h` (90 days); for longer spans, remove \
            `window` and set `spec.accounting.period`"
            .to_owned(),
        BudgetError::WindowNotWholeSeconds { .. } => {
            format!("write the window in whole seconds, {example}: its buckets are whole seconds")
        }
        BudgetError::UnknownTimeZone { .. } => fix(error),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::inputs::load_policy;
    use crate::policy::{Accounting, Budget};
    use crate::validation::validate;

    fn problems_with(limits: &[(&str, &str)], time_zone: Option<&str>) -> Vec<String> {
        problems_with_window(limits, time_zone, None)
    }

    fn problems_with_window(limits: &[(&str, &str)], time_zone: Option<&str>, window: Option<&str>) -> Vec<String> {
        let mut spec = load_policy(None).unwrap().spec;
        let limits: BTreeMap<String, String> =
            limits.iter().map(|(resource, text)| ((*resource).to_owned(), (*text).to_owned())).collect();
        spec.tiers[1].budget = Some(Budget { limits, window: window.map(str::to_owned) });
        spec.accounting = Some(Accounting { period: None, time_zone: time_zone.map(str::to_owned) });
        match validate(&spec) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn gpu_hours_in_a_known_time_zone_are_valid() {
        assert_eq!(problems_with(&[("nvidia.com/gpu", "2000h")], Some("Europe/Berlin")), Vec::<String>::new());
        assert_eq!(problems_with(&[("nvidia.com/gpu", "90m")], None), Vec::<String>::new());
    }

    #[test]
    fn a_bare_number_or_zero_names_the_limit_and_the_fix() {
        let problems = problems_with(&[("nvidia.com/gpu", "2000")], None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "spec.tiers[1].budget.limits[\"nvidia.com/gpu\"]: \"2000\" is not an amount of time; fix: write how \
                 long one unit may run"
            ),
            "{problems:?}"
        );
        let zero = problems_with(&[("nvidia.com/gpu", "0h")], None);
        assert!(zero[0].contains("is not more than zero; fix: set a limit above zero"), "{zero:?}");
    }

    #[test]
    fn a_limit_on_a_resource_without_quota_is_refused_naming_the_quota_resources() {
        let problems = problems_with(&[("example.com/fpga", "10h")], None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("has no quota for example.com/fpga"), "{problems:?}");
        assert!(
            problems[0].contains("fix: limit one of the tier's quota resources (")
                && problems[0].contains("nvidia.com/gpu")
        );
    }

    #[test]
    fn an_empty_budget_and_an_unknown_time_zone_are_refused() {
        let problems = problems_with(&[], Some("Mars/Olympus"));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("spec.accounting.timeZone: \"Mars/Olympus\" is not a time zone"));
        assert!(problems[1].starts_with("spec.tiers[1].budget.limits: no limit is set"));
    }

    #[test]
    fn a_window_from_a_minute_to_ninety_days_is_valid() {
        for window in ["1m", "60s", "720h", "2160h", "1h30m"] {
            let problems = problems_with_window(&[("nvidia.com/gpu", "2000h")], None, Some(window));
            assert_eq!(problems, Vec::<String>::new(), "{window}");
        }
    }

    #[test]
    fn a_window_that_is_no_duration_too_short_or_too_long_names_the_field_and_the_fix() {
        let field = "spec.tiers[1].budget.window: ";
        for (window, problem, fix) in [
            ("30d", "\"30d\" is not an amount of time", "fix: write the window as a number and a unit (h, m, s)"),
            ("720", "\"720\" is not an amount of time", "fix: write the window as a number and a unit"),
            ("0h", "\"0h\" is not more than zero", "fix: set a window of at least `1m`"),
            ("-720h", "\"-720h\" is not more than zero", "fix: set a window of at least `1m`"),
            ("59s", "\"59s\" is shorter than the shortest window, 1m", "fix: set a window of at least `1m`"),
            ("90.5s", "\"90.5s\" is not a whole number of seconds", "fix: write the window in whole seconds"),
            (
                "2161h",
                "\"2161h\" is longer than the longest window, 2160h (90 days)",
                "fix: set a window of at most `2160h`",
            ),
        ] {
            let problems = problems_with_window(&[("nvidia.com/gpu", "2000h")], None, Some(window));
            assert_eq!(problems.len(), 1, "{window}: {problems:?}");
            assert!(problems[0].starts_with(&format!("{field}{problem}; {fix}")), "{window}: {problems:?}");
        }
    }
}
