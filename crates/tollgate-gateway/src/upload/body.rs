//! Reading an upload's body no slower than the upload's [`Pace`]: a body that falls behind
//! is cut ([`Read::TooSlow`]), so a client trickling bytes holds its reservation for at most
//! `grace + length / min_rate`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::time::Instant;
pub(crate) use tollgate_http::pace::Pace;

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
        let next = match pace.due(start, received) {
            Some(due) => tokio::time::timeout_at(due, body.frame()).await,
            None => Ok(body.frame().await),
        };
        let frame = match next {
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
