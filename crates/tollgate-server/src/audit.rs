//! `GET /v1/audit`: the audit log ([`tollgate_http::audit`]), newest records first, a page at
//! a time: `before` (a record's position, from the `Link` header of the previous page) lists
//! older records, and `action`, `who` and `target` keep the records holding those texts (any
//! case). Bad values are refused with 400 `invalid-query` naming the parameter and the value.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use tollgate_http::Problem;
use tollgate_http::audit::{DEFAULT_LIST, Filter, MAX_LIST, Position};
use tollgate_http::user::Permission;

use crate::state::AppState;

/// `?limit=&before=&action=&who=&target=`.
#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    limit: Option<String>,
    before: Option<String>,
    action: Option<String>,
    who: Option<String>,
    target: Option<String>,
}

/// The longest text `action`, `who` or `target` may hold.
const MAX_NEEDLE: usize = 200;

/// A refused query parameter: 400, naming it and the value received.
fn invalid(parameter: &str, value: &str, why: String) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
        .detail(format!("{parameter} {value:?}: {why}"))
        .with("invalid_parameter", parameter)
        .with("value", value)
}

/// `value` percent-encoded for a query string.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One audit record.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct AuditRecord {
    /// When the change was made.
    #[schema(format = DateTime)]
    at: String,
    /// Who made it (`admin`, a user's name, `loopback`, or `config-file` for a reload).
    who: String,
    /// Their role.
    role: String,
    /// `policies.replace`, `policies.reload`, `counter.reset`, `queue.retry`, `queue.release`
    /// or `queue.purge`.
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

/// `GET /v1/audit?limit=N&before=P&action=A&who=W&target=T`: the newest records first
/// (readers and up).
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "admin",
    operation_id = "listAudit",
    summary = "The audit log of admin changes, newest first, a page at a time",
    params(
        ("limit" = Option<u32>, Query, description = "Records to list, 1 to 1,000 (default 100).", minimum = 1, maximum = 1000),
        ("before" = Option<String>, Query, description = "List the records older than this one: the position `FILE-OFFSET` of the last record of the previous page, as the `Link` header gives it; from the newest when empty or absent.",
            pattern = "^([0-9]{1,19}-[0-9]{1,19})?$"),
        ("action" = Option<String>, Query, description = "Only records whose action holds this text, in any case (e.g. `release`); empty for all.", max_length = 200),
        ("who" = Option<String>, Query, description = "Only records whose author holds this text, in any case; empty for all.", max_length = 200),
        ("target" = Option<String>, Query, description = "Only records whose target holds this text, in any case (a metering id, an item id); empty for all.", max_length = 200),
    ),
    responses(
        (status = 200, description = "The records, newest first.", body = Vec<AuditRecord>,
            headers(("Link" = String, description = "`</v1/audit?…&before=…>; rel=\"next\"` when older records pass the filters too."))),
        (status = 400, description = "A query parameter is invalid: limit not a whole number from 1 to 1,000, before not a position, or a text longer than 200 characters (problem invalid-query, naming the parameter and the value).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
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
                let why = format!("limit must be a whole number from 1 to {MAX_LIST}");
                return Err(invalid("limit", text, why));
            }
        },
    };
    let before = match q.before.as_deref().filter(|b| !b.is_empty()) {
        None => None,
        Some(text) => Some(text.parse::<Position>().map_err(|why| invalid("before", text, why))?),
    };
    for (name, value) in [("action", &q.action), ("who", &q.who), ("target", &q.target)] {
        if let Some(v) = value.as_deref().filter(|v| v.chars().count() > MAX_NEEDLE) {
            let why = format!("at most {MAX_NEEDLE} characters are searched for");
            return Err(invalid(name, v, why));
        }
    }
    let filter = Filter::new(q.action.as_deref(), q.who.as_deref(), q.target.as_deref());
    let Some(log) = state.admin().audit().cloned() else {
        return Ok(Json(Vec::<Value>::new()).into_response());
    };
    let page = tokio::task::spawn_blocking(move || log.page(before, &filter, limit)).await;
    let page = match page {
        Ok(Ok(page)) => page,
        Ok(Err(e)) => return Err(unreadable(e.to_string())),
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let body = Json(page.records);
    let Some(next) = page.next else { return Ok(body.into_response()) };
    let mut link = format!("</v1/audit?limit={limit}");
    for (name, value) in [("action", &q.action), ("who", &q.who), ("target", &q.target)] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            link.push_str(&format!("&{name}={}", encode(v)));
        }
    }
    link.push_str(&format!("&before={next}>; rel=\"next\""));
    Ok(([(axum::http::header::LINK, link)], body).into_response())
}

fn unreadable(detail: String) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "audit-unreadable", "Audit log unreadable")
        .detail(detail)
}
