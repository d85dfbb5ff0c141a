//! Serving the rate limit service and the standard gRPC health service
//! (`grpc.health.v1.Health`, reporting `envoy.service.ratelimit.v3.RateLimitService` and the
//! server as a whole as SERVING) on a listener.
//!
//! [`serve()`] takes a bound TCP listener; [`serve_incoming`] takes any stream of accepted
//! connections, which is where a TLS acceptor plugs in: wrap the listener's connections in TLS
//! and hand the stream over, nothing else changes.

use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpIncoming};

use crate::RateLimiter;
use crate::rls::rate_limit_service_server::RateLimitServiceServer;

/// Serves `limiter` and the health service on `listener` until `shutdown` completes, then
/// lets calls in flight finish.
pub async fn serve(
    listener: TcpListener,
    limiter: RateLimiter,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    serve_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)), limiter, shutdown).await
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
        .add_service(health)
        .add_service(RateLimitServiceServer::new(limiter))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
