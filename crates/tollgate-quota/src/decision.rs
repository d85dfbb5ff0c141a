//! The answer to one check: allowed or not, and the counter's state after it.

use std::time::Duration;

use jiff::Timestamp;

use crate::metering_id::MeteringId;

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

/// The result of a quota check, with the counter's state after the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, exceeded, or never admissible.
    pub outcome: Outcome,
    /// The counter identifier.
    pub identifier: MeteringId,
    /// The limit in force for this check.
    pub limit: u64,
    /// Units consumed in the current window, after this check.
    pub used: u64,
    /// `limit - used`, saturating at 0.
    pub available: u64,
    /// The weight of this request.
    pub weight: u64,
    /// Rejections in the current window.
    pub exceed_count: u64,
    /// Rejections across all windows of this counter.
    pub total_exceed_count: u64,
    /// Start of the current window; `None` for rolling windows.
    pub window_start: Option<Timestamp>,
    /// End of the current window; `None` for rolling windows.
    pub window_end: Option<Timestamp>,
    /// Time until the counter has freed enough for this weight; `None` when allowed or never
    /// admissible.
    pub retry_after: Option<Duration>,
    /// Time until the current window resets (for rolling windows: until the oldest counted
    /// sub-bucket leaves the window). Feeds the `t=` of the `RateLimit` header.
    pub reset_after: Duration,
    /// True when a shared store was unreachable and this instance answered from its own
    /// memory instead (`store_unavailable = "local"`).
    pub degraded: bool,
    /// When the store decided, by the store's clock (Redis' `TIME` on Redis): with the window,
    /// where an admission's units were counted (see [`Decision::counted`]).
    pub at: Timestamp,
}

impl Decision {
    /// True when the request was admitted.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// Where this decision counted its units: what [`crate::Store::give_back`] needs to give
    /// them back to that window only.
    pub fn counted(&self) -> Counted {
        Counted {
            at_us: self.at.as_microsecond(),
            window: self
                .window_start
                .zip(self.window_end)
                .map(|(s, e)| (s.as_microsecond(), e.as_microsecond())),
        }
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
