//! Where "now" comes from. Stores read time through a [`Clock`] so tests can move it by hand.

use std::any::Any;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Any + Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// The current instant in microseconds since the Unix epoch, within jiff's range: what the
    /// engine computes with, read without building a [`Timestamp`] where a clock can.
    fn now_us(&self) -> i64 {
        self.now().as_microsecond()
    }
}

/// The system's wall clock (UTC), read cheaply.
///
/// Reading the wall clock through the OS costs about as much as the rest of a decision, so this
/// clock reads the CPU's monotonic counter (via `quanta`, which falls back to the OS monotonic
/// clock where the counter is unreliable) and adds an offset to the wall clock that is re-taken
/// from the OS at least once a second. Steps of the OS clock (NTP) therefore show within a second;
/// between re-anchorings the error is the counter's drift (microseconds). A re-anchoring can move
/// time back by that drift, which the engine treats conservatively (see `counter.rs`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// How often [`SystemClock`] re-reads the OS wall clock, in microseconds of monotonic time.
const REANCHOR_EVERY_US: i64 = 1_000_000;

/// The process-wide state behind [`SystemClock`].
struct FastWall {
    clock: quanta::Clock,
    /// The counter's raw reading when the process first read the time.
    origin: u64,
    /// Wall-clock microseconds minus monotonic microseconds since `origin`.
    offset_us: AtomicI64,
    /// Monotonic microseconds at which to re-read the OS clock.
    next_anchor_us: AtomicI64,
}

impl FastWall {
    fn get() -> &'static FastWall {
        static WALL: OnceLock<FastWall> = OnceLock::new();
        WALL.get_or_init(|| {
            let clock = quanta::Clock::new();
            let origin = clock.raw();
            let wall = FastWall {
                clock,
                origin,
                offset_us: AtomicI64::new(0),
                next_anchor_us: AtomicI64::new(REANCHOR_EVERY_US),
            };
            wall.anchor();
            wall
        })
    }

    /// Monotonic microseconds since `origin`: one counter reading and one scaling, without the
    /// detour through a `Duration`.
    #[inline]
    fn mono_us(&self) -> i64 {
        let nanos = self.clock.delta_as_nanos(self.origin, self.clock.raw());
        i64::try_from(nanos / 1_000).unwrap_or(i64::MAX / 2)
    }

    /// Re-reads the OS wall clock between two counter readings and keeps the pair taken with
    /// the least delay between them (a thread preempted mid-way would skew the offset).
    #[cold]
    #[inline(never)]
    fn anchor(&self) {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..3 {
            let before = self.mono_us();
            let wall = os_wall_us();
            let after = self.mono_us();
            let spread = after.saturating_sub(before);
            let offset = wall.saturating_sub(before.saturating_add(spread / 2));
            if best.is_none_or(|(s, _)| spread < s) {
                best = Some((spread, offset));
            }
            if spread <= 20 {
                break;
            }
        }
        if let Some((_, offset)) = best {
            self.offset_us.store(offset, Ordering::Relaxed);
        }
    }

    #[inline]
    fn now_us(&self) -> i64 {
        let mono = self.mono_us();
        if mono >= self.next_anchor_us.load(Ordering::Relaxed) {
            // Racing threads may both re-anchor; each stores a correct offset.
            self.next_anchor_us.store(mono.saturating_add(REANCHOR_EVERY_US), Ordering::Relaxed);
            self.anchor();
        }
        mono.saturating_add(self.offset_us.load(Ordering::Relaxed))
    }
}

/// Whole microseconds of `d`, without 128-bit arithmetic.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_secs())
        .unwrap_or(i64::MAX / 2_000_000)
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(d.subsec_micros()))
}

/// The OS wall clock in microseconds since the epoch.
fn os_wall_us() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => micros(d),
        Err(before) => micros(before.duration()).saturating_neg(),
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_microsecond(FastWall::get().now_us()).unwrap_or_else(|_| Timestamp::now())
    }

    #[inline]
    fn now_us(&self) -> i64 {
        let us = FastWall::get().now_us();
        if (crate::window::MIN_US..=crate::window::MAX_US).contains(&us) {
            us
        } else {
            Timestamp::now().as_microsecond()
        }
    }
}

/// A store's clock: the [`SystemClock`] called directly, so that each check reads it inline,
/// or any other clock through its trait object. Behind a virtual call the counter's read could
/// not overlap the start of the check (BENCHMARKS.md, engine).
#[derive(Clone)]
pub(crate) enum StoreClock {
    /// The system clock.
    System,
    /// Any other clock (a test's [`ManualClock`], the simulator's virtual time).
    Other(Arc<dyn Clock>),
}

impl StoreClock {
    /// `clock`, called directly when it is the [`SystemClock`].
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        if (clock.as_ref() as &dyn Any).is::<SystemClock>() {
            Self::System
        } else {
            Self::Other(clock)
        }
    }

    /// See [`Clock::now_us`].
    #[inline]
    pub(crate) fn now_us(&self) -> i64 {
        match self {
            Self::System => SystemClock.now_us(),
            Self::Other(clock) => clock.now_us(),
        }
    }

    /// See [`Clock::now`].
    pub(crate) fn now(&self) -> Timestamp {
        match self {
            Self::System => SystemClock.now(),
            Self::Other(clock) => clock.now(),
        }
    }
}

/// A clock that only moves when told to; cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: Timestamp) -> Self {
        Self { micros: Arc::new(AtomicI64::new(at.as_microsecond())) }
    }

    /// Moves the clock to `at`.
    pub fn set(&self, at: Timestamp) {
        self.micros.store(at.as_microsecond(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let d = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.micros.fetch_add(d, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> i64 {
        self.now().as_microsecond()
    }

    fn now(&self) -> Timestamp {
        // The stored value always came from a valid Timestamp, plus bounded advances.
        Timestamp::from_microsecond(self.micros.load(Ordering::SeqCst)).unwrap_or(Timestamp::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_agrees_with_the_os_clock() {
        for _ in 0..3 {
            let a = Timestamp::now();
            let ours = SystemClock.now();
            let b = Timestamp::now();
            // Close to the OS clock's readings around it (drift is microseconds; the slack
            // only absorbs a thread preempted while anchoring on a busy machine).
            let slack = jiff::SignedDuration::from_millis(20);
            assert!(ours >= a - slack && ours <= b + slack, "{a} {ours} {b}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
