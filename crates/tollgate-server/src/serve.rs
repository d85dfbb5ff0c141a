//! The HTTP/1.1 listener: accepts connections, enforces the 8 KiB header limit, turns bare
//! framework errors into problem+json, and shuts down gracefully.
//!
//! This sits below the router on purpose, so it covers every route, including those merged
//! in by the gateway: a request whose header fields exceed [`MAX_HEADER_BYTES`] gets a 431
//! problem before any handler runs, and any 4xx/5xx answered with a plain-text or empty body
//! (axum's 404, 405, 413 and extractor rejections) is rewritten as `application/problem+json`
//! with the same status and headers (e.g. `Allow` on a 405).

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::problem::{PROBLEM_JSON, Problem};

/// The most bytes of header fields a request may carry (names, values and `": "` + CRLF).
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The HTTP parser's read buffer. Headers between [`MAX_HEADER_BYTES`] and this size get a
/// 431 problem+json; beyond it, or beyond 100 header fields, the parser itself answers a bare
/// 431 (no body) before any of our code runs.
const READ_BUFFER: usize = 64 * 1024;

/// How long in-flight requests may take to finish after shutdown is requested.
const GRACE: Duration = Duration::from_secs(10);

/// The largest error body we read back to put into a problem's `detail`.
const MAX_DETAIL_BYTES: usize = 4 * 1024;

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, lets
/// in-flight requests finish (up to 10 s) and returns.
pub async fn serve<F>(listener: TcpListener, app: Router, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.max_buf_size(READ_BUFFER);
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
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
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| handle(app.clone(), req));
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
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

async fn handle(app: Router, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
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
    let response = app.oneshot(req.map(Body::new)).await?;
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
