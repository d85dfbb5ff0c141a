//! A connection whose writes fail when the client stops taking its answers.
//!
//! hyper reads no further request while an answer is going out, and has no write timeout of
//! its own. A client that pipelines requests and never reads the answers (or stops reading
//! once the socket buffers are full) would hold its connection slot for good, and enough of
//! them would hold every slot. [`SendTimeout`] fails a write, flush or shutdown that has made
//! no progress for the connection's `body_timeout` (the longest silence allowed mid-transfer,
//! in either direction); hyper then closes the connection and its slot is freed.
//!
//! Like nginx's `send_timeout`, it bounds the silence between two writes that make progress,
//! not the time a whole answer takes. The timer exists only while a write waits: a write that
//! goes through at once costs nothing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, with writes that fail after `stall` without progress.
#[derive(Debug)]
pub(crate) struct SendTimeout<S> {
    inner: S,
    stall: Duration,
    /// Started when a write first waits; dropped when one makes progress.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S> SendTimeout<S> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: S, stall: Duration) -> Self {
        Self { inner, stall, waiting: None }
    }

    /// Passes on what the inner write returned, unless it has waited `stall` in all.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let stall = self.stall;
        let waiting = self.waiting.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        if waiting.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.waiting = None;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client took none of its answer for {} ms", stall.as_millis()),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.bounded(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.bounded(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.bounded(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.bounded(cx, polled)
    }
}
