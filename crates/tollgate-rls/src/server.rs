//! Serving the rate limit service and the standard gRPC health service
//! (`grpc.health.v1.Health`, reporting `envoy.service.ratelimit.v3.RateLimitService` and the
//! server as a whole as SERVING) on a listener.
//!
//! [`serve()`] takes a bound TCP listener and its [`ConnLimits`]; [`serve_incoming`] takes any
//! stream of accepted connections, which is where a TLS acceptor plugs in: wrap the listener's
//! connections in TLS (then in [`crate::Guarded`], for the same limits) and hand the stream
//! over, nothing else changes.
//!
//! Bounds, so that no client holds the server: connections are capped, must send the HTTP/2
//! preface within the handshake timeout and are closed once idle (see [`crate::conn`]); a
//! call is cut after [`CALL_TIMEOUT`], a connection carries at most [`MAX_STREAMS`] calls at
//! once, peers are pinged every [`KEEPALIVE`] and dropped when they do not answer, and a
//! message is at most 4 MiB (tonic's default).

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::Connected;

use crate::RateLimiter;
use crate::conn::{CallTrackingLayer, ConnLimits};
use crate::rls::rate_limit_service_server::RateLimitServiceServer;

/// The longest a call may take before it is answered `CANCELLED`.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent calls per connection.
pub(crate) const MAX_STREAMS: u32 = 1024;
/// HTTP/2 ping period on a connection (dropped when a ping is not answered within it).
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(30);

/// Serves `limiter` and the health service on `listener` within `limits` until `shutdown`
/// completes, then lets calls in flight finish.
pub async fn serve(
    listener: TcpListener,
    limits: ConnLimits,
    limiter: RateLimiter,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    serve_incoming(crate::conn::incoming(listener, limits), limiter, shutdown).await
}

/// Like [`serve()`], on any stream of accepted connections (e.g. TLS ones).
pub async fn serve_incoming<I, IO, IE>(
    incoming: I,
    limiter: RateLimiter,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error>
where
    I: Stream<Item = Result<IO, IE>> + Send,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RateLimitServiceServer<RateLimiter>>().await;
    tonic::transport::Server::builder()
        .layer(CallTrackingLayer)
        .timeout(CALL_TIMEOUT)
        .max_concurrent_streams(Some(MAX_STREAMS))
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .add_service(health)
        .add_service(RateLimitServiceServer::new(limiter))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
