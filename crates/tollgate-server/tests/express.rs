//! The express lane (`express.rs`): plain `GET /v1/quota` heads on a cleartext connection are
//! answered without hyper; anything else hands the connection to hyper with the bytes already
//! read. Raw TCP, so what is tested is the bytes on the wire.

mod common;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use common::{Options, Server};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tollgate_server::ConnectionLimits;

const HEAD_TIMEOUT: Duration = Duration::from_millis(500);

async fn start() -> Server {
    let limits = ConnectionLimits {
        header_timeout: HEAD_TIMEOUT,
        body_timeout: HEAD_TIMEOUT,
        max_connections: NonZeroUsize::new(64).unwrap(),
        ..ConnectionLimits::default()
    };
    Server::with(Options { limits, ..Options::default() }).await
}

/// A check of weight 1 against a limit of 2 a day, with `extra` fields.
fn check(extra: &str) -> String {
    format!(
        "GET /v1/quota HTTP/1.1\r\nHost: x\r\nmetering-id: ORDERS:ACME\r\nquota-limit: 2\r\n\
         quota-interval: 1\r\nquota-timeunit: day\r\n{extra}\r\n"
    )
}

/// One answer read off the wire: status, fields (names lower-case) and body.
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Reads `n` answers (each framed by its `content-length`), failing after 10 s.
async fn read_answers(c: &mut TcpStream, n: usize) -> Vec<Answer> {
    let mut raw = Vec::new();
    let mut answers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while answers.len() < n {
        if let Some((answer, used)) = parse(&raw) {
            raw.drain(..used);
            answers.push(answer);
            continue;
        }
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, c.read(&mut buf)).await {
            Err(_) => panic!("{} of {n} answers after 10 s: {raw:?}", answers.len()),
            Ok(Ok(0)) | Ok(Err(_)) => panic!("closed after {} of {n} answers", answers.len()),
            Ok(Ok(k)) => raw.extend_from_slice(&buf[..k]),
        }
    }
    assert!(raw.is_empty(), "bytes after the last answer: {raw:?}");
    answers
}

fn parse(raw: &[u8]) -> Option<(Answer, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().unwrap();
    let fields: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    let len: usize = fields.iter().find(|(n, _)| n == "content-length")?.1.parse().unwrap();
    let body = raw.get(end..end + len)?.to_vec();
    Some((Answer { status, fields, body }, end + len))
}

/// Reads until the server closes; how long that took. Fails after 10 s.
async fn wait_for_close(c: &mut (impl AsyncRead + Unpin)) -> Duration {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(Duration::from_secs(10), c.read(&mut buf)).await {
            Err(_) => panic!("the server kept the connection open for 10 s"),
            Ok(Ok(0)) | Ok(Err(_)) => return t0.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn pipelined_checks_are_answered_in_order() {
    let s = start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let three = [check(""), check(""), check("")].concat();
    c.write_all(three.as_bytes()).await.unwrap();
    let answers = read_answers(&mut c, 3).await;
    let got: Vec<(u16, Value)> =
        answers.iter().map(|a| (a.status, a.json()["used"].clone())).collect();
    assert_eq!(got, [(200, 1.into()), (200, 2.into()), (429, 2.into())]);
    for a in &answers {
        assert_eq!(a.field("content-type"), Some("application/json"));
        assert!(a.field("date").is_some_and(|d| d.ends_with(" GMT")), "{:?}", a.fields);
        assert!(a.field("ratelimit").is_some(), "{:?}", a.fields);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_head_the_lane_does_not_take_hands_the_connection_to_hyper_with_what_was_read() {
    let s = start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    // A check, a head for hyper and a check again, in one write: the bytes after the check
    // were already read by the lane and must reach hyper intact.
    let mixed =
        [check(""), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(), check("")].concat();
    c.write_all(mixed.as_bytes()).await.unwrap();
    let answers = read_answers(&mut c, 3).await;
    assert_eq!(answers.iter().map(|a| a.status).collect::<Vec<_>>(), [200, 200, 200]);
    assert_eq!(answers[0].json()["used"], 1);
    let health = String::from_utf8_lossy(&answers[1].body);
    assert!(!health.contains("\"used\""), "the health answer: {health}");
    assert_eq!(answers[2].json()["used"], 2);
    // The same answer either way, field for field but the date.
    let names = |a: &Answer| a.fields.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&answers[0]), names(&answers[2]));
    s.stop().await;
}

#[tokio::test]
async fn a_check_that_asks_to_close_is_answered_then_closed() {
    let s = start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(check("Connection: close\r\n").as_bytes()).await.unwrap();
    let answers = read_answers(&mut c, 1).await;
    assert_eq!(answers[0].status, 200);
    assert!(wait_for_close(&mut c).await < Duration::from_secs(2));
    // `connection: keep-alive` stays on the lane and the connection stays open.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let two = [check("Connection: keep-alive\r\n"), check("")].concat();
    c.write_all(two.as_bytes()).await.unwrap();
    let answers = read_answers(&mut c, 2).await;
    assert_eq!(answers.iter().map(|a| a.status).collect::<Vec<_>>(), [200, 429]);
    s.stop().await;
}

#[tokio::test]
async fn oversized_heads_get_431_on_the_lane_and_beyond_it() {
    let s = start().await;
    // 9 KiB of fields: a complete head the lane reads, over the 8 KiB limit. 20 KiB: more
    // than the lane waits for, so hyper reads it.
    for size in [9 * 1024, 20 * 1024] {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let big = check(&format!("x-big: {}\r\n", "a".repeat(size)));
        c.write_all(big.as_bytes()).await.unwrap();
        let answers = read_answers(&mut c, 1).await;
        assert_eq!(answers[0].status, 431, "{size} bytes");
        assert_eq!(answers[0].field("content-type"), Some("application/problem+json"));
        assert_eq!(answers[0].json()["type"], "https://tollgate.dev/problems/headers-too-large");
    }
    // Neither counted.
    let r: Value = s
        .quota(&[
            ("metering-id", "ORDERS:ACME"),
            ("quota-limit", "2"),
            ("quota-interval", "1"),
            ("quota-timeunit", "day"),
        ])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["used"], 1, "{r}");
    s.stop().await;
}

#[tokio::test]
async fn an_idle_or_slow_connection_is_closed_at_the_header_timeout() {
    let s = start().await;
    // Idle after an answer.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(check("").as_bytes()).await.unwrap();
    read_answers(&mut c, 1).await;
    let waited = wait_for_close(&mut c).await;
    assert!(waited >= HEAD_TIMEOUT / 2 && waited < Duration::from_secs(3), "{waited:?}");
    // A head trickled a byte every 20 ms (2.4 s in all): the deadline is the head's, so the
    // server closes while bytes still come; a per-read timeout would never fire.
    let (mut read, mut write) = TcpStream::connect(s.addr).await.unwrap().into_split();
    let head = check("");
    let trickle = tokio::spawn(async move {
        for b in head.as_bytes().iter().take(head.len() - 1) {
            if write.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let waited = wait_for_close(&mut read).await;
    assert!(waited < Duration::from_millis(1500), "closed after {waited:?}");
    trickle.abort();
    s.stop().await;
}

#[tokio::test]
async fn an_open_connection_does_not_hold_up_shutdown() {
    let s = start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(check("").as_bytes()).await.unwrap();
    read_answers(&mut c, 1).await;
    // Stopping takes far less than the 10 s grace: the idle connection is closed at once.
    let t0 = Instant::now();
    let stopped = tokio::spawn(s.stop());
    let closed = wait_for_close(&mut c).await;
    timeout(Duration::from_secs(5), stopped).await.expect("stopped within 5 s").unwrap();
    assert!(closed < Duration::from_secs(2), "closed after {closed:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}
