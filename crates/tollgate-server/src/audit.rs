//! `GET /v1/audit`: the audit log ([`tollgate_http::audit`]), newest records first.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use tollgate_http::Problem;
use tollgate_http::audit::{DEFAULT_LIST, MAX_LIST};
use tollgate_http::user::Permission;

use crate::state::AppState;

/// `?limit=`.
#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    limit: Option<String>,
}

/// One audit record.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct AuditRecord {
    /// When the change was made.
    #[schema(format = DateTime)]
    at: String,
    /// Who made it (`admin`, a user's name, or `loopback`).
    who: String,
    /// Their role.
    role: String,
    /// `policies.replace`, `counter.reset`, `queue.retry`, `queue.release` or `queue.purge`.
    action: String,
    /// What was changed.
    target: String,
    /// The state before.
    before: serde_json::Value,
    /// The state after.
    after: serde_json::Value,
    /// Present when before and after were too large to keep whole (they then hold their
    /// `bytes` and `sha256`): the `removed` and `added` elements, or the `changed` keys, and
    /// what was `left_out` of the diff.
    #[schema(required = false)]
    diff: serde_json::Value,
}

/// `GET /v1/audit?limit=N`: the newest records first (readers and up).
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "admin",
    operation_id = "listAudit",
    summary = "The audit log of admin changes, newest first",
    params(("limit" = Option<u32>, Query, description = "Records to list, 1 to 1,000 (default 100).", minimum = 1, maximum = 1000)),
    responses(
        (status = 200, description = "The records, newest first.", body = Vec<AuditRecord>),
        (status = 400, description = "limit is not a whole number from 1 to 1,000 (problem invalid-query).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 503, description = "The log could not be read (problem audit-unreadable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    let limit = match q.limit.as_deref() {
        None => DEFAULT_LIST,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_LIST).contains(&n) => n,
            _ => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-query",
                    "Invalid query",
                )
                .detail(format!("limit must be a whole number from 1 to {MAX_LIST}"))
                .with("invalid_parameter", "limit")
                .with("value", text));
            }
        },
    };
    let Some(log) = state.admin().audit().cloned() else {
        return Ok(Json(Vec::<Value>::new()).into_response());
    };
    let records = tokio::task::spawn_blocking(move || log.newest(limit)).await;
    match records {
        Ok(Ok(records)) => Ok(Json(records).into_response()),
        Ok(Err(e)) => Err(unreadable(e.to_string())),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

fn unreadable(detail: String) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "audit-unreadable", "Audit log unreadable")
        .detail(detail)
}
