//! The values of the rate limit headers a [`Decision`] is announced with, as text:
//! `RateLimit-Policy`, `RateLimit` (draft-ietf-httpapi-ratelimit-headers, List form) and
//! `Retry-After` (delay-seconds).
//!
//! Both faces of the quota service use these functions, so an answer over HTTP
//! (`GET /v1/quota`) and one over gRPC (Envoy's rate limit service) carry the same values for
//! the same decision. Only the text is built here; header names and transports belong to the
//! callers, as this crate knows nothing of HTTP.

use std::time::Duration;

use crate::{Decision, Outcome, QuotaSpec};

/// `RateLimit-Policy`: `"q";q=<limit>;w=<window seconds>`.
pub fn ratelimit_policy(d: &Decision, spec: &QuotaSpec) -> String {
    list_item("q", d.limit, "w", window_seconds(d, spec))
}

/// `RateLimit`: `"q";r=<available>;t=<seconds until the window resets>`.
pub fn ratelimit(d: &Decision) -> String {
    list_item("r", d.available(), "t", ceil_secs(d.reset_after()))
}

/// `"q";<a>=<x>;<b>=<y>`, written without the formatting machinery: every answer carries two.
/// The string's capacity is its exact length, so an HTTP header value made from it takes the
/// buffer as it is (a larger one costs the header a second allocation).
fn list_item(a: &str, x: u64, b: &str, y: u64) -> String {
    let (mut x_digits, mut y_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
    let parts = ["\"q\";", a, "=", x_digits.format(x), ";", b, "=", y_digits.format(y)];
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| s.push_str(p));
    s
}

/// `Retry-After` in whole seconds (at least 1) for an exceeded decision: until this weight
/// fits, else until the window resets. `None` when allowed, and when the weight can never fit
/// (so that no caller retries it forever).
pub fn retry_after_secs(d: &Decision) -> Option<u64> {
    match d.outcome {
        Outcome::Exceeded => Some(ceil_secs(d.retry_after().unwrap_or(d.reset_after())).max(1)),
        Outcome::Allowed | Outcome::WeightExceedsLimit => None,
    }
}

/// Whole seconds, rounded up (a caller waiting this long never comes back too early).
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The window length for `w=`: the actual window for calendar and flexi windows (months vary),
/// `interval × unit` for rolling ones (a month counted as 30 days). At least 1.
pub fn window_seconds(d: &Decision, spec: &QuotaSpec) -> u64 {
    let secs = match (d.window_start(), d.window_end()) {
        (Some(s), Some(e)) => e.as_second().saturating_sub(s.as_second()),
        _ => spec
            .unit
            .fixed_seconds()
            .unwrap_or(30 * 86_400)
            .saturating_mul(i64::from(spec.interval)),
    };
    u64::try_from(secs).unwrap_or(0).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TimeUnit;

    /// Unix microseconds of an RFC 3339 instant.
    fn us(at: &str) -> i64 {
        at.parse::<jiff::Timestamp>().unwrap().as_microsecond()
    }

    fn decision(outcome: Outcome) -> Decision {
        let at = us("2026-01-01T23:00:00Z");
        Decision {
            outcome,
            degraded: false,
            limit: 1000,
            used: 950,
            weight: 50,
            exceed_count: 0,
            total_exceed_count: 0,
            window_us: Some((us("2026-01-01T00:00:00Z"), us("2026-01-02T00:00:00Z"))),
            retry_at_us: Some(at + 3_599_001_000),
            reset_at_us: at + 3_600_000_000,
            at_us: at,
        }
    }

    #[test]
    fn values_follow_the_draft() {
        let spec = QuotaSpec::new(1000, 24, TimeUnit::Hour).unwrap();
        let d = decision(Outcome::Allowed);
        assert_eq!(ratelimit_policy(&d, &spec), "\"q\";q=1000;w=86400");
        assert_eq!(ratelimit(&d), "\"q\";r=50;t=3600");
        assert_eq!(retry_after_secs(&d), None);
        let edge = Decision { limit: u64::MAX, used: u64::MAX, reset_at_us: d.at_us, ..d };
        assert_eq!(ratelimit_policy(&edge, &spec), "\"q\";q=18446744073709551615;w=86400");
        assert_eq!(ratelimit(&edge), "\"q\";r=0;t=0");
        for s in [ratelimit_policy(&d, &spec), ratelimit(&d), ratelimit_policy(&edge, &spec)] {
            assert_eq!(s.capacity(), s.len(), "{s}: no spare capacity");
        }
    }

    #[test]
    fn retry_after_rounds_up_and_is_absent_when_the_weight_never_fits() {
        assert_eq!(retry_after_secs(&decision(Outcome::Exceeded)), Some(3600));
        assert_eq!(retry_after_secs(&decision(Outcome::WeightExceedsLimit)), None);
        let mut d = decision(Outcome::Exceeded);
        d.retry_at_us = Some(d.at_us);
        assert_eq!(retry_after_secs(&d), Some(1));
    }

    #[test]
    fn rolling_window_length_comes_from_the_spec() {
        let mut d = decision(Outcome::Allowed);
        d.window_us = None;
        let spec = QuotaSpec::new(1000, 24, TimeUnit::Hour).unwrap();
        assert_eq!(window_seconds(&d, &spec), 86_400);
        let month = QuotaSpec::new(1, 1, TimeUnit::Month).unwrap();
        assert_eq!(window_seconds(&d, &month), 30 * 86_400);
    }
}
