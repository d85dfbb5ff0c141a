//! Failed console logins through the real `tollgate serve`, from two loopback source
//! addresses: after 10 wrong tokens one address gets 429 with `Retry-After` (even with the
//! right token), while the other still logs in and still gets 401 for a wrong token.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Message, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// One request from the source address `from` (a loopback address other than 127.0.0.1 plays
/// another client) with exactly the `headers` given besides `content-length` and
/// `connection: close`.
async fn send_from(
    server: &Server,
    from: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Message {
    let to: SocketAddr = server.addr.parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut c = socket.connect(to).await.unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut raw))
        .await
        .expect("the server answers within 10 s")
        .unwrap();
    Message::answer_from(raw.as_bytes()).unwrap_or_else(|| panic!("no answer: {raw:?}"))
}

/// `POST /ui/login` with `token`, as the console's page sends it, from the source address
/// `from`: the status, the headers (lower-cased names) and the body.
async fn login(server: &Server, from: &str, token: &str) -> (u16, String, String) {
    let body = format!("{{\"token\":\"{token}\"}}");
    let headers = [("host", "x"), ("content-type", "application/json")];
    let r = send_from(server, from, "POST", "/ui/login", &headers, &body).await;
    (r.status, r.head(), r.text())
}

/// A server with the admin token `root-token` and a memory store in `dir`.
fn server_in(dir: &tempfile::TempDir) -> Server {
    let data = dir.path().join("data");
    Server::start_with_env(
        &["--store", "memory", "--data", data.to_str().unwrap()],
        &[("TOLLGATE_ADMIN_TOKEN", "root-token")],
    )
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

/// What a page on another site can send with a hidden form (`text/plain`, no preflight) or a
/// cross-origin `fetch`: refused before anything is counted, so eleven of them lock nobody out
/// and none logs the browser in.
#[tokio::test]
async fn logins_from_forms_or_other_origins_are_refused_and_count_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_in(&dir);
    let victim = "127.0.0.4";
    let host = server.addr.clone();
    let form = "{\"token\":\"guess\",\"x\":\"=\"}";
    for i in 0..11 {
        let headers = [
            ("host", host.as_str()),
            ("content-type", "text/plain"),
            ("origin", "http://evil.example"),
        ];
        let r = send_from(&server, victim, "POST", "/ui/login", &headers, form).await;
        assert_eq!(r.status, 415, "text/plain login {i}: {r:?}");
        let p = r.json();
        assert!(p["detail"].as_str().unwrap().contains("\"text/plain\""), "{p}");
    }
    let evil = [
        ("host", host.as_str()),
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
    ];
    for token in ["guess", "root-token"] {
        let body = format!("{{\"token\":\"{token}\"}}");
        let r = send_from(&server, victim, "POST", "/ui/login", &evil, &body).await;
        assert_eq!(r.status, 403, "cross-origin login: {r:?}");
        assert!(r.header("set-cookie").is_none(), "no session is opened: {r:?}");
        assert!(r.json()["detail"].as_str().unwrap().contains("http://evil.example"), "{r:?}");
    }
    // The page's own origin is accepted, as is a client that sends no Origin.
    let own = format!("http://{host}");
    let same =
        [("host", host.as_str()), ("content-type", "application/json"), ("origin", own.as_str())];
    let r =
        send_from(&server, victim, "POST", "/ui/login", &same, "{\"token\":\"root-token\"}").await;
    assert_eq!(r.status, 200, "same-origin login: {r:?}");
    for i in 1..=10 {
        assert_eq!(login(&server, victim, &format!("guess-{i}")).await.0, 401, "none was counted");
    }
}

/// One user's logins end only that user's oldest sessions: 1,025 logins by a viewer leave the
/// admin's session valid.
#[tokio::test]
async fn a_users_many_logins_leave_other_users_sessions_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tollgate.toml");
    let text = format!(
        "[server]\nadmin_token = \"root-token\"\ndata = \"{}\"\n\n\
         [[user]]\nname = \"vera\"\ntoken_sha256 = \"{}\"\nrole = \"viewer\"\n",
        dir.path().join("data").display(),
        common::sha256_hex("vera-token"),
    );
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap(), "--store", "memory"]);
    let (status, head, body) = login(&server, "127.0.0.1", "root-token").await;
    assert_eq!(status, 200, "{body}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let who = |cookie: String| {
        let server = &server;
        async move {
            let headers = [("host", "x"), ("cookie", cookie.as_str())];
            send_from(server, "127.0.0.1", "GET", "/ui/api/session", &headers, "").await
        }
    };
    assert_eq!(who(cookie.clone()).await.status, 200);
    for i in 0..1025 {
        assert_eq!(login(&server, "127.0.0.5", "vera-token").await.0, 200, "viewer login {i}");
    }
    let r = who(cookie).await;
    assert_eq!(r.status, 200, "the admin is still logged in: {r:?}");
    assert_eq!(r.json()["name"], "admin");
}

/// An address under lockout stays locked while one wrong login comes from each of 4,096 other
/// addresses (127.0.1.0 to 127.0.16.255), enough to fill the table of tracked addresses.
#[tokio::test]
async fn new_sources_do_not_free_a_locked_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_in(&dir);
    let locked = "127.0.0.2";
    for i in 1..=10 {
        assert_eq!(login(&server, locked, &format!("guess-{i}")).await.0, 401);
    }
    assert_eq!(login(&server, locked, "guess-11").await.0, 429);
    for n in 0..4096u32 {
        let from = format!("127.0.{}.{}", 1 + n / 256, n % 256);
        let (status, _, body) = login(&server, &from, "guess").await;
        assert_eq!(status, 401, "a wrong login from {from}: {body}");
    }
    let (status, _, body) = login(&server, locked, "guess-12").await;
    assert_eq!(status, 429, "still locked out: {body}");
}

/// Wrong bearer tokens on the API count toward the same per-address limit as wrong logins:
/// after 10, every credentialed request and login from that address gets 429, even with the
/// right token, while another address is served.
#[tokio::test]
async fn wrong_bearer_tokens_count_toward_the_lockout() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_in(&dir);
    let (guesser, other) = ("127.0.0.2", "127.0.0.3");
    let audit = |from: &'static str, token: &'static str| {
        let server = &server;
        async move {
            let auth = format!("Bearer {token}");
            let headers = [("host", "x"), ("authorization", auth.as_str())];
            send_from(server, from, "GET", "/v1/audit", &headers, "").await
        }
    };
    for i in 1..=10 {
        let r = audit(guesser, "guess").await;
        assert_eq!(r.status, 401, "wrong bearer token {i}: {r:?}");
    }
    let r = audit(guesser, "guess").await;
    assert_eq!(r.status, 429, "the 11th wrong bearer token: {r:?}");
    let retry: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=300).contains(&retry), "Retry-After {retry}");
    assert_eq!(audit(guesser, "root-token").await.status, 429, "the right token too");
    assert_eq!(login(&server, guesser, "root-token").await.0, 429, "and a login");
    assert_eq!(audit(other, "root-token").await.status, 200, "another address is served");
}

/// Behind a proxy named in `trusted_proxies`, each client it forwards for counts alone: one
/// locked out by wrong bearer tokens leaves the proxy's other clients served. A client that
/// is not a trusted proxy cannot dodge its count by sending `X-Forwarded-For` itself.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_counts_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    let data = dir.path().join("data");
    let toml =
        format!("[server]\ndata = \"{}\"\ntrusted_proxies = [\"127.0.0.2\"]\n", data.display());
    std::fs::write(&file, toml).unwrap();
    let server = Server::start_with_env(
        &["--store", "memory", "--config", file.to_str().unwrap()],
        &[("TOLLGATE_ADMIN_TOKEN", "root-token")],
    );
    let audit = |from: &'static str, forwarded: String, token: &'static str| {
        let server = &server;
        async move {
            let auth = format!("Bearer {token}");
            let headers =
                [("host", "x"), ("authorization", auth.as_str()), ("x-forwarded-for", &forwarded)];
            send_from(server, from, "GET", "/v1/audit", &headers, "").await
        }
    };
    let (proxy, direct) = ("127.0.0.2", "127.0.0.3");
    // The guesser's own header is left of the proxy's hop, so it is never believed.
    let guesser = || "203.0.113.9, 198.51.100.1".to_owned();
    for i in 1..=10 {
        assert_eq!(audit(proxy, guesser(), "guess").await.status, 401, "wrong token {i}");
    }
    let r = audit(proxy, guesser(), "root-token").await;
    assert_eq!(r.status, 429, "the forwarded client is locked out: {r:?}");
    assert!(r.json()["detail"].as_str().unwrap().contains("198.51.100.1"), "{r:?}");
    let r = audit(proxy, "198.51.100.2".to_owned(), "root-token").await;
    assert_eq!(r.status, 200, "the proxy's other clients are served: {r:?}");

    for i in 1..=10 {
        let r = audit(direct, format!("198.51.100.{}", 100 + i), "guess").await;
        assert_eq!(r.status, 401, "wrong token {i} from an untrusted peer");
    }
    let r = audit(direct, "198.51.100.200".to_owned(), "root-token").await;
    assert_eq!(r.status, 429, "an untrusted peer counts as itself: {r:?}");
}
