//! The extremes of a spec: every interval, unit, window, start, limit and weight a header or a
//! policy can express is either refused by [`QuotaSpec::validated`] or decided in bounded time,
//! and no window computation loops in proportion to the interval, even for shapes that were
//! never validated.
//!
//! Each case runs on a worker thread with a deadline, so a regression fails here instead of
//! hanging the suite.

use std::sync::mpsc;
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use tollgate_quota::CounterShape;
use tollgate_quota::{
    Counters, MAX_WINDOW_YEARS, MeteringId, Outcome, QuotaSpec, SpecError, TimeUnit, WindowKind,
};
use tollgate_quota::{RollingLayout, Window};

/// Far more than any one case needs (microseconds in practice); a loop proportional to the
/// interval takes minutes to hours.
const DEADLINE: Duration = Duration::from_secs(5);

/// A century and one month: the longest window plus the clamping of month ends.
const MAX_WINDOW_SECS: i64 = (MAX_WINDOW_YEARS as i64) * 36_525 * 864 + 31 * 86_400;

/// Runs `f` on its own thread and fails the case if it does not finish within [`DEADLINE`].
fn within_deadline<T: Send + 'static>(what: String, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {DEADLINE:?}"),
    }
}

fn unit() -> impl Strategy<Value = TimeUnit> {
    prop_oneof![
        Just(TimeUnit::Second),
        Just(TimeUnit::Minute),
        Just(TimeUnit::Hour),
        Just(TimeUnit::Day),
        Just(TimeUnit::Week),
        Just(TimeUnit::Month),
    ]
}

fn window() -> impl Strategy<Value = WindowKind> {
    prop_oneof![Just(WindowKind::Calendar), Just(WindowKind::Flexi), Just(WindowKind::Rolling)]
}

/// Any instant jiff can hold, with the ends and the century around now weighted up.
fn instant() -> impl Strategy<Value = Timestamp> {
    let min = Timestamp::MIN.as_second();
    let max = Timestamp::MAX.as_second();
    prop_oneof![
        Just(min),
        Just(max),
        min..=max,
        QuotaSpec::EARLIEST_START.as_second()..=QuotaSpec::LATEST_START.as_second(),
    ]
    .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::MAX))
}

/// Intervals over the whole `u32` range, with the edges of every unit's bound weighted up.
fn interval() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1u32),
        Just(u32::MAX),
        any::<u32>(),
        unit().prop_flat_map(|u| {
            let m = u.max_interval();
            prop_oneof![Just(m), Just(m + 1), m.saturating_sub(3)..=m.saturating_add(3)]
        }),
        1u32..=300_000,
    ]
}

fn limit_or_weight() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), Just(i64::MAX as u64 + 1), any::<u64>()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Window arithmetic on any shape at any instant, validated or not, ends in bounded time
    /// and gives a window that holds the instant (within the representable range).
    #[test]
    fn window_arithmetic_is_bounded_for_every_shape(
        interval in interval(),
        unit in unit(),
        window in window(),
        start in proptest::option::of(instant()),
        now in instant(),
    ) {
        let shape = CounterShape { interval, unit, window, start: start.map(|t| t.as_second()) };
        let what = format!("window arithmetic for {shape:?} at {now}");
        let (cal, flexi, first, current) = within_deadline(what, move || {
            let layout = RollingLayout::of(&shape);
            let us = now.as_microsecond();
            (
                Window::calendar(&shape, now),
                Window::flexi(&shape, now),
                layout.first_counted(us),
                layout.bucket_of(us),
            )
        });
        prop_assert!(cal.start <= cal.end);
        prop_assert!(flexi.start <= flexi.end);
        prop_assert!(first <= current.saturating_add(1), "first {first} after current {current}");
    }

    /// Every spec is refused with a reason naming the value, or decided quickly with answers
    /// that respect the limit and a window no longer than the bound.
    #[test]
    fn every_spec_is_refused_or_decided_in_bounded_time(
        limit in limit_or_weight(),
        weight in limit_or_weight(),
        interval in interval(),
        unit in unit(),
        window in window(),
        start in proptest::option::of(instant()),
        now in QuotaSpec::EARLIEST_START.as_second()..=QuotaSpec::LATEST_START.as_second(),
    ) {
        let spec = QuotaSpec { limit, interval, unit, window, start };
        let spec = match spec.validated() {
            Ok(spec) => spec,
            Err(e) => {
                let msg = e.to_string();
                match e {
                    SpecError::ZeroInterval => prop_assert_eq!(interval, 0),
                    SpecError::WindowTooLong { .. } => {
                        prop_assert!(interval > unit.max_interval());
                        prop_assert!(msg.contains(&interval.to_string()), "{}", msg);
                    }
                    SpecError::StartNotCalendar => prop_assert_ne!(window, WindowKind::Calendar),
                    SpecError::StartOutOfRange(t) => {
                        prop_assert_eq!(Some(t), start);
                        prop_assert!(msg.contains("out of range"), "{}", msg);
                    }
                    other => prop_assert!(false, "unexpected refusal {other:?}"),
                }
                return Ok(());
            }
        };
        prop_assert!(interval >= 1 && interval <= unit.max_interval());
        let now = Timestamp::from_second(now).unwrap_or(Timestamp::UNIX_EPOCH);
        let what = format!("decisions for {spec:?} at {now}");
        let decisions = within_deadline(what, move || {
            let counters = Counters::new();
            let id = MeteringId::new("bounds:prop").unwrap_or_else(|e| panic!("{e}"));
            let mut out = Vec::new();
            // Admit, admit again, then jump a window ahead and once more far ahead.
            for step in [0i64, 0, 1, 3_600, MAX_WINDOW_SECS, 2 * MAX_WINDOW_SECS] {
                let at = Timestamp::from_second(now.as_second().saturating_add(step))
                    .unwrap_or(Timestamp::MAX);
                out.push(counters.check_at(&id, &spec, weight, at));
            }
            out
        });
        for d in decisions {
            prop_assert!(d.used <= limit, "used {} over limit {}", d.used, limit);
            if d.outcome == Outcome::Allowed && weight > 0 {
                prop_assert!(d.used >= weight);
            }
            if weight > limit {
                prop_assert_ne!(d.outcome, Outcome::Allowed);
            }
            if let (Some(s), Some(e)) = (d.window_start(), d.window_end()) {
                let len = e.as_second() - s.as_second();
                prop_assert!((0..=MAX_WINDOW_SECS).contains(&len), "window of {} s", len);
            }
        }
    }
}

/// The request of the original report: a rolling window of 145,000 months (and the largest
/// interval of all) used to loop for hours in the rolling layout while holding a shard lock.
#[test]
fn the_reported_rolling_month_windows_end_quickly() {
    for interval in [145_000, 1_000_000, u32::MAX] {
        let spec = QuotaSpec {
            limit: 10,
            interval,
            unit: TimeUnit::Month,
            window: WindowKind::Rolling,
            start: None,
        };
        assert!(
            matches!(spec.validated(), Err(SpecError::WindowTooLong { .. })),
            "{interval} months must be refused"
        );
        // Even unvalidated, the engine answers at once instead of looping.
        let d = within_deadline(format!("rolling {interval} months"), move || {
            let counters = Counters::new();
            let id = MeteringId::new("hang:me").unwrap_or_else(|e| panic!("{e}"));
            counters.check_at(&id, &spec, 1, Timestamp::now())
        });
        assert_eq!(d.limit, 10);
    }
    let max = QuotaSpec::new(10, TimeUnit::Month.max_interval(), TimeUnit::Month)
        .map(|s| s.with_window(WindowKind::Rolling))
        .unwrap_or_else(|e| panic!("{e}"));
    let d = within_deadline("rolling 1200 months".into(), move || {
        Counters::new().check_at(
            &MeteringId::new("max").unwrap_or_else(|e| panic!("{e}")),
            &max,
            1,
            Timestamp::now(),
        )
    });
    assert_eq!((d.outcome, d.used), (Outcome::Allowed, 1));
}
