use super::*;
use crate::spec::WindowKind;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn shape(interval: u32, unit: TimeUnit, start: Option<&str>) -> CounterShape {
    CounterShape {
        interval,
        unit,
        window: WindowKind::Calendar,
        start: start.map(|s| ts(s).as_second()),
    }
}

fn cal(interval: u32, unit: TimeUnit, start: Option<&str>, now: &str) -> (String, String) {
    let w = Window::calendar(&shape(interval, unit, start), ts(now));
    (w.start.to_string(), w.end.to_string())
}

fn pair(a: &str, b: &str) -> (String, String) {
    (ts(a).to_string(), ts(b).to_string())
}

#[test]
fn range_constants_match_jiff() {
    assert_eq!(MIN_US, Timestamp::MIN.as_microsecond());
    assert_eq!(MAX_US, Timestamp::MAX.as_microsecond());
}

#[test]
fn fixed_units_align_to_the_epoch() {
    assert_eq!(
        cal(1, TimeUnit::Second, None, "2026-03-04T05:06:07.890Z"),
        pair("2026-03-04T05:06:07Z", "2026-03-04T05:06:08Z")
    );
    assert_eq!(
        cal(5, TimeUnit::Minute, None, "2026-03-04T05:06:07Z"),
        pair("2026-03-04T05:05:00Z", "2026-03-04T05:10:00Z")
    );
    assert_eq!(
        cal(24, TimeUnit::Hour, None, "2026-03-04T23:59:59.999999Z"),
        pair("2026-03-04T00:00:00Z", "2026-03-05T00:00:00Z")
    );
    // The exact end instant belongs to the next window.
    assert_eq!(
        cal(1, TimeUnit::Day, None, "2026-03-05T00:00:00Z"),
        pair("2026-03-05T00:00:00Z", "2026-03-06T00:00:00Z")
    );
}

#[test]
fn interval_of_seven_days_is_epoch_aligned_not_monday_aligned() {
    // 1970-01-01 was a Thursday, so 7-day windows run Thursday to Thursday.
    assert_eq!(
        cal(7, TimeUnit::Day, None, "2026-11-30T12:00:00Z"),
        pair("2026-11-26T00:00:00Z", "2026-12-03T00:00:00Z")
    );
    assert_eq!(
        ts("2026-11-26T00:00:00Z").to_zoned_datetime(TimeZone::UTC).weekday(),
        jiff::civil::Weekday::Thursday
    );
}

#[test]
fn weeks_start_on_monday_midnight_utc() {
    // Monday 2026-11-30 11:55: the week started this midnight and ends next Monday.
    assert_eq!(
        cal(1, TimeUnit::Week, None, "2026-11-30T11:55:25Z"),
        pair("2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z")
    );
    // Sunday 23:59:59 is still in the previous week.
    assert_eq!(
        cal(1, TimeUnit::Week, None, "2026-11-29T23:59:59Z"),
        pair("2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z")
    );
    // Two-week windows count from the first Monday after the epoch.
    let (s, e) = cal(2, TimeUnit::Week, None, "1970-01-20T00:00:00Z");
    assert_eq!((s, e), pair("1970-01-19T00:00:00Z", "1970-02-02T00:00:00Z"));
}

#[test]
fn months_are_calendar_months_from_the_first() {
    assert_eq!(
        cal(1, TimeUnit::Month, None, "2026-02-14T10:00:00Z"),
        pair("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z")
    );
    assert_eq!(
        cal(1, TimeUnit::Month, None, "2026-12-31T23:59:59Z"),
        pair("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
    );
    // Quarters count from January 1970.
    assert_eq!(
        cal(3, TimeUnit::Month, None, "2026-05-15T00:00:00Z"),
        pair("2026-04-01T00:00:00Z", "2026-07-01T00:00:00Z")
    );
}

#[test]
fn leap_years() {
    assert_eq!(
        cal(1, TimeUnit::Month, None, "2028-02-29T12:00:00Z"),
        pair("2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z")
    );
    let w = Window::calendar(&shape(1, TimeUnit::Month, None), ts("2028-02-10T00:00:00Z"));
    assert_eq!(w.duration(), Duration::from_secs(29 * 86_400));
    let w = Window::calendar(&shape(1, TimeUnit::Month, None), ts("2027-02-10T00:00:00Z"));
    assert_eq!(w.duration(), Duration::from_secs(28 * 86_400));
    // 2100 is not a leap year.
    let w = Window::calendar(&shape(1, TimeUnit::Month, None), ts("2100-02-10T00:00:00Z"));
    assert_eq!(w.duration(), Duration::from_secs(28 * 86_400));
    // A day window on Feb 29.
    assert_eq!(
        cal(1, TimeUnit::Day, None, "2028-02-29T23:00:00Z"),
        pair("2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z")
    );
}

#[test]
fn month_ends_clamp_without_drifting() {
    let start = Some("2026-01-31T05:00:00Z");
    assert_eq!(
        cal(1, TimeUnit::Month, start, "2026-02-15T00:00:00Z"),
        pair("2026-01-31T05:00:00Z", "2026-02-28T05:00:00Z")
    );
    assert_eq!(
        cal(1, TimeUnit::Month, start, "2026-03-01T00:00:00Z"),
        pair("2026-02-28T05:00:00Z", "2026-03-31T05:00:00Z")
    );
    // Back on the 31st in March: the February clamp did not carry over.
    assert_eq!(
        cal(1, TimeUnit::Month, start, "2026-04-01T00:00:00Z"),
        pair("2026-03-31T05:00:00Z", "2026-04-30T05:00:00Z")
    );
    // Leap February from a 30th anchor.
    assert_eq!(
        cal(1, TimeUnit::Month, Some("2027-12-30T00:00:00Z"), "2028-02-29T23:00:00Z"),
        pair("2028-02-29T00:00:00Z", "2028-03-30T00:00:00Z")
    );
}

#[test]
fn start_anchors_in_the_past() {
    // Apigee's example: StartTime 2015-06-26 08:30, every 20 minutes.
    assert_eq!(
        cal(20, TimeUnit::Minute, Some("2015-06-26T08:30:00Z"), "2026-11-30T11:31:00Z"),
        pair("2026-11-30T11:30:00Z", "2026-11-30T11:50:00Z")
    );
    // Monthly from the 1st at 05:00 (the community report): resets on the 1st at 05:00.
    assert_eq!(
        cal(1, TimeUnit::Month, Some("2024-07-01T05:00:00Z"), "2024-09-01T04:59:59Z"),
        pair("2024-08-01T05:00:00Z", "2024-09-01T05:00:00Z")
    );
    // 24 hours from 08:30: windows run 08:30 to 08:30.
    assert_eq!(
        cal(24, TimeUnit::Hour, Some("2020-01-01T08:30:00Z"), "2026-11-30T08:29:00Z"),
        pair("2026-11-29T08:30:00Z", "2026-11-30T08:30:00Z")
    );
    // Weeks from a Wednesday anchor.
    assert_eq!(
        cal(1, TimeUnit::Week, Some("2026-11-04T00:00:00Z"), "2026-11-30T00:00:00Z"),
        pair("2026-11-25T00:00:00Z", "2026-12-02T00:00:00Z")
    );
    // An anchor in the future extends backwards.
    assert_eq!(
        cal(1, TimeUnit::Hour, Some("2030-01-01T00:30:00Z"), "2026-11-30T11:00:00Z"),
        pair("2026-11-30T10:30:00Z", "2026-11-30T11:30:00Z")
    );
}

#[test]
fn utc_only_offsets_name_the_same_instant() {
    // An anchor written with an offset is the same instant as its UTC form.
    assert_eq!(
        cal(1, TimeUnit::Day, Some("2026-01-01T02:00:00+02:00"), "2026-06-15T12:00:00Z"),
        pair("2026-06-15T00:00:00Z", "2026-06-16T00:00:00Z")
    );
    // Days end at midnight UTC, not at local midnight.
    assert_eq!(
        cal(1, TimeUnit::Day, None, "2026-06-15T23:30:00-05:00"),
        pair("2026-06-16T00:00:00Z", "2026-06-17T00:00:00Z")
    );
    // Months too: 2026-07-01T01:00+02:00 is still June in UTC.
    assert_eq!(
        cal(1, TimeUnit::Month, None, "2026-07-01T01:00:00+02:00"),
        pair("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z")
    );
}

#[test]
fn before_the_epoch_and_at_the_range_ends() {
    assert_eq!(
        cal(1, TimeUnit::Hour, None, "1969-12-31T23:30:00Z"),
        pair("1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z")
    );
    let huge = shape(u32::MAX, TimeUnit::Week, None);
    let w = Window::calendar(&huge, ts("2026-01-01T00:00:00Z"));
    assert!(w.start <= ts("2026-01-01T00:00:00Z"));
    assert_eq!(w.end.as_microsecond(), MAX_US);
    let months = shape(u32::MAX, TimeUnit::Month, None);
    let w = Window::calendar(&months, ts("2026-01-01T00:00:00Z"));
    assert_eq!(w.end.as_microsecond(), MAX_US);
    let w = Window::calendar(&shape(1, TimeUnit::Month, None), Timestamp::MAX);
    assert_eq!(w.start, ts("9999-12-01T00:00:00Z"));
    assert_eq!(w.end.as_microsecond(), MAX_US);
}

#[test]
fn flexi_windows_start_at_the_first_request() {
    let s = shape(1, TimeUnit::Month, None);
    let w = Window::flexi(&s, ts("2026-01-31T10:00:00Z"));
    assert_eq!(w.end, ts("2026-02-28T10:00:00Z"));
    let s = shape(90, TimeUnit::Second, None);
    let w = Window::flexi(&s, ts("2026-01-31T10:00:00.5Z"));
    assert_eq!(w.end, ts("2026-01-31T10:01:30.5Z"));
}

#[test]
fn rolling_layout_counts_one_window_within_one_bucket() {
    let s = shape(1, TimeUnit::Minute, None);
    let l = RollingLayout::of(&s);
    assert_eq!(l.bucket_width(), Duration::from_micros(937_500));
    let now = ts("2026-01-01T00:10:00Z").as_microsecond();
    let first = l.first_counted(now);
    let current = l.bucket_of(now);
    assert_eq!(current - first + 1, ROLLING_BUCKETS);
    // The oldest counted bucket leaves exactly one window after its start.
    assert_eq!(l.leaves_at(first), first * 937_500 + 60_000_000);
    assert!(l.leaves_at(first) > now);
    assert!(l.leaves_at(first - 1) <= now);
    // Months: buckets of 28/64 days; a 31-day look-back spans more of them.
    let m = RollingLayout::of(&shape(1, TimeUnit::Month, None));
    assert_eq!(m.bucket_width(), Duration::from_secs(28 * 86_400 / 64) + Duration::from_millis(0));
    let now = ts("2026-04-01T00:00:00Z").as_microsecond();
    let span = m.bucket_of(now) - m.first_counted(now) + 1;
    assert!((ROLLING_BUCKETS..=72).contains(&span), "{span}");
}

/// A month's rolling buckets leave in order even where the target month lacks the start's day
/// (March 31 + 1 month): the bisection of `first_counted` depends on it.
#[test]
fn month_buckets_leave_in_order_across_a_short_month() {
    for interval in [1, 2, 11] {
        let shape = shape(interval, TimeUnit::Month, None);
        let layout = RollingLayout::of(&shape);
        let from = layout.bucket_of(ts("2026-01-27T00:00:00Z").as_microsecond());
        let to = layout.bucket_of(ts("2026-04-03T00:00:00Z").as_microsecond());
        for b in from..to {
            assert!(
                layout.leaves_at(b) <= layout.leaves_at(b + 1),
                "bucket {b}, {interval} months"
            );
            let now = layout.leaves_at(b);
            assert!(
                layout.first_counted(now) > b,
                "bucket {b} is no longer counted when it leaves"
            );
        }
    }
}
