//! Failed console logins through the real `tollgate serve`, from two loopback source
//! addresses: after 10 wrong tokens one address gets 429 with `Retry-After` (even with the
//! right token), while the other still logs in and still gets 401 for a wrong token.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// `POST /ui/login` with `token`, sent from the source address `from`: the status, the
/// headers (lower-cased names) and the body.
async fn login(server: &Server, from: &str, token: &str) -> (u16, String, String) {
    let to: SocketAddr = server.addr.parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut c = socket.connect(to).await.unwrap();
    let body = format!("{{\"token\":\"{token}\"}}");
    let req = format!(
        "POST /ui/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut raw))
        .await
        .expect("the server answers within 10 s")
        .unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn failed_logins_are_limited_per_source_address() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with_env(
        &["--store", "memory", "--data", data.to_str().unwrap()],
        &[("TOLLGATE_ADMIN_TOKEN", "root-token")],
    );
    let (attacker, other) = ("127.0.0.2", "127.0.0.3");

    // A correct token gives back its attempt: it does not use up the budget of wrong ones.
    assert_eq!(login(&server, attacker, "root-token").await.0, 200);
    for i in 1..=10 {
        let (status, _, body) = login(&server, attacker, &format!("guess-{i}")).await;
        assert_eq!(status, 401, "wrong token {i}: {body}");
    }
    let (status, head, body) = login(&server, attacker, "guess-11").await;
    assert_eq!(status, 429, "the 11th wrong token: {body}");
    let retry: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: "))
        .unwrap_or_else(|| panic!("no Retry-After: {head}"))
        .trim()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&retry), "Retry-After {retry}");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 429);
    assert!(problem["type"].as_str().unwrap().ends_with("/too-many-failed-logins"), "{problem}");
    assert_eq!(problem["limit"], 10);
    assert_eq!(problem["window_seconds"], 300);
    assert_eq!(problem["retry_after"], retry);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("127.0.0.2") && detail.contains("refused for"), "{detail}");
    // Blocked means blocked: the right token from that address is refused too.
    assert_eq!(login(&server, attacker, "root-token").await.0, 429);

    // Another address is not affected: a wrong token is a plain 401, the right one logs in.
    assert_eq!(login(&server, other, "guess").await.0, 401);
    let (status, head, body) = login(&server, other, "root-token").await;
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("set-cookie: tollgate_session="), "{head}");
}
