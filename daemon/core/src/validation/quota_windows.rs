//! Policy checks of a tier's quota windows (`quotaWindows`): names, exactly one of `recurring` and `once`, times,
//! time zones and instants, resources the tier's `quotas` names, and the tier's quota rules with each window in force;
//! pure, no I/O.
//!
//! The quota rules are not restated here: for each window, the whole policy is checked again with that window's
//! quota applied ([`crate::plan::quota_windows::apply_window`]), and every problem the base policy does not have is
//! reported at the window's field. The windows are never merged, so these are all the quotas the cluster can see.

use std::collections::BTreeSet;

use super::names::{DNS_LABEL_RULE, is_dns_label};
use super::{PolicyError, Problems};
use crate::plan::quota_windows::{apply_window, parse_clock};
use crate::policy::{QuotaWindow, RecurringWindow, Tier, TierPolicySpec};
use crate::syntax::find_time_zone;
use crate::syntax::parse_timestamp;

/// Every tier's `quotaWindows`.
pub(super) fn check_quota_windows(spec: &TierPolicySpec, problems: &mut Problems) {
    if spec.tiers.iter().all(|tier| tier.quota_windows.is_empty()) {
        return;
    }
    let base = without_windows(spec);
    let base_problems = all_problems(&base);
    for (tier_index, tier) in spec.tiers.iter().enumerate() {
        let tier_path = format!("spec.tiers[{tier_index}]");
        problems.duplicates(
            tier.quota_windows
                .iter()
                .enumerate()
                .map(|(index, window)| (format!("{tier_path}.quotaWindows[{index}].name"), window.name.as_str())),
            "quota window",
        );
        for (index, window) in tier.quota_windows.iter().enumerate() {
            let path = format!("{tier_path}.quotaWindows[{index}]");
            check_window(&path, tier, window, problems);
            let mut windowed = base.clone();
            if let Some(windowed_tier) = windowed.tiers.get_mut(tier_index) {
                apply_window(windowed_tier, window);
            }
            for problem in all_problems(&windowed).into_iter().filter(|problem| !base_problems.contains(problem)) {
                problems.0.push(at_window(problem, &tier_path, &path, window));
            }
        }
    }
}

fn check_window(path: &str, tier: &Tier, window: &QuotaWindow, problems: &mut Problems) {
    if !is_dns_label(&window.name) {
        problems.push(
            format!("{path}.name"),
            format!("quota window {:?} is not {DNS_LABEL_RULE}", window.name),
            "rename the window, e.g. `nights`",
        );
    }
    match (&window.recurring, &window.once) {
        (Some(recurring), None) => check_recurring(&format!("{path}.recurring"), recurring, problems),
        (None, Some(once)) => {
            let begin = check_instant(&format!("{path}.once.begin"), &once.begin, problems);
            let end = check_instant(&format!("{path}.once.end"), &once.end, problems);
            if let (Some(begin), Some(end)) = (begin, end)
                && begin >= end
            {
                problems.push(
                    format!("{path}.once.end"),
                    format!("the window ends ({end}) no later than it begins ({begin})"),
                    "set `end` after `begin`",
                );
            }
        }
        (Some(_), Some(_)) => problems.push(
            path,
            "both `recurring` and `once` are set",
            "keep one: `recurring` for days of the week, `once` for two instants; write two windows for both",
        ),
        (None, None) => problems.push(
            path,
            "neither `recurring` nor `once` is set, so the window is never in force",
            "add `recurring: {days: [Sat, Sun], start: \"00:00\", end: \"00:00\", timeZone: UTC}` or \
             `once: {begin: ..., end: ...}` with RFC 3339 instants",
        ),
    }
    if window.quotas.is_empty() {
        problems.push(
            format!("{path}.quotas"),
            "the window changes no quota",
            "name a resource of the tier's quotas with the fields the window changes, e.g. \
             `nvidia.com/gpu: {nominal: \"8\"}`",
        );
    }
    let known: Vec<&str> = tier.quotas.keys().map(String::as_str).collect();
    for (resource, fields) in &window.quotas {
        let field_path = format!("{path}.quotas[{resource:?}]");
        if !tier.quotas.contains_key(resource) {
            problems.push(
                field_path,
                format!("{resource:?} is not a resource of the tier's quotas, so the window cannot change it"),
                format!("use one of {known:?}, or add {resource:?} to the tier's quotas first"),
            );
        } else if fields.nominal.is_none() && fields.borrowing_limit.is_none() && fields.lending_limit.is_none() {
            problems.push(
                field_path,
                "no field is set, so the window changes nothing of this resource",
                "set `nominal`, `borrowingLimit` or `lendingLimit`, or remove the entry",
            );
        }
    }
}

fn check_recurring(path: &str, recurring: &RecurringWindow, problems: &mut Problems) {
    if recurring.days.is_empty() {
        problems.push(
            format!("{path}.days"),
            "no day is listed, so the window never opens",
            "list the days it starts on, e.g. `[Mon, Tue, Wed, Thu, Fri]`",
        );
    }
    let mut seen = BTreeSet::new();
    for (index, day) in recurring.days.iter().enumerate() {
        if !seen.insert(day) {
            problems.push(format!("{path}.days[{index}]"), format!("{day:?} is listed twice"), "list each day once");
        }
    }
    for (field, value) in [("start", &recurring.start), ("end", &recurring.end)] {
        if parse_clock(value).is_none() {
            problems.push(
                format!("{path}.{field}"),
                format!("{value:?} is not a time of day as HH:MM"),
                "write two-digit hours from 00 to 23 and minutes from 00 to 59, e.g. \"07:30\" or \"22:00\"",
            );
        }
    }
    if find_time_zone(&recurring.time_zone).is_none() {
        problems.push(
            format!("{path}.timeZone"),
            format!("{:?} is not a time zone of the IANA time zone database", recurring.time_zone),
            "name a zone as `Area/City`, e.g. `Europe/Berlin`, `America/New_York`, or `UTC` (an offset such as \
             +01:00 does not follow daylight saving time)",
        );
    }
}

fn check_instant(path: &str, text: &str, problems: &mut Problems) -> Option<jiff::Timestamp> {
    let instant = parse_timestamp(text);
    if instant.is_none() {
        problems.push(
            path,
            format!("{text:?} is not an RFC 3339 instant"),
            "write a date, a time and an offset, e.g. \"2026-12-24T18:00:00+01:00\" or \"2026-12-24T17:00:00Z\"",
        );
    }
    instant
}

/// The policy's problems, quota windows left out (`spec` has none).
fn all_problems(spec: &TierPolicySpec) -> Vec<PolicyError> {
    let mut problems = Problems::default();
    super::check_spec(spec, &mut problems);
    problems.0
}

fn without_windows(spec: &TierPolicySpec) -> TierPolicySpec {
    let mut base = spec.clone();
    for tier in &mut base.tiers {
        tier.quota_windows.clear();
    }
    base
}

/// A problem found with `window` in force, said at the window's field when it is one the window sets.
fn at_window(problem: PolicyError, tier_path: &str, path: &str, window: &QuotaWindow) -> PolicyError {
    let quotas = format!("{tier_path}.quotas[");
    let set_by_window = problem.path.strip_prefix(&quotas).is_some_and(|rest| {
        let Some((resource, field)) = rest.split_once("]") else { return false };
        let Some(fields) = window.quotas.get(resource.trim_matches('"')) else { return false };
        match field {
            ".nominal" => fields.nominal.is_some(),
            ".borrowingLimit" => fields.borrowing_limit.is_some(),
            ".lendingLimit" => fields.lending_limit.is_some(),
            _ => true,
        }
    });
    let path = if set_by_window { problem.path.replacen(tier_path, path, 1) } else { problem.path };
    PolicyError {
        path,
        problem: format!("with quota window {:?} in force, {}", window.name, problem.problem),
        fix: format!("{} (in the window or the tier's base quotas)", problem.fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;
    use crate::validation::validate;

    /// The sample policy with `windows` (each a YAML flow mapping) as bronze's quota windows.
    fn sample_with(windows: &[&str]) -> TierPolicySpec {
        let text = include_str!("../../../../samples/kubenexus/policy.yaml");
        let marker = "      maxRunTime: {ceiling: 4h}\n";
        assert!(text.contains(marker), "the sample's bronze tier changed");
        let mut list = String::new();
        if !windows.is_empty() {
            list.push_str("      quotaWindows:\n");
            for window in windows {
                list.push_str(&format!("        - {window}\n"));
            }
        }
        let text = text.replacen(marker, &format!("{marker}{list}"), 1);
        parse_policy(&text, "sample").unwrap().spec
    }

    fn problems_of(windows: &[&str]) -> Vec<PolicyError> {
        validate(&sample_with(windows)).map(|()| Vec::new()).unwrap_or_else(|errors| errors.0)
    }

    fn window_path(rest: &str) -> String {
        let index = sample_with(&[]).tiers.iter().position(|tier| tier.name == "bronze").unwrap();
        format!("spec.tiers[{index}].quotaWindows{rest}")
    }

    fn paths(problems: &[PolicyError]) -> Vec<&str> {
        problems.iter().map(|problem| problem.path.as_str()).collect()
    }

    #[test]
    fn a_recurring_and_a_one_off_window_are_valid() {
        let problems = problems_of(&[
            r#"{name: nights, recurring: {days: [Mon, Fri], start: "22:00", end: "06:00", timeZone: Europe/Berlin}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
            r#"{name: campaign, once: {begin: "2026-12-24T18:00:00+01:00", end: "2026-12-27T06:00:00Z"}, quotas: {nvidia.com/gpu: {nominal: "32"}, cpu: {nominal: "256"}}}"#,
        ]);
        assert_eq!(problems, Vec::new());
    }

    #[test]
    fn a_bad_time_zone_is_named_with_its_field_and_fix() {
        let problems = problems_of(&[
            r#"{name: nights, recurring: {days: [Mon], start: "22:00", end: "06:00", timeZone: Europe/Berlinn}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
        ]);
        assert_eq!(paths(&problems), [window_path("[0].recurring.timeZone")]);
        assert!(problems[0].problem.contains("Europe/Berlinn"), "{}", problems[0]);
        assert!(problems[0].fix.contains("Europe/Berlin`"), "{}", problems[0]);
    }

    #[test]
    fn bad_times_instants_and_an_end_before_the_begin_are_each_named() {
        let problems = problems_of(&[
            r#"{name: nights, recurring: {days: [Mon, Mon], start: "7:00", end: "24:00", timeZone: UTC}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
            r#"{name: broken, once: {begin: tomorrow, end: "2026-12-27"}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
            r#"{name: backwards, once: {begin: "2026-12-27T00:00:00Z", end: "2026-12-26T00:00:00Z"}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
        ]);
        assert_eq!(
            paths(&problems),
            [
                window_path("[0].recurring.days[1]"),
                window_path("[0].recurring.start"),
                window_path("[0].recurring.end"),
                window_path("[1].once.begin"),
                window_path("[1].once.end"),
                window_path("[2].once.end"),
            ]
        );
    }

    #[test]
    fn both_or_neither_kind_duplicate_names_and_unknown_resources_are_refused() {
        let problems = problems_of(&[
            r#"{name: twice, recurring: {days: [Sun], start: "00:00", end: "00:00", timeZone: UTC}, once: {begin: "2026-12-24T00:00:00Z", end: "2026-12-25T00:00:00Z"}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#,
            r#"{name: twice, quotas: {amd.com/gpu: {nominal: "4"}, cpu: {}}}"#,
            r#"{name: Bad_Name, once: {begin: "2026-12-24T00:00:00Z", end: "2026-12-25T00:00:00Z"}, quotas: {}}"#,
        ]);
        assert_eq!(
            paths(&problems),
            [
                window_path("[1].name"),
                window_path("[0]"),
                window_path("[1]"),
                window_path("[1].quotas[\"amd.com/gpu\"]"),
                window_path("[1].quotas[\"cpu\"]"),
                window_path("[2].name"),
                window_path("[2].quotas"),
            ]
        );
    }

    #[test]
    fn a_window_quota_breaking_a_quota_rule_is_reported_at_the_window_field() {
        // A nominal quota that is not a quantity is refused at the window's field, with the window named.
        let problems = problems_of(&[
            r#"{name: nights, recurring: {days: [Sat], start: "00:00", end: "06:00", timeZone: UTC}, quotas: {nvidia.com/gpu: {nominal: "lots"}}}"#,
        ]);
        assert!(!problems.is_empty());
        for problem in &problems {
            assert_eq!(problem.path, window_path("[0].quotas[\"nvidia.com/gpu\"].nominal"), "{problem}");
            assert!(problem.problem.starts_with("with quota window \"nights\" in force"), "{problem}");
        }
    }

    #[test]
    fn a_base_field_a_window_breaks_keeps_its_own_path_and_names_the_window() {
        // Bronze has no cohort, so a borrowing limit cannot apply: the base policy has none, the window adds one.
        let problems = problems_of(&[
            r#"{name: nights, recurring: {days: [Sat], start: "00:00", end: "06:00", timeZone: UTC}, quotas: {cpu: {borrowingLimit: "8"}}}"#,
        ]);
        assert!(!problems.is_empty(), "a borrowing limit without a cohort was accepted");
        assert!(problems.iter().all(|problem| problem.problem.contains("\"nights\"")), "{problems:?}");
    }

    #[test]
    fn a_valid_base_policy_without_windows_has_no_problems() {
        assert_eq!(problems_of(&[]), Vec::new());
    }
}
