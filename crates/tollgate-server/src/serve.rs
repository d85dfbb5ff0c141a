//! The HTTP/1.1 listener: accepts connections, enforces the 8 KiB header limit, turns bare
//! framework errors into problem+json, bounds slow and idle clients, and shuts down
//! gracefully.
//!
//! Bounds ([`ConnectionLimits`]): at most `max_connections` connections are served at once
//! (further clients wait in the accept queue); a request head must arrive within
//! `header_timeout` (also the keep-alive idle time: hyper starts that clock when it waits for
//! the next head), else the connection is closed; a body silent for `body_timeout`, or slower
//! than `body_min_rate` bytes per second on average once `body_timeout` has passed, gets 408
//! and the connection closed ([`crate::body_pace`]), and an answer the client takes nothing of for `body_timeout`
//! closes the connection ([`crate::send_timeout`]). Together they guarantee that a slot held
//! by a client that sends nothing is freed within `header_timeout`, and one held by a client
//! that reads nothing within `body_timeout` of the buffers filling, so a flood of such
//! connections delays `/healthz` by at most that long.
//!
//! This sits below the router on purpose, so it covers every route, including those merged
//! in by the gateway: a request whose header fields exceed [`MAX_HEADER_BYTES`] gets a 431
//! problem before any handler runs, and any 4xx/5xx answered with a plain-text or empty body
//! (axum's 404, 405, 413 and extractor rejections) is rewritten as `application/problem+json`
//! with the same status and headers (e.g. `Allow` on a 405). A request target longer than
//! [`MAX_URI_BYTES`] gets a 414 problem. Requests the parser itself refuses get
//! problem+json through [`crate::parse_error::ProblemIo`].
//!
//! Over TLS ([`serve_tls`]) all of this holds unchanged: the handshake runs in the
//! connection's own task, after its slot is taken, and must finish within `header_timeout`
//! (so a client that opens TCP and sends nothing, or stalls mid-handshake, is freed like one
//! that never sends a head); the limits and rewrites then apply to the decrypted stream. The
//! verified client certificate's subject, under mTLS, is put on every request of the
//! connection as a [`PeerCertificate`] extension.
//!
//! Every request carries the client's address as axum's [`ConnectInfo<SocketAddr>`]
//! extension (what per-address limits, such as failed credentials, count by): the TCP peer,
//! or behind a trusted proxy the hop it forwarded for ([`tollgate_http::proxy`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{CONNECTION, CONTENT_TYPE, HeaderValue};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use axum::response::IntoResponse;
use hyper::body::{Body as _, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::app::App;
use crate::body_pace::{Cut, CutFlag, Pace, PacedBody};
use crate::limits::ConnectionLimits;
use crate::parse_error::ProblemIo;
use crate::send_timeout::SendTimeout;
use tollgate_http::problem::{PROBLEM_JSON, Problem};
use tollgate_http::proxy::TrustedProxies;
use tollgate_http::tls::{PeerCertificate, TlsAcceptor};

/// The most bytes of header fields a request may carry (names, values and `": "` + CRLF).
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The longest request target (path and query) served; longer ones get 414.
pub(crate) const MAX_URI_BYTES: usize = 8 * 1024;

/// The HTTP parser's read buffer. Headers between [`MAX_HEADER_BYTES`] and this size get a
/// 431 problem+json; beyond it, or beyond 100 header fields, the parser itself answers a bare
/// 431 (no body) before any of our code runs.
const READ_BUFFER: usize = 64 * 1024;

/// How long in-flight requests may take to finish after shutdown is requested.
const GRACE: Duration = Duration::from_secs(10);

/// The largest error body we read back to put into a problem's `detail`.
const MAX_DETAIL_BYTES: usize = 4 * 1024;

/// Serves `app` on `listener` with the default [`ConnectionLimits`]; see [`serve_with`].
pub async fn serve<F>(
    listener: TcpListener,
    app: impl Into<App>,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    serve_with(listener, app, shutdown, ConnectionLimits::default()).await
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting, lets in-flight requests finish (up to 10 s) and returns.
pub async fn serve_with<F>(
    listener: TcpListener,
    app: impl Into<App>,
    shutdown: F,
    limits: ConnectionLimits,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    serve_tls(listener, app, shutdown, limits, None).await
}

/// Like [`serve_with`], over TLS with `tls`'s current certificate when it is `Some`.
pub async fn serve_tls<F>(
    listener: TcpListener,
    app: impl Into<App>,
    shutdown: F,
    limits: ConnectionLimits,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let app = app.into();
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .max_buf_size(READ_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // Invariant: one permit per live connection; it is released when the connection ends.
    let slots = Arc::new(Semaphore::new(limits.max_connections.get()));
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_closed) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        if slots.available_permits() == 0 {
            tracing::debug!(max = limits.max_connections, "connection cap reached");
        }
        let app = app.clone();
        let body_timeout = limits.body_timeout;
        let pace = Pace { min_rate: limits.body_min_rate.get(), grace: limits.body_rate_grace };
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let header_timeout = limits.header_timeout;
        let proxies = limits.trusted_proxies.clone();
        tokio::spawn(async move {
            // Invariant: the permit lives as long as this task, handshake included.
            let _permit = permit;
            let result = match tls {
                None => {
                    let service = hyper::service::service_fn(move |req| {
                        handle(
                            app.clone(),
                            req,
                            (body_timeout, pace),
                            (addr, proxies.clone()),
                            None,
                        )
                    });
                    let io = TokioIo::new(ProblemIo::new(SendTimeout::new(stream, body_timeout)));
                    watcher.watch(builder.serve_connection(io, service)).await
                }
                Some(tls) => {
                    let stream = match tokio::time::timeout(header_timeout, tls.accept(stream))
                        .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake not finished within the header timeout");
                            return;
                        }
                    };
                    let peer = TlsAcceptor::peer(&stream);
                    let service = hyper::service::service_fn(move |req| {
                        handle(
                            app.clone(),
                            req,
                            (body_timeout, pace),
                            (addr, proxies.clone()),
                            peer.clone(),
                        )
                    });
                    let io = TokioIo::new(ProblemIo::new(SendTimeout::new(stream, body_timeout)));
                    watcher.watch(builder.serve_connection(io, service)).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(GRACE) => tracing::warn!("in-flight requests did not finish in time"),
    }
    Ok(())
}

async fn handle(
    app: App,
    mut req: Request<Incoming>,
    (stall, pace): (Duration, Pace),
    (addr, proxies): (SocketAddr, TrustedProxies),
    peer: Option<PeerCertificate>,
) -> Result<Response<Body>, Infallible> {
    let client = if proxies.is_empty() {
        addr
    } else {
        SocketAddr::new(proxies.client(addr.ip(), req.headers()), addr.port())
    };
    req.extensions_mut().insert(ConnectInfo(client));
    if let Some(peer) = peer {
        req.extensions_mut().insert(peer);
    }
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Ok(Problem::new(StatusCode::URI_TOO_LONG, "uri-too-long", "URI Too Long")
            .detail(format!(
                "the request target is {uri_len} bytes long; the limit is {MAX_URI_BYTES}"
            ))
            .with("limit", MAX_URI_BYTES)
            .with("received", uri_len)
            .into_response());
    }
    let size = header_bytes(req.headers());
    if size > MAX_HEADER_BYTES {
        return Ok(Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request Header Fields Too Large",
        )
        .detail(format!(
            "the request carries {size} bytes of headers; the limit is {MAX_HEADER_BYTES}"
        ))
        .with("limit", MAX_HEADER_BYTES)
        .with("received", size)
        .into_response());
    }
    let method = req.method().clone();
    let uri = req.uri().clone();
    // A request without a body (every `GET /v1/quota`) cannot stall: it skips the watch.
    let paced = (!req.body().is_end_stream()).then(CutFlag::default);
    let req = match &paced {
        Some(flag) => {
            let flag = flag.clone();
            req.map(|b| Body::new(PacedBody::new(b, stall, pace, flag)))
        }
        None => req.map(Body::new),
    };
    let response = app.answer(req).await;
    if let Some(cut) = paced.as_ref().and_then(CutFlag::fired) {
        // Whatever the route made of its failed body, the cause was the client's pace.
        let (kind, detail) = match cut {
            Cut::Stalled => (
                "body-timeout",
                format!(
                    "no request body data arrived for {} ms; the connection is closed",
                    stall.as_millis()
                ),
            ),
            Cut::TooSlow => (
                "body-too-slow",
                format!(
                    "the request body arrived slower than {} bytes per second on average after \
                     its first {} ms; the connection is closed",
                    pace.min_rate,
                    pace.grace.as_millis()
                ),
            ),
        };
        return Ok(Problem::new(StatusCode::REQUEST_TIMEOUT, kind, "Request Timeout")
            .detail(detail)
            .with("path", uri.path())
            .header(CONNECTION, HeaderValue::from_static("close"))
            .into_response());
    }
    Ok(as_problem(response, &method, &uri).await)
}

/// The size of the header fields as sent on the wire.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum()
}

/// Rewrites a bare (plain-text or empty) error response as problem+json.
async fn as_problem(response: Response<Body>, method: &Method, uri: &Uri) -> Response<Body> {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let bare = match response.headers().get(CONTENT_TYPE) {
        None => true,
        Some(ct) => ct.as_bytes().starts_with(b"text/plain"),
    };
    if !bare {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let path = uri.path();
    let mut problem = match status {
        StatusCode::NOT_FOUND => Problem::not_found(path),
        StatusCode::METHOD_NOT_ALLOWED => Problem::method_not_allowed(method.as_str(), path),
        StatusCode::PAYLOAD_TOO_LARGE => {
            Problem::new(status, "body-too-large", "Content Too Large").with("path", path)
        }
        _ => Problem::new(status, "http-error", status.canonical_reason().unwrap_or("Error"))
            .with("path", path),
    };
    if !text.is_empty() {
        problem = problem.detail(text);
    }
    let mut rewritten = problem.into_response();
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    debug_assert_eq!(
        rewritten.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(PROBLEM_JSON.as_bytes())
    );
    rewritten
}
