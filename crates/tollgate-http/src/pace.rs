//! The least rate a request body must keep, shared by the listener (every body) and the
//! gateway's uploads (their own, usually faster, rule).
//!
//! Rule: once `grace` has passed since the body began, it must have arrived at `min_rate`
//! bytes per second on average: after `r` bytes the next ones are due by
//! `start + grace + r / min_rate`, so a client trickling bytes holds what it holds for at most
//! `grace + length / min_rate`.

use std::time::Duration;

use tokio::time::Instant;

/// How fast a body must come; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Bytes per second, on average since the body began, once `grace` has passed (at least 1).
    pub min_rate: u64,
    /// How long a body may take before `min_rate` applies.
    pub grace: Duration,
}

impl Pace {
    /// When the bytes after the first `received` of a body that began at `start` are due;
    /// `None` when that is too far for the clock to hold (no deadline).
    pub fn due(&self, start: Instant, received: u64) -> Option<Instant> {
        let paced = Duration::from_millis(received.saturating_mul(1000) / self.min_rate.max(1));
        start.checked_add(self.grace)?.checked_add(paced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_bytes_are_due_after_the_grace_and_the_bytes_at_the_rate() {
        let pace = Pace { min_rate: 100, grace: Duration::from_secs(2) };
        let start = Instant::now();
        assert_eq!(pace.due(start, 0), Some(start + Duration::from_secs(2)));
        assert_eq!(pace.due(start, 250), Some(start + Duration::from_millis(4_500)));
        let huge = Pace { min_rate: 1, grace: Duration::MAX };
        assert_eq!(huge.due(start, 1), None);
    }
}
