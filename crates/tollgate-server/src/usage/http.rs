//! `GET /v1/usage?metering_id=ID[&from=RFC3339][&to=RFC3339]`: one id's usage history as JSON,
//! `{metering_id, bucket_seconds, from, to, buckets: [{start, admitted, refused, held,
//! duplicate}]}` (see [`UsageBucket`] for what each counts).
//!
//! - `from` and `to` default to the last 7 days (now − 7 d .. now); an omitted `to` is now,
//!   rounded up to the second (or `from`, when that is later), an omitted `from` is 7 days before `to`. The history keeps no more:
//!   a `from` before its oldest bucket is clamped to that bucket's start (the answer's `from`
//!   says so), and a range wholly before it answers no buckets, with `from` = `to`. Nothing
//!   later than a day past now is read, whatever `to` says.
//! - Buckets start in `[from rounded down to 5 minutes, to)`, ascending; only buckets with
//!   units are listed.
//! - A missing or empty `metering_id`, a timestamp that is not RFC 3339, or `from` after `to`
//!   is a 400 problem naming the parameter and the value received.
//! - Access as `GET /v1/counters` (the `read` permission); with `[server] usage_history =
//!   false` the answer is 404 problem `usage-history-off`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use tollgate_quota::MeteringId;

use crate::state::AppState;
use crate::usage::{BUCKET_SECONDS, RETENTION_BUCKETS, UsageBucket, bucket_start, retention_start};
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;

/// The query string.
#[derive(Debug, Deserialize)]
pub struct UsageQuery {
    metering_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// One id's usage history.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Usage)]
pub struct UsageAnswer<'a> {
    /// The metering id asked for.
    metering_id: &'a str,
    /// The length of a bucket: 300 (5 minutes).
    #[schema(minimum = 300, maximum = 300)]
    bucket_seconds: i64,
    /// The start of the range answered (clamped to the oldest bucket kept).
    #[schema(value_type = String, format = DateTime)]
    from: Timestamp,
    /// The end of the range answered (exclusive).
    #[schema(value_type = String, format = DateTime)]
    to: Timestamp,
    /// The buckets with units, ascending.
    buckets: Vec<UsageBucket>,
}

/// `GET /v1/usage` (see the module docs).
#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = "admin",
    operation_id = "getUsage",
    summary = "One metering id's admitted, refused, held and duplicate units in 5-minute buckets, up to 7 days",
    params(
        ("metering_id" = String, Query, description = "The metering id: 1 to 256 bytes of visible ASCII.", min_length = 1, max_length = 256, pattern = r"^[!-~]{1,256}$"),
        ("from" = Option<String>, Query, description = "RFC 3339; default 7 days before `to`, clamped to the oldest bucket kept.", format = DateTime),
        ("to" = Option<String>, Query, description = "RFC 3339; default now.", format = DateTime),
    ),
    responses(
        (status = 200, description = "The buckets with units, ascending.", body = UsageAnswer<'_>),
        (status = 400, description = "A parameter is missing or malformed, or from is after to (problem invalid-parameter or invalid-query, naming the parameter and the value).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 404, description = "The usage history is turned off (problem usage-history-off).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The history could not be read (problem usage-unavailable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    let Some(usage) = state.usage() else {
        return Err(Problem::new(StatusCode::NOT_FOUND, "usage-history-off", "Usage history off")
            .detail("the usage history is turned off ([server] usage_history = false)"));
    };
    let Query(q) = query.map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
            .detail(e.body_text())
    })?;
    let raw_id = q.metering_id.unwrap_or_default();
    if raw_id.is_empty() {
        return Err(invalid("metering_id", &raw_id, "metering_id is required".into()));
    }
    let id =
        MeteringId::new(&raw_id).map_err(|e| invalid("metering_id", &raw_id, e.to_string()))?;
    let now = up_to(Timestamp::now());
    // An omitted bound follows the other: `to` is now (or `from`, when that is later), `from`
    // is 7 days before `to`; only two explicit bounds can be the wrong way round.
    let asked_from = timestamp("from", q.from.as_deref())?;
    let to = timestamp("to", q.to.as_deref())?.unwrap_or(asked_from.map_or(now, |f| f.max(now)));
    let from = asked_from.unwrap_or_else(|| {
        to.checked_sub(SignedDuration::from_secs(RETENTION_BUCKETS * BUCKET_SECONDS)).unwrap_or(to)
    });
    if from > to {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-parameter",
            "Invalid parameter",
        )
        .detail(format!("from ({from}) is after to ({to})"))
        .with("invalid_parameter", "from")
        .with("value", q.from.unwrap_or_default())
        .with("to", q.to.unwrap_or_default()));
    }
    let from = from.max(bucket_start(retention_start(now))).min(to);
    let buckets = usage.series(id.as_str(), from, to).await.map_err(|e| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "usage-unavailable",
            "Usage history unavailable",
        )
        .detail(e.to_string())
    })?;
    let body =
        UsageAnswer { metering_id: id.as_str(), bucket_seconds: BUCKET_SECONDS, from, to, buckets };
    Ok(Json(body).into_response())
}

/// The instant an omitted `to` stands for when the clock reads `t`: `t` rounded up to the whole
/// second. Rounded down, a check made in the first second of a bucket would be left out of
/// the answer, its bucket starting at `to`.
fn up_to(t: Timestamp) -> Timestamp {
    let whole = t.as_second().saturating_add(i64::from(t.subsec_nanosecond() > 0));
    Timestamp::from_second(whole).unwrap_or(t)
}

fn timestamp(name: &'static str, raw: Option<&str>) -> Result<Option<Timestamp>, Problem> {
    raw.map(|s| {
        s.parse::<Timestamp>().or_else(|e| {
            beyond_range(s).ok_or_else(|| {
                invalid(
                    name,
                    s,
                    format!(
                        "{name} must be an RFC 3339 timestamp such as 2026-12-01T16:00:00Z: {e}"
                    ),
                )
            })
        })
    })
    .transpose()
}

/// A valid RFC 3339 instant beyond the range an instant here holds (late on 9999-12-31 UTC,
/// or before year -9999): the nearest one it holds. The history keeps recent buckets only,
/// so the clamp changes no answer.
fn beyond_range(s: &str) -> Option<Timestamp> {
    let (civil, rest) = (s.get(..19)?, s.get(19..)?);
    let civil = civil.parse::<jiff::civil::DateTime>().ok()?;
    let rest = match rest.strip_prefix('.') {
        Some(r) => r.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    let offset = rest.eq_ignore_ascii_case("z")
        || (rest.len() == 6
            && rest.starts_with(['+', '-'])
            && rest[1..]
                .bytes()
                .enumerate()
                .all(|(i, b)| if i == 2 { b == b':' } else { b.is_ascii_digit() }));
    offset.then(|| if civil.year() > 0 { Timestamp::MAX } else { Timestamp::MIN })
}

fn invalid(name: &'static str, value: &str, detail: String) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid-parameter", "Invalid parameter")
        .detail(detail)
        .with("invalid_parameter", name)
        .with("value", value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_beyond_the_range_held_are_clamped_and_others_refused() {
        assert_eq!(timestamp("to", Some("9999-12-31T23:59:59Z")).unwrap(), Some(Timestamp::MAX));
        assert_eq!(
            timestamp("to", Some("9999-12-31T23:59:59.5+00:00")).unwrap(),
            Some(Timestamp::MAX)
        );
        assert!(timestamp("to", Some("9999-12-31T23:59:59 junk")).is_err());
        assert!(timestamp("to", Some("9999-13-31T23:59:59Z")).is_err());
        let t = timestamp("from", Some("2026-12-01T16:00:00Z")).unwrap().unwrap();
        assert_eq!(t.to_string(), "2026-12-01T16:00:00Z");
    }

    #[tokio::test]
    async fn a_check_in_the_first_second_of_a_bucket_is_in_the_default_range() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(up_to(at("2026-12-01T16:00:00.3Z")), at("2026-12-01T16:00:01Z"));
        assert_eq!(up_to(at("2026-12-01T16:00:00Z")), at("2026-12-01T16:00:00Z"));
        let history = crate::usage::UsageHistory::in_memory(10);
        let id = MeteringId::new("S:FIRST").unwrap();
        // A bucket two hours ago: inside the retention whenever the test runs.
        let start = crate::usage::bucket_start(crate::usage::bucket_of(Timestamp::now()) - 24);
        let now = start + jiff::SignedDuration::from_millis(300);
        history.record(&id, now, 4, 0);
        let hour_before = start - jiff::SignedDuration::from_hours(1);
        let buckets = history.series("S:FIRST", hour_before, up_to(now)).await;
        assert_eq!(buckets.unwrap().len(), 1, "the bucket that began 0.3 s before holds the check");
    }
}
