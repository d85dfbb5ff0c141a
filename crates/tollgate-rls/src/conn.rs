//! What one client may hold of the gRPC listener: a slot out of `max_connections`, for at
//! most `handshake` before the HTTP/2 connection preface has arrived, and for at most `idle`
//! with no call in progress afterwards.
//!
//! - [`Slots`] caps the connections served at once; the accept loop ([`incoming`], or the
//!   caller's own for TLS) takes a slot *before* accepting, so further clients wait in the
//!   kernel's accept queue and cost no descriptor.
//! - [`Guarded`] wraps an accepted connection with its slot and its deadlines: a read that would
//!   wait past the deadline fails instead, which makes the server drop the connection (and
//!   free the slot). Before the 24 bytes of the HTTP/2 preface have been read the deadline is
//!   `handshake` after the accept; afterwards it is `idle` after the last call ended (and at
//!   least a second after the last bytes read, so a request arriving just then is not cut),
//!   and there is none while a call is in progress. Pings and their answers are not calls: a
//!   client that only keeps its connection alive loses it after `idle`.
//! - Calls are counted per connection by a layer around the service ([`CallTracking`]),
//!   which finds the connection's [`Activity`] in the request's extensions (tonic puts the
//!   connection's `connect_info` there).

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::Connected;

/// The length of the HTTP/2 connection preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
const PREFACE: u64 = 24;
/// An idle connection is kept at least this long after bytes were last read from it, so a
/// request that arrives as the idle timeout ends becomes a call before it can be cut.
const READ_GRACE: Duration = Duration::from_secs(1);

/// Default connections served at once.
pub(crate) const DEFAULT_MAX_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(1024).expect("non-zero");
/// Default time from the accept to the end of the HTTP/2 preface (TLS handshake included).
pub(crate) const DEFAULT_HANDSHAKE: Duration = Duration::from_secs(20);
/// Default time a connection is kept with no call in progress.
pub(crate) const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// The listener's bounds; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections served at once.
    pub max_connections: NonZeroUsize,
    /// Time from the accept until the HTTP/2 preface has been read.
    pub handshake: Duration,
    /// Time a connection is kept once no call is in progress.
    pub idle: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake: DEFAULT_HANDSHAKE,
            idle: DEFAULT_IDLE,
        }
    }
}

/// The connection slots of one listener: one permit per connection served.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    /// `limits.max_connections` slots.
    pub fn new(limits: &ConnLimits) -> Self {
        Self(Arc::new(Semaphore::new(limits.max_connections.get())))
    }

    /// Waits for a free slot; `None` once the slots are closed (never, in practice).
    pub async fn take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.0).acquire_owned().await.ok()
    }
}

/// Calls in progress on one connection and when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    calls: AtomicUsize,
    /// Milliseconds after `base` at which the connection last became idle.
    idle_since_ms: AtomicU64,
    /// Milliseconds after `base` at which bytes were last read.
    read_ms: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            calls: AtomicUsize::new(0),
            idle_since_ms: 0.into(),
            read_ms: 0.into(),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn mark_idle(&self) {
        self.idle_since_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn mark_read(&self) {
        self.read_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// When the connection may be closed for idleness: `None` while a call is in progress.
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if self.calls.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        let read = Duration::from_millis(self.read_ms.load(Ordering::Relaxed));
        Some((self.base + since + idle).max(self.base + read + READ_GRACE))
    }
}

/// A call in progress; the connection's count goes down (and its idle clock restarts) when
/// it is dropped, whether the call finished or was cancelled.
struct Call(Arc<Activity>);

impl Call {
    fn begin(activity: &Arc<Activity>) -> Self {
        activity.calls.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(activity))
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.0.mark_idle();
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What tonic puts into each request's extensions for a [`Guarded`] connection: its activity,
/// and the peer's address when known.
#[derive(Debug, Clone)]
pub struct ConnActivity(Arc<Activity>, Option<IpAddr>);

impl ConnActivity {
    /// The address of the connection's peer.
    pub fn peer(&self) -> Option<IpAddr> {
        self.1
    }
}

/// One accepted connection with its slot and its deadlines (see the module docs).
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    _slot: OwnedSemaphorePermit,
    activity: Arc<Activity>,
    /// Preface bytes still to come; the handshake deadline holds until they have.
    preface_left: u64,
    handshake_deadline: Instant,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    armed: Instant,
    peer: Option<IpAddr>,
}

impl<IO> Guarded<IO> {
    /// `io` from `peer`, accepted at `accepted_at`, holding `slot`.
    pub fn new(
        io: IO,
        slot: OwnedSemaphorePermit,
        accepted_at: Instant,
        limits: &ConnLimits,
        peer: Option<IpAddr>,
    ) -> Self {
        let handshake_deadline = accepted_at + limits.handshake;
        Self {
            io,
            _slot: slot,
            activity: Activity::new(),
            preface_left: PREFACE,
            handshake_deadline,
            idle: limits.idle,
            timer: Box::pin(tokio::time::sleep_until(handshake_deadline)),
            armed: handshake_deadline,
            peer,
        }
    }

    /// When a read still waiting must fail: `None` while a call is in progress.
    fn deadline(&self) -> Option<Instant> {
        if self.preface_left > 0 {
            return Some(self.handshake_deadline);
        }
        self.activity.idle_deadline(self.idle)
    }
}

impl<IO: Connected> Connected for Guarded<IO> {
    type ConnectInfo = ConnActivity;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnActivity(Arc::clone(&self.activity), self.peer)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = (buf.filled().len() - before) as u64;
                if read > 0 {
                    this.activity.mark_read();
                    if this.preface_left > 0 {
                        this.preface_left = this.preface_left.saturating_sub(read);
                        if this.preface_left == 0 {
                            this.activity.mark_idle();
                        }
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(at) = this.deadline() else { return Poll::Pending };
                if at != this.armed {
                    this.timer.as_mut().reset(at);
                    this.armed = at;
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let why = if this.preface_left > 0 {
                            "no HTTP/2 preface within the handshake timeout"
                        } else {
                            "no call within the idle timeout"
                        };
                        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A stream of accepted connections fed by a task (see `incoming` in this module).
pub struct Accepted<T>(mpsc::Receiver<io::Result<T>>);

impl<T> Accepted<T> {
    /// The stream of what is sent on the other side of `rx`.
    pub fn new(rx: mpsc::Receiver<io::Result<T>>) -> Self {
        Self(rx)
    }
}

impl<T> Stream for Accepted<T> {
    type Item = io::Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// The plain TCP connections of `listener` within `limits`: a slot is taken before each
/// accept. Accept errors (out of descriptors, say) are logged and retried after 50 ms.
pub(crate) fn incoming(listener: TcpListener, limits: ConnLimits) -> Accepted<Guarded<TcpStream>> {
    let (tx, rx) = mpsc::channel(16);
    let slots = Slots::new(&limits);
    tokio::spawn(async move {
        loop {
            let slot = tokio::select! {
                () = tx.closed() => return,
                slot = slots.take() => match slot { Some(s) => s, None => return },
            };
            let tcp = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        tracing::warn!(error = %e, "grpc accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Small answers go out at once, not after the peer's delayed ACK (Nagle).
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "grpc: cannot set TCP_NODELAY");
            }
            let peer = tcp.peer_addr().ok().map(|a| a.ip());
            let conn = Guarded::new(tcp, slot, Instant::now(), &limits, peer);
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
        }
    });
    Accepted::new(rx)
}

/// The layer counting each connection's calls (see the module docs); a request from a
/// connection that is not [`Guarded`] passes untouched.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallTrackingLayer;

impl<S> tower::Layer<S> for CallTrackingLayer {
    type Service = CallTracking<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallTracking { inner }
    }
}

/// See [`CallTrackingLayer`].
#[derive(Debug, Clone)]
pub(crate) struct CallTracking<S> {
    inner: S,
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for CallTracking<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: tonic::codegen::http::Request<B>) -> Self::Future {
        let call = req.extensions().get::<ConnActivity>().map(|a| Call::begin(&a.0));
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answered = answer.await;
            drop(call);
            answered
        })
    }
}
