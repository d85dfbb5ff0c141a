//! Window arithmetic: which window an instant falls in, and when it starts and ends.
//!
//! All arithmetic is in UTC and in whole microseconds since the Unix epoch. Nothing here
//! panics: results that would leave jiff's supported range (years -9999 to 9999) are clamped
//! to its ends.
//!
//! * **Calendar**, fixed units (second … day): window k covers `[anchor + k·n·u,
//!   anchor + (k+1)·n·u)`, the anchor being the epoch or `start`. Weeks are anchored on Monday
//!   1970-01-05 00:00 UTC unless `start` is given. Months are true calendar months counted from
//!   the 1st of January 1970 (or from `start`): a window starting on the 31st runs to the 31st of
//!   the month after, clamped to that month's last day, and is always computed from the anchor
//!   (never chained), so clamping never drifts.
//! * **Flexi**: `[first, first + n·u)`, months again as calendar months.
//! * **Rolling**: a look-back of `n·u` kept in [`ROLLING_BUCKETS`] sub-buckets of equal width
//!   aligned to the epoch; the counted span is off by at most one sub-bucket.

use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

use crate::spec::{CounterShape, TimeUnit};

/// Sub-buckets per rolling window (for months: per `n × 28` days, so a 31-day month spans up to
/// 71 of them). 64 divides every fixed unit length in microseconds exactly.
pub const ROLLING_BUCKETS: i64 = 64;

/// The earliest instant jiff represents (-009999-01-01T00:00:00 UTC-25:59:59), in microseconds.
pub(crate) const MIN_US: i64 = -377_705_023_201_000_000;
/// The latest instant jiff represents (9999-12-31T23:59:59.999999 UTC+25:59:59), in microseconds.
pub(crate) const MAX_US: i64 = 253_402_207_200_999_999;

/// Monday 1970-01-05 00:00 UTC: the anchor of calendar weeks without `start`.
const FIRST_MONDAY_US: i64 = 4 * 86_400 * 1_000_000;
/// 28 days: the shortest month, the base of rolling-month sub-buckets.
const DAYS_28_US: i64 = 28 * DAY_US;
/// One day in microseconds.
const DAY_US: i64 = 86_400 * 1_000_000;
/// 31 days: the longest month, used where a nominal length must cover any month.
const DAYS_31_US: i64 = 31 * 86_400 * 1_000_000;
/// Longest fixed window we compute with; far beyond the representable range already.
const MAX_LEN_US: i64 = i64::MAX / 4;

/// One window: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First instant inside the window.
    pub start: Timestamp,
    /// First instant after the window.
    pub end: Timestamp,
}

impl Window {
    /// The calendar window of `shape` that holds `now`.
    pub fn calendar(shape: &CounterShape, now: Timestamp) -> Window {
        let (start, end) = calendar_us(shape, now.as_microsecond());
        Window { start: timestamp(start), end: timestamp(end) }
    }

    /// The flexi window of `shape` opened at `first`.
    pub fn flexi(shape: &CounterShape, first: Timestamp) -> Window {
        let first = first.as_microsecond();
        Window { start: timestamp(first), end: timestamp(add_len(shape, first)) }
    }

    /// The window's length.
    pub fn duration(&self) -> Duration {
        micros_between(self.start.as_microsecond(), self.end.as_microsecond())
    }
}

/// `us` as a timestamp, clamped to jiff's range.
pub(crate) fn timestamp(us: i64) -> Timestamp {
    Timestamp::from_microsecond(us.clamp(MIN_US, MAX_US)).unwrap_or(Timestamp::MAX)
}

/// The time from `from` to `to`, zero when `to` is not after `from`.
pub(crate) fn micros_between(from: i64, to: i64) -> Duration {
    Duration::from_micros(u64::try_from(to.saturating_sub(from)).unwrap_or(0))
}

/// The length of `interval × unit` in microseconds for fixed units; `None` for months.
pub(crate) fn fixed_len_us(shape: &CounterShape) -> Option<i64> {
    let unit_us = shape.unit.fixed_seconds()? * 1_000_000;
    Some(i64::from(shape.interval.max(1)).saturating_mul(unit_us).min(MAX_LEN_US))
}

/// A length no window of `shape` exceeds (months count as 31 days). Counters keep their
/// all-window totals for this long after their last window ended.
pub(crate) fn nominal_len_us(shape: &CounterShape) -> i64 {
    fixed_len_us(shape).unwrap_or_else(|| {
        i64::from(shape.interval.max(1)).saturating_mul(DAYS_31_US).min(MAX_LEN_US)
    })
}

/// `at + interval × unit`, clamped.
pub(crate) fn add_len(shape: &CounterShape, at: i64) -> i64 {
    match fixed_len_us(shape) {
        Some(len) => at.saturating_add(len).min(MAX_US),
        None => add_months(at, i64::from(shape.interval.max(1))),
    }
}

/// `at - interval × unit`, clamped.
pub(crate) fn sub_len(shape: &CounterShape, at: i64) -> i64 {
    match fixed_len_us(shape) {
        Some(len) => at.saturating_sub(len).max(MIN_US),
        None => add_months(at, -i64::from(shape.interval.max(1))),
    }
}

/// The calendar window `[start, end)` holding `now`, in microseconds.
pub(crate) fn calendar_us(shape: &CounterShape, now: i64) -> (i64, i64) {
    let frame = CalendarFrame::of(shape);
    frame.bounds(frame.index(now))
}

/// How one calendar shape numbers its windows: window `k` starts `k` lengths after the anchor.
/// Computed once per shape, so finding the window of an instant is a division for fixed units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CalendarFrame {
    /// The anchor in microseconds: the start of window 0.
    anchor: i64,
    /// The window length in microseconds for fixed units, `None` for months.
    len: Option<i64>,
    /// Months per window (months only).
    months: i64,
}

impl CalendarFrame {
    /// The frame of `shape` (its window kind is not looked at).
    pub(crate) fn of(shape: &CounterShape) -> Self {
        let anchor = match (shape.start, shape.unit) {
            (Some(secs), _) => secs.saturating_mul(1_000_000),
            (None, TimeUnit::Week) => FIRST_MONDAY_US,
            (None, _) => 0,
        };
        Self { anchor, len: fixed_len_us(shape), months: i64::from(shape.interval.max(1)) }
    }

    /// The number of the window holding `now` (negative before the anchor).
    pub(crate) fn index(&self, now: i64) -> i64 {
        match self.len {
            // `now - anchor` fits: both lie within jiff's range, far inside i64.
            Some(len) => now.saturating_sub(self.anchor).div_euclid(len),
            None => {
                let (a, n) = (civil(self.anchor), civil(now));
                let mut months = (i64::from(n.year()) - i64::from(a.year())) * 12
                    + (i64::from(n.month()) - i64::from(a.month()));
                if add_months(self.anchor, months) > now {
                    months -= 1;
                }
                months.div_euclid(self.months)
            }
        }
    }

    /// True when window `k` holds `now`: a multiplication where [`CalendarFrame::index`]
    /// divides. Months always answer false (their windows are found through the calendar).
    pub(crate) fn holds(&self, k: i64, now: i64) -> bool {
        let Some(len) = self.len else { return false };
        let start = k.checked_mul(len).and_then(|d| d.checked_add(self.anchor));
        start.is_some_and(|start| start <= now && now - start < len)
    }

    /// `[start, end)` of window `k`, clamped to jiff's range.
    pub(crate) fn bounds(&self, k: i64) -> (i64, i64) {
        match self.len {
            Some(len) => {
                let start = i128::from(self.anchor) + i128::from(k) * i128::from(len);
                (clamp_us(start), clamp_us(start + i128::from(len)))
            }
            None => {
                let first = k.saturating_mul(self.months);
                let (start, end) = (first, first.saturating_add(self.months));
                (add_months(self.anchor, start), add_months(self.anchor, end))
            }
        }
    }
}

/// `at + months` calendar months in UTC (day clamped to the month's end), clamped to range.
pub(crate) fn add_months(at: i64, months: i64) -> i64 {
    let shifted = Span::new()
        .try_months(months)
        .and_then(|span| civil(at).checked_add(span))
        .and_then(|dt| TimeZone::UTC.to_timestamp(dt));
    match shifted {
        Ok(ts) => ts.as_microsecond(),
        Err(_) if months >= 0 => MAX_US,
        Err(_) => MIN_US,
    }
}

fn civil(us: i64) -> DateTime {
    TimeZone::UTC.to_datetime(timestamp(us))
}

fn clamp_us(us: i128) -> i64 {
    i64::try_from(us.clamp(i128::from(MIN_US), i128::from(MAX_US))).unwrap_or(MAX_US)
}

/// How a rolling window of one shape is cut into sub-buckets.
///
/// Bucket `i` covers `[i·width, (i+1)·width)` and is counted until `i·width + n·u`
/// ([`RollingLayout::leaves_at`]). At `now` the counted buckets are those from
/// [`RollingLayout::first_counted`] on, so the counted span is between `n·u - width` and `n·u`
/// long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollingLayout {
    width: i64,
    shape: CounterShape,
}

impl RollingLayout {
    /// The layout for `shape` (its window kind is not looked at).
    pub fn of(shape: &CounterShape) -> Self {
        let base = fixed_len_us(shape)
            .unwrap_or_else(|| i64::from(shape.interval.max(1)).saturating_mul(DAYS_28_US));
        Self { width: (base / ROLLING_BUCKETS).max(1), shape: *shape }
    }

    /// The width of one sub-bucket: the largest error of the look-back.
    pub fn bucket_width(&self) -> Duration {
        micros_between(0, self.width)
    }

    /// The sub-bucket holding the instant `us`.
    pub fn bucket_of(&self, us: i64) -> i64 {
        us.div_euclid(self.width)
    }

    /// The oldest sub-bucket still counted at `now`: the first one whose
    /// [`leaves_at`](Self::leaves_at) is after `now`. (Defined through `leaves_at`, which is
    /// monotonic, because "now minus n months" is not: March 29 to 31 all clamp to February 28.)
    ///
    /// Found by galloping from a first guess (exact for fixed units, a few buckets off for
    /// months), then bisecting: at most ~2·64 evaluations of `leaves_at` whatever the shape, so
    /// no interval, however long, makes this loop in proportion to it.
    pub fn first_counted(&self, now: i64) -> i64 {
        const LOWEST: i64 = i64::MIN / 2;
        const HIGHEST: i64 = i64::MAX / 2;
        let counted = |b: i64| self.leaves_at(b) > now;
        let guess =
            self.bucket_of(sub_len(&self.shape, now)).saturating_add(1).clamp(LOWEST, HIGHEST);
        // Invariant of the bisection below: `lo` is not counted (or is LOWEST), `hi` is counted
        // (or is HIGHEST), and the answer lies in (lo, hi].
        let (mut lo, mut hi);
        if guess > LOWEST && counted(guess - 1) {
            hi = guess - 1;
            let mut step = 1i64;
            lo = hi.saturating_sub(step).max(LOWEST);
            while lo > LOWEST && counted(lo) {
                hi = lo;
                step = step.saturating_mul(2);
                lo = hi.saturating_sub(step).max(LOWEST);
            }
            if lo == LOWEST && counted(lo) {
                return LOWEST;
            }
        } else {
            if counted(guess) {
                return guess;
            }
            lo = guess;
            let mut step = 1i64;
            hi = lo.saturating_add(step).min(HIGHEST);
            while hi < HIGHEST && !counted(hi) {
                lo = hi;
                step = step.saturating_mul(2);
                hi = lo.saturating_add(step).min(HIGHEST);
            }
            if hi == HIGHEST && !counted(hi) {
                return HIGHEST;
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if counted(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// When sub-bucket `bucket` stops being counted: its start plus the window, except that a
    /// start whose day the target month lacks (March 31 plus one month) leaves at the end of
    /// that month, not on its last day at the same time of day. So a later bucket never leaves
    /// before an earlier one (March 30 19:30 leaves April 30 19:30, March 31 06:00 at May 1
    /// 00:00), which [`Self::first_counted`] relies on. `decide.lua` does the same.
    pub fn leaves_at(&self, bucket: i64) -> i64 {
        let start = bucket.saturating_mul(self.width);
        let end = add_len(&self.shape, start);
        if fixed_len_us(&self.shape).is_some() || civil(end).day() >= civil(start).day() {
            return end;
        }
        end.div_euclid(DAY_US).saturating_add(1).saturating_mul(DAY_US).min(MAX_US)
    }
}

#[cfg(test)]
mod tests;
