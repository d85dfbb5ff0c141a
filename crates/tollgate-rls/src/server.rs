//! Serving the rate limit service and the standard gRPC health service
//! (`grpc.health.v1.Health`, reporting `envoy.service.ratelimit.v3.RateLimitService` and the
//! server as a whole as SERVING) on a listener.
//!
//! [`serve()`] takes a bound TCP listener and its [`ConnLimits`]; [`serve_incoming`] takes any
//! stream of accepted connections, which is where a TLS acceptor plugs in: wrap the listener's
//! connections in TLS (then in [`crate::Guarded`], for the same limits) and hand the stream
//! over, nothing else changes.
//!
//! Each connection is served by hyper's HTTP/2 server in a task of its own, and its calls run
//! inside that task (see [`crate::calls`]): a check is answered without a task spawned per call.
//!
//! Bounds, so that no client holds the server: connections are capped, must send the HTTP/2
//! preface within the handshake timeout and are closed once idle (see [`crate::conn`]); a
//! call is cut after [`CALL_TIMEOUT`] or the client's shorter `grpc-timeout` (see
//! [`crate::deadline`]), a connection carries at most [`MAX_STREAMS`] calls at once, peers are
//! pinged every [`KEEPALIVE`] and dropped when they do not answer, and a message is at most
//! 4 MiB (tonic's default). On shutdown the listener closes at once and the calls in flight
//! finish.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tonic::codegen::http;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;
use tower::ServiceExt;

use crate::RateLimiter;
use crate::calls::{Calls, Driven};
use crate::conn::{CallTrackingLayer, ConnLimits};
use crate::deadline::DeadlineLayer;
use crate::rls::rate_limit_service_server::RateLimitServiceServer;

/// The longest a call may take before it is answered `CANCELLED`.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request taken, `ShouldRateLimit` or a health check (tonic's default is 4 MiB):
/// Envoy's are well under a kilobyte, and a connection may carry [`MAX_STREAMS`] at once.
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024;
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
) {
    serve_incoming(crate::conn::incoming(listener, limits), limiter, shutdown).await
}

/// Like [`serve()`], on any stream of accepted connections (e.g. TLS ones).
pub async fn serve_incoming<I, IO, IE>(
    incoming: I,
    limiter: RateLimiter,
    shutdown: impl Future<Output = ()> + Send,
) where
    I: Stream<Item = Result<IO, IE>> + Send,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: std::fmt::Display,
{
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RateLimitServiceServer<RateLimiter>>().await;
    let health = health.max_decoding_message_size(MAX_REQUEST_BYTES);
    let routes = tonic::service::Routes::new(health)
        .add_service(
            RateLimitServiceServer::new(limiter).max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .prepare();
    let graceful = GracefulShutdown::new();
    let mut incoming = Box::pin(incoming);
    let mut shutdown = pin!(shutdown);
    loop {
        let io = tokio::select! {
            () = &mut shutdown => break,
            io = incoming.next() => match io {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "grpc connection not accepted");
                    continue;
                }
                None => break,
            },
        };
        let info = io.connect_info();
        let svc = tower::ServiceBuilder::new()
            .layer(tonic::service::RecoverErrorLayer::new())
            .layer(DeadlineLayer { bound: CALL_TIMEOUT })
            .layer(CallTrackingLayer)
            .service(routes.clone())
            .map_request(move |req: http::Request<Incoming>| {
                let mut req = req.map(tonic::body::Body::new);
                req.extensions_mut().insert(info.clone());
                req
            });
        let calls = Calls::default();
        let mut http2 = hyper::server::conn::http2::Builder::new(calls.clone());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_STREAMS)
            .keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE);
        let conn = http2.serve_connection(TokioIo::new(io), TowerToHyperService::new(svc));
        tokio::spawn(Driven::new(graceful.watch(conn), calls));
    }
    // Dropping the stream closes the listener: new clients are refused, not left waiting.
    drop(incoming);
    graceful.shutdown().await;
}
