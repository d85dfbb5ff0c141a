//! Uploads: `POST /v1/interchanges`, spooled durably and answered 202 `{"id", "state"}`.
//!
//! Invariants:
//! - The uploader is authorised ([`UploadGuard`]) before a byte of the body is read, and every
//!   interchange's sender is checked against the uploader's partners before anything is
//!   spooled: a refused upload leaves no trace.
//! - Bodies in memory at once never exceed `upload_budget_bytes`: each upload reserves its
//!   `Content-Length` (or `max_upload_bytes` when the length is not declared) from one shared
//!   [`UploadBudget`] before reading, and gives it back once the bytes are spooled. When the
//!   budget is spent the upload gets 503 with `Retry-After`, at once, instead of waiting.
//! - One client (a `[[client]]`, or a source address without a key) holds at most its share
//!   of the budget (see `budget`); beyond it its upload gets 429 with `Retry-After`, so it
//!   cannot starve the others.
//! - A body must arrive at `upload_min_rate_bytes` per second on average once
//!   `upload_rate_grace_ms` has passed (see `body`); a slower one is cut with 408 and its
//!   reservation given back.
//! - The answer 202 is sent only after [`Spool::receive`] made the bytes durable.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use tollgate_http::problem::Problem;

use crate::config::Plan;
use crate::credentials::{UploadGuard, Uploader};
use crate::pipeline::Event;
use crate::receipt;
use crate::spool::Spool;

mod body;
mod budget;

pub(crate) use body::Pace;
pub(crate) use budget::UploadBudget;
use budget::{Holder, Refusal};

/// What the upload handler needs.
#[derive(Clone)]
pub(crate) struct Upload {
    /// The spool.
    pub spool: Arc<Spool>,
    /// The pipeline's inbox.
    pub events: mpsc::UnboundedSender<Event>,
    /// `max_upload_bytes`.
    pub max_bytes: u64,
    /// The memory budget for bodies in flight.
    pub budget: UploadBudget,
    /// The pace a body must keep.
    pub pace: Pace,
    /// Who may upload.
    pub guard: UploadGuard,
    /// `QUAL:ID` → partner name, for partner scoping.
    pub partners: Arc<HashMap<String, String>>,
    /// The routes, for weighing what the upload's parse finds.
    pub plan: Arc<Plan>,
}

fn too_large(max: u64, got: Option<u64>) -> Response {
    let detail = match got {
        Some(n) => format!("the body has {n} bytes; max_upload_bytes is {max}"),
        None => format!("the body is larger than max_upload_bytes ({max})"),
    };
    Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "upload-too-large", "Upload too large")
        .detail(detail)
        .with("max_upload_bytes", max)
        .into_response()
}

fn budget_spent(budget: &UploadBudget, wanted: u64) -> Response {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "upload-budget-exhausted", "Too many uploads")
        .detail(format!(
            "uploads in flight hold the whole upload_budget_bytes ({}); this one needs {wanted} \
             bytes: retry shortly",
            budget.bytes()
        ))
        .with("upload_budget_bytes", budget.bytes())
        .header(RETRY_AFTER, HeaderValue::from_static("1"))
        .into_response()
}

fn share_spent(budget: &UploadBudget, holder: &Holder, held: u64, wanted: u64) -> Response {
    Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "upload-share-exhausted",
        "Too many uploads from this client",
    )
    .detail(format!(
        "uploads of {holder} in flight hold {held} bytes of its share of the upload budget \
         ({} bytes: a quarter of upload_budget_bytes, at least max_upload_bytes); this one \
         needs {wanted} bytes: retry once one of them is done",
        budget.share()
    ))
    .with("share_bytes", budget.share())
    .with("held_bytes", held)
    .header(RETRY_AFTER, HeaderValue::from_static("1"))
    .into_response()
}

fn too_slow(pace: Pace, received: u64, wanted: u64, elapsed: std::time::Duration) -> Response {
    Problem::new(StatusCode::REQUEST_TIMEOUT, "upload-too-slow", "Upload too slow")
        .detail(format!(
            "{received} of {wanted} bytes arrived in {} ms; after upload_rate_grace_ms ({} ms) \
             an upload must arrive at upload_min_rate_bytes ({} bytes per second) on average: \
             the upload is cut and the connection closed",
            elapsed.as_millis(),
            pace.grace.as_millis(),
            pace.min_rate
        ))
        .with("received_bytes", received)
        .with("upload_min_rate_bytes", pace.min_rate)
        .header(CONNECTION, HeaderValue::from_static("close"))
        .into_response()
}

/// The answer of an accepted upload.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Accepted {
    /// The queue item's id (see `/v1/queue`).
    id: String,
    /// Always `received`: spooled, not yet metered.
    #[schema(pattern = "^received$")]
    state: String,
}

/// `POST /v1/interchanges`: authorise, reserve memory, read, check senders, spool, answer 202.
#[utoipa::path(
    post,
    path = "/v1/interchanges",
    tag = "gateway",
    operation_id = "uploadInterchange",
    summary = "Upload an X12 or EDIFACT interchange file to the gateway",
    description = "The bytes are spooled durably before the answer; metering and delivery follow \
                   asynchronously (follow the item in /v1/queue). Bodies in memory at once are \
                   bounded by upload_budget_bytes (one client, by key or else by address, holds \
                   at most a quarter of it, at least max_upload_bytes), one body by \
                   max_upload_bytes; a body must arrive at upload_min_rate_bytes per second \
                   once upload_rate_grace_ms has passed.",
    request_body(content = String, description = "One file with one or more X12 (ISA) or EDIFACT (UNA/UNB) interchanges.",
        content_type = "application/octet-stream"),
    responses(
        (status = 202, description = "Spooled.", body = Accepted),
        (status = 400, description = "Not an EDI interchange (problem not-edi), or a bad Content-Length (problem invalid-content-length).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Credentials are configured and none valid was sent (problems upload-unauthorized, admin-unauthorized, missing-api-key, invalid-api-key).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "A sender is outside the client's partners (problem partner-not-allowed), or nothing is configured and the listener is not loopback.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 408, description = "The body arrived slower than upload_min_rate_bytes on average once upload_rate_grace_ms had passed (problem upload-too-slow), or stalled for body_timeout_ms (problem body-timeout), or fell behind body_min_rate_bytes (problem body-too-slow); the connection is closed.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "Larger than max_upload_bytes (problem upload-too-large).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 429, description = "This client's uploads in flight hold its share of upload_budget_bytes (problem upload-share-exhausted, with Retry-After).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json", headers(("Retry-After" = u64, description = "Seconds to wait."))),
        (status = 500, description = "The parser failed on this upload (problem parser-failed).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The upload budget is spent (problem upload-budget-exhausted, with Retry-After) or the spool failed (problem spool-unavailable).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json", headers(("Retry-After" = u64, description = "Seconds to wait."))),
    ),
    security((), ("api_key" = []), ("admin_token" = [])),
)]
pub(crate) async fn upload(
    State(up): State<Upload>,
    peer: Option<axum::Extension<tollgate_http::tls::PeerCertificate>>,
    source: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let uploader = match up.guard.authorize(&headers, peer.as_ref().map(|p| &p.0)) {
        Ok(u) => u,
        Err(p) => return p.into_response(),
    };
    let holder = match &uploader {
        Uploader::Client(c) => Holder::Client(c.name().to_owned()),
        Uploader::Unscoped => {
            Holder::address(source.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |s| s.0.0.ip()))
        }
    };
    let declared = match headers.get(CONTENT_LENGTH) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) => Some(n),
            None => {
                return Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-content-length",
                    "Invalid Content-Length",
                )
                .detail(format!(
                    "Content-Length {:?} is not a byte count",
                    String::from_utf8_lossy(v.as_bytes())
                ))
                .with("header", "content-length")
                .into_response();
            }
        },
    };
    if let Some(n) = declared.filter(|&n| n > up.max_bytes) {
        return too_large(up.max_bytes, Some(n));
    }
    let wanted = declared.unwrap_or(up.max_bytes);
    let _reserved = match up.budget.try_reserve(holder.clone(), wanted) {
        Ok(r) => r,
        Err(Refusal::Budget) => return budget_spent(&up.budget, wanted),
        Err(Refusal::Share { held }) => return share_spent(&up.budget, &holder, held, wanted),
    };
    let bytes = match body::read(body, wanted, up.pace).await {
        body::Read::Done(b) => b,
        body::Read::TooLarge => return too_large(up.max_bytes, None),
        body::Read::TooSlow { received, elapsed } => {
            tracing::debug!(%holder, received, wanted, "upload cut: below upload_min_rate_bytes");
            return too_slow(up.pace, received, wanted, elapsed);
        }
        body::Read::Failed(e) => {
            return Problem::new(StatusCode::BAD_REQUEST, "upload-body-failed", "Upload failed")
                .detail(format!("the request body could not be read: {e}"))
                .into_response();
        }
    };
    // The one parse of the upload, off the runtime (a body may be up to max_upload_bytes):
    // its result checks the senders here and goes with the record to the pipeline.
    let (plan, body) = (up.plan.clone(), bytes.clone());
    let parsed = match tokio::task::spawn_blocking(move || receipt::parse(&body, &plan)).await {
        Ok(p) => Arc::new(p),
        Err(e) => {
            tracing::error!(error = %e, bytes = bytes.len(), "the parser failed on an upload");
            return Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "parser-failed",
                "The parser failed on this upload",
            )
            .detail(format!("the parser failed on this upload: {e}"))
            .into_response();
        }
    };
    let scan = &parsed.scan;
    if scan.envelopes.is_empty() {
        let detail =
            scan.error.clone().unwrap_or_else(|| "no X12 or EDIFACT interchange found".into());
        return Problem::new(StatusCode::BAD_REQUEST, "not-edi", "Not an EDI interchange")
            .detail(detail)
            .with("bytes", bytes.len())
            .into_response();
    }
    if let Uploader::Client(client) = uploader {
        for e in &scan.envelopes {
            let partner = up.partners.get(&e.sender).map_or(e.sender.as_str(), String::as_str);
            if !client.may_upload_for(partner, &e.sender) {
                tracing::warn!(
                    client = client.name(),
                    sender = %e.sender,
                    "upload refused: sender outside the client's partners"
                );
                return tollgate_http::client::partner_forbidden(client, partner, &e.sender)
                    .into_response();
            }
        }
    }
    let sender = scan.envelopes[0].sender.clone();
    let spool = up.spool.clone();
    let res =
        tokio::task::spawn_blocking(move || spool.receive(&[(&bytes[..], "upload".to_owned())]))
            .await;
    match res {
        Ok(Ok(mut records)) if !records.is_empty() => {
            let mut rec = records.remove(0);
            rec.sender = sender;
            rec.parsed = Some(parsed);
            let id = rec.id.clone();
            let _ = up.events.send(Event::Received(vec![rec]));
            (StatusCode::ACCEPTED, Json(serde_json::json!({"id": id, "state": "received"})))
                .into_response()
        }
        Ok(Ok(_)) => spool_failed("nothing was recorded".into()),
        Ok(Err(e)) => spool_failed(e.to_string()),
        Err(e) => spool_failed(e.to_string()),
    }
}

fn spool_failed(detail: String) -> Response {
    // The spool's health reports a failing disk once, not once per upload.
    tracing::debug!(error = %detail, "spooling an upload failed");
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "spool-unavailable", "Spool unavailable")
        .detail(detail)
        .into_response()
}
