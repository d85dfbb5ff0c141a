//! The counter endpoints of the admin API: list live counters, drop a metering id's counters.
//!
//! - `GET /v1/counters?prefix=P&limit=N&after=C` lists live counters whose id starts with
//!   `P`, a page of at most `N` (default [`DEFAULT_PAGE`], at most [`MAX_PAGE`]) at a time,
//!   in identifier order; `next` is the `after` of the next page (role `read`).
//! - `DELETE /v1/counters/{metering-id}` drops every counter of that id (role `limits`); the
//!   change is written to the audit log with the counters it dropped, before the answer and in
//!   a task of its own, so a client that hangs up cannot leave a reset without its record.
//!
//! Access goes through [`tollgate_http::AccessGuard`].

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate_quota::{CounterInfo, CounterListing, MeteringId, PositionError, Store};

use crate::state::AppState;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;

/// Counters on a page when the query names no `limit`.
pub(crate) const DEFAULT_PAGE: usize = 1_000;
/// The most counters on a page: an answer stays within about 4 MB.
pub const MAX_PAGE: usize = 10_000;
/// Counters of one id recorded in a reset's audit record (its first shapes, in order).
const RESET_RECORDED: usize = 100;

/// `?prefix=&limit=&after=` of the counter listing.
#[derive(Debug, Deserialize)]
pub(crate) struct CounterQuery {
    #[serde(default)]
    prefix: String,
    limit: Option<String>,
    after: Option<String>,
}

impl CounterQuery {
    /// The listing asked for; a bad `limit` or `after` is a 400 naming the parameter and value.
    fn listing(&self) -> Result<CounterListing<'_>, Problem> {
        let invalid = |name: &str, value: &str, why: String| {
            Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
                .detail(format!("{name}: {why}"))
                .with("parameter", name)
                .with("value", value)
        };
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE,
            Some(v) => v.parse().ok().filter(|n| (1..=MAX_PAGE).contains(n)).ok_or_else(|| {
                invalid("limit", v, format!("{v:?} is not a whole number from 1 to {MAX_PAGE}"))
            })?,
        };
        let after = match self.after.as_deref() {
            None | Some("") => None,
            Some(v) => {
                Some(v.parse().map_err(|e: PositionError| invalid("after", v, e.to_string()))?)
            }
        };
        Ok(CounterListing { prefix: &self.prefix, after, limit })
    }
}

fn counter_json(c: &CounterInfo) -> Value {
    json!({
        "identifier": c.identifier.as_str(),
        "interval": c.interval,
        "unit": c.unit.as_str(),
        "window": c.window.as_str(),
        "start": c.start.map(|t| t.to_string()),
        "used": c.used,
        "exceed_count": c.exceed_count,
        "total_exceed_count": c.total_exceed_count,
        "window_start": c.window_start.map(|t| t.to_string()),
        "window_end": c.window_end.map(|t| t.to_string()),
    })
}

fn store_problem(e: &tollgate_quota::StoreError) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Store unavailable")
        .detail(e.to_string())
}

/// One live counter, as listed by `GET /v1/counters`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Counter {
    /// The metering id.
    identifier: String,
    /// Window length in units.
    #[schema(minimum = 1, maximum = 4294967295_u64, format = Int64)]
    interval: u32,
    /// second … month.
    #[schema(pattern = "^(second|minute|hour|day|week|month)$")]
    unit: String,
    /// calendar, flexi or rolling.
    #[schema(pattern = "^(calendar|flexi|rolling)$")]
    window: String,
    /// The calendar anchor, when one was given.
    #[schema(format = DateTime)]
    start: Option<String>,
    /// Units counted in the current window.
    used: u64,
    /// Refusals in the current window.
    exceed_count: u64,
    /// Refusals since the counter was made.
    total_exceed_count: u64,
    /// When the current window began (`null` for rolling windows).
    #[schema(format = DateTime)]
    window_start: Option<String>,
    /// When the current window ends.
    #[schema(format = DateTime)]
    window_end: Option<String>,
}

/// The answer of `GET /v1/counters`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct CounterList {
    /// The prefix asked for.
    prefix: String,
    /// How many counters are listed.
    count: usize,
    /// The counters, by identifier, then window shape.
    counters: Vec<Counter>,
    /// Pass as `after` for the next page; `null` on the last page. A page may be short (a
    /// counter that ended meanwhile is left off) while `next` is set.
    next: Option<String>,
}

/// The answer of `DELETE /v1/counters/{id}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct CounterReset {
    /// The metering id.
    identifier: String,
    /// How many counters (one per window shape) were dropped.
    removed: u64,
}

/// `GET /v1/counters?prefix=`.
#[utoipa::path(
    get,
    path = "/v1/counters",
    tag = "admin",
    operation_id = "listCounters",
    summary = "List live counters whose metering id starts with a prefix",
    params(
        ("prefix" = Option<String>, Query, description = "Metering id prefix; all counters when empty or absent."),
        ("limit" = Option<u32>, Query, description = "Most counters on the page: 1 to 10,000, 1,000 when absent.", minimum = 1, maximum = 10000),
        ("after" = Option<String>, Query, description = "The `next` of the previous page; the first page when empty or absent.", pattern = r"^([0-9]{1,9}\.(second|minute|hour|day|week|month)\.(calendar|flexi|rolling)\.(-|-?[0-9]{1,18})\.[!-~]{1,256})?$"),
    ),
    responses(
        (status = 200, description = "The counters.", body = CounterList),
        (status = 400, description = "The query string is not valid (problem invalid-query).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 503, description = "The store could not list (problem store-unavailable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn list_counters(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<CounterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    let Query(q) = query.map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
            .detail(e.body_text())
    })?;
    let listing = q.listing()?;
    let page = state.store().counters(&listing).await.map_err(|e| store_problem(&e))?;
    let list: Vec<Value> = page.counters.iter().map(counter_json).collect();
    let next = page.next.map(|p| p.to_string());
    Ok(Json(json!({ "prefix": q.prefix, "count": list.len(), "counters": list, "next": next }))
        .into_response())
}

/// `DELETE /v1/counters/{metering-id}`: 200 with how many counters were dropped.
#[utoipa::path(
    delete,
    path = "/v1/counters/{id}",
    tag = "admin",
    operation_id = "resetCounter",
    summary = "Drop every counter of a metering id (all window shapes)",
    params(("id" = String, Path, description = "The metering id (may contain `/`).", pattern = r"^[!-~]{1,256}$")),
    responses(
        (status = 200, description = "The counters were dropped (removed may be 0).", body = CounterReset),
        (status = 400, description = "The id is not a metering id (problem invalid-metering-id), or not UTF-8 once decoded.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 404, description = "An empty id: no route (problem not-found).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The counters were dropped but the audit record could not be written (problem audit-write-failed).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The store could not reset (problem store-unavailable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn reset_counter(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let who = state.admin().allow(&headers, Permission::Limits)?;
    let id = MeteringId::new(&id).map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-metering-id", "Invalid metering id")
            .detail(e.to_string())
            .with("value", id.clone())
    })?;
    // A task of its own, awaited here: a client that hangs up drops this handler, not the
    // reset and its record.
    let task = tokio::spawn(async move {
        // The id sorts before every other id it is a prefix of: its counters come first.
        let listing = CounterListing { prefix: id.as_str(), after: None, limit: RESET_RECORDED };
        let before = state.store().counters(&listing).await.map_err(|e| store_problem(&e))?;
        let before: Vec<Value> =
            before.counters.iter().filter(|c| c.identifier == id).map(counter_json).collect();
        // A reset that fails may have taken effect all the same (memory dropped, the file's
        // commit or the shared Redis call failed and is retried): it is recorded either way.
        let reset = state.store().reset(&id).await;
        let after = match &reset {
            Ok(removed) => json!({ "removed": removed }),
            Err(e) => json!({ "error": e.to_string() }),
        };
        let (admin, target) = (state.admin().clone(), id.as_str().to_owned());
        tokio::task::spawn_blocking(move || {
            admin.record(&who, "counter.reset", &target, Value::Array(before), after)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|written| written)
        .map_err(tollgate_http::audit::write_failed)?;
        let removed = reset.map_err(|e| store_problem(&e))?;
        tracing::info!(identifier = %id, removed, "counter reset via the API");
        Ok(Json(json!({ "identifier": id.as_str(), "removed": removed })).into_response())
    });
    task.await.unwrap_or_else(|e| {
        Err(tollgate_http::audit::write_failed(format!("the task failed: {e}")))
    })
}
