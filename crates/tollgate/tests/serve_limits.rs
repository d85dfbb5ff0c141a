//! The listener limits of a real `tollgate serve`, set in its config file: a slowloris head
//! and a stalled body are cut off at the configured timeouts, bad limits exit 2 naming the
//! key, and the default cap serves 1,000 concurrent keep-alive clients.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, Server};

fn config(dir: &tempfile::TempDir, body: &str) -> String {
    let file = dir.path().join("t.toml");
    std::fs::write(&file, body).unwrap();
    file.to_str().unwrap().to_owned()
}

/// Reads until the server closes; panics after 10 s.
fn read_to_close(c: &mut TcpStream) -> (String, Duration) {
    let t0 = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("kept open for 10 s: {:?}", String::from_utf8_lossy(&out))
            }
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), t0.elapsed())
}

#[test]
fn configured_timeouts_cut_off_slow_clients() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, "[server]\nheader_timeout_ms = 300\nbody_timeout_ms = 300\n");
    let s = Server::start(&["--store", "memory", "--config", &file]);

    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    let (_, waited) = read_to_close(&mut slow);
    assert!(waited < Duration::from_secs(3), "slowloris held for {waited:?}");

    let mut stalled = TcpStream::connect(&s.addr).unwrap();
    stalled
        .write_all(b"PUT /v1/policies HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
        .unwrap();
    let (answer, waited) = read_to_close(&mut stalled);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(waited < Duration::from_secs(3), "stalled body held for {waited:?}");
}

#[test]
fn bad_limits_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (body, key) in [
        ("[server]\nheader_timeout_ms = 0\n", "header_timeout_ms = 0"),
        ("[server]\nmax_connections = 0\n", "max_connections = 0"),
        ("[server]\nbody_timeout_ms = \"soon\"\n", "soon"),
    ] {
        let file = config(&dir, body);
        let o = Command::new(BIN)
            .args(["serve", "--store", "memory", "--listen", "127.0.0.1:0", "--config", &file])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{body}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&file) && err.contains(key), "{body}: {err}");
    }
}

#[test]
fn the_default_cap_serves_a_thousand_keep_alive_clients() {
    let s = Server::start(&["--store", "memory"]);
    let mut clients = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        clients.push(c);
    }
    // Every one is answered while all stay open (keep-alive), then a second round on the
    // same connections works too.
    for round in 0..2 {
        for (i, c) in clients.iter_mut().enumerate() {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 256];
            let n = c.read(&mut buf).unwrap_or_else(|e| panic!("client {i}, round {round}: {e}"));
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "client {i}, round {round}");
            if round == 0 {
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            }
        }
    }
}

#[test]
fn a_low_soft_open_file_limit_is_raised_to_serve_the_default_cap() {
    // Start under a soft limit of 512 descriptors (the hard limit is left as it is): the
    // server raises its soft limit, or 1,000 clients could not all be connected at once.
    let hard = Command::new("sh").args(["-c", "ulimit -Hn"]).output().unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    assert!(
        hard == "unlimited" || hard.parse::<u64>().unwrap() >= 1400,
        "this test needs a hard open-file limit of at least 1400, found {hard}"
    );
    let mut launcher = Command::new("sh");
    launcher.args(["-c", "ulimit -Sn 512 && exec \"$0\" \"$@\"", BIN]);
    let s = Server::start_via(launcher, &["--store", "memory"], &[]);
    let mut clients = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        clients.push(c);
    }
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 256];
        let n = c.read(&mut buf).unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "client {i}");
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid())).unwrap_or_default();
    if let Some(line) = limits.lines().find(|l| l.starts_with("Max open files")) {
        assert!(!line.contains(" 512 "), "the soft limit was not raised: {line}");
    }
}
