//! `tollgate serve --store redis://…` against a real `redis-server` child process: counters are
//! shared by two service instances, and a Redis outage is answered per `store_unavailable`
//! (`local`: 200 + `Tollgate-Degraded: local`; `deny`: 503 + `Retry-After`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{RedisServer, Server, free_port};

fn serve(store: &str, config: &std::path::Path) -> Server {
    Server::start(&["--store", store, "--config", config.to_str().unwrap()])
}

/// One `GET /v1/quota`; returns the status line and the raw head + body.
fn quota(addr: &str, id: &str) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET /v1/quota HTTP/1.1\r\nhost: {addr}\r\nmetering-id: {id}\r\nquota-limit: 3\r\n\
         quota-timeunit: hour\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let status = s.split(' ').nth(1).unwrap().parse().unwrap();
    (status, s.to_ascii_lowercase())
}

fn config(dir: &std::path::Path, unavailable: &str) -> std::path::PathBuf {
    let f = dir.join(format!("{unavailable}.toml"));
    std::fs::write(
        &f,
        format!("[store]\nstore_unavailable = \"{unavailable}\"\ntimeout_ms = 50\n"),
    )
    .unwrap();
    f
}

#[test]
fn two_instances_share_exact_counters_and_survive_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut redis) = RedisServer::start() else { return };
    let url = redis.url();
    let id = format!("Shared:{}", free_port());
    let a = serve(&url, &config(dir.path(), "local"));
    let a = &a.addr;
    let b = serve(&url, &config(dir.path(), "deny"));
    let b = &b.addr;
    assert_eq!(quota(a, &id).0, 200);
    assert_eq!(quota(b, &id).0, 200);
    assert_eq!(quota(a, &id).0, 200);
    assert_eq!(quota(b, &id).0, 429, "the fourth of 3 is refused, whichever instance asks");

    redis.kill();
    // local: answered from this instance's memory, marked degraded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, text) = loop {
        let r = quota(a, "Outage:1");
        if r.1.contains("tollgate-degraded: local") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("tollgate-degraded: local"), "{text}");
    // deny: 503 with Retry-After.
    let (status, text) = quota(b, "Outage:2");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("retry-after:"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    // Both report the outage in /readyz, still as 200 (the answers go on per the mode).
    let ready = get(a, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("\"status\":\"degraded\""), "{ready}");
    assert!(ready.contains("\"store\":\"redis\""), "{ready}");
}

fn get(addr: &str, path: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}
