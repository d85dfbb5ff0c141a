//! The counter endpoints of the admin API: list live counters, drop a metering id's counters.
//!
//! - `GET /v1/counters?prefix=P` lists live counters whose id starts with `P` (role `read`).
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
use tollgate_quota::{CounterInfo, MeteringId, Store};

use crate::state::AppState;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;

/// `?prefix=` of the counter listing.
#[derive(Debug, Deserialize)]
pub(crate) struct CounterQuery {
    #[serde(default)]
    prefix: String,
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
    /// The counters, by identifier.
    counters: Vec<Counter>,
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
    params(("prefix" = Option<String>, Query, description = "Metering id prefix; all counters when empty or absent.")),
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
    let mut counters = state.store().counters(&q.prefix).await.map_err(|e| store_problem(&e))?;
    counters.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    let list: Vec<Value> = counters.iter().map(counter_json).collect();
    Ok(Json(json!({ "prefix": q.prefix, "count": list.len(), "counters": list })).into_response())
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
        let before = state.store().counters(id.as_str()).await.map_err(|e| store_problem(&e))?;
        let before: Vec<Value> =
            before.iter().filter(|c| c.identifier == id).map(counter_json).collect();
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
