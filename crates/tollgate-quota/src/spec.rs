//! What a quota is: the limit per window, and the shape of the counter that enforces it.
//!
//! Everything here is parsed and validated at the edge (HTTP headers, config files), so the
//! rest of the engine can trust a [`QuotaSpec`] without checking again.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;

/// Why a spec or identifier was refused. The message names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The metering id is empty, longer than 256 bytes, or holds a byte outside visible ASCII.
    #[error("metering id {0:?} must be 1 to 256 bytes of visible ASCII")]
    InvalidId(String),
    /// The time unit is not one of second, minute, hour, day, week, month.
    #[error("unknown time unit {0:?}: expected second, minute, hour, day, week or month")]
    UnknownUnit(String),
    /// The window kind is not calendar, flexi or rolling.
    #[error("unknown window {0:?}: expected calendar, flexi or rolling")]
    UnknownWindow(String),
    /// The interval is zero.
    #[error("interval must be at least 1")]
    ZeroInterval,
    /// A `start` anchor was given for a window that is not calendar.
    #[error("a start anchor only applies to calendar windows")]
    StartNotCalendar,
    /// `interval × unit` is longer than [`MAX_WINDOW_YEARS`] years.
    #[error(
        "interval {interval} {unit} is longer than the longest window, {MAX_WINDOW_YEARS} years \
         ({max} {unit})",
        max = unit.max_interval()
    )]
    WindowTooLong {
        /// The interval asked for.
        interval: u32,
        /// Its unit.
        unit: TimeUnit,
    },
    /// The `start` anchor lies outside [`QuotaSpec::EARLIEST_START`] ..= [`QuotaSpec::LATEST_START`].
    #[error(
        "start {0} is out of range: it must lie between {earliest} and {latest}",
        earliest = QuotaSpec::EARLIEST_START,
        latest = QuotaSpec::LATEST_START
    )]
    StartOutOfRange(Timestamp),
}

/// The longest window any spec may ask for, in years (see [`TimeUnit::max_interval`]).
///
/// Why a bound at all: every window computation, in Rust and in the Redis script, must stay
/// inside the instants both can represent exactly (jiff's years ±9999; doubles exact until
/// 2255), and a rolling layout must have sub-buckets that fit in such a window. A century is far
/// beyond any real quota and keeps `now + 2 windows` (a counter's longest lifetime) before 2255.
pub const MAX_WINDOW_YEARS: u32 = 100;

/// The unit of a window's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeUnit {
    /// One second.
    Second,
    /// Sixty seconds.
    Minute,
    /// Sixty minutes.
    Hour,
    /// 24 hours (calendar days start at 00:00 UTC).
    Day,
    /// Calendar weeks start on Monday 00:00 UTC.
    Week,
    /// True calendar months, never "28 days".
    Month,
}

impl TimeUnit {
    /// The canonical singular name, as used in config files and headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }

    /// The largest interval of this unit: [`MAX_WINDOW_YEARS`] years (of 365.25 days, or 12
    /// months), rounded down to whole units.
    pub fn max_interval(self) -> u32 {
        match self {
            Self::Second => 3_155_760_000,
            Self::Minute => 52_596_000,
            Self::Hour => 876_600,
            Self::Day => 36_525,
            Self::Week => 5_217,
            Self::Month => 1_200,
        }
    }

    /// The unit's length in seconds, or `None` for months, whose length varies.
    pub fn fixed_seconds(self) -> Option<i64> {
        match self {
            Self::Second => Some(1),
            Self::Minute => Some(60),
            Self::Hour => Some(3_600),
            Self::Day => Some(86_400),
            Self::Week => Some(604_800),
            Self::Month => None,
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TimeUnit {
    type Err = SpecError;
    /// Accepts singular and plural, case-insensitive: `hour`, `Hours`, `MONTH`. Compared in
    /// place, without a lowercased copy: every `/v1/quota` request may name its unit.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        let singular = trimmed.strip_suffix(['s', 'S']).unwrap_or(trimmed);
        [Self::Second, Self::Minute, Self::Hour, Self::Day, Self::Week, Self::Month]
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(singular))
            .ok_or_else(|| SpecError::UnknownUnit(s.to_owned()))
    }
}

/// Read and written as text (`"hour"`, any case, singular or plural), as in config files.
impl serde::Serialize for TimeUnit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for TimeUnit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How windows are laid out in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum WindowKind {
    /// Fixed windows aligned in UTC to the epoch (or to `start`).
    #[default]
    Calendar,
    /// A window starts at the first admitted request and lasts `interval × unit`.
    Flexi,
    /// A sliding window looking back `interval × unit` from now, kept in sub-buckets.
    Rolling,
}

impl WindowKind {
    /// The canonical name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Calendar => "calendar",
            Self::Flexi => "flexi",
            Self::Rolling => "rolling",
        }
    }
}

impl fmt::Display for WindowKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WindowKind {
    type Err = SpecError;
    /// Case-insensitive, compared in place (see [`TimeUnit`]'s).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        [Self::Calendar, Self::Flexi, Self::Rolling]
            .into_iter()
            .find(|w| w.as_str().eq_ignore_ascii_case(trimmed))
            .ok_or_else(|| SpecError::UnknownWindow(s.to_owned()))
    }
}

/// Read and written as text (`"rolling"`, any case), as in config files.
impl serde::Serialize for WindowKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for WindowKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A quota: at most `limit` units per window of `interval × unit`.
///
/// The limit is not part of a counter's identity: changing it applies at once to the running
/// counter. The other fields are (see [`QuotaSpec::counter_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuotaSpec {
    /// Units allowed per window.
    pub limit: u64,
    /// Window length in `unit`s; at least 1.
    pub interval: u32,
    /// The unit of `interval`.
    pub unit: TimeUnit,
    /// Calendar, flexi or rolling.
    pub window: WindowKind,
    /// Anchor for calendar windows; the Unix epoch when `None`.
    pub start: Option<Timestamp>,
}

impl QuotaSpec {
    /// The earliest calendar anchor accepted: 1900-01-01T00:00:00Z.
    pub const EARLIEST_START: Timestamp = Timestamp::constant(-2_208_988_800, 0);
    /// The latest calendar anchor accepted: 2200-01-01T00:00:00Z. With windows of at most
    /// [`MAX_WINDOW_YEARS`], every window edge the stores compute stays before 2255, where the
    /// Redis script's doubles stop being exact in microseconds.
    pub const LATEST_START: Timestamp = Timestamp::constant(7_258_118_400, 0);

    /// A calendar quota of `limit` per `interval × unit`, anchored at the epoch.
    pub fn new(limit: u64, interval: u32, unit: TimeUnit) -> Result<Self, SpecError> {
        Self { limit, interval, unit, window: WindowKind::Calendar, start: None }.validated()
    }

    /// Returns the spec if it is well formed: 1 ≤ interval ≤ [`TimeUnit::max_interval`],
    /// `start` only with calendar windows and between [`Self::EARLIEST_START`] and
    /// [`Self::LATEST_START`]. Every window shape that passes is one the stores compute in a
    /// bounded number of steps.
    pub fn validated(self) -> Result<Self, SpecError> {
        if self.interval == 0 {
            return Err(SpecError::ZeroInterval);
        }
        if self.interval > self.unit.max_interval() {
            return Err(SpecError::WindowTooLong { interval: self.interval, unit: self.unit });
        }
        if let Some(start) = self.start {
            if self.window != WindowKind::Calendar {
                return Err(SpecError::StartNotCalendar);
            }
            check_start(start)?;
        }
        Ok(self)
    }

    /// The same spec with another window kind.
    pub fn with_window(mut self, window: WindowKind) -> Self {
        self.window = window;
        self
    }

    /// The same spec anchored at `start`.
    pub fn with_start(mut self, start: Timestamp) -> Self {
        self.start = Some(start);
        self
    }

    /// The parts of the spec that identify a counter (everything but the limit).
    pub fn counter_shape(&self) -> CounterShape {
        CounterShape {
            interval: self.interval,
            unit: self.unit,
            window: self.window,
            start: self.start.map(|t| t.as_second()),
        }
    }
}

/// `start` if it is a calendar anchor the engine accepts (see [`QuotaSpec::EARLIEST_START`]).
pub fn check_start(start: Timestamp) -> Result<Timestamp, SpecError> {
    if (QuotaSpec::EARLIEST_START..=QuotaSpec::LATEST_START).contains(&start) {
        Ok(start)
    } else {
        Err(SpecError::StartOutOfRange(start))
    }
}

/// The parts of a [`QuotaSpec`] that, with the [`MeteringId`](crate::MeteringId), make a counter key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterShape {
    /// How many `unit`s one window lasts.
    pub interval: u32,
    /// The unit of `interval`.
    pub unit: TimeUnit,
    /// How windows are placed in time.
    pub window: WindowKind,
    /// The calendar anchor in Unix seconds.
    pub start: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_singular_plural_any_case() {
        assert_eq!("hours".parse::<TimeUnit>(), Ok(TimeUnit::Hour));
        assert_eq!("Month".parse::<TimeUnit>(), Ok(TimeUnit::Month));
        assert_eq!("SECONDS".parse::<TimeUnit>(), Ok(TimeUnit::Second));
        assert!("fortnight".parse::<TimeUnit>().is_err());
        assert!("".parse::<TimeUnit>().is_err());
        assert_eq!(" Days ".parse::<TimeUnit>(), Ok(TimeUnit::Day));
        assert!("hourss".parse::<TimeUnit>().is_err(), "one plural s only");
        assert!("s".parse::<TimeUnit>().is_err());
        assert_eq!(
            "Fortnights".parse::<TimeUnit>(),
            Err(SpecError::UnknownUnit("Fortnights".into())),
            "the error keeps the value as sent"
        );
    }

    #[test]
    fn windows_parse_in_any_case() {
        assert_eq!("Rolling".parse::<WindowKind>(), Ok(WindowKind::Rolling));
        assert_eq!(" FLEXI ".parse::<WindowKind>(), Ok(WindowKind::Flexi));
        assert_eq!("calendar".parse::<WindowKind>(), Ok(WindowKind::Calendar));
        assert!("sliding".parse::<WindowKind>().is_err());
        assert!("calendars".parse::<WindowKind>().is_err());
    }

    #[test]
    fn zero_interval_and_misplaced_start_are_refused() {
        assert_eq!(QuotaSpec::new(1, 0, TimeUnit::Day), Err(SpecError::ZeroInterval));
        let s = QuotaSpec::new(1, 1, TimeUnit::Day).unwrap().with_window(WindowKind::Flexi);
        assert_eq!(
            s.with_start(Timestamp::UNIX_EPOCH).validated(),
            Err(SpecError::StartNotCalendar)
        );
    }

    #[test]
    fn windows_longer_than_a_century_and_far_anchors_are_refused() {
        for unit in [
            TimeUnit::Second,
            TimeUnit::Minute,
            TimeUnit::Hour,
            TimeUnit::Day,
            TimeUnit::Week,
            TimeUnit::Month,
        ] {
            let max = unit.max_interval();
            assert!(QuotaSpec::new(1, max, unit).is_ok(), "{unit}");
            assert_eq!(
                QuotaSpec::new(1, max + 1, unit),
                Err(SpecError::WindowTooLong { interval: max + 1, unit })
            );
            // A century, give or take the rounding of each unit.
            let secs = unit.fixed_seconds().unwrap_or(2_629_800) * i64::from(max);
            assert!((3_155_000_000..=3_155_760_000).contains(&secs), "{unit}: {secs}");
        }
        let msg = QuotaSpec::new(1, 145_000, TimeUnit::Month).unwrap_err().to_string();
        assert!(msg.contains("145000 month") && msg.contains("100 years"), "{msg}");
        let day = QuotaSpec::new(1, 1, TimeUnit::Day).unwrap();
        let far: Timestamp = "2200-01-01T00:00:01Z".parse().unwrap();
        assert_eq!(day.with_start(far).validated(), Err(SpecError::StartOutOfRange(far)));
        assert!(day.with_start(QuotaSpec::LATEST_START).validated().is_ok());
        assert!(day.with_start(QuotaSpec::EARLIEST_START).validated().is_ok());
        let msg = day.with_start(Timestamp::MIN).validated().unwrap_err().to_string();
        assert!(msg.contains("out of range") && msg.contains("1900-01-01T00:00:00Z"), "{msg}");
    }
}
