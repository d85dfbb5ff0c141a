//! Slow and idle clients cannot exhaust the listener: real sockets against a real server with
//! short, test-sized limits. A slowloris head is closed after the header timeout, a stalled
//! body gets 408 and a closed connection after the body timeout, an idle keep-alive
//! connection is closed, a client that reads none of its answers loses its slot after the
//! body timeout, a body trickled a byte before each silence would end gets 408 once it falls
//! behind the least rate, the connection cap holds, and `/healthz` still answers within a
//! bound while hundreds of half-open connections sit on the port.

mod common;

use std::time::{Duration, Instant};

use common::{Options, Server};
use std::num::NonZeroUsize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use tollgate_server::ConnectionLimits;

fn limits(max_connections: usize) -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        body_rate_grace: Duration::from_millis(500),
        max_connections: NonZeroUsize::new(max_connections).unwrap(),
        ..ConnectionLimits::default()
    }
}

async fn start(max_connections: usize) -> Server {
    Server::with(Options { limits: limits(max_connections), ..Options::default() }).await
}

/// Reads until the peer closes (or 10 s pass: a test failure, not a hang).
async fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, Duration) {
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Err(_) => panic!("the server kept the connection open for 10 s: {out:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return (out, t0.elapsed()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// `GET /healthz` on a fresh connection; the time it took.
async fn healthz(s: &Server, bound: Duration) -> Duration {
    let t0 = Instant::now();
    let r = timeout(bound, s.http.get(s.url("/healthz")).send())
        .await
        .unwrap_or_else(|_| panic!("/healthz did not answer within {bound:?}"))
        .unwrap();
    assert_eq!(r.status(), 200);
    t0.elapsed()
}

#[tokio::test]
async fn a_slowloris_head_is_closed_after_the_header_timeout() {
    let s = start(64).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a").await.unwrap();
    // Keep trickling bytes: a per-read timeout would never fire, the head deadline must.
    let trickle = async {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if c.write_all(b"a").await.is_err() {
                break;
            }
        }
    };
    trickle.await;
    let (_, waited) = read_to_close(&mut c).await;
    assert!(waited < Duration::from_secs(3), "closed only after {waited:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_stalled_body_gets_408_and_the_connection_is_closed() {
    let s = start(64).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        b"PUT /v1/policies HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"policies\":",
    )
    .await
    .unwrap();
    let (out, waited) = read_to_close(&mut c).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("body-timeout"), "{text}");
    assert!(waited < Duration::from_secs(3), "answered only after {waited:?}");
    // The policies did not change.
    let r: serde_json::Value =
        s.http.get(s.url("/v1/policies")).send().await.unwrap().json().await.unwrap();
    assert_eq!(r["generation"], 1, "{r}");
    s.stop().await;
}

/// A byte every 200 ms never leaves the 500 ms body timeout silent, but averages 5 bytes per
/// second: cut with 408 once the first 500 ms have passed and it falls behind 100 per second.
/// The same body at 2,000 bytes per second is taken. (Before the least rate, a trickle held
/// its connection for as long as its length in 200 ms steps.)
#[tokio::test]
async fn a_trickled_body_is_cut_once_it_falls_behind_the_least_rate() {
    let mut options = Options { limits: limits(64), ..Options::default() };
    options.limits.body_min_rate = std::num::NonZeroU64::new(100).unwrap();
    let s = Server::with(options).await;
    let body = br#"{"policies":[{"match":"T:*","limit":5,"unit":"day"}]}"#;
    let head = format!(
        "PUT /v1/policies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    let t0 = Instant::now();
    let mut cut = None;
    for byte in body {
        if c.write_all(&[*byte]).await.is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        if let Ok(Ok(n)) = timeout(Duration::from_millis(200), c.read(&mut buf)).await {
            cut = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            break;
        }
    }
    let text =
        cut.unwrap_or_else(|| panic!("a body of {} bytes at 5 per second taken", body.len()));
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body-too-slow"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(3), "cut only after {:?}", t0.elapsed());
    let (_, waited) = read_to_close(&mut c).await;
    assert!(waited < Duration::from_secs(3), "closed only after {waited:?}");

    // 20 bytes every 10 ms: taken.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(20) {
        c.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut buf = [0u8; 4096];
    let n = timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    s.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let s = start(64).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let (out, waited) = read_to_close(&mut c).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    assert!(waited < Duration::from_secs(3), "idle connection kept for {waited:?}");
    s.stop().await;
}

#[tokio::test]
async fn healthz_answers_while_hundreds_of_half_open_connections_wait() {
    let s = start(100).await;
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let partial: &[u8] = if i % 2 == 0 { b"GET /heal" } else { b"" };
        c.write_all(partial).await.unwrap();
        idle.push(c);
    }
    // 300 half-open connections against a cap of 100: slots free up as each group hits the
    // header timeout, so /healthz waits at most a few header timeouts.
    let waited = healthz(&s, Duration::from_secs(5)).await;
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    // And every one of the half-open connections is eventually closed.
    let mut closed = 0;
    for c in &mut idle {
        let (_, _) = read_to_close(c).await;
        closed += 1;
    }
    assert_eq!(closed, 300);
    s.stop().await;
}

#[tokio::test]
async fn the_connection_cap_is_respected() {
    let s = Server::with(Options {
        limits: ConnectionLimits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: NonZeroUsize::new(5).unwrap(),
            ..ConnectionLimits::default()
        },
        ..Options::default()
    })
    .await;
    // Five connections that keep their slot (each sends a request, then stays idle).
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let n = timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(c);
    }
    // A sixth is not served while they are open...
    let mut sixth = TcpStream::connect(s.addr).await.unwrap();
    sixth.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 512];
    assert!(
        timeout(Duration::from_millis(500), sixth.read(&mut buf)).await.is_err(),
        "a sixth connection was served beyond the cap of 5"
    );
    // ...and is served as soon as one of them leaves.
    drop(held.pop());
    let n = timeout(Duration::from_secs(5), sixth.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&buf[..n]));
    s.stop().await;
}

#[tokio::test]
async fn a_client_that_reads_none_of_its_answers_gives_up_its_slot() {
    // One slot, taken by a client that pipelines requests with 4 KiB answers (404 problems
    // that quote the path) and reads none of them: once the socket buffers are full, the
    // server's write waits.
    let s = start(1).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let (unread, mut write) = socket.connect(s.addr).await.unwrap().into_split();
    let request = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(4096));
    let flood = tokio::spawn(async move {
        for _ in 0..4096 {
            if write.write_all(request.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    // The slot comes free within `body_timeout` (500 ms) of the write stalling: another
    // client is served. Without the bound it would wait for good.
    let waited = healthz(&s, Duration::from_secs(8)).await;
    assert!(waited < Duration::from_secs(5), "served after {waited:?}");
    flood.abort();
    drop(unread);
    s.stop().await;
}
