//! A request body that fails when the client goes silent.
//!
//! Without it, a client that announces a large body and then stops sending holds its
//! connection, its handler and whatever the handler buffered, forever. [`StallTimeout`]
//! errors when no chunk arrives within the configured time and raises a flag the listener
//! reads to answer 408 (whatever error the route made of the failed body).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error a stalled body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: no data for {0:?}")]
pub(crate) struct BodyStalled(pub Duration);

/// Set once a body of this request timed out.
#[derive(Debug, Clone, Default)]
pub(crate) struct StallFlag(Arc<AtomicBool>);

impl StallFlag {
    /// True once the body stalled.
    pub(crate) fn fired(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `Incoming`, failing with [`BodyStalled`] after `stall` without a frame.
#[derive(Debug)]
pub(crate) struct StallTimeout {
    inner: Incoming,
    stall: Duration,
    /// Started at the first poll: a handler that reads the body late is not the client's
    /// fault.
    sleep: Option<Pin<Box<Sleep>>>,
    flag: StallFlag,
}

impl StallTimeout {
    /// Wraps `inner`; `flag` is raised when it stalls.
    pub(crate) fn new(inner: Incoming, stall: Duration, flag: StallFlag) -> Self {
        Self { inner, stall, sleep: None, flag }
    }
}

impl Body for StallTimeout {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                // Invariant: the clock restarts at every frame, so only silence counts.
                if let Some(sleep) = &mut this.sleep {
                    sleep.as_mut().reset(Instant::now() + this.stall);
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let stall = this.stall;
                let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if sleep.as_mut().poll(cx).is_ready() {
                    this.flag.0.store(true, Ordering::Relaxed);
                    return Poll::Ready(Some(Err(Box::new(BodyStalled(stall)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
