//! Requests the HTTP parser itself refuses still get `application/problem+json` that says
//! what was wrong, over a raw socket to a real server (a client library would refuse to send
//! most of them).

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Sends `raw` and reads one answer (its head, then `content-length` bytes of body, or
/// until the server closes): (status, head, problem body).
async fn send(s: &Server, raw: &[u8]) -> (u16, String, Value) {
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    // The server may answer and close before all of a large request is written.
    let _ = c.write_all(raw).await;
    let shown = String::from_utf8_lossy(&raw[..raw.len().min(80)]).into_owned();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
                let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
                return (status, head, body);
            }
        }
        match tokio::time::timeout_at(deadline, c.read(&mut buf)).await {
            Err(_) => panic!("no whole answer within 10 s to {shown:?}: {text:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => {
                panic!("closed without a whole answer to {shown:?}: {text:?}")
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A name, the raw request, the status and a part of the detail expected, and the header the
/// problem should name.
type Case = (&'static str, Vec<u8>, u16, &'static str, Option<&'static str>);

fn with_headers(n: usize) -> Vec<u8> {
    let mut r = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..n {
        r.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r
}

#[tokio::test]
async fn parser_refusals_are_problem_json_naming_the_fault() {
    let s = Server::start().await;
    let long_url = {
        let mut r = b"GET /v1/quota?x=".to_vec();
        r.extend(std::iter::repeat_n(b'a', 70_000));
        r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        r
    };
    let mid_url = {
        let mut r = b"GET /v1/quota?x=".to_vec();
        r.extend(std::iter::repeat_n(b'a', 65_500));
        r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        r
    };
    let big_header = |n| {
        let mut r = b"GET /healthz HTTP/1.1\r\nHost: x\r\nx-big: ".to_vec();
        r.extend(std::iter::repeat_n(b'a', n));
        r.extend_from_slice(b"\r\n\r\n");
        r
    };
    let cases: Vec<Case> = vec![
        ("control byte", b"GET /healthz HTTP/1.1\r\nHost: x\r\nx-a: a\x01b\r\n\r\n".to_vec(), 400, "control byte 0x01", Some("x-a")),
        ("NUL byte", b"GET /healthz HTTP/1.1\r\nHost: x\r\nmetering-id: a\x00b\r\n\r\n".to_vec(), 400, "control byte 0x00", Some("metering-id")),
        ("obs-fold", b"GET /healthz HTTP/1.1\r\nHost: x\r\nx-a: a\r\n  folded\r\n\r\n".to_vec(), 400, "folding", None),
        ("missing colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nno-colon-here\r\n\r\n".to_vec(), 400, "no colon", None),
        ("two content-lengths", b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(), 400, "content-length is sent 2 times", Some("content-length")),
        ("bad content-length", b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_vec(), 400, "not a number", Some("content-length")),
        ("garbage request line", b"\x16\x03\x01\x02\x00garbage\r\n\r\n".to_vec(), 400, "request line", None),
        ("bad version", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n".to_vec(), 400, "version", None),
        ("space in header name", b"GET /healthz HTTP/1.1\r\nHost: x\r\nbad name: v\r\n\r\n".to_vec(), 400, "invalid name", Some("bad name")),
        ("over 100 headers", with_headers(101), 431, "more than 100 header fields", None),
        ("headers over 8 KiB", big_header(20_000), 431, "bytes of headers; the limit is 8192", None),
        ("head over the parser's buffer", big_header(200_000), 431, "64 KiB", None),
        ("URL over the parser's limit", long_url, 414, "longer than the parser accepts", None),
        ("URL within the parser's limit", mid_url, 414, "the limit is 8192", None),
    ];
    let n = cases.len();
    for (name, raw, status, needle, header) in cases {
        let (got, head, body) = send(&s, &raw).await;
        assert_eq!(got, status, "{name}: {head}\n{body}");
        assert!(head.contains("content-type: application/problem+json"), "{name}: {head}");
        assert_eq!(body["status"], status, "{name}: {body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(!detail.is_empty() && detail.contains(needle), "{name}: {body}");
        if let Some(h) = header {
            assert_eq!(body["invalid_header"], h, "{name}: {body}");
        }
    }
    assert_eq!(n, 14);
    // The server is still fine.
    assert_eq!(s.http.get(s.url("/healthz")).send().await.unwrap().status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn a_long_url_within_the_parser_gets_414_from_the_service() {
    let s = Server::start().await;
    let url = format!("/v1/quota?x={}", "a".repeat(9000));
    let r = s.http.get(s.url(&url)).send().await.unwrap();
    assert_eq!(r.status(), 414);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["limit"], 8192);
    s.stop().await;
}

#[tokio::test]
async fn a_bad_second_request_on_a_keep_alive_connection_is_explained_too() {
    let s = Server::start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nbroken\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("header line 2 has no colon"), "{text}");
    s.stop().await;
}
