//! `tollgate serve --store redis://…` against a real `redis-server` child process: counters are
//! shared by two service instances, and a Redis outage is answered per `store_unavailable`
//! (`local`: 200 + `Tollgate-Degraded: local`; `deny`: 503 + `Retry-After`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn redis() -> (Kill, String) {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed for this test (apt-get install redis-server)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Kill(child), format!("redis://127.0.0.1:{port}/"))
}

fn serve(store: &str, config: &std::path::Path) -> (Kill, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", store, "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.strip_prefix("listening on http://") {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(20)).expect("no `listening on` line");
    (Kill(child), addr)
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
    let (redis_proc, url) = redis();
    let id = format!("Shared:{}", free_port());
    let (_a, a) = serve(&url, &config(dir.path(), "local"));
    let (_b, b) = serve(&url, &config(dir.path(), "deny"));
    assert_eq!(quota(&a, &id).0, 200);
    assert_eq!(quota(&b, &id).0, 200);
    assert_eq!(quota(&a, &id).0, 200);
    assert_eq!(quota(&b, &id).0, 429, "the fourth of 3 is refused, whichever instance asks");

    drop(redis_proc);
    // local: answered from this instance's memory, marked degraded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, text) = loop {
        let r = quota(&a, "Outage:1");
        if r.1.contains("tollgate-degraded: local") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("tollgate-degraded: local"), "{text}");
    // deny: 503 with Retry-After.
    let (status, text) = quota(&b, "Outage:2");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("retry-after:"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    // Both report the outage in /readyz, still as 200 (the answers go on per the mode).
    let ready = get(&a, "/readyz");
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
