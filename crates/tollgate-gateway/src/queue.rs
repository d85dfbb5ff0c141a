//! The hold queue's admin API, behind the server's [`AccessGuard`].
//!
//! - `GET /v1/queue?partner=&route=&state=&from=&to=` (a [`QueueFilter`]; all items when
//!   empty), a page at a time in id (arrival) order: `limit` items (1 to 1,000, default 100),
//!   after the item `cursor`; the body stays an array, a `Link: <…>; rel="next"` header names
//!   the next page when there is one, and `X-Total-Count` gives the whole filter's count (from
//!   the tally without time bounds, counted row by row with them)
//! - `POST /v1/queue/purge` and `POST /v1/queue/release` with the same filter: a bulk job
//!   (see `bulk`)
//! - `POST /v1/queue/{id}/retry` re-meters now (held or dead items)
//! - `POST /v1/queue/{id}/release` delivers without metering
//! - `DELETE /v1/queue/{id}` purges the item and its spooled bytes
//! - `GET /v1/queue/{id}/payload` answers the item's bytes as received, at most
//!   [`MAX_PAYLOAD_BYTES`] of them (`Tollgate-Payload-Bytes` tells the whole size); partner
//!   data, so it needs the queue permission (operator or admin), not just read access; 410
//!   once the bytes are no longer spooled (delivered or purged)

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tollgate_http::AccessGuard;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;

use crate::filter::{BadParameter, FilterQuery, QueueFilter, encode};
use crate::pipeline::{AdminError, AdminOp, Event, row};
use crate::spool::Spool;

/// What the queue handlers need.
#[derive(Clone)]
pub(crate) struct QueueApi {
    /// Who may call.
    pub guard: AccessGuard,
    /// Where items are listed from.
    pub spool: Arc<Spool>,
    /// The pipeline's inbox (retry, release, purge go through it).
    pub events: mpsc::UnboundedSender<Event>,
    /// Bulk releases and purges (`bulk`).
    pub jobs: crate::bulk::Jobs,
}

/// `?partner=&route=&state=&from=&to=&limit=&cursor=`.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    /// Which items (see [`QueueFilter`]).
    #[serde(flatten)]
    pub filter: FilterQuery,
    /// Items per page, 1 to [`MAX_PAGE`] ([`DEFAULT_PAGE`] when absent).
    pub limit: Option<String>,
    /// The id of the last item of the previous page.
    pub cursor: Option<String>,
}

/// Items per page when `limit` is absent.
pub(crate) const DEFAULT_PAGE: usize = 100;
/// The most items one page holds.
pub(crate) const MAX_PAGE: usize = 1000;

/// A refused query parameter: 400, naming it and the value received.
pub(crate) fn invalid(bad: BadParameter) -> Response {
    Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
        .detail(bad.why)
        .with("invalid_parameter", bad.name)
        .with("value", bad.value)
        .into_response()
}

/// One queue item, as the queue API lists and answers it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct QueueItem {
    /// Stable id (sorts by arrival); the `Tollgate-Interchange-Id` of its delivery.
    id: String,
    /// received, admitted, held, delivered, rejected, duplicate or dead.
    #[schema(pattern = "^(received|admitted|held|delivered|rejected|duplicate|dead)$")]
    state: String,
    /// Partner name, or the raw `QUAL:ID` of an unknown sender.
    partner: String,
    /// Document type (first ST01 / UNH message type).
    document: String,
    /// Route name, when one matched.
    route: Option<String>,
    /// The counter it is metered against, when routed.
    metering_id: Option<String>,
    /// Units it consumes.
    weight: u64,
    /// When it was received.
    #[schema(format = DateTime)]
    received_at: String,
    /// When the pipeline next looks at it.
    #[schema(format = DateTime)]
    next_attempt_at: Option<String>,
    /// Metering or delivery attempts so far.
    attempts: u32,
    /// Why it is where it is.
    reason: Option<String>,
    /// For a duplicate of admitted transactions: the item first sent with them.
    duplicate_of: Option<String>,
    /// Where its bytes are: `{"file": "spool/<name>.edi", "start", "end"}`.
    spool: SpoolRange,
}

/// Where an item's bytes are in the spool.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct SpoolRange {
    /// `spool/<name>.edi` in the data directory.
    file: String,
    /// First byte.
    start: u64,
    /// End of the range (exclusive).
    end: u64,
}

/// `GET /v1/queue`.
#[utoipa::path(
    get,
    path = "/v1/queue",
    tag = "gateway",
    operation_id = "listQueue",
    summary = "The gateway's queue, filtered, a page at a time in arrival order",
    params(
        FilterQuery,
        ("limit" = Option<u32>, Query, description = "Items per page, 1 to 1,000 (default 100).", minimum = 1, maximum = 1000),
        ("cursor" = Option<String>, Query, description = "The id of the last item of the previous page."),
    ),
    responses(
        (status = 200, description = "One page of items.", body = Vec<QueueItem>,
            headers(
                ("Link" = String, description = "`</v1/queue?…&cursor=…>; rel=\"next\"` when there is a next page."),
                ("X-Total-Count" = u64, description = "How many items the whole filter keeps, on every page."),
            )),
        (status = 400, description = "A query parameter is invalid (problem invalid-query, naming it and the value).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 503, description = "The spool could not be read (problem gateway-unavailable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn list(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(p) = api.guard.allow(&headers, Permission::Read) {
        return p.into_response();
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => {
            return Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
                .detail(e.body_text())
                .into_response();
        }
    };
    let filter = match QueueFilter::parse(&q.filter) {
        Ok(f) => f,
        Err(bad) => return invalid(bad),
    };
    let limit = match q.limit.as_deref() {
        None => DEFAULT_PAGE,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                let why = format!("limit must be a whole number from 1 to {MAX_PAGE}");
                return invalid(BadParameter { name: "limit", value: text.to_owned(), why });
            }
        },
    };
    let spool = api.spool.clone();
    let cursor = q.cursor.clone().filter(|c| !c.is_empty());
    let f = filter.clone();
    let page = tokio::task::spawn_blocking(move || {
        let total = total(&spool, &f)?;
        let (items, next) = spool.page(&f, cursor.as_deref(), limit)?;
        Ok::<_, crate::spool::SpoolError>((items, next, total))
    });
    match page.await {
        Ok(Ok((items, next, total))) => {
            let body = Json(items.iter().map(row).collect::<Vec<_>>());
            let total = [(axum::http::HeaderName::from_static("x-total-count"), total.to_string())];
            let Some(next) = next else { return (total, body).into_response() };
            let link = format!(
                "</v1/queue?{}limit={limit}&cursor={}>; rel=\"next\"",
                filter.query(),
                encode(&next)
            );
            (total, [(axum::http::header::LINK, link)], body).into_response()
        }
        Ok(Err(e)) => unavailable(e.to_string()),
        Err(e) => unavailable(e.to_string()),
    }
}

/// How many items `filter` keeps: from the tally when it has no time bounds, else counted.
pub(crate) fn total(spool: &Spool, filter: &QueueFilter) -> Result<u64, crate::spool::SpoolError> {
    if filter.has_time() {
        return spool.count(filter);
    }
    Ok(spool.tally().count(filter.partner.as_deref(), filter.route.as_deref(), filter.state))
}

/// The most bytes of one item `GET /v1/queue/{id}/payload` answers.
pub(crate) const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

/// `GET /v1/queue/{id}/payload`.
#[utoipa::path(
    get,
    path = "/v1/queue/{id}/payload",
    tag = "gateway",
    operation_id = "getQueueItemPayload",
    summary = "An item's bytes as received, at most 64 KiB",
    params(("id" = String, Path, description = "The queue item's id.")),
    responses(
        (status = 200, description = "The first 64 KiB of the item's bytes.", body = Vec<u8>, content_type = "application/octet-stream",
            headers(
                ("Tollgate-Payload-Bytes" = u64, description = "The whole item's size in bytes."),
                ("Tollgate-Payload-Truncated" = bool, description = "`true` when the answer is cut at 64 KiB."),
            )),
        (status = 400, description = "The id is not UTF-8 once decoded (problem http-error).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 404, description = "No such item (problem queue-item-not-found).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 410, description = "The bytes are no longer spooled: delivered or purged (problem payload-not-kept).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The gateway is shutting down or the spool failed (problem gateway-unavailable).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn payload(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(p) = api.guard.allow(&headers, Permission::Queue) {
        return p.into_response();
    }
    let spool = api.spool.clone();
    let key = id.clone();
    let read = tokio::task::spawn_blocking(move || {
        let Some(item) = spool.item(&key)? else { return Ok(None) };
        let end = item.end.min(item.start.saturating_add(MAX_PAYLOAD_BYTES));
        let bytes = spool.read(&item.spool_file, item.start, end)?;
        Ok::<_, crate::spool::SpoolError>(Some((bytes, item.end.saturating_sub(item.start))))
    });
    match read.await {
        Ok(Ok(Some((bytes, total)))) => {
            let truncated = (bytes.len() as u64) < total;
            (
                [
                    (axum::http::header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                    (
                        axum::http::HeaderName::from_static("tollgate-payload-bytes"),
                        total.to_string(),
                    ),
                    (
                        axum::http::HeaderName::from_static("tollgate-payload-truncated"),
                        truncated.to_string(),
                    ),
                ],
                bytes,
            )
                .into_response()
        }
        Ok(Ok(None)) => {
            Problem::new(StatusCode::NOT_FOUND, "queue-item-not-found", "No such queue item")
                .detail(format!("no queue item {id}"))
                .with("id", id)
                .into_response()
        }
        Ok(Err(crate::spool::SpoolError::Io { source, .. }))
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Problem::new(StatusCode::GONE, "payload-not-kept", "Payload no longer kept")
                .detail(format!(
                    "the bytes of queue item {id} are no longer spooled (delivered or purged)"
                ))
                .with("id", id)
                .into_response()
        }
        Ok(Err(e)) => unavailable(e.to_string()),
        Err(e) => unavailable(e.to_string()),
    }
}

/// The answers of an action on one queue item (retry, release, purge) that it refuses.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum QueueItemRefused {
    /// 400: a path that is not an id.
    #[response(
        status = 400,
        description = "The id is not UTF-8 once decoded (problem http-error).",
        content_type = "application/problem+json"
    )]
    BadId(tollgate_http::openapi::ProblemDoc),
    /// 404: no such item.
    #[response(
        status = 404,
        description = "No such item (problem queue-item-not-found), or no route for an empty id.",
        content_type = "application/problem+json"
    )]
    NotFound(tollgate_http::openapi::ProblemDoc),
    /// 409: the item's state does not allow the action.
    #[response(
        status = 409,
        description = "Not possible in the item's state (problem queue-item-state), or its delivery attempt is under way (problem queue-item-in-flight, with Retry-After).",
        content_type = "application/problem+json"
    )]
    State(tollgate_http::openapi::ProblemDoc),
    /// 500: done, but not recorded.
    #[response(
        status = 500,
        description = "The action was done but its audit record could not be written (problem audit-write-failed).",
        content_type = "application/problem+json"
    )]
    NotRecorded(tollgate_http::openapi::ProblemDoc),
    /// 503: the gateway cannot act now.
    #[response(
        status = 503,
        description = "The gateway is shutting down or the spool failed (problem gateway-unavailable).",
        content_type = "application/problem+json"
    )]
    Unavailable(tollgate_http::openapi::ProblemDoc),
}

/// `POST /v1/queue/{id}/retry`.
#[utoipa::path(
    post,
    path = "/v1/queue/{id}/retry",
    tag = "gateway",
    operation_id = "retryQueueItem",
    summary = "Re-meter a held or dead item now",
    params(("id" = String, Path, description = "The queue item's id.")),
    responses(
        (status = 200, description = "The item after the operation.", body = QueueItem),
        tollgate_http::openapi::AccessRefused,
        QueueItemRefused,
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn retry(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    operate(api, headers, id, AdminOp::Retry).await
}

/// `POST /v1/queue/{id}/release`.
#[utoipa::path(
    post,
    path = "/v1/queue/{id}/release",
    tag = "gateway",
    operation_id = "releaseQueueItem",
    summary = "Deliver an item without metering it",
    params(("id" = String, Path, description = "The queue item's id.")),
    responses(
        (status = 200, description = "The item after the operation.", body = QueueItem),
        tollgate_http::openapi::AccessRefused,
        QueueItemRefused,
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn release(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    operate(api, headers, id, AdminOp::Release).await
}

/// `DELETE /v1/queue/{id}`.
#[utoipa::path(
    delete,
    path = "/v1/queue/{id}",
    tag = "gateway",
    operation_id = "purgeQueueItem",
    summary = "Purge an item and its spooled bytes",
    params(("id" = String, Path, description = "The queue item's id.")),
    responses(
        (status = 204, description = "Purged."),
        tollgate_http::openapi::AccessRefused,
        QueueItemRefused,
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn purge(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    operate(api, headers, id, AdminOp::Purge).await
}

/// Runs the action and its audit record in a task of their own, awaited here: a client that
/// hangs up drops this handler, not the change and its record (the answer waits for both).
async fn operate(api: QueueApi, headers: HeaderMap, id: String, op: AdminOp) -> Response {
    tokio::spawn(act(api, headers, id, op)).await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "a queue action's task failed");
        unavailable(format!("the action's task failed: {e}"))
    })
}

async fn act(api: QueueApi, headers: HeaderMap, id: String, op: AdminOp) -> Response {
    let who = match api.guard.allow(&headers, Permission::Queue) {
        Ok(who) => who,
        Err(p) => return p.into_response(),
    };
    // The item as stored before the operation, for the audit log.
    let (spool, key) = (api.spool.clone(), id.clone());
    let before = match tokio::task::spawn_blocking(move || spool.item(&key)).await {
        Ok(Ok(Some(item))) => row(&item),
        _ => serde_json::Value::Null,
    };
    let (tx, rx) = oneshot::channel();
    if api.events.send(Event::Admin { id: id.clone(), op, only_if: None, reply: tx }).is_err() {
        return unavailable("the gateway is shutting down".into());
    }
    let action = match op {
        AdminOp::Retry => "queue.retry",
        AdminOp::Release => "queue.release",
        AdminOp::Purge => "queue.purge",
    };
    // The answer is sent only once the record is durable; a record that cannot be written is
    // a 500 that says the change was made.
    let record = |after: serde_json::Value| {
        let (guard, id, who) = (api.guard.clone(), id.clone(), who.clone());
        async move {
            tokio::task::spawn_blocking(move || guard.record(&who, action, &id, before, after))
                .await
                .map_err(|e| e.to_string())
                .and_then(|written| written)
                .map_err(|e| tollgate_http::audit::write_failed(e).into_response())
        }
    };
    match rx.await {
        Ok(Ok(Some(item))) => match record(row(&item)).await {
            Ok(()) => Json(row(&item)).into_response(),
            Err(refused) => refused,
        },
        Ok(Ok(None)) => match record(serde_json::Value::Null).await {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(refused) => refused,
        },
        Ok(Err(AdminError::NotFound)) => {
            Problem::new(StatusCode::NOT_FOUND, "queue-item-not-found", "No such queue item")
                .detail(format!("no queue item {id}"))
                .with("id", id)
                .into_response()
        }
        Ok(Err(AdminError::Conflict(msg))) => {
            Problem::new(StatusCode::CONFLICT, "queue-item-state", "Not possible in this state")
                .detail(msg)
                .with("id", id)
                .into_response()
        }
        Ok(Err(AdminError::InFlight(msg))) => {
            let problem =
                Problem::new(StatusCode::CONFLICT, "queue-item-in-flight", "Delivery under way");
            let retry_after = [(axum::http::header::RETRY_AFTER, "1")];
            (retry_after, problem.detail(msg).with("id", id)).into_response()
        }
        Ok(Err(AdminError::Spool(msg))) => unavailable(msg),
        Err(_) => unavailable("the gateway is shutting down".into()),
    }
}

pub(crate) fn unavailable(detail: String) -> Response {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "gateway-unavailable", "Gateway unavailable")
        .detail(detail)
        .into_response()
}
