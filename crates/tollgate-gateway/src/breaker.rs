//! A circuit breaker in front of the remote quota service.
//!
//! While the service is down, every check would pay the full timeout. The breaker counts
//! consecutive failures; after [`Breaker::THRESHOLD`] it opens and [`Breaker::allow`] answers
//! `false` at once (the caller applies `on_unavailable` without calling). After the cool-down
//! one probe is let through (half-open): success closes the breaker, failure opens it again
//! with a doubled cool-down (capped).
//!
//! Invariant: at most one probe is in flight while half-open (`probing` is set under the lock
//! by the call that lets the probe through).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// What the breaker is doing (for tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One probe is allowed to test the service.
    HalfOpen,
}

#[derive(Debug)]
struct Inner {
    failures: u32,
    open_until: Option<Instant>,
    cool_down: Duration,
    probing: bool,
}

/// Consecutive-failure circuit breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    inner: Mutex<Inner>,
    first_cool_down: Duration,
}

impl Breaker {
    /// Consecutive failures that open the breaker.
    pub(crate) const THRESHOLD: u32 = 5;
    /// The longest cool-down.
    pub(crate) const MAX_COOL_DOWN: Duration = Duration::from_secs(30);

    /// A closed breaker whose first cool-down is `cool_down`.
    pub(crate) fn new(cool_down: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner { failures: 0, open_until: None, cool_down, probing: false }),
            first_cool_down: cool_down,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current state.
    #[cfg(test)]
    pub(crate) fn state(&self) -> BreakerState {
        let g = self.lock();
        match g.open_until {
            None => BreakerState::Closed,
            Some(t) if Instant::now() < t => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// May a call be made now? In half-open state only the first caller gets `true`.
    pub(crate) fn allow(&self) -> bool {
        let mut g = self.lock();
        match g.open_until {
            None => true,
            Some(t) if Instant::now() < t => false,
            Some(_) if g.probing => false,
            Some(_) => {
                g.probing = true;
                true
            }
        }
    }

    /// The service answered: close. Returns true when this closed an open breaker.
    pub(crate) fn success(&self) -> bool {
        let mut g = self.lock();
        let was_open = g.open_until.is_some();
        g.failures = 0;
        g.open_until = None;
        g.probing = false;
        g.cool_down = self.first_cool_down;
        was_open
    }

    /// The service failed. Returns true when this opened the breaker (from closed).
    pub(crate) fn failure(&self) -> bool {
        let mut g = self.lock();
        g.failures = g.failures.saturating_add(1);
        if g.probing {
            // The probe failed: open again, for longer.
            g.probing = false;
            g.cool_down = (g.cool_down * 2).min(Self::MAX_COOL_DOWN);
            g.open_until = Some(Instant::now() + g.cool_down);
            return false;
        }
        if g.open_until.is_none() && g.failures >= Self::THRESHOLD {
            g.open_until = Some(Instant::now() + g.cool_down);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paused time: the cool-downs pass when the test says so, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_and_probes_once() {
        let b = Breaker::new(Duration::from_millis(20));
        for _ in 0..Breaker::THRESHOLD - 1 {
            assert!(b.allow());
            assert!(!b.failure());
        }
        assert!(b.failure());
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allow());
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.allow());
        assert!(!b.allow(), "only one probe while half-open");
        b.failure();
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::advance(Duration::from_millis(50)).await;
        assert!(b.allow());
        assert!(b.success());
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.allow());
    }
}
