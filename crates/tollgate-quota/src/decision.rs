//! The answer to one check: allowed or not, and the counter's state after it.

use std::time::Duration;

use jiff::Timestamp;

use crate::spec::MeteringId;

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
}

impl Decision {
    /// True when the request was admitted.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }
}
