//! The answer to one check: allowed or not, and the counter's state after it.

use std::time::Duration;

use jiff::Timestamp;

use crate::window;

/// What happened to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `used + weight <= limit`: admitted, and `used` grew by the weight.
    Allowed,
    /// Not enough left in this window; retry after [`Decision::retry_after`].
    Exceeded,
    /// The weight is larger than the limit: it can never be admitted, so never retry it.
    WeightExceedsLimit,
}

/// The result of a quota check, with the counter's state after the check. Times are Unix
/// microseconds by the store's clock, as the engine keeps them; the methods give them as
/// [`Timestamp`]s and [`Duration`]s.
///
/// It holds only what the check decided, not the question (the identifier, the spec): every
/// check builds one, and a smaller answer is a cheaper check (BENCHMARKS.md, engine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, exceeded, or never admissible.
    pub outcome: Outcome,
    /// True when a shared store was unreachable and this instance answered from its own
    /// memory instead (`store_unavailable = "local"`).
    pub degraded: bool,
    /// The limit in force for this check.
    pub limit: u64,
    /// Units consumed in the current window, after this check.
    pub used: u64,
    /// The weight of this request.
    pub weight: u64,
    /// Rejections in the current window.
    pub exceed_count: u64,
    /// Rejections across all windows of this counter.
    pub total_exceed_count: u64,
    /// `(start, end)` of the current window; `None` for rolling windows.
    pub window_us: Option<(i64, i64)>,
    /// When the counter will have freed enough for this weight; `None` when allowed or never
    /// admissible.
    pub retry_at_us: Option<i64>,
    /// When the current window resets (for rolling windows: when the oldest counted
    /// sub-bucket leaves the window). Feeds the `t=` of the `RateLimit` header.
    pub reset_at_us: i64,
    /// When the store decided, by the store's clock (Redis' `TIME` on Redis): with the window,
    /// where an admission's units were counted (see [`Decision::counted`]).
    pub at_us: i64,
}

impl Decision {
    /// True when the request was admitted.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// `limit - used`, saturating at 0.
    pub fn available(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    /// Start of the current window; `None` for rolling windows.
    pub fn window_start(&self) -> Option<Timestamp> {
        self.window_us.map(|(start, _)| window::timestamp(start))
    }

    /// End of the current window; `None` for rolling windows.
    pub fn window_end(&self) -> Option<Timestamp> {
        self.window_us.map(|(_, end)| window::timestamp(end))
    }

    /// Time until the counter has freed enough for this weight; `None` when allowed or never
    /// admissible.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_at_us.map(|at| window::micros_between(self.at_us, at))
    }

    /// Time until the current window resets (see [`Decision::reset_at_us`]).
    pub fn reset_after(&self) -> Duration {
        window::micros_between(self.at_us, self.reset_at_us)
    }

    /// When the store decided.
    pub fn at(&self) -> Timestamp {
        window::timestamp(self.at_us)
    }

    /// Where this decision counted its units: what [`crate::Store::give_back`] needs to give
    /// them back to that window only.
    pub fn counted(&self) -> Counted {
        Counted { at_us: self.at_us, window: self.window_us }
    }
}

/// Where an admitted request's units were counted, in Unix microseconds by the store's clock:
/// the window `[start, end)` of a calendar or flexi counter, and the instant of the decision
/// (which names the sub-bucket of a rolling one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counted {
    /// When the store decided.
    pub at_us: i64,
    /// `(start, end)` of the window; `None` for rolling windows.
    pub window: Option<(i64, i64)>,
}

/// What a give-back did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GivenBack {
    /// Units given back: at most those asked, fewer when the counter held fewer (it never goes
    /// below zero, e.g. after a reset).
    Units(u64),
    /// The window the units were counted in has ended (or its counter is gone): nothing given
    /// back, and nothing needs to be.
    WindowGone,
}
