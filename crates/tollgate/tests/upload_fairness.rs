//! One client trickling uploads into the real `tollgate serve` cannot starve the others: raw
//! TCP connections with one client key declare bodies adding up to the whole
//! `upload_budget_bytes` and send a byte now and then. That client holds at most its share of
//! the budget (further uploads of its own get 429 at once), another client's upload is taken
//! meanwhile, and the slow uploads are cut with 408 once they fall below
//! `upload_min_rate_bytes` after `upload_rate_grace_ms`, giving their share back.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, Status214, status, wait_until};

const KIB: usize = 1024;

/// An upload with `key` declaring `len` bytes, of which only the head and one byte are sent.
fn trickle(addr: &str, key: &str, len: usize) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST /v1/interchanges HTTP/1.1\r\nhost: x\r\nx-api-key: {key}\r\n\
         content-length: {len}\r\n\r\nI"
    )
    .unwrap();
    c
}

/// The answer the server sends on `c` (read until it closes; 20 s at most).
fn answer(c: &mut TcpStream) -> String {
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_slow_client_loses_its_own_uploads_and_nobody_elses() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\ndata = \"{data}\"\n\n[[client]]\nname = \"slow\"\nkey = \"slow-key\"\n\n\
             [[client]]\nname = \"other\"\nkey = \"other-key\"\n\n[gateway]\n\
             max_upload_bytes = {max}\nupload_budget_bytes = {budget}\n\
             upload_min_rate_bytes = 65536\nupload_rate_grace_ms = 5000\n\n\
             [[gateway.route]]\nname = \"Status\"\ndocuments = [\"214\"]\nlimit = 1000\n\
             unit = \"day\"\ndeliver = \"dir:{out}\"\n",
            data = dir.path().join("data").display(),
            out = dir.path().join("out").display(),
            max = 1024 * KIB,
            budget = 3 * 1024 * KIB,
        ),
    )
    .unwrap();
    let s = Server::start(&["--config", file.to_str().unwrap()]);
    let upload = |key: &str| {
        let body = Status214::new("CARRIERA", 7).build();
        s.request("POST", "/v1/interchanges", &[("x-api-key", key)], &body)
    };

    // Six uploads of 512 KiB each declared: together the whole budget of 3 MiB. The server
    // takes them in whatever order its tasks run, so each answer is read on its own thread.
    let slow: Vec<TcpStream> = (0..6).map(|_| trickle(&s.addr, "slow-key", 512 * KIB)).collect();
    let (tx, answers) = std::sync::mpsc::channel();
    for (i, c) in slow.iter().enumerate() {
        let (tx, mut c) = (tx.clone(), c.try_clone().unwrap());
        std::thread::spawn(move || tx.send((i, answer(&mut c))));
    }
    let next = || answers.recv_timeout(Duration::from_secs(25)).expect("an answer within 25 s");
    // Two hold the slow client's share (a quarter of the budget, but at least one
    // max_upload_bytes: 1 MiB); the other four are refused at once, and the other client's
    // upload is taken while the two still trickle.
    let mut refused = Vec::new();
    for _ in 0..4 {
        let (i, a) = next();
        assert_eq!(status(&a), 429, "upload {i}: {a}");
        assert!(a.contains("upload-share-exhausted"), "{a}");
        refused.push(i);
    }
    let other = upload("other-key");
    assert_eq!(other.status, 202, "another client is starved: {}", other.text());

    // The trickling uploads are cut once below the minimum rate, and their share comes back.
    for (i, mut c) in slow.into_iter().enumerate().filter(|(i, _)| !refused.contains(i)) {
        c.write_all(b"S").unwrap_or_else(|e| panic!("upload {i} still open: {e}"));
    }
    for _ in 0..2 {
        let (i, a) = next();
        assert_eq!(status(&a), 408, "upload {i}: {a}");
        assert!(a.contains("upload-too-slow"), "{a}");
    }
    wait_until("the slow client's share returned", Duration::from_secs(10), || {
        upload("slow-key").status == 202
    });
}

/// The listener's own least rate (`body_min_rate_bytes`, 1,024 by default, after
/// `body_timeout_ms`) bends to a gateway whose upload rule is looser: an upload at 300 bytes per
/// second, within `upload_min_rate_bytes = 100`, is taken although `body_timeout_ms` is 500.
#[test]
fn an_upload_the_upload_rule_allows_is_not_cut_by_the_listener() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\ndata = \"{data}\"\nbody_timeout_ms = 500\n\n[gateway]\n\
             upload_min_rate_bytes = 100\nupload_rate_grace_ms = 500\n\n\
             [[gateway.route]]\nname = \"Status\"\ndocuments = [\"214\"]\nlimit = 1000\n\
             unit = \"day\"\ndeliver = \"dir:{out}\"\n",
            data = dir.path().join("data").display(),
            out = dir.path().join("out").display(),
        ),
    )
    .unwrap();
    let s = Server::start(&["--config", file.to_str().unwrap()]);
    let body = Status214::new("CARRIERA", 7).padded_to(1_000).build();
    assert!(body.len() > 900, "{} bytes", body.len());
    let mut c = TcpStream::connect(&s.addr).unwrap();
    write!(
        c,
        "POST /v1/interchanges HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    for chunk in body.chunks(30) {
        c.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut head = [0u8; 512];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = c.read(&mut head).unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");

    // At 10 bytes per second it falls behind the upload rule, which cuts it as an upload
    // (its reservation given back), not the listener's rule.
    let mut c = TcpStream::connect(&s.addr).unwrap();
    write!(
        c,
        "POST /v1/interchanges HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut answer = String::new();
    for byte in &body {
        if c.write_all(&[*byte]).is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        if let Ok(n) = c.read(&mut buf)
            && n > 0
        {
            answer = String::from_utf8_lossy(&buf[..n]).into_owned();
            break;
        }
    }
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("upload-too-slow"), "{answer}");
}
