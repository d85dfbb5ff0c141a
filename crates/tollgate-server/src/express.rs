//! The express lane: plain `GET /v1/quota` requests on a cleartext connection, read and
//! answered without hyper's connection machinery, by the same handler under the same layers.
//!
//! hyper's dispatcher, buffers and encoder cost more per answer than the check itself (see
//! BENCHMARKS.md, "The express lane"). The lane reads each request head with `httparse`, the
//! parser hyper itself uses, builds the `Request` hyper would build, answers it through
//! [`answer_bodiless`] (the admission checks, [`crate::App::answer`] with every layer, the
//! problem+json rewrite) and writes the answer's bytes itself.
//!
//! It takes only heads it is sure of: complete, `GET`, HTTP/1.1, the target `/v1/quota` or
//! `/v1/quota?…`, every field a valid name and value, and none of the fields that announce a
//! body or change the connection ([`HANDED_OVER`]; `connection: keep-alive` is taken). At the first other head, or when more than
//! [`MAX_HEAD`] bytes do not yet make a head, the connection goes to hyper for the rest of its
//! life with the bytes read so far put back in front of the socket: hyper stays the judge of
//! every unusual request, and its refusals, limits and timeouts apply unchanged.
//!
//! # Invariants
//!
//! * **One answer per head, in order.** Pipelined heads are answered in the order they came,
//!   and the answers to the heads of one read go out in one write.
//! * **The head timeout holds.** A head must be complete within `header_timeout` of the lane
//!   starting to wait for it, the idle time between requests included, as under hyper; else
//!   the connection is closed.
//! * **Bounded memory.** Unanswered bytes stay below [`MAX_HEAD`] plus one read; an answer's
//!   body is read up to [`MAX_ANSWER_BYTES`] (a check's answers are a few hundred bytes).
//! * **Writes are bounded too.** Answers must be taken by the client within `header_timeout`,
//!   else the connection is closed.
//! * **Shutdown.** Once the server stops, the lane finishes the answers in hand and closes the
//!   connection instead of waiting for another head.

use std::cell::RefCell;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::header::{
    CONNECTION, CONTENT_LENGTH, DATE, EXPECT, TE, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, Version};
use bytes::{Buf, BytesMut};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::serve::{Conn, MAX_HEADER_BYTES, MAX_URI_BYTES, answer_bodiless};

/// The target the lane serves (with or without a query).
const QUOTA_PATH: &str = "/v1/quota";

/// Fields that announce a body or change the connection: a head with any of them goes to
/// hyper (but for `connection: keep-alive`).
const HANDED_OVER: [HeaderName; 6] =
    [CONTENT_LENGTH, TRANSFER_ENCODING, CONNECTION, UPGRADE, EXPECT, TE];

/// The most bytes that may wait to become a head before hyper gets the connection (and
/// answers 414 or 431 as it sees fit).
pub(crate) const MAX_HEAD: usize = MAX_URI_BYTES + MAX_HEADER_BYTES + 1024;

/// The most header fields in a head the lane takes; hyper takes up to 100.
const MAX_FIELDS: usize = 64;

/// The largest answer body the lane writes.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// How one connection ended, or why it failed.
type Ended = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Serves `stream` on the express lane until it closes, the server stops, or a head the lane
/// does not take hands the connection to hyper (see the module docs).
pub(crate) async fn serve(
    mut stream: TcpStream,
    conn: Conn,
    watcher: Watcher,
    mut stop: watch::Receiver<bool>,
    header_timeout: Duration,
) -> Ended {
    let mut unread = BytesMut::with_capacity(4096);
    let mut out = Vec::with_capacity(1024);
    let mut waiting_since = Instant::now();
    loop {
        let mut answered = false;
        loop {
            match next_head(&unread) {
                Head::Express(req, len) => {
                    unread.advance(len);
                    answered = true;
                    let response = answer_bodiless(conn.app.clone(), *req, conn.client.clone());
                    if write_answer(response.await, &mut out).await == After::Close {
                        send(&mut stream, &out, header_timeout).await?;
                        stream.shutdown().await?;
                        return Ok(());
                    }
                }
                Head::Partial => break,
                Head::Other => {
                    send(&mut stream, &out, header_timeout).await?;
                    let io = Rewind { unread, inner: stream };
                    return Ok(conn.hyper(io, watcher).await?);
                }
            }
        }
        if !out.is_empty() {
            send(&mut stream, &out, header_timeout).await?;
            out.clear();
        }
        if unread.len() > MAX_HEAD {
            return Ok(conn.hyper(Rewind { unread, inner: stream }, watcher).await?);
        }
        if answered {
            waiting_since = Instant::now();
        }
        if *stop.borrow() {
            return Ok(());
        }
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            read = tokio::time::timeout_at(waiting_since + header_timeout, stream.read_buf(&mut unread)) => match read {
                Err(_elapsed) => {
                    tracing::debug!("request head not complete within the header timeout");
                    return Ok(());
                }
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.into()),
            },
        }
    }
}

/// Writes `out` whole, within `bound`: a client that stops reading its answers is closed,
/// where it would otherwise hold its connection slot for good.
async fn send(stream: &mut TcpStream, out: &[u8], bound: Duration) -> io::Result<()> {
    match tokio::time::timeout(bound, stream.write_all(out)).await {
        Ok(written) => written,
        Err(_) => {
            Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not read its answers"))
        }
    }
}

/// What the start of the unread bytes holds.
enum Head {
    /// A head the lane answers, as a request, and its length in bytes.
    Express(Box<Request<Body>>, usize),
    /// Not yet a complete head.
    Partial,
    /// A head for hyper (or bytes hyper will refuse).
    Other,
}

fn next_head(unread: &[u8]) -> Head {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut head = httparse::Request::new(&mut fields);
    let len = match head.parse(unread) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Other,
    };
    let quota = head.path.is_some_and(|target| {
        target.strip_prefix(QUOTA_PATH).is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
    });
    if head.method != Some("GET") || head.version != Some(1) || !quota {
        return Head::Other;
    }
    let Some(Ok(uri)) = head.path.map(Uri::try_from) else { return Head::Other };
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for field in head.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(field.name.as_bytes()) else { return Head::Other };
        // `connection: keep-alive` is what HTTP/1.1 does anyway, and many clients send it.
        let keep_alive = name == CONNECTION && field.value.eq_ignore_ascii_case(b"keep-alive");
        if HANDED_OVER.contains(&name) && !keep_alive {
            return Head::Other;
        }
        let Ok(value) = HeaderValue::from_bytes(field.value) else { return Head::Other };
        headers.append(name, value);
    }
    let mut req = Request::new(Body::empty());
    *req.method_mut() = Method::GET;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    Head::Express(Box::new(req), len)
}

/// What the connection does after an answer.
#[derive(Debug, PartialEq, Eq)]
enum After {
    KeepAlive,
    Close,
}

/// Appends `response` to `out` as HTTP/1.1 bytes, as hyper writes them: the status with its
/// reason, the fields, `content-length` and `date`, then the body. An answer that asks for
/// `connection: close`, or whose body fails, closes the connection (the latter with nothing
/// of it written).
async fn write_answer(response: Response<Body>, out: &mut Vec<u8>) -> After {
    let (parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(error = %e, "an answer's body failed; the connection is closed");
            return After::Close;
        }
    };
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or_default().as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut after = After::KeepAlive;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH {
            continue;
        }
        if name == CONNECTION && value.as_bytes().eq_ignore_ascii_case(b"close") {
            after = After::Close;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = status.is_informational()
        || status == axum::http::StatusCode::NO_CONTENT
        || status == axum::http::StatusCode::NOT_MODIFIED;
    if !bodiless {
        let mut len = [0u8; 20];
        let mut cursor = io::Cursor::new(&mut len[..]);
        // Twenty bytes hold any usize in decimal.
        let _ = write!(cursor, "{}", body.len());
        let end = usize::try_from(cursor.position()).unwrap_or_default();
        field(out, b"content-length", len.get(..end).unwrap_or_default());
    }
    if !parts.headers.contains_key(DATE) {
        DATE_NOW.with(|date| field(out, b"date", date.borrow_mut().now().as_bytes()));
    }
    out.extend_from_slice(b"\r\n");
    if !bodiless {
        out.extend_from_slice(&body);
    }
    after
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

thread_local! {
    static DATE_NOW: RefCell<HttpDate> =
        const { RefCell::new(HttpDate { second: u64::MAX, text: String::new() }) };
}

/// The `date` field's value, formatted once a second per thread.
struct HttpDate {
    second: u64,
    text: String,
}

impl HttpDate {
    fn now(&mut self) -> &str {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}

/// A connection with the bytes already read from it put back in front.
struct Rewind<S> {
    unread: BytesMut,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.unread.is_empty() {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let n = self.unread.len().min(buf.remaining());
        buf.put_slice(&self.unread[..n]);
        self.unread.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
