//! problem+json for requests the HTTP parser itself refuses.
//!
//! When hyper cannot parse a request head (control bytes in a value, obs-fold, a missing
//! colon, two `Content-Length`s, a garbage request line, too long a URL, too many or too
//! large headers), it answers on its own, before any of our code runs, with a bare
//! `400`/`414`/`431` and no body, then closes. [`ProblemIo`] sits between hyper and the
//! socket and swaps that bare answer for an `application/problem+json` one that says what was
//! wrong.
//!
//! Why an IO wrapper rather than pre-parsing each request ourselves: hyper stays the only
//! parser, so what is accepted and refused cannot drift between two parsers; we only change
//! the words of a refusal hyper already decided on.
//!
//! How the bare answer is recognised: it is a response head with status 400, 414 or 431,
//! `content-length: 0` and no `content-type`. Invariant: no response of ours looks like
//! that, since [`crate::serve()`] turns every empty error response into problem+json (with a
//! `content-type`) before hyper writes it. The wrapper reports writes as non-vectored, so
//! hyper hands it each head as one buffer.
//!
//! The `detail` comes from the bytes read since the last response was written (at most
//! [`CAPTURE_BYTES`] of them, the start of the request that failed), diagnosed by
//! [`diagnose`]; when nothing specific is found it says so in general terms.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use tollgate_http::problem::{PROBLEM_JSON, Problem};

/// How much of a request's start is kept to explain a parse error.
pub(crate) const CAPTURE_BYTES: usize = 8 * 1024;

/// hyper's limit on header fields per request.
pub(crate) const MAX_HEADERS: usize = 100;

/// A connection whose parser-made bare errors become problem+json (see the module docs).
#[derive(Debug)]
pub(crate) struct ProblemIo<S> {
    inner: S,
    /// The start of what was read since the last response (at most [`CAPTURE_BYTES`]).
    capture: Vec<u8>,
    /// A replacement response being written, the bytes already written, and the length of
    /// hyper's buffer to report once it is all out.
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<S> ProblemIo<S> {
    /// Wraps a connection.
    pub(crate) fn new(inner: S) -> Self {
        Self { inner, capture: Vec::new(), replacing: None }
    }
}

impl<S> ProblemIo<S> {
    /// Drops the captured request. A small buffer is kept for the next request; a large one
    /// is freed, so an idle keep-alive connection holds at most 1 KiB for this.
    fn forget_request(&mut self) {
        if self.capture.capacity() > 1024 {
            self.capture = Vec::new();
        } else {
            self.capture.clear();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ProblemIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let room = CAPTURE_BYTES.saturating_sub(this.capture.len());
            let new = &buf.filled()[before..];
            this.capture.extend_from_slice(&new[..new.len().min(room)]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ProblemIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            if let Some(status) = bare_parse_error(buf) {
                let problem = explain(status, &this.capture);
                this.replacing = Some((problem, 0, buf.len()));
            } else {
                // A response is going out: the request it answers was parsed.
                this.forget_request();
                return Pin::new(&mut this.inner).poll_write(cx, buf);
            }
        }
        let Some((bytes, written, reported)) = &mut this.replacing else {
            return Poll::Ready(Ok(0));
        };
        while *written < bytes.len() {
            match Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let reported = *reported;
        this.replacing = None;
        this.forget_request();
        Poll::Ready(Ok(reported))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// The status of `buf` when it is hyper's own bodiless answer to a request it could not
/// parse (see the module docs).
fn bare_parse_error(buf: &[u8]) -> Option<StatusCode> {
    // Cheap checks first: this runs on every write of every response.
    if !(buf.starts_with(b"HTTP/1.1 4") || buf.starts_with(b"HTTP/1.0 4")) {
        return None;
    }
    let status = match buf.get(9..13)? {
        b"400 " => StatusCode::BAD_REQUEST,
        b"414 " => StatusCode::URI_TOO_LONG,
        b"431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let end = memchr_crlfcrlf(buf)?;
    if end + 4 != buf.len() {
        return None; // a body follows: not hyper's bare answer
    }
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let bare = head.contains("\r\ncontent-length: 0") && !head.contains("\r\ncontent-type:");
    bare.then_some(status)
}

fn memchr_crlfcrlf(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The full problem+json response replacing a bare `status`, explained from `request`.
fn explain(status: StatusCode, request: &[u8]) -> Vec<u8> {
    let problem = match status {
        StatusCode::URI_TOO_LONG => Problem::new(status, "uri-too-long", "URI Too Long").detail(
            "the request target is longer than the parser accepts (65,534 bytes); send long \
             parameters in headers or a body",
        ),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            let count = header_lines(request).count();
            let p = Problem::new(status, "headers-too-large", "Request Header Fields Too Large");
            if count > MAX_HEADERS {
                p.detail(format!(
                    "the request carries more than {MAX_HEADERS} header fields ({count} seen)"
                ))
                .with("limit", MAX_HEADERS)
            } else {
                p.detail("the request head is larger than the parser's 64 KiB buffer")
            }
        }
        _ => {
            let (detail, header) = diagnose(request);
            let p = Problem::new(status, "malformed-request", "Bad Request").detail(detail);
            match header {
                Some(h) => p.with("invalid_header", Value::String(h)),
                None => p,
            }
        }
    };
    let body = serde_json::to_vec(&problem.body()).unwrap_or_default();
    let reason = status.canonical_reason().unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The header lines of a captured request head (after the request line, before the blank
/// line), without their line ends.
fn header_lines(request: &[u8]) -> impl Iterator<Item = &[u8]> {
    let head_end = memchr_crlfcrlf(request).unwrap_or(request.len());
    request[..head_end]
        .split(|&b| b == b'\n')
        .skip(1)
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
}

/// Says what is wrong with a request head hyper refused with 400, and which header (when one
/// is to blame). Best effort: the first fault found, in wire order.
pub(crate) fn diagnose(request: &[u8]) -> (String, Option<String>) {
    let line_end = request.iter().position(|&b| b == b'\n').unwrap_or(request.len());
    let line = request[..line_end].strip_suffix(b"\r").unwrap_or(&request[..line_end]);
    if let Some(why) = request_line_fault(line) {
        return (format!("{why}: {}", shown(line)), None);
    }
    let mut content_lengths = Vec::new();
    for (i, raw) in header_lines(request).enumerate() {
        let n = i + 1;
        if raw.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return (
                format!(
                    "header line {n} starts with whitespace (obsolete line folding is not \
                     accepted): {}",
                    shown(raw)
                ),
                None,
            );
        }
        let Some(colon) = raw.iter().position(|&b| b == b':') else {
            return (format!("header line {n} has no colon: {}", shown(raw)), None);
        };
        let name = String::from_utf8_lossy(&raw[..colon]).into_owned();
        if name.is_empty() || !raw[..colon].iter().all(|&b| is_tchar(b)) {
            return (format!("header line {n} has an invalid name: {}", shown(raw)), Some(name));
        }
        let value = raw[colon + 1..].trim_ascii_start();
        if let Some(&bad) = value.iter().find(|&&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return (
                format!("header {name} carries the control byte 0x{bad:02x}: {}", shown(value)),
                Some(name.to_ascii_lowercase()),
            );
        }
        if name.eq_ignore_ascii_case("content-length") {
            let v = String::from_utf8_lossy(value).trim().to_owned();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return (
                    format!("content-length is not a number of bytes: {v:?}"),
                    Some("content-length".into()),
                );
            }
            content_lengths.push(v);
        }
        if name.eq_ignore_ascii_case("transfer-encoding") {
            let v = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
            if !v.ends_with("chunked") {
                return (
                    format!("transfer-encoding must end with chunked, got {v:?}"),
                    Some("transfer-encoding".into()),
                );
            }
        }
    }
    if content_lengths.len() > 1 {
        return (
            format!(
                "content-length is sent {} times ({}); send it once",
                content_lengths.len(),
                content_lengths.join(", ")
            ),
            Some("content-length".into()),
        );
    }
    ("the request head is not valid HTTP/1.1".into(), None)
}

/// Why a request line is not `METHOD SP TARGET SP HTTP/1.x`, if it is not.
fn request_line_fault(line: &[u8]) -> Option<&'static str> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Some("the request line is not METHOD TARGET HTTP/1.1");
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Some("the request line has an invalid method");
    }
    if target.is_empty() || target.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Some("the request line has an invalid target");
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Some("the request line has an unsupported HTTP version");
    }
    None
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A line for a message: escaped, and cut to 200 characters.
fn shown(bytes: &[u8]) -> String {
    let text: String = bytes.escape_ascii().to_string();
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("\"{cut}\"…")
    } else {
        format!("\"{text}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_bare_parser_errors() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_parse_error(bare), Some(StatusCode::BAD_REQUEST));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_parse_error(ours), None);
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nx";
        assert_eq!(bare_parse_error(with_body), None);
        assert_eq!(bare_parse_error(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(bare_parse_error(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), None);
        let too_long = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_parse_error(too_long), Some(StatusCode::URI_TOO_LONG));
    }

    #[test]
    fn diagnoses_name_the_fault() {
        for (req, needle, header) in [
            (&b"GET / HTTP/1.1\r\nx-a: a\x01b\r\n\r\n"[..], "control byte 0x01", Some("x-a")),
            (b"GET / HTTP/1.1\r\nx-a: a\r\n b\r\n\r\n", "folding", None),
            (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", "no colon", None),
            (
                b"GET / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "2 times",
                Some("content-length"),
            ),
            (b"\x16\x03\x01garbage\r\n\r\n", "request line", None),
            (b"GET / HTTP/1.1\r\nbad name: x\r\n\r\n", "invalid name", Some("bad name")),
        ] {
            let (detail, h) = diagnose(req);
            assert!(detail.contains(needle), "{detail}");
            assert_eq!(h.as_deref(), header, "{detail}");
        }
    }
}
