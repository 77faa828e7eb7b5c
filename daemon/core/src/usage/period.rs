//! The calendar accounting periods (`Month`, `Week` from Monday, `Day`) in a named time zone, as Unix seconds;
//! pure, no I/O.

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, civil::Date};

use crate::policy::AccountingPeriod;
pub use crate::syntax::{format_instant, parse_instant};

/// The period an instant falls in, and the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeriodBounds {
    /// When the previous period began.
    pub previous_start: i64,
    /// When this period began (the previous one ended).
    pub start: i64,
    /// When this period ends.
    pub end: i64,
}

/// The first day of the period `date` falls in.
fn first_day(period: AccountingPeriod, date: Date) -> Option<Date> {
    match period {
        AccountingPeriod::Month => Some(date.first_of_month()),
        AccountingPeriod::Week => date.checked_sub(Span::new().days(date.weekday().to_monday_zero_offset())).ok(),
        AccountingPeriod::Day => Some(date),
    }
}

/// One period as a span of days or months.
fn length(period: AccountingPeriod) -> Span {
    match period {
        AccountingPeriod::Month => Span::new().months(1),
        AccountingPeriod::Week => Span::new().days(7),
        AccountingPeriod::Day => Span::new().days(1),
    }
}

/// Midnight (or the first instant of the day, across a daylight-saving gap) of `date` in `zone`.
fn midnight(date: Date, zone: &TimeZone) -> Option<i64> {
    date.to_zoned(zone.clone()).ok().map(|zoned| zoned.timestamp().as_second())
}

/// The period of `period` in `zone` that the Unix second `at` falls in; `None` only outside jiff's range of years.
pub fn period_bounds(period: AccountingPeriod, zone: &TimeZone, at: i64) -> Option<PeriodBounds> {
    let date = Timestamp::from_second(at).ok()?.to_zoned(zone.clone()).date();
    let first = first_day(period, date)?;
    let next = first.checked_add(length(period)).ok()?;
    let previous = first.checked_sub(length(period)).ok()?;
    Some(PeriodBounds {
        previous_start: midnight(previous, zone)?,
        start: midnight(first, zone)?,
        end: midnight(next, zone)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        parse_instant(text).unwrap()
    }

    fn bounds(period: AccountingPeriod, zone: &str, instant: &str) -> (String, String, String) {
        let zone = jiff::tz::db().get(zone).unwrap();
        let bounds = period_bounds(period, &zone, at(instant)).unwrap();
        (format_instant(bounds.previous_start), format_instant(bounds.start), format_instant(bounds.end))
    }

    #[test]
    fn a_month_runs_from_the_first_to_the_first_in_utc() {
        assert_eq!(
            bounds(AccountingPeriod::Month, "UTC", "2026-12-02T07:54:00Z"),
            ("2026-11-01T00:00:00Z".into(), "2026-12-01T00:00:00Z".into(), "2027-01-01T00:00:00Z".into())
        );
        assert_eq!(bounds(AccountingPeriod::Month, "UTC", "2026-03-01T00:00:00Z").1, "2026-03-01T00:00:00Z");
    }

    #[test]
    fn a_week_starts_on_monday_and_a_day_at_midnight() {
        // 2026-12-02 is a Wednesday.
        assert_eq!(
            bounds(AccountingPeriod::Week, "UTC", "2026-12-02T07:54:00Z"),
            ("2026-11-23T00:00:00Z".into(), "2026-11-30T00:00:00Z".into(), "2026-12-07T00:00:00Z".into())
        );
        assert_eq!(
            bounds(AccountingPeriod::Day, "UTC", "2026-12-02T23:59:59Z"),
            ("2026-12-01T00:00:00Z".into(), "2026-12-02T00:00:00Z".into(), "2026-12-03T00:00:00Z".into())
        );
    }

    #[test]
    fn periods_turn_at_local_midnight_of_the_named_time_zone() {
        // Berlin is UTC+1 in winter: its December begins at 23:00 UTC on 30 November.
        let (_, start, end) = bounds(AccountingPeriod::Month, "Europe/Berlin", "2026-11-30T23:30:00Z");
        assert_eq!((start.as_str(), end.as_str()), ("2026-11-30T23:00:00Z", "2026-12-31T23:00:00Z"));
        // The day daylight saving time begins is 23 hours long.
        let (_, start, end) = bounds(AccountingPeriod::Day, "Europe/Berlin", "2026-03-29T12:00:00Z");
        assert_eq!(at(&end) - at(&start), 23 * 3600);
    }
}
