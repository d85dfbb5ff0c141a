//! Where "now" comes from. Stores read time through a [`Clock`] so tests can move it by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock (UTC).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Whole microseconds are all the engine uses; reading `SystemTime` directly skips
        // jiff's nanosecond bookkeeping on the hot path (about a quarter of a decision's cost).
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
        };
        Timestamp::from_microsecond(micros).unwrap_or_else(|_| Timestamp::now())
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
    fn now(&self) -> Timestamp {
        // The stored value always came from a valid Timestamp, plus bounded advances.
        Timestamp::from_microsecond(self.micros.load(Ordering::SeqCst)).unwrap_or(Timestamp::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_agrees_with_jiff_to_the_millisecond() {
        let a = Timestamp::now();
        let ours = SystemClock.now();
        let b = Timestamp::now();
        assert!(a.as_microsecond() <= ours.as_microsecond() && ours <= b, "{a} {ours} {b}");
    }
}
