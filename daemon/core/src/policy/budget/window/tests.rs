//! Tests of a budget window's buckets: length and alignment, splitting use across them, expiry, the window's use
//! and its over-count bound, when enough use leaves, and the status text round trip.

use super::*;

const GPU: &str = "nvidia.com/gpu";
const HOUR: i64 = 3600;
/// 30 days.
const MONTH: i64 = 720 * HOUR;

fn at(text: &str) -> i64 {
    parse_instant(text).unwrap()
}

#[test]
fn windows_read_like_limits_from_a_minute_to_ninety_days() {
    assert_eq!(window_seconds("720h"), Ok(MONTH));
    assert_eq!(window_seconds("1m"), Ok(60));
    assert_eq!(window_seconds("1h30m"), Ok(5400));
    assert_eq!(window_seconds("2160h"), Ok(2160 * HOUR));
    assert!(matches!(window_seconds("90.5s"), Err(BudgetError::WindowNotWholeSeconds { .. })), "never truncated");
    assert!(matches!(window_seconds("720"), Err(BudgetError::NotADuration { .. })));
    assert!(matches!(window_seconds("0s"), Err(BudgetError::NotPositive { .. })));
    assert!(matches!(window_seconds("-1h"), Err(BudgetError::NotPositive { .. })));
    assert!(matches!(window_seconds("59s"), Err(BudgetError::WindowTooShort { .. })));
    assert!(matches!(window_seconds("2160h1s"), Err(BudgetError::WindowTooLong { .. })));
}

#[test]
fn a_bucket_is_the_windows_48th_in_whole_seconds_aligned_to_the_epoch() {
    assert_eq!(bucket_seconds(MONTH), 54_000, "15 hours");
    assert_eq!(bucket_seconds(120), 2, "2.5 s rounds down, so 48 buckets never span more than the window");
    assert_eq!(bucket_seconds(60), 1);
    assert_eq!(bucket_seconds(47), 1, "at least a second");
    assert_eq!(bucket_start(at("2026-12-02T08:00:00Z"), HOUR), at("2026-12-02T08:00:00Z"));
    assert_eq!(bucket_start(at("2026-12-02T08:59:59Z"), HOUR), at("2026-12-02T08:00:00Z"));
    // 15-hour buckets: 2026-12-01T18:00:00Z is 33262 · 54000 s after the epoch, whichever replica computes it.
    assert_eq!(bucket_start(at("2026-12-02T08:00:00Z"), 54_000), at("2026-12-01T18:00:00Z"));
    assert_eq!(bucket_start(at("2026-12-02T09:00:00Z") - 1, 54_000), at("2026-12-01T18:00:00Z"));
    assert_eq!(bucket_start(at("2026-12-02T09:00:00Z"), 54_000), at("2026-12-02T09:00:00Z"));
    assert_eq!(bucket_start(-1, 10), -10, "before the epoch too");
}

#[test]
fn use_is_split_across_the_buckets_it_overlaps_exactly() {
    let mut counts = WindowCounts::empty(48 * HOUR);
    assert_eq!(counts.bucket, HOUR);
    let start = at("2026-12-02T08:30:00Z");
    counts.add(GPU, 2000, start, start + 2 * HOUR);
    let by_start: Vec<(String, i128)> =
        counts.buckets.iter().map(|(start, used)| (format_instant(*start), used[GPU])).collect();
    assert_eq!(
        by_start,
        [
            ("2026-12-02T08:00:00Z".to_owned(), 2 * 1800 * 1000),
            ("2026-12-02T09:00:00Z".to_owned(), 2 * 3600 * 1000),
            ("2026-12-02T10:00:00Z".to_owned(), 2 * 1800 * 1000),
        ]
    );
    // The next checkpoint's part of the same run adds to the bucket the last one left open.
    counts.add(GPU, 2000, start + 2 * HOUR, start + 2 * HOUR + 600);
    assert_eq!(counts.buckets[&at("2026-12-02T10:00:00Z")][GPU], 2 * 2400 * 1000);
    assert_eq!(counts.used(GPU, start + 2 * HOUR + 600), 2 * (2 * HOUR + 600) as i128 * 1000);
    counts.add(GPU, 2000, start, start);
    counts.add(GPU, 0, start, start + HOUR);
    assert_eq!(counts.buckets.len(), 3, "an empty interval or no amount adds no bucket");
}

#[test]
fn buckets_that_ended_a_window_before_now_expire_and_no_longer_count() {
    let mut counts = WindowCounts::empty(48 * HOUR);
    let start = at("2026-12-02T08:00:00Z");
    counts.add(GPU, 1000, start, start + HOUR);
    counts.add(GPU, 1000, start + HOUR, start + 2 * HOUR);
    // The first bucket ends at 09:00; it leaves the 48 h window at 09:00 two days later.
    let leaves = start + HOUR + 48 * HOUR;
    assert_eq!(counts.used(GPU, leaves - 1), 2 * HOUR as i128 * 1000);
    assert_eq!(counts.used(GPU, leaves), HOUR as i128 * 1000);
    counts.expire(leaves - 1);
    assert_eq!(counts.buckets.len(), 2);
    counts.expire(leaves);
    assert_eq!(counts.buckets.keys().copied().collect::<Vec<_>>(), [start + HOUR]);
    counts.expire(leaves + HOUR);
    assert!(counts.buckets.is_empty());
}

#[test]
fn the_windows_use_overcounts_by_at_most_one_bucket_and_never_undercounts() {
    // One GPU running without a break, checkpointed every 3 s; the exact use of the window is one GPU all along it.
    let window = 120;
    let mut counts = WindowCounts::empty(window);
    let bucket = counts.bucket;
    assert!(bucket * WINDOW_BUCKETS <= window, "a bucket is at most 1/48 of the window");
    let first = at("2026-12-02T08:00:00Z");
    let mut checkpoint = first;
    for now in (first + 3..first + 1800).step_by(3) {
        counts.add(GPU, 1000, checkpoint, now);
        counts.expire(now);
        checkpoint = now;
        let exact = i128::from(window.min(now - first)) * 1000;
        let counted = counts.used(GPU, now);
        assert!(counted >= exact, "under-counted at {now}: {counted} < {exact}");
        assert!(counted - exact < i128::from(bucket) * 1000, "over-counted by a bucket or more at {now}: {counted}");
    }
    // Use just before the window: only the part in the oldest bucket counts, and none of it once that bucket ends.
    let mut early = WindowCounts::empty(window);
    early.add(GPU, 1000, first, first + 10);
    let now = first + 10 + window;
    assert_eq!(early.used(GPU, now), 0, "ended a window ago, in a bucket ended a window ago");
    assert_eq!(early.used(GPU, now - 1), 2000, "the last bucket's 2 s, of which 1 s is still in the window");
}

#[test]
fn a_spent_window_has_room_again_once_enough_buckets_leave_it() {
    let mut counts = WindowCounts::empty(48 * HOUR);
    let start = at("2026-12-02T08:00:00Z");
    // 1 GPU-hour at 08:00, 2 at 09:00, 1 at 10:00: 4 GPU-hours in the window.
    counts.add(GPU, 1000, start, start + HOUR);
    counts.add(GPU, 2000, start + HOUR, start + 2 * HOUR);
    counts.add(GPU, 1000, start + 2 * HOUR, start + 3 * HOUR);
    let now = start + 3 * HOUR;
    let hours = |hours: i128| hours * 3_600_000;
    assert_eq!(counts.falls_below_at(GPU, hours(5), now), None, "not spent");
    // A 4 h limit: below it once the 08:00 bucket leaves, at 09:00 two days on.
    assert_eq!(counts.falls_below_at(GPU, hours(4), now), Some(start + HOUR + 48 * HOUR));
    // A 3 h limit: 3 h remain once 08:00 leaves, so it waits for 09:00's to leave as well.
    assert_eq!(counts.falls_below_at(GPU, hours(3), now), Some(start + 2 * HOUR + 48 * HOUR));
    assert_eq!(counts.falls_below_at(GPU, hours(1), now), Some(start + 3 * HOUR + 48 * HOUR));
    // Another resource without use in the early buckets waits for its own.
    counts.add("cpu", 4000, start + 2 * HOUR, start + 3 * HOUR);
    assert_eq!(counts.falls_below_at("cpu", 1, now), Some(start + 3 * HOUR + 48 * HOUR));
    // At that instant the use is below the limit: the checkpoint then lifts the hold.
    let renewed = start + HOUR + 48 * HOUR;
    assert!(counts.used(GPU, renewed) < hours(4));
    assert!(counts.used(GPU, renewed - 1) >= hours(4));
}

#[test]
fn the_status_text_round_trips_exactly_and_another_window_does_not_read() {
    let mut counts = WindowCounts::empty(MONTH);
    let start = at("2026-12-02T08:00:00Z");
    counts.add(GPU, 1000, start, start + 100_000);
    counts.add("cpu", 500, start + 7, start + 8);
    let status = counts.write(" 720h ");
    assert_eq!(status.window, "720h");
    assert_eq!(status.bucket_seconds, 54_000);
    assert_eq!(status.buckets[0].start, "2026-12-01T18:00:00Z");
    assert_eq!(status.buckets[0].used.get("cpu").map(String::as_str), Some("0.5"));
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["bucketSeconds"], 54_000);
    assert_eq!(json["buckets"][0]["used"][GPU], "3600", "08:00 to the bucket's end at 09:00");
    let back: WindowUsage = serde_json::from_value(json).unwrap();
    assert_eq!(back, status);
    assert_eq!(WindowCounts::read(&back, MONTH), Some(counts.clone()));
    assert_eq!(WindowCounts::read(&back, MONTH - HOUR), None, "another window");
    let recut = WindowUsage { bucket_seconds: 3600, ..back.clone() };
    assert_eq!(WindowCounts::read(&recut, MONTH), None, "another bucket length");
    let written_otherwise = WindowUsage { window: "43200m".into(), ..back };
    assert_eq!(WindowCounts::read(&written_otherwise, MONTH), Some(counts), "the same window written otherwise");
}
