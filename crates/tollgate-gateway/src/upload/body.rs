//! Reading an upload's body no slower than the minimum rate.
//!
//! Rule: once `grace` has passed since the upload began, its body must have arrived at
//! `min_rate` bytes per second on average since then: after `r` bytes, the next ones must
//! come by `start + grace + r / min_rate`. A body that falls behind is cut ([`Read::TooSlow`]),
//! so a client trickling bytes holds its reservation for at most `grace + length / min_rate`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::time::Instant;

/// The pace an upload body must keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// Bytes per second, on average, once `grace` has passed (at least 1).
    pub min_rate: u64,
    /// How long an upload may take before `min_rate` applies.
    pub grace: Duration,
}

/// How reading a body ended.
#[derive(Debug)]
pub(super) enum Read {
    /// The whole body.
    Done(Bytes),
    /// More than `limit` bytes.
    TooLarge,
    /// Fell behind the pace after `received` bytes and `elapsed`.
    TooSlow {
        /// Bytes received.
        received: u64,
        /// Since the upload began.
        elapsed: Duration,
    },
    /// The body failed (the client went away, or stalled past `body_timeout_ms`).
    Failed(String),
}

/// Reads `body` (at most `limit` bytes) at `pace`.
pub(super) async fn read(body: Body, limit: u64, pace: Pace) -> Read {
    let start = Instant::now();
    let mut body = body;
    let first = usize::try_from(limit.min(64 * 1024)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(first);
    loop {
        let received = bytes.len() as u64;
        let due = start
            + pace.grace
            + Duration::from_secs_f64(received as f64 / pace.min_rate.max(1) as f64);
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Err(_) => return Read::TooSlow { received, elapsed: start.elapsed() },
            Ok(None) => return Read::Done(Bytes::from(bytes)),
            Ok(Some(Err(e))) => return Read::Failed(e.to_string()),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if received + data.len() as u64 > limit {
                return Read::TooLarge;
            }
            bytes.extend_from_slice(&data);
        }
    }
}
