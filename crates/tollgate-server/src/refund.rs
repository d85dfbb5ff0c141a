//! `POST /v1/quota/refund`: gives back the units of an admitted check whose message the
//! backend never took, so that its retry fits in a full window.
//!
//! The request carries the check's headers (`metering-id`, the quota headers,
//! `message-weight`) and its required `quota-request-id`; the record that request id left (see
//! `request_id`) says what was counted and where. A refund:
//!
//! 1. hands the record over from *admitted* to *refunded* first ([`Seen::hand_over`], atomic on
//!    every store), so of two refunds of one id only one goes on;
//! 2. then gives the units back ([`Store::give_back`]): to the window (rolling: the sub-bucket)
//!    they were counted in, while it still counts, never below zero. When that window has
//!    ended, nothing is given back and the answer says so (`window_ended: true`).
//!
//! Answers: 200 with what was given back; 404 `unknown-request-id` when no record is kept
//! (never checked with this id, or expired); 409 `already-refunded`, `not-admitted` (the
//! check was refused, or only a shadow policy let it through) or `request-in-progress`; 400
//! naming a bad header, or a `message-weight` other than the admitted one; 503 when the store
//! fails (the record is handed back to *admitted*, so the refund can be asked again).
//!
//! The next check with a refunded request id is decided afresh (see `request_id`): that is
//! the retry of the message.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate_http::client;
use tollgate_http::problem::Problem;
use tollgate_http::tls::PeerCertificate;
use tollgate_quota::{GivenBack, MeteringId, Seen, Store};

use crate::headers::{self, MESSAGE_WEIGHT, QUOTA_REQUEST_ID, QuotaRequest, invalid_header};
use crate::metrics;
use crate::request_id::{self, Holder, Stage};
use crate::state::AppState;

/// The answer to a refund.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RefundAnswer {
    /// The metering id.
    identifier: String,
    /// The refunded request id.
    request_id: String,
    /// The units the check admitted.
    weight: u64,
    /// The units given back: the weight, fewer when the counter held fewer (never below
    /// zero), 0 when the window had ended.
    given_back: u64,
    /// True when the window the units were counted in had ended: nothing was given back, and
    /// nothing needed to be.
    window_ended: bool,
}

/// `POST /v1/quota/refund`.
#[utoipa::path(
    post,
    path = "/v1/quota/refund",
    tag = "quota",
    operation_id = "refundQuota",
    summary = "Give back the units of an admitted check whose message the backend never took",
    description = "Send the check's headers again, with its quota-request-id. The units go back \
                   to the window they were counted in, while it lasts, never below zero; a \
                   request id is refunded once. The next check with that request id is \
                   counted afresh (the retry).",
    params(
        ("metering-id" = String, Header, description = "The checked counter identifier.",
            pattern = r"^[!-~]{1,256}$", example = "ORDERS:ACME"),
        ("quota-request-id" = String, Header, description = "The request id the check was sent with: 1 to 128 bytes of visible ASCII.",
            pattern = r"^[!-~]{1,128}$", example = "MSG-4711"),
        ("message-weight" = Option<u64>, Header, description = "The check's weight; when sent, it must be the weight admitted.",
            minimum = 0, maximum = 18446744073709551615_u64),
    ),
    responses(
        (status = 200, description = "Given back (or nothing to give back: the window had ended).", body = RefundAnswer),
        (status = 400, description = "A header is missing or invalid, or message-weight is not the admitted weight (problem invalid-header, naming it and the value).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Client keys are configured and x-api-key is missing or unknown.",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 403, description = "The client key may not use this metering-id (problem metering-id-not-allowed).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "No record of this request id for this metering-id: never checked with it, or its record expired (problem unknown-request-id).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "Already refunded, not admitted, or still being decided (problems already-refunded, not-admitted, request-in-progress).",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The store could not give back (problem store-unavailable); the refund may be asked again.",
            body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before asking again."))),
    ),
    security((), ("api_key" = [])),
)]
pub(crate) async fn refund(State(state): State<AppState>, request: Request) -> Response {
    let peer = request.extensions().get::<PeerCertificate>();
    match give_back(&state, request.headers(), peer).await {
        Ok(answer) => {
            let result = if answer.window_ended { "window_ended" } else { "given_back" };
            metrics::refund(result, answer.given_back);
            (StatusCode::OK, axum::Json(answer)).into_response()
        }
        Err(p) => {
            let result = match p.status() {
                StatusCode::NOT_FOUND => "unknown",
                StatusCode::CONFLICT => "conflict",
                _ => "error",
            };
            metrics::refund(result, 0);
            p.into_response()
        }
    }
}

async fn give_back(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    peer: Option<&PeerCertificate>,
) -> Result<RefundAnswer, Problem> {
    let client = state.clients().authenticate_with(headers, peer)?;
    if client.is_none() {
        state.admin().from_this_host_on_loopback(headers)?;
    }
    let req = QuotaRequest::from_headers(headers)?;
    let Some(rid) = headers::request_id(headers)? else {
        return Err(invalid_header(
            QUOTA_REQUEST_ID,
            None,
            "a refund needs the quota-request-id its check was sent with",
        ));
    };
    if let Some(c) = client
        && !c.permits(&req.id)
    {
        return Err(client::forbidden(c, &req.id));
    }
    let store = state.store();
    let key = request_id::key(&req.id, rid);
    // A few rounds at most: each lost hand-over means another refund or check moved it on.
    for _ in 0..3 {
        let owner = store
            .holders(&[&key], "")
            .await
            .map_err(|e| crate::quota::store_unavailable(&req.id, &e))?
            .into_iter()
            .next()
            .flatten();
        let Some(owner) = owner else { return Err(unknown(&req.id, rid)) };
        let record = match Holder::of(&owner) {
            Some(Holder::Record(r)) => r,
            Some(Holder::Pending) | None => return Err(request_id::in_progress(&req.id, rid)),
        };
        let units = match (record.stage, &record.units) {
            (Stage::Admitted, Some(units)) => units.clone(),
            (Stage::Refunded, _) => return Err(conflict(&req.id, rid, "already-refunded")),
            _ => return Err(conflict(&req.id, rid, "not-admitted")),
        };
        if headers::has_weight(headers) && req.weight != units.weight {
            return Err(invalid_header(
                MESSAGE_WEIGHT,
                Some(&req.weight.to_string()),
                format!(
                    "quota-request-id {rid} was admitted with message-weight {}; a refund gives \
                     back what was admitted",
                    units.weight
                ),
            ));
        }
        let Some(spec) = units.spec() else { return Err(conflict(&req.id, rid, "not-admitted")) };
        let refunded = record.at(Stage::Refunded).owner();
        let won = store
            .hand_over(&key, &owner, &refunded, record.ttl())
            .await
            .map_err(|e| crate::quota::store_unavailable(&req.id, &e))?;
        if !won {
            continue;
        }
        return match store.give_back(&req.id, &spec, &units.counted, units.weight).await {
            Ok(given) => Ok(RefundAnswer {
                identifier: req.id.as_str().to_owned(),
                request_id: rid.to_owned(),
                weight: units.weight,
                given_back: match given {
                    GivenBack::Units(n) => n,
                    GivenBack::WindowGone => 0,
                },
                window_ended: given == GivenBack::WindowGone,
            }),
            Err(e) => {
                // Nothing was given back (or the store cannot tell): admitted again, so the
                // refund can be asked again.
                let back = record.at(Stage::Admitted);
                let _ = store.hand_over(&key, &refunded, &back.owner(), back.ttl()).await;
                Err(crate::quota::store_unavailable(&req.id, &e))
            }
        };
    }
    Err(request_id::in_progress(&req.id, rid))
}

fn unknown(id: &MeteringId, rid: &str) -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "unknown-request-id", "Unknown request id")
        .detail(format!(
            "no check of {id} with quota-request-id {rid} is on record: it was never checked \
             with this request id, or its record expired with its window (at most 24 hours)"
        ))
        .with("invalid_header", QUOTA_REQUEST_ID)
        .with("value", rid)
        .with("identifier", id.as_str())
}

fn conflict(id: &MeteringId, rid: &str, slug: &'static str) -> Problem {
    let (title, why) = match slug {
        "already-refunded" => ("Already refunded", "was already refunded"),
        _ => ("Not admitted", "was not admitted, so nothing was counted to give back"),
    };
    Problem::new(StatusCode::CONFLICT, slug, title)
        .detail(format!("the check of {id} with quota-request-id {rid} {why}"))
        .with("invalid_header", QUOTA_REQUEST_ID)
        .with("value", rid)
        .with("identifier", id.as_str())
}
