//! `GET /v1/quota`: the quota check that middleware calls before forwarding a document.
//!
//! The request headers become a [`QuotaRequest`]; the one decision path (`tollgate-policy`'s
//! `Decider`: policies complete the spec, the store decides, `store_unavailable` applies)
//! gives a verdict, and its [`Decision`] becomes the answer:
//!
//! - **200** allowed / **429** exceeded, both with the JSON body `{allowed, identifier, limit,
//!   used, available, weight, exceed_count, total_exceed_count, window_start, window_end,
//!   retry_after_s}`, `RateLimit-Policy: "q";q=<limit>;w=<window seconds>` and
//!   `RateLimit: "q";r=<available>;t=<seconds to reset>` (draft-ietf-httpapi-ratelimit-headers,
//!   List form); a 429 adds `Retry-After` (delay-seconds until this weight fits).
//! - **429** problem `weight-exceeds-limit` when the weight can never fit: no `Retry-After`,
//!   so that no caller retries it forever.
//! - In **shadow** mode an over-limit answer becomes 200 with `Tollgate-Shadow: would-reject`
//!   (and `allowed: true`, because the caller should go on).
//! - A store failure follows `store_unavailable`: `allow` → 200 with
//!   `Tollgate-Degraded: store-unavailable`; `deny` or `local` → 503 problem with
//!   `Retry-After`. A decision made from local memory during an outage carries
//!   `Tollgate-Degraded: local`. A limit set by a `[[policy]]` adds `Tollgate-Limit-Source:
//!   policy`.
//!
//! Invariant: the store is called only after every header parsed and the spec resolved, so
//! a refused request never counts.

use std::cell::RefCell;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Serialize;
use tollgate_http::tls::PeerCertificate;
use tollgate_policy::{DecideError, DecisionOutcome, LimitSource, PolicyMode, Resolved, Transport};
use tollgate_quota::{Decision, MeteringId, Outcome, QuotaSpec, StoreError, rate_headers};

use crate::headers::{self, QuotaRequest, unresolved};
use crate::metrics;
use crate::request_id;
use crate::state::AppState;
use tollgate_http::client;
use tollgate_http::problem::Problem;

/// `RateLimit-Policy`: the quota and window, in the draft's List form.
pub(crate) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: remaining units and seconds until reset.
pub(crate) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `Tollgate-Shadow: would-reject` on shadow-mode answers that enforcement would refuse.
pub(crate) static TOLLGATE_SHADOW: HeaderName = HeaderName::from_static("tollgate-shadow");
/// `Tollgate-Degraded: local | store-unavailable` when the shared store could not decide.
pub(crate) static TOLLGATE_DEGRADED: HeaderName = HeaderName::from_static("tollgate-degraded");
/// `Tollgate-Limit-Source: policy` when a server `[[policy]]` set the limit in force.
pub(crate) static TOLLGATE_LIMIT_SOURCE: HeaderName =
    HeaderName::from_static("tollgate-limit-source");

/// The JSON body of a 200 or 429 answer. The counts are `null` only in the answer given when
/// the store could not decide and `store_unavailable = "allow"` (`Tollgate-Degraded:
/// store-unavailable`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = QuotaAnswer)]
pub(crate) struct QuotaAnswer<'a> {
    /// True when the caller should go on (200).
    allowed: bool,
    /// The metering id.
    identifier: &'a str,
    /// Units per window.
    limit: u64,
    /// Units counted in the current window, this request's included when it was admitted.
    #[schema(value_type = Option<u64>)]
    used: u64,
    /// Units left in the current window.
    #[schema(value_type = Option<u64>)]
    available: u64,
    /// This request's weight.
    weight: u64,
    /// Refusals in the current window.
    #[schema(value_type = Option<u64>)]
    exceed_count: u64,
    /// Refusals since the counter was made.
    #[schema(value_type = Option<u64>)]
    total_exceed_count: u64,
    /// When the current window began (`null` for rolling windows and undecided answers).
    #[schema(value_type = Option<String>, format = DateTime)]
    window_start: Option<Timestamp>,
    /// When the current window ends.
    #[schema(value_type = Option<String>, format = DateTime)]
    window_end: Option<Timestamp>,
    /// On a 429: seconds until this weight fits (as `Retry-After`).
    retry_after_s: Option<u64>,
}

/// `GET /v1/quota`.
#[utoipa::path(
    get,
    path = "/v1/quota",
    tag = "quota",
    operation_id = "checkQuota",
    summary = "Count a message against its quota, and say whether it may go on",
    description = "The request headers name the counter and the quota; a server [[policy]] \
                   whose glob matches metering-id fills in what the headers leave out (or \
                   overrides them). Nothing is counted for a refused request (4xx).",
    params(
        ("metering-id" = String, Header, description = "The counter identifier: 1 to 256 bytes of visible ASCII.",
            pattern = r"^[!-~]{1,256}$", example = "ORDERS:ACME"),
        ("quota-limit" = Option<u64>, Header, description = "Units allowed per window (required unless a policy supplies it).",
            minimum = 0, maximum = 18446744073709551615_u64),
        ("quota-interval" = Option<u32>, Header, description = "Window length in units; default 1, or the policy's. interval × unit may not exceed 100 years.",
            minimum = 1, maximum = 4294967295_u64, format = Int64),
        ("quota-timeunit" = Option<String>, Header, description = "The window's unit, singular or plural, any case (required unless a policy supplies it).",
            pattern = r"^([Ss][Ee][Cc][Oo][Nn][Dd]|[Mm][Ii][Nn][Uu][Tt][Ee]|[Hh][Oo][Uu][Rr]|[Dd][Aa][Yy]|[Ww][Ee][Ee][Kk]|[Mm][Oo][Nn][Tt][Hh])[Ss]?$"),
        ("quota-window" = Option<String>, Header, description = "calendar (default), flexi or rolling, any case.",
            pattern = r"^([Cc][Aa][Ll][Ee][Nn][Dd][Aa][Rr]|[Ff][Ll][Ee][Xx][Ii]|[Rr][Oo][Ll][Ll][Ii][Nn][Gg])$"),
        ("quota-start" = Option<String>, Header, description = "RFC 3339 anchor of calendar windows, between 1900-01-01 and 2200-01-01.",
            format = DateTime, example = "2026-01-01T00:00:00Z"),
        ("message-weight" = Option<u64>, Header, description = "Units this message consumes; default 1 (0 asks without counting).",
            minimum = 0, maximum = 18446744073709551615_u64),
        ("quota-request-id" = Option<String>, Header, description = "The message's own id (1 to 128 bytes of visible ASCII): the same id for the same metering-id gets the first answer again, counting nothing more, while its record is kept (until the window ends, or a refusal's Retry-After; at most 24 hours).",
            pattern = r"^[!-~]{1,128}$", example = "MSG-4711"),
    ),
    responses(
        (status = 200, description = "Go on (also a shadow-mode refusal, and a store failure under store_unavailable = \"allow\").",
            body = QuotaAnswer<'_>, headers(
                ("Quota-Request-Replayed" = String, description = "`true` when this is the recorded answer to an earlier check with the same quota-request-id (nothing counted)."),
                ("RateLimit" = String, description = "Units left and seconds to reset: `\"q\";r=<available>;t=<seconds>`."),
                ("RateLimit-Policy" = String, description = "The quota and window: `\"q\";q=<limit>;w=<window seconds>`."),
                ("Tollgate-Shadow" = String, description = "`would-reject` when a shadow-mode policy would have refused."),
                ("Tollgate-Degraded" = String, description = "`local` (decided from local memory during a store outage) or `store-unavailable`."),
            )),
        (status = 400, description = "A quota header is missing or invalid (problem invalid-header, naming it and the value).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Client keys are configured and x-api-key is missing or unknown (problems missing-api-key, invalid-api-key, unknown-certificate-subject).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "The client key may not use this metering-id (problem metering-id-not-allowed).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 429, description = "Hold it: over the limit (JSON answer with Retry-After), or a weight larger than the limit that can never fit (problem weight-exceeds-limit, no Retry-After).",
            content(
                (QuotaAnswer<'_> = "application/json"),
                (tollgate_http::openapi::ProblemDoc = "application/problem+json"),
            ),
            headers(
                ("RateLimit" = String, description = "Units left and seconds to reset."),
                ("RateLimit-Policy" = String, description = "The quota and window."),
                ("Retry-After" = u64, description = "Seconds until this weight fits."),
                ("Tollgate-Degraded" = String, description = "`local` when decided from local memory."),
                ("Quota-Request-Replayed" = String, description = "`true` when this is the recorded answer to an earlier check with the same quota-request-id."),
            )),
        (status = 409, description = "The first check with this quota-request-id is still being decided after 2 s (problem request-in-progress): ask again.",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before asking again."))),
        (status = 503, description = "The store could not decide and store_unavailable is deny or local (problem store-unavailable).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before asking again."))),
    ),
    security((), ("api_key" = [])),
)]
pub(crate) async fn check(State(state): State<AppState>, request: Request) -> Response {
    // The whole request rather than a `HeaderMap` extractor, which would clone every header.
    let peer = request.extensions().get::<PeerCertificate>();
    match decide(&state, request.headers(), peer).await {
        Ok(r) => r,
        Err((outcome, problem)) => {
            metrics::decision(outcome);
            problem.into_response()
        }
    }
}

async fn decide(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<&PeerCertificate>,
) -> Result<Response, (DecisionOutcome, Problem)> {
    let client = state
        .clients()
        .authenticate_with(headers, peer)
        .map_err(|p| (DecisionOutcome::Unauthorized, p))?;
    if client.is_none() {
        state
            .admin()
            .from_this_host_on_loopback(headers)
            .map_err(|p| (DecisionOutcome::Forbidden, p))?;
    }
    let req = QuotaRequest::from_headers(headers).map_err(|p| (DecisionOutcome::BadRequest, p))?;
    let request_id = headers::request_id(headers).map_err(|p| (DecisionOutcome::BadRequest, p))?;
    if let Some(c) = client
        && !c.permits(&req.id)
    {
        return Err((DecisionOutcome::Forbidden, client::forbidden(c, &req.id)));
    }
    match request_id {
        None => counted(state, &req).await.map(|(r, _)| r),
        // Boxed: its claim and record futures would otherwise make every answer's future,
        // which is moved whole on each request, several times larger.
        Some(rid) => Box::pin(request_id::once(state, &req, rid, || counted(state, &req))).await,
    }
}

/// Decides `req` and answers it; with the verdict when the store decided, which a request
/// id's record keeps.
async fn counted(state: &AppState, req: &QuotaRequest) -> request_id::Decided {
    match state.decider().decide(&req.id, &req.asked, req.weight, Transport::Http).await {
        Ok(verdict) => {
            metrics::store_latency(verdict.store_latency);
            let Resolved { spec, mode, source, .. } = &verdict.resolved;
            let mut answer = match &verdict.decision {
                Some(d) => answer(&req.id, d, spec, *mode == PolicyMode::Shadow),
                None => undecided(req, spec),
            };
            if *source == LimitSource::Policy {
                answer
                    .headers_mut()
                    .insert(TOLLGATE_LIMIT_SOURCE.clone(), HeaderValue::from_static("policy"));
            }
            Ok((answer, Some(verdict)))
        }
        Err(DecideError::Resolve(e)) => Err((DecisionOutcome::BadRequest, unresolved(&e))),
        Err(DecideError::StoreUnavailable { id, error, store_latency }) => {
            metrics::store_latency(store_latency);
            Err((DecisionOutcome::StoreError, store_unavailable(&id, &error)))
        }
    }
}

/// Turns a decision into the HTTP answer (see the module docs).
///
/// Hot path: the headers go straight into one pre-sized map and the body is copied out of a
/// reused buffer at its exact size, so an answer costs a handful of allocations (the map, the
/// body, the two RateLimit values, each exactly sized).
fn answer(id: &MeteringId, d: &Decision, spec: &QuotaSpec, shadow: bool) -> Response {
    let would_reject = d.outcome != Outcome::Allowed;
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(RATELIMIT_POLICY.clone(), value(rate_headers::ratelimit_policy(d, spec)));
    headers.insert(RATELIMIT.clone(), value(rate_headers::ratelimit(d)));
    if d.degraded {
        headers.insert(TOLLGATE_DEGRADED.clone(), HeaderValue::from_static("local"));
    }

    let (status, retry_after) = if shadow && would_reject {
        metrics::decision(DecisionOutcome::ShadowWouldReject);
        headers.insert(TOLLGATE_SHADOW.clone(), HeaderValue::from_static("would-reject"));
        (StatusCode::OK, None)
    } else {
        match d.outcome {
            Outcome::Allowed => {
                metrics::decision(DecisionOutcome::Allowed);
                (StatusCode::OK, None)
            }
            Outcome::Exceeded => {
                metrics::decision(DecisionOutcome::Exceeded);
                let wait = rate_headers::retry_after_secs(d);
                if let Some(wait) = wait {
                    headers.insert(RETRY_AFTER, HeaderValue::from(wait));
                }
                (StatusCode::TOO_MANY_REQUESTS, wait)
            }
            Outcome::WeightExceedsLimit => {
                metrics::decision(DecisionOutcome::WeightExceedsLimit);
                let mut p = Problem::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "weight-exceeds-limit",
                    "Weight exceeds the limit",
                )
                .detail(format!(
                    "message-weight {} is larger than the limit {} of {}: it can never be \
                     admitted, do not retry it",
                    d.weight, d.limit, id
                ))
                .with("identifier", id.as_str())
                .with("limit", d.limit)
                .with("weight", d.weight)
                .with("used", d.used)
                .with("available", d.available());
                for (n, v) in headers {
                    if let Some(n) = n
                        && n != CONTENT_TYPE
                    {
                        p = p.header(n, v);
                    }
                }
                return p.into_response();
            }
        }
    };

    let body = QuotaAnswer {
        allowed: status == StatusCode::OK,
        identifier: id.as_str(),
        limit: d.limit,
        used: d.used,
        available: d.available(),
        weight: d.weight,
        exceed_count: d.exceed_count,
        total_exceed_count: d.total_exceed_count,
        window_start: d.window_start(),
        window_end: d.window_end(),
        retry_after_s: retry_after,
    };
    json_answer(status, &body, headers)
}

/// The 200 when the store could not decide and `store_unavailable = "allow"`.
fn undecided(req: &QuotaRequest, spec: &QuotaSpec) -> Response {
    metrics::decision(DecisionOutcome::StoreError);
    let body = serde_json::json!({
        "allowed": true,
        "identifier": req.id.as_str(),
        "limit": spec.limit,
        "used": null,
        "available": null,
        "weight": req.weight,
        "exceed_count": null,
        "total_exceed_count": null,
        "window_start": null,
        "window_end": null,
        "retry_after_s": null,
    });
    let mut headers = HeaderMap::with_capacity(2);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(TOLLGATE_DEGRADED.clone(), HeaderValue::from_static("store-unavailable"));
    json_answer(StatusCode::OK, &body, headers)
}

/// The 503 when the store could not decide and `store_unavailable` is `deny` or `local`.
pub(crate) fn store_unavailable(id: &MeteringId, e: &StoreError) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Store unavailable")
        .detail(format!("the counter store could not decide: {e}"))
        .with("identifier", id.as_str())
        .header(RETRY_AFTER, HeaderValue::from_static("1"))
}

/// The fixed part of a [`QuotaAnswer`]: member names, two RFC 3339 instants and eight
/// numbers fit in this many bytes; the identifier (and any escaping of it) comes on top.
const BODY_BYTES: usize = 384;

thread_local! {
    /// Where a thread writes its answers' bodies before copying each out at its exact size. A
    /// body written into a buffer of its own kept the buffer's spare capacity, and the response
    /// body paid a second allocation to share it. An identifier is at most 256 bytes, so the
    /// buffer stays under a kilobyte or two.
    static BODY: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(BODY_BYTES));
}

/// A JSON answer with `headers` (which carry the content type): one allocation for the body.
fn json_answer(status: StatusCode, body: &impl Serialize, headers: HeaderMap) -> Response {
    let bytes = BODY.with_borrow_mut(|buf| {
        buf.clear();
        if serde_json::to_writer(&mut *buf, body).is_err() {
            buf.clear();
        }
        buf.to_vec()
    });
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// A header value from text we built ourselves (digits, quotes, `;`, `=`): always valid.
fn value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tollgate_quota::TimeUnit;

    /// 2026-01-01T23:00:00Z, in Unix microseconds.
    const AT: i64 = 1_767_308_400_000_000;
    const HOUR: i64 = 3_600_000_000;

    fn id() -> MeteringId {
        MeteringId::new("S:C").unwrap()
    }

    /// At 23:00 of a day-long window: 950 of 1000 used, retry in 3,599.001 s, reset in an hour.
    fn decision(outcome: Outcome) -> Decision {
        Decision {
            outcome,
            degraded: false,
            limit: 1000,
            used: 950,
            weight: 50,
            exceed_count: 0,
            total_exceed_count: 0,
            window_us: Some((AT - 23 * HOUR, AT + HOUR)),
            retry_at_us: Some(AT + 3_599_001_000),
            reset_at_us: AT + HOUR,
            at_us: AT,
        }
    }

    fn spec() -> QuotaSpec {
        QuotaSpec::new(1000, 24, TimeUnit::Hour).unwrap()
    }

    #[test]
    fn allowed_has_ratelimit_headers_and_no_retry_after() {
        let r = answer(&id(), &decision(Outcome::Allowed), &spec(), false);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["ratelimit-policy"], "\"q\";q=1000;w=86400");
        assert_eq!(r.headers()["ratelimit"], "\"q\";r=50;t=3600");
        assert!(r.headers().get(RETRY_AFTER).is_none());
    }

    #[tokio::test]
    async fn answer_keeps_content_type_and_every_body_member() {
        let r = answer(&id(), &decision(Outcome::Exceeded), &spec(), false);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        let bytes = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["allowed"], false);
        assert_eq!(v["identifier"], "S:C");
        assert_eq!(v["retry_after_s"], 3600);
        assert_eq!(v["window_start"], "2026-01-01T00:00:00Z");
        assert_eq!(v.as_object().map(|o| o.len()), Some(11), "{v}");
    }

    #[test]
    fn weight_exceeds_limit_is_a_problem_with_ratelimit_headers() {
        let r = answer(&id(), &decision(Outcome::WeightExceedsLimit), &spec(), false);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[CONTENT_TYPE], tollgate_http::problem::PROBLEM_JSON);
        assert_eq!(r.headers()["ratelimit"], "\"q\";r=50;t=3600");
        assert!(r.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn exceeded_rounds_retry_after_up() {
        let r = answer(&id(), &decision(Outcome::Exceeded), &spec(), false);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[RETRY_AFTER], "3600");
    }

    #[test]
    fn shadow_turns_refusals_into_200() {
        for o in [Outcome::Exceeded, Outcome::WeightExceedsLimit] {
            let r = answer(&id(), &decision(o), &spec(), true);
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["tollgate-shadow"], "would-reject");
        }
        let r = answer(&id(), &decision(Outcome::Allowed), &spec(), true);
        assert!(r.headers().get("tollgate-shadow").is_none());
    }

    #[test]
    fn degraded_decision_is_marked() {
        let mut d = decision(Outcome::Allowed);
        d.degraded = true;
        let r = answer(&id(), &d, &spec(), false);
        assert_eq!(r.headers()["tollgate-degraded"], "local");
    }

    fn request() -> QuotaRequest {
        let mut h = HeaderMap::new();
        h.insert("metering-id", HeaderValue::from_static("S:C"));
        h.insert("message-weight", HeaderValue::from_static("3"));
        QuotaRequest::from_headers(&h).unwrap()
    }

    #[test]
    fn store_failure_allow_mode_answers_200_degraded() {
        let r = undecided(&request(), &spec());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["tollgate-degraded"], "store-unavailable");
    }

    #[test]
    fn store_failure_deny_and_local_answer_503_with_retry_after() {
        let e = StoreError::Timeout(Duration::from_millis(50));
        let r = store_unavailable(&request().id, &e).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[RETRY_AFTER], "1");
    }
}
