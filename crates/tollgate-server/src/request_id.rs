//! Idempotent quota checks: `quota-request-id` on `GET /v1/quota`.
//!
//! The same request id for the same metering id, while its record is kept, gets the first
//! answer again (same status, quota headers and body, plus `quota-request-replayed: true`) and
//! counts nothing more. The record is a key of the store's [`Seen`] keys,
//! `quota-request <metering id> <request id>`, so every instance on one store shares it:
//!
//! 1. the first check claims the key for a fresh random owner (`p:…`, *pending*, for
//!    [`PENDING_TTL`]), decides, then hands the key over to an owner that *is* the answer
//!    (`r:` and the JSON [`Record`]), atomically ([`Seen::hand_over`]);
//! 2. a duplicate reads the holder ([`Seen::holders`]): a record is replayed; a pending owner
//!    is polled every [`POLL_EVERY`] for up to [`WAIT_AT_MOST`], then answered 409
//!    `request-in-progress` with `Retry-After: 1`. A pending key whose decider died expires
//!    with its own ttl, and the next check decides afresh;
//! 3. a refunded record (see `refund`) is taken over by the next check of that id, which
//!    decides afresh: the retry of a message the backend never took is counted again.
//!
//! Expiry: an admitted answer is kept until its window ends (rolling windows: one window
//! length), a refused one until its `Retry-After` (a retry after that is decided afresh), both
//! at most [`MAX_KEEP`]. Memory is bounded by the expiry: Redis expires the keys, the embedded
//! store drops expired rows once a minute, the memory store when its key table doubles.
//!
//! Only store decisions are recorded: an answer made without the store (a store failure under
//! `store_unavailable`, a `Tollgate-Degraded: local` decision) releases the claim, so the
//! retry is decided again. When the store cannot keep the record at all, the check is decided
//! as if no request id had been sent (at-least-once, as without the header).

use std::time::Duration;

use axum::body::Body;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tollgate_policy::{DecisionOutcome, Verdict};
use tollgate_quota::{Counted, MeteringId, QuotaSpec, Seen, TimeUnit, WindowKind};

use crate::headers::QuotaRequest;
use crate::state::AppState;
use tollgate_http::problem::Problem;

/// `quota-request-replayed: true` on an answer given again from its record.
pub(crate) static REPLAYED: HeaderName = HeaderName::from_static("quota-request-replayed");

/// How long a pending claim lives: a decider that died frees the id after this.
pub(crate) const PENDING_TTL: Duration = Duration::from_secs(10);
/// How often a duplicate looks again at a pending record.
const POLL_EVERY: Duration = Duration::from_millis(10);
/// How long a duplicate waits for the first check's answer before a 409.
const WAIT_AT_MOST: Duration = Duration::from_secs(2);
/// The longest a record is kept, whatever its window.
pub(crate) const MAX_KEEP: Duration = Duration::from_secs(24 * 3600);
/// The largest answer body recorded (answers are a few hundred bytes).
const MAX_BODY: usize = 16 * 1024;

const PENDING: &str = "p:";
const RECORD: &str = "r:";

/// The key of one request id's record.
pub(crate) fn key(id: &MeteringId, request_id: &str) -> String {
    // Both parts are visible ASCII: the spaces keep them apart.
    format!("quota-request {} {request_id}", id.as_str())
}

/// Where a request id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stage {
    /// Answered without counting (a refusal, or a shadow-mode would-reject).
    Answered,
    /// Admitted: its units may be refunded.
    Admitted,
    /// Admitted, then refunded.
    Refunded,
}

/// A recorded answer, kept as the key's owner (see the module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) stage: Stage,
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    /// When the record expires (Unix ms): a hand-over keeps it.
    pub(crate) until_ms: i64,
    /// What a refund needs (admitted and refunded records).
    pub(crate) units: Option<Units>,
}

/// The units an admission counted, and on which counter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Units {
    pub(crate) weight: u64,
    limit: u64,
    interval: u32,
    unit: String,
    window: String,
    /// The calendar anchor in Unix seconds.
    start: Option<i64>,
    pub(crate) counted: Counted,
}

impl Units {
    /// The spec the units were counted against; `None` for a record this server never wrote.
    pub(crate) fn spec(&self) -> Option<QuotaSpec> {
        Some(QuotaSpec {
            limit: self.limit,
            interval: self.interval,
            unit: self.unit.parse::<TimeUnit>().ok()?,
            window: self.window.parse::<WindowKind>().ok()?,
            start: match self.start {
                Some(s) => Some(jiff::Timestamp::from_second(s).ok()?),
                None => None,
            },
        })
    }
}

impl Record {
    /// The owner string that is this record.
    pub(crate) fn owner(&self) -> String {
        format!("{RECORD}{}", serde_json::to_string(self).unwrap_or_default())
    }

    /// This record in another stage.
    pub(crate) fn at(&self, stage: Stage) -> Self {
        Self { stage, ..self.clone() }
    }

    /// Time left before the record expires (at least 1 ms).
    pub(crate) fn ttl(&self) -> Duration {
        let left = self.until_ms.saturating_sub(jiff::Timestamp::now().as_millisecond());
        Duration::from_millis(u64::try_from(left).unwrap_or(0).max(1))
    }

    /// The recorded answer, marked as replayed.
    fn replay(&self) -> Response {
        let mut r = Response::new(Body::from(self.body.clone()));
        *r.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        for (n, v) in &self.headers {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
                r.headers_mut().append(n, v);
            }
        }
        r.headers_mut().insert(REPLAYED.clone(), HeaderValue::from_static("true"));
        r
    }
}

/// What holds a request id's key.
pub(crate) enum Holder {
    /// A check is deciding it.
    Pending,
    /// Its answer.
    Record(Record),
}

impl Holder {
    /// Reads an owner string; `None` for one this module never writes.
    pub(crate) fn of(owner: &str) -> Option<Self> {
        if owner.starts_with(PENDING) {
            return Some(Self::Pending);
        }
        let json = owner.strip_prefix(RECORD)?;
        serde_json::from_str(json).ok().map(Self::Record)
    }
}

/// A 409 for a request id whose first check has not answered yet.
pub(crate) fn in_progress(id: &MeteringId, request_id: &str) -> Problem {
    Problem::new(StatusCode::CONFLICT, "request-in-progress", "Request in progress")
        .detail(format!(
            "quota-request-id {request_id} of {id} is being decided by another request; ask \
             again in a second"
        ))
        .with("identifier", id.as_str())
        .with("request_id", request_id)
        .header(RETRY_AFTER, HeaderValue::from_static("1"))
}

/// What a first check answered: the response, and the verdict when the store decided.
pub(crate) type Decided = Result<(Response, Option<Verdict>), (DecisionOutcome, Problem)>;

/// Answers `req` once per request id (see the module docs); `decide` makes the first answer.
pub(crate) async fn once<F, Fut>(
    state: &AppState,
    req: &QuotaRequest,
    request_id: &str,
    decide: F,
) -> Result<Response, (DecisionOutcome, Problem)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Decided>,
{
    let store = state.store();
    let key = key(&req.id, request_id);
    let pending = format!("{PENDING}{:032x}", rand::random::<u128>());
    let deadline = tokio::time::Instant::now() + WAIT_AT_MOST;
    loop {
        let claimed = match store.claim(&[&key], &pending, PENDING_TTL).await {
            Ok(c) => c.first().copied().unwrap_or(false),
            Err(error) => {
                tracing::warn!(identifier = %req.id, request_id, %error, "the request id cannot be recorded: deciding without it");
                return decide().await.map(|(r, _)| r);
            }
        };
        if claimed {
            return record(state, &req.id, &key, &pending, decide().await).await;
        }
        let holder = match store.holders(&[&key], &pending).await {
            Ok(h) => h.into_iter().next().flatten(),
            Err(error) => {
                tracing::warn!(identifier = %req.id, request_id, %error, "the request id cannot be read: deciding without it");
                return decide().await.map(|(r, _)| r);
            }
        };
        let freed = holder.is_none();
        match holder.as_deref().and_then(Holder::of) {
            Some(Holder::Record(r)) if r.stage == Stage::Refunded => {
                // The retry of a refunded message: counted afresh, by whoever takes it over.
                let from = holder.as_deref().unwrap_or_default();
                if store.hand_over(&key, from, &pending, PENDING_TTL).await.unwrap_or(false) {
                    return record(state, &req.id, &key, &pending, decide().await).await;
                }
            }
            Some(Holder::Record(r)) => {
                crate::metrics::replayed();
                return Ok(r.replay());
            }
            // Pending, freed meanwhile, or unreadable (which expires like a pending claim).
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            // Not a decision: the caller asks again.
            return Err((DecisionOutcome::BadRequest, in_progress(&req.id, request_id)));
        }
        if !freed {
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// Keeps the first answer as the key's owner (or frees the key when it is not a store's
/// decision), and returns it.
async fn record(
    state: &AppState,
    id: &MeteringId,
    key: &str,
    pending: &str,
    decided: Decided,
) -> Result<Response, (DecisionOutcome, Problem)> {
    let store = state.store();
    let (response, verdict) = match decided {
        Ok((response, Some(v))) if v.decision.as_ref().is_some_and(|d| !d.degraded) => {
            (response, v)
        }
        other => {
            if let Err(error) = store.release(&[key], pending).await {
                tracing::warn!(%error, "a pending request id could not be freed: it expires in {PENDING_TTL:?}");
            }
            return other.map(|(r, _)| r);
        }
    };
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.unwrap_or_default();
    let Some(d) = &verdict.decision else { return Ok(Response::from_parts(parts, bytes.into())) };
    let spec = &verdict.resolved.spec;
    let window_left = match d.window_us {
        Some((_, end)) => {
            Duration::from_micros(u64::try_from(end.saturating_sub(d.at_us)).unwrap_or(0))
        }
        None => Duration::from_secs(tollgate_quota::rate_headers::window_seconds(d, spec)),
    };
    let keep = match d.retry_after() {
        Some(retry) if !d.allowed() => window_left.min(retry),
        _ => window_left,
    }
    .clamp(Duration::from_millis(1), MAX_KEEP);
    let admitted = d.allowed();
    let record = Record {
        stage: if admitted { Stage::Admitted } else { Stage::Answered },
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
        until_ms: jiff::Timestamp::now()
            .as_millisecond()
            .saturating_add(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX)),
        units: admitted.then(|| Units {
            weight: d.weight,
            limit: spec.limit,
            interval: spec.interval,
            unit: spec.unit.as_str().to_owned(),
            window: spec.window.as_str().to_owned(),
            start: spec.start.map(|s| s.as_second()),
            counted: d.counted(),
        }),
    };
    match store.hand_over(key, pending, &record.owner(), keep).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            identifier = %id,
            "a request id's pending claim expired before its answer was kept"
        ),
        Err(error) => {
            tracing::warn!(identifier = %id, %error, "a request id's answer could not be kept");
            let _ = store.release(&[key], pending).await;
        }
    }
    Ok(Response::from_parts(parts, bytes.into()))
}
