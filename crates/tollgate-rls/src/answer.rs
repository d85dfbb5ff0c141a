//! Building a `RateLimitResponse` from the decisions: per-descriptor statuses, the overall
//! code, and the headers Envoy adds to its answer.
//!
//! The header values come from [`tollgate_quota::rate_headers`], the same functions
//! `GET /v1/quota` uses. With several limited descriptors the headers describe one: the first
//! over its limit, else the one with the fewest units left (the closest to refusing), so a
//! client reading `RateLimit` sees the limit that will stop it first.

use std::time::Duration;

use tollgate_quota::{Decision, MeteringId, Outcome, QuotaSpec, TimeUnit, rate_headers};

use crate::pb::envoy::config::core::v3::HeaderValue;
use crate::rls::RateLimitResponse;
use crate::rls::rate_limit_response::rate_limit::Unit;
use crate::rls::rate_limit_response::{Code, DescriptorStatus, RateLimit};

/// What became of one descriptor.
#[derive(Debug, Clone)]
pub(crate) enum Checked {
    /// No rule matched: OK without a limit.
    Unlimited,
    /// The store decided.
    Decided {
        /// The counter checked.
        id: MeteringId,
        /// The store's decision (boxed: the other outcomes carry nothing).
        decision: Box<Decision>,
        /// The spec it was checked against.
        spec: QuotaSpec,
        /// A shadow policy applied: a refusal is reported, not enforced.
        shadow: bool,
    },
    /// The store failed and `store_unavailable = "allow"`: OK without a limit.
    StoreUnavailable,
}

/// The decisions of one request, in descriptor order.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    checked: Vec<Checked>,
}

impl Answer {
    /// Room for `n` descriptors.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self { checked: Vec::with_capacity(n) }
    }

    /// Adds the next descriptor's outcome.
    pub(crate) fn push(&mut self, c: Checked) {
        self.checked.push(c);
    }

    /// The response Envoy enforces.
    pub(crate) fn into_response(self) -> RateLimitResponse {
        let mut overall = Code::Ok;
        let mut statuses = Vec::with_capacity(self.checked.len());
        // (index, is over limit and enforced, available) of the descriptor the headers show.
        let mut headline: Option<(usize, bool, u64)> = None;
        let mut degraded: Option<&'static str> = None;
        let mut would_reject = false;
        for (i, c) in self.checked.iter().enumerate() {
            match c {
                Checked::Unlimited => statuses.push(unlimited()),
                Checked::StoreUnavailable => {
                    degraded = Some("store-unavailable");
                    statuses.push(unlimited());
                }
                Checked::Decided { id, decision: d, spec, shadow } => {
                    let refused = d.outcome != Outcome::Allowed;
                    let over = refused && !shadow;
                    would_reject |= refused && *shadow;
                    if over {
                        overall = Code::OverLimit;
                    }
                    if d.degraded && degraded.is_none() {
                        degraded = Some("local");
                    }
                    let better = match headline {
                        None => true,
                        Some((_, h_over, h_avail)) => !h_over && (over || d.available() < h_avail),
                    };
                    if better {
                        headline = Some((i, over, d.available()));
                    }
                    statuses.push(status(id, d, spec, over));
                }
            }
        }
        let mut headers = Vec::with_capacity(4);
        if let Some((i, over, _)) = headline
            && let Some(Checked::Decided { decision: d, spec, .. }) = self.checked.get(i)
        {
            headers.push(header("ratelimit-policy", rate_headers::ratelimit_policy(d, spec)));
            headers.push(header("ratelimit", rate_headers::ratelimit(d)));
            if over && let Some(wait) = rate_headers::retry_after_secs(d) {
                headers.push(header("retry-after", wait.to_string()));
            }
        }
        if would_reject && overall == Code::Ok {
            headers.push(header("tollgate-shadow", "would-reject".into()));
        }
        if let Some(why) = degraded {
            headers.push(header("tollgate-degraded", why.into()));
        }
        RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add: headers,
            ..Default::default()
        }
    }
}

fn unlimited() -> DescriptorStatus {
    DescriptorStatus { code: Code::Ok as i32, ..Default::default() }
}

fn status(id: &MeteringId, d: &Decision, spec: &QuotaSpec, over: bool) -> DescriptorStatus {
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(RateLimit {
            name: format!(
                "{}: {} per {} {} ({})",
                id, d.limit, spec.interval, spec.unit, spec.window
            ),
            requests_per_unit: saturating_u32(d.limit),
            unit: unit(spec) as i32,
        }),
        limit_remaining: saturating_u32(d.available()),
        duration_until_reset: Some(duration(d.reset_after())),
    }
}

/// Envoy's unit when the window is one unit long and Envoy has that unit; `UNKNOWN` otherwise
/// (the limit's name then tells the window: `… per 24 hour (calendar)`).
fn unit(spec: &QuotaSpec) -> Unit {
    if spec.interval != 1 {
        return Unit::Unknown;
    }
    match spec.unit {
        TimeUnit::Second => Unit::Second,
        TimeUnit::Minute => Unit::Minute,
        TimeUnit::Hour => Unit::Hour,
        TimeUnit::Day => Unit::Day,
        TimeUnit::Month => Unit::Month,
        TimeUnit::Week => Unit::Unknown,
    }
}

fn saturating_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue { key: key.into(), value, raw_value: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(outcome: Outcome, available: u64, shadow: bool) -> Checked {
        let at = 1_767_229_198_500_000; // 2026-01-01T00:59:58.5Z
        let end = at + 1_500_000;
        Checked::Decided {
            id: MeteringId::new("214:ACME").unwrap(),
            decision: Box::new(Decision {
                outcome,
                degraded: false,
                limit: 10,
                used: 10 - available,
                weight: 1,
                exceed_count: 0,
                total_exceed_count: 0,
                window_us: Some((end - 3_600_000_000, end)),
                retry_at_us: (outcome == Outcome::Exceeded).then_some(end),
                reset_at_us: end,
                at_us: at,
            }),
            spec: QuotaSpec::new(10, 1, TimeUnit::Hour).unwrap(),
            shadow,
        }
    }

    fn headers(r: &RateLimitResponse) -> Vec<(String, String)> {
        r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
    }

    #[test]
    fn one_over_makes_the_whole_answer_over_and_shows_its_headers() {
        let mut a = Answer::default();
        a.push(decided(Outcome::Allowed, 3, false));
        a.push(Checked::Unlimited);
        a.push(decided(Outcome::Exceeded, 0, false));
        let r = a.into_response();
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
        assert_eq!(codes, [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
        assert!(r.statuses[1].current_limit.is_none());
        assert_eq!(r.statuses[0].limit_remaining, 3);
        assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().unit, Unit::Hour as i32);
        assert_eq!(
            headers(&r),
            [
                ("ratelimit-policy".into(), "\"q\";q=10;w=3600".into()),
                ("ratelimit".into(), "\"q\";r=0;t=2".into()),
                ("retry-after".into(), "2".into()),
            ]
        );
    }

    #[test]
    fn shadow_refusals_are_ok_and_marked() {
        let mut a = Answer::default();
        a.push(decided(Outcome::Exceeded, 0, true));
        let r = a.into_response();
        assert_eq!(r.overall_code, Code::Ok as i32);
        let h = headers(&r);
        assert!(h.iter().all(|(k, _)| k != "retry-after"));
        assert!(h.contains(&("tollgate-shadow".into(), "would-reject".into())));
    }

    #[test]
    fn weight_over_the_limit_has_no_retry_after() {
        let mut a = Answer::default();
        a.push(decided(Outcome::WeightExceedsLimit, 10, false));
        let r = a.into_response();
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert!(headers(&r).iter().all(|(k, _)| k != "retry-after"));
    }
}
