//! What one instance knows of one counter in Redis: the most Redis answered about it, how
//! fast that was rising, and whether Redis has stopped answering about it (see `fallback`).

/// The shortest span a counter's rate is measured over (µs).
const RATE_SPAN: i64 = 10_000;

/// What this instance knows of one counter in Redis.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    /// The most Redis answered in the window ending at `until` (µs).
    pub(super) used: u64,
    pub(super) until: i64,
    /// When `used` last rose (µs).
    rose_at: i64,
    /// How fast `used` rose, in units per µs, measured over at least [`RATE_SPAN`].
    rate: f64,
    /// The `used` and time the next `rate` is measured from.
    mark: (u64, i64),
    /// Until when the counter is down (µs; 0 while up).
    pub(super) down_until: i64,
    /// Since when Redis has not answered this instance about the counter (µs): the first
    /// check that timed out was sent then.
    pub(super) silent_since: i64,
    /// Checks sent to Redis and not answered yet.
    pub(super) in_flight: u32,
}

impl View {
    /// Nothing known yet, at `now`.
    pub(super) fn new(now: i64) -> Self {
        View {
            used: 0,
            until: now,
            rose_at: now,
            rate: 0.0,
            mark: (0, now),
            down_until: 0,
            silent_since: now,
            in_flight: 0,
        }
    }

    /// Keeps `used`, answered at `now` about the window ending at `until`. A rolling
    /// window's `used` also falls as time passes: it is taken as answered, with no rate.
    pub(super) fn heard(&mut self, used: u64, until: i64, now: i64, rolling: bool) {
        if self.until != until || rolling {
            *self = View { used, until, rate: 0.0, mark: (used, now), rose_at: now, ..*self };
            return;
        }
        // Answers arrive out of order; within one calendar or flexi window `used` grows.
        if used > self.used {
            self.used = used;
            self.rose_at = now;
            let (from, at) = self.mark;
            if now - at >= RATE_SPAN {
                self.rate = used.saturating_sub(from) as f64 / (now - at) as f64;
                self.mark = (used, now);
            }
        }
    }

    /// What Redis holds by this instance's estimate: `used`, plus what it was rising by from
    /// when it was answered until Redis stopped answering (at most `horizon` of it), so that
    /// an instance whose latest answer is older than the others' does not take its share of
    /// more than was left.
    pub(super) fn estimate(&self, now: i64, horizon: i64) -> u64 {
        if self.until <= now {
            return 0;
        }
        let behind = (self.silent_since - self.rose_at).clamp(0, horizon);
        self.used.saturating_add((self.rate * behind as f64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000;
    const END: i64 = 3_600_000 * MS;

    #[test]
    fn within_a_window_the_most_answered_stands_and_a_new_window_starts_over() {
        let mut v = View::new(0);
        v.heard(10, END, MS, false);
        v.heard(7, END, 2 * MS, false);
        assert_eq!(v.used, 10, "an answer that arrives late does not lower used");
        v.heard(3, 2 * END, 3 * MS, false);
        assert_eq!((v.used, v.until), (3, 2 * END));
        v.heard(1, 2 * END + MS, 4 * MS, true);
        assert_eq!(v.used, 1, "a rolling window's used may fall");
    }

    #[test]
    fn the_estimate_adds_the_rise_until_redis_went_silent_at_most_the_horizon() {
        let mut v = View::new(0);
        // 1 unit per ms, measured over 10 ms spans.
        for ms in 0..=40 {
            v.heard(ms as u64, END, ms * MS, false);
        }
        assert_eq!(v.estimate(50 * MS, 50 * MS), 40, "not silent: used as answered");
        v.silent_since = 60 * MS;
        assert_eq!(v.estimate(100 * MS, 50 * MS), 60, "silent 20 ms after the last rise");
        assert_eq!(v.estimate(100 * MS, 5 * MS), 45, "at most the horizon");
        assert_eq!(v.estimate(END, 50 * MS), 0, "the window is over");
        v.silent_since = 30 * MS;
        assert_eq!(v.estimate(100 * MS, 50 * MS), 40, "silent before the last rise");
    }
}
