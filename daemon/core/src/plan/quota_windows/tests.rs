//! Tests of the quota windows' clock: boundaries, midnight, daylight saving time, overlaps and the next change.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::inputs::parse_policy;
use crate::policy::{OnceWindow, QuotaWindow, RecurringWindow, Tier, Weekday, WindowQuota};
use crate::syntax::find_time_zone;

const GPU: &str = "nvidia.com/gpu";

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn gpus(nominal: &str) -> std::collections::BTreeMap<String, WindowQuota> {
    [(GPU.to_owned(), WindowQuota { nominal: Some(Quantity(nominal.to_owned())), ..WindowQuota::default() })].into()
}

fn recurring(name: &str, days: &[Weekday], start: &str, end: &str, zone: &str, nominal: &str) -> QuotaWindow {
    QuotaWindow {
        name: name.to_owned(),
        recurring: Some(RecurringWindow {
            days: days.to_vec(),
            start: start.to_owned(),
            end: end.to_owned(),
            time_zone: zone.to_owned(),
        }),
        once: None,
        quotas: gpus(nominal),
    }
}

fn once(name: &str, begin: &str, end: &str, nominal: &str) -> QuotaWindow {
    QuotaWindow {
        name: name.to_owned(),
        recurring: None,
        once: Some(OnceWindow { begin: begin.to_owned(), end: end.to_owned() }),
        quotas: gpus(nominal),
    }
}

fn spec_with(windows: Vec<QuotaWindow>) -> TierPolicySpec {
    let mut spec = parse_policy(include_str!("../../../../../samples/kubenexus/policy.yaml"), "sample").unwrap().spec;
    let bronze = spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.quota_windows = windows;
    spec
}

fn bronze(spec: &TierPolicySpec) -> &Tier {
    spec.tiers.iter().find(|tier| tier.name == "bronze").unwrap()
}

fn in_force_at(windows: Vec<QuotaWindow>, instant: &str) -> Option<String> {
    let spec = spec_with(windows);
    window_in_force(bronze(&spec), at(instant)).map(|window| window.name.clone())
}

const WEEKDAYS: &[Weekday] = &[Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri];

#[test]
fn a_recurring_window_opens_at_its_start_and_is_closed_at_its_end() {
    let window = || vec![recurring("office", WEEKDAYS, "09:00", "17:00", "UTC", "4")];
    // 2026-12-02 is a Wednesday.
    assert_eq!(in_force_at(window(), "2026-12-02T08:59:59Z"), None);
    assert_eq!(in_force_at(window(), "2026-12-02T09:00:00Z").as_deref(), Some("office"));
    assert_eq!(in_force_at(window(), "2026-12-02T16:59:59Z").as_deref(), Some("office"));
    assert_eq!(in_force_at(window(), "2026-12-02T17:00:00Z"), None);
    // Saturday is not listed.
    assert_eq!(in_force_at(window(), "2026-12-05T10:00:00Z"), None);
}

#[test]
fn a_window_whose_end_is_not_after_its_start_runs_over_midnight_into_the_next_day() {
    let window = || vec![recurring("nights", &[Weekday::Fri], "22:00", "06:00", "UTC", "32")];
    // Friday 2026-12-04 22:00 to Saturday 06:00.
    assert_eq!(in_force_at(window(), "2026-12-04T21:59:00Z"), None);
    assert_eq!(in_force_at(window(), "2026-12-04T23:30:00Z").as_deref(), Some("nights"));
    assert_eq!(in_force_at(window(), "2026-12-05T05:59:00Z").as_deref(), Some("nights"));
    assert_eq!(in_force_at(window(), "2026-12-05T06:00:00Z"), None);
    // Thursday night is not a Friday start.
    assert_eq!(in_force_at(window(), "2026-12-03T23:00:00Z"), None);
}

#[test]
fn equal_start_and_end_make_a_window_of_a_whole_day() {
    let window = || vec![recurring("sunday", &[Weekday::Sun], "00:00", "00:00", "UTC", "32")];
    assert_eq!(in_force_at(window(), "2026-12-06T00:00:00Z").as_deref(), Some("sunday"));
    assert_eq!(in_force_at(window(), "2026-12-06T23:59:59Z").as_deref(), Some("sunday"));
    assert_eq!(in_force_at(window(), "2026-12-07T00:00:00Z"), None);
}

#[test]
fn local_times_are_read_in_the_named_time_zone() {
    let window = || vec![recurring("office", WEEKDAYS, "09:00", "17:00", "Europe/Berlin", "4")];
    // Berlin is UTC+1 in December: 09:00 local is 08:00 UTC.
    assert_eq!(in_force_at(window(), "2026-12-02T07:59:00Z"), None);
    assert_eq!(in_force_at(window(), "2026-12-02T08:00:00Z").as_deref(), Some("office"));
    assert_eq!(in_force_at(window(), "2026-12-02T16:00:00Z"), None);
}

#[test]
fn on_a_spring_forward_day_the_window_follows_the_local_clock_and_is_an_hour_shorter() {
    // Berlin springs forward on Sunday 2026-03-29 at 02:00 (to 03:00). 01:00-04:00 local is 00:00Z-02:00Z.
    let spec = spec_with(vec![recurring("early", &[Weekday::Sun], "01:00", "04:00", "Europe/Berlin", "4")]);
    let tier = bronze(&spec);
    assert_eq!(window_in_force(tier, at("2026-03-28T23:59:59Z")), None);
    assert!(window_in_force(tier, at("2026-03-29T00:00:00Z")).is_some());
    assert!(window_in_force(tier, at("2026-03-29T01:59:59Z")).is_some());
    assert_eq!(window_in_force(tier, at("2026-03-29T02:00:00Z")), None);
    let (change, _) = next_change(tier, at("2026-03-29T00:30:00Z")).unwrap();
    assert_eq!(change, at("2026-03-29T02:00:00Z"));
}

#[test]
fn a_start_the_clock_skips_is_read_as_the_same_time_after_the_jump() {
    // 02:30 does not exist in Berlin on 2026-03-29: the window opens at 03:30 CEST (01:30Z).
    let spec = spec_with(vec![recurring("skipped", &[Weekday::Sun], "02:30", "05:00", "Europe/Berlin", "4")]);
    let (change, next) = next_change(bronze(&spec), at("2026-03-29T00:00:00Z")).unwrap();
    assert_eq!(change, at("2026-03-29T01:30:00Z"));
    assert_eq!(next.map(|window| window.name.as_str()), Some("skipped"));
}

#[test]
fn on_a_fall_back_day_a_time_that_happens_twice_is_its_first_occurrence() {
    // Berlin falls back on Sunday 2026-10-25 at 03:00 CEST (to 02:00 CET): 02:30 happens at 00:30Z and 01:30Z.
    // The window 02:30-04:00 opens at the first (00:30Z) and closes at 04:00 CET (03:00Z): two and a half hours.
    let spec = spec_with(vec![recurring("folded", &[Weekday::Sun], "02:30", "04:00", "Europe/Berlin", "4")]);
    let tier = bronze(&spec);
    let (open, _) = next_change(tier, at("2026-10-25T00:00:00Z")).unwrap();
    assert_eq!(open, at("2026-10-25T00:30:00Z"));
    let (close, next) = next_change(tier, open).unwrap();
    assert_eq!(close, at("2026-10-25T03:00:00Z"));
    assert_eq!(next, None);
}

#[test]
fn a_one_off_window_is_in_force_between_its_begin_and_end_only() {
    let window = || vec![once("campaign", "2026-12-24T18:00:00+01:00", "2026-12-27T06:00:00+01:00", "32")];
    assert_eq!(in_force_at(window(), "2026-12-24T16:59:59Z"), None);
    assert_eq!(in_force_at(window(), "2026-12-24T17:00:00Z").as_deref(), Some("campaign"));
    assert_eq!(in_force_at(window(), "2026-12-27T05:00:00Z"), None);
}

#[test]
fn a_one_off_window_in_the_past_is_never_in_force_and_never_a_next_change() {
    let spec = spec_with(vec![once("gone", "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z", "32")]);
    let windows = build_windows_in_force(&spec, at("2026-12-02T08:00:00Z"));
    assert_eq!(windows.tiers[0].in_force, None);
    assert_eq!(windows.tiers[0].next_change, None);
    assert_eq!(windows.next_change(), None);
}

#[test]
fn a_one_off_window_far_ahead_is_the_next_change_beyond_the_lookahead() {
    let spec = spec_with(vec![once("spring", "2027-04-01T00:00:00Z", "2027-04-02T00:00:00Z", "32")]);
    let windows = build_windows_in_force(&spec, at("2026-12-02T08:00:00Z"));
    assert_eq!(windows.tiers[0].next_change, Some(at("2027-04-01T00:00:00Z")));
    assert_eq!(windows.tiers[0].next_in_force.as_deref(), Some("spring"));
}

#[test]
fn a_one_off_window_wins_over_a_recurring_one_and_a_later_entry_over_an_earlier_one() {
    let all_week = &[Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];
    let windows = || {
        vec![
            once("campaign", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z", "32"),
            recurring("days", all_week, "08:00", "20:00", "UTC", "8"),
            recurring("lunch", all_week, "12:00", "13:00", "UTC", "12"),
        ]
    };
    // The one-off window beats both recurring ones, although it is listed first.
    assert_eq!(in_force_at(windows(), "2026-12-02T12:30:00Z").as_deref(), Some("campaign"));
    // Without it, the later recurring entry wins while both are open.
    assert_eq!(in_force_at(windows(), "2026-12-03T12:30:00Z").as_deref(), Some("lunch"));
    assert_eq!(in_force_at(windows(), "2026-12-03T13:00:00Z").as_deref(), Some("days"));
}

#[test]
fn the_next_change_skips_edges_that_do_not_change_the_window_in_force() {
    let all_week = &[Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];
    let spec = spec_with(vec![
        recurring("days", all_week, "08:00", "20:00", "UTC", "8"),
        once("campaign", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z", "32"),
    ]);
    // During the one-off window, the recurring window's 08:00 and 20:00 change nothing: next is the campaign's end,
    // when "days" is not open (it is midnight), so the base quota follows.
    let (change, next) = next_change(bronze(&spec), at("2026-12-02T01:00:00Z")).unwrap();
    assert_eq!(change, at("2026-12-03T00:00:00Z"));
    assert_eq!(next, None);
}

#[test]
fn back_to_back_occurrences_of_an_always_open_window_never_change() {
    let all_week = &[Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri, Weekday::Sat, Weekday::Sun];
    let spec = spec_with(vec![recurring("always", all_week, "00:00", "00:00", "UTC", "8")]);
    let windows = build_windows_in_force(&spec, at("2026-12-02T08:00:00Z"));
    assert_eq!(windows.tiers[0].in_force.as_deref(), Some("always"));
    assert_eq!(windows.tiers[0].next_change, None);
}

#[test]
fn the_effective_spec_has_the_window_quota_and_keeps_fields_the_window_leaves_out() {
    let mut window = recurring("nights", &[Weekday::Wed], "00:00", "06:00", "UTC", "24");
    window.quotas.get_mut(GPU).unwrap().borrowing_limit = Some(Quantity("4".to_owned()));
    let spec = spec_with(vec![window]);
    let base = bronze(&spec).quotas.clone();
    let windows = build_windows_in_force(&spec, at("2026-12-02T03:00:00Z"));
    let effective = bronze(&windows.spec);
    assert_eq!(effective.quotas[GPU].nominal, Quantity("24".to_owned()));
    assert_eq!(effective.quotas[GPU].borrowing_limit, Some(Quantity("4".to_owned())));
    assert_eq!(effective.quotas["cpu"], base["cpu"]);
    assert_eq!(windows.tiers[0].in_force.as_deref(), Some("nights"));
    assert_eq!(windows.tiers[0].next_change, Some(at("2026-12-02T06:00:00Z")));
    assert_eq!(windows.tiers[0].next_in_force, None);
    // Outside the window the base quota is translated, and the next change is the next Wednesday.
    let later = build_windows_in_force(&spec, at("2026-12-02T07:00:00Z"));
    assert_eq!(bronze(&later.spec).quotas, base);
    assert_eq!(later.tiers[0].next_change, Some(at("2026-12-09T00:00:00Z")));
    assert_eq!(later.tiers[0].next_in_force.as_deref(), Some("nights"));
}

#[test]
fn tiers_without_windows_are_untouched_and_not_reported() {
    let spec = spec_with(vec![recurring("nights", &[Weekday::Wed], "00:00", "06:00", "UTC", "24")]);
    let windows = build_windows_in_force(&spec, at("2026-12-02T03:00:00Z"));
    assert_eq!(windows.tiers.len(), 1);
    assert_eq!(windows.tiers[0].tier, "bronze");
    for (effective, base) in windows.spec.tiers.iter().zip(&spec.tiers).filter(|(tier, _)| tier.name != "bronze") {
        assert_eq!(effective, base);
    }
    let status = windows.to_status();
    assert_eq!(status[0].next_change.as_deref(), Some("2026-12-02T06:00:00Z"));
}

#[test]
fn a_window_with_an_unknown_time_zone_or_bad_time_is_never_in_force() {
    let windows = || {
        vec![
            recurring("bad-zone", WEEKDAYS, "09:00", "17:00", "Mars/Olympus", "4"),
            recurring("bad-time", WEEKDAYS, "9:00", "17:00", "UTC", "4"),
        ]
    };
    assert_eq!(in_force_at(windows(), "2026-12-02T10:00:00Z"), None);
}

#[test]
fn clock_times_are_two_digit_hours_and_minutes() {
    assert_eq!(parse_clock("00:00"), Some(jiff::civil::time(0, 0, 0, 0)));
    assert_eq!(parse_clock("23:59"), Some(jiff::civil::time(23, 59, 0, 0)));
    for bad in ["24:00", "9:00", "09:60", "0900", "09:00:00", "ab:cd", ""] {
        assert_eq!(parse_clock(bad), None, "{bad:?}");
    }
}

#[test]
fn the_time_zone_database_knows_named_zones_and_refuses_unknown_ones() {
    assert!(find_time_zone("Europe/Berlin").is_some());
    assert!(find_time_zone("America/New_York").is_some());
    assert!(find_time_zone("UTC").is_some());
    assert!(find_time_zone("Mars/Olympus").is_none());
    assert!(find_time_zone("").is_none());
}

#[test]
fn admitted_work_above_the_quota_in_force_is_named_per_resource() {
    let spec = spec_with(Vec::new());
    let held = |gpus: i128, cpus: i128| [(GPU.to_owned(), gpus), ("cpu".to_owned(), cpus)].into();
    // Bronze's base quota is 16 GPUs and 128 CPUs: 20 GPUs held are above it, 64 CPUs are not.
    assert_eq!(
        admitted_above_quota(&spec, bronze(&spec), &held(20_000, 64_000)),
        vec![(GPU.to_owned(), 20_000, 16_000)]
    );
    assert_eq!(admitted_above_quota(&spec, bronze(&spec), &held(16_000, 128_000)), Vec::new());
    assert_eq!(admitted_above_quota(&spec, bronze(&spec), &Default::default()), Vec::new());
}

#[test]
fn a_window_is_described_with_its_times_and_the_fields_it_sets() {
    assert_eq!(
        describe_window(&recurring("nights", &[Weekday::Mon, Weekday::Fri], "22:00", "06:00", "Europe/Berlin", "24")),
        "nights (Mon,Fri 22:00-06:00 Europe/Berlin: nvidia.com/gpu nominal 24)"
    );
    assert_eq!(
        describe_window(&once("burst", "2026-12-02T10:00:00Z", "2026-12-02T10:01:00Z", "20")),
        "burst (once 2026-12-02T10:00:00Z to 2026-12-02T10:01:00Z: nvidia.com/gpu nominal 20)"
    );
}
