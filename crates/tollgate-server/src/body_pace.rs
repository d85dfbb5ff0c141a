//! A request body that fails when the client goes silent, or trickles.
//!
//! Without it, a client that announces a large body and then stops sending holds its
//! connection, its handler and whatever the handler buffered, forever; and one that sends a
//! byte just before each silence would end holds them as long. [`PacedBody`] errors when no
//! chunk arrives within `stall`, or when it falls behind its [`Pace`]; either raises a flag the
//! listener reads to answer 408 (whatever error the route made of the failed body).
//!
//! Invariant: the next bytes must come by [`Pace::due`] and within `stall` of the last chunk,
//! so a body of `n` bytes holds its connection for at most `grace + n / min_rate`, whoever
//! sends it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

pub(crate) use tollgate_http::pace::Pace;

/// Why a body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// No data for `stall`.
    Stalled,
    /// Slower than `min_rate` on average.
    TooSlow,
}

/// The error a cut body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body was cut: {0:?}")]
pub(crate) struct BodyCut(pub Cut);

/// Set once a body of this request was cut, with why.
#[derive(Debug, Clone, Default)]
pub(crate) struct CutFlag(Arc<AtomicU8>);

impl CutFlag {
    /// Why the body was cut, if it was.
    pub(crate) fn fired(&self) -> Option<Cut> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Cut::Stalled),
            2 => Some(Cut::TooSlow),
            _ => None,
        }
    }

    fn raise(&self, cut: Cut) {
        self.0.store(if cut == Cut::Stalled { 1 } else { 2 }, Ordering::Relaxed);
    }
}

/// `Incoming`, failing with [`BodyCut`] as the module docs say.
#[derive(Debug)]
pub(crate) struct PacedBody {
    inner: Incoming,
    /// The longest silence.
    stall: Duration,
    pace: Pace,
    /// The first poll: a handler that reads the body late is not the client's fault.
    started: Option<Instant>,
    received: u64,
    /// The next deadline and what missing it means.
    sleep: Option<(Pin<Box<Sleep>>, Cut)>,
    flag: CutFlag,
}

impl PacedBody {
    /// Wraps `inner`; `flag` is raised when it is cut.
    pub(crate) fn new(inner: Incoming, stall: Duration, pace: Pace, flag: CutFlag) -> Self {
        Self { inner, stall, pace, started: None, received: 0, sleep: None, flag }
    }

    /// The earlier of the two deadlines, counted from `now` and the body's start.
    fn deadline(&self, now: Instant) -> (Instant, Cut) {
        // A stall too long for the clock (only a caller of the library can set one) waits a
        // year instead.
        let year = Duration::from_secs(365 * 86_400);
        let silence = now.checked_add(self.stall).unwrap_or(now + year);
        match self.pace.due(self.started.unwrap_or(now), self.received) {
            Some(paced) if paced < silence => (paced, Cut::TooSlow),
            _ => (silence, Cut::Stalled),
        }
    }
}

impl Body for PacedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
                    this.received += data.map_or(0, |d| d.len() as u64);
                }
                let now = Instant::now();
                this.started.get_or_insert(now);
                let (at, cut) = this.deadline(now);
                if let Some((sleep, why)) = &mut this.sleep {
                    sleep.as_mut().reset(at);
                    *why = cut;
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let now = Instant::now();
                this.started.get_or_insert(now);
                if this.sleep.is_none() {
                    let (at, cut) = this.deadline(now);
                    this.sleep = Some((Box::pin(tokio::time::sleep_until(at)), cut));
                }
                let Some((sleep, cut)) = &mut this.sleep else { return Poll::Pending };
                if sleep.as_mut().poll(cx).is_ready() {
                    this.flag.raise(*cut);
                    return Poll::Ready(Some(Err(Box::new(BodyCut(*cut)))));
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
