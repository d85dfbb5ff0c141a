//! The embedded store through the real binary: counters survive a graceful stop (SIGTERM), a
//! SIGKILL after the flush interval, and, with `durability = "strict"`, a SIGKILL right after
//! the answer.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{BIN, Server};

fn start(data: &Path, config: &Path) -> Server {
    let (data, config) = (data.to_str().unwrap(), config.to_str().unwrap());
    Server::start(&["--store", "embedded", "--data", data, "--config", config])
}

/// `tollgate check` against this server; returns (exit code, used).
fn check(s: &Server, id: &str, weight: u64) -> (i32, u64) {
    let o = Command::new(BIN)
        .args(["check", "--url", &s.url, "--id", id, "--limit", "5", "--unit", "day"])
        .args(["--weight", &weight.to_string()])
        .output()
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    (o.status.code().unwrap_or(-1), j["used"].as_u64().unwrap())
}

fn config(dir: &Path, store: &str) -> std::path::PathBuf {
    let file = dir.join("tollgate.toml");
    std::fs::write(&file, format!("[store]\n{store}\n")).unwrap();
    file
}

#[test]
fn counter_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    // A flush interval far longer than the test: only the shutdown flush can save the count.
    let conf = config(dir.path(), "flush_interval_ms = 60000");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Restart:A", 3), (0, 3));
    assert_eq!(s.sigterm().code(), Some(0));
    assert!(data.join("counters.redb").exists());

    let s = start(&data, &conf);
    assert_eq!(
        check(&s, "Restart:A", 0),
        (0, 3),
        "the probe sees the 3 counted before the restart"
    );
    assert_eq!(check(&s, "Restart:A", 3).0, 3, "3 + 3 > 5");
    assert_eq!(check(&s, "Restart:A", 2), (0, 5));
}

#[test]
fn counter_survives_sigkill_after_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "flush_interval_ms = 50");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Crash:A", 4), (0, 4));
    // Several flush intervals pass before the kill.
    std::thread::sleep(Duration::from_millis(500));
    s.sigkill();

    let s = start(&data, &conf);
    assert_eq!(check(&s, "Crash:A", 0), (0, 4));
    assert_eq!(check(&s, "Crash:A", 2).0, 3, "4 + 2 > 5");
}

#[test]
fn strict_durability_survives_sigkill_right_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "durability = \"strict\"\nflush_interval_ms = 1000");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Strict:A", 5), (0, 5));
    s.sigkill();

    let s = start(&data, &conf);
    assert_eq!(check(&s, "Strict:A", 1).0, 3, "the 5 were on disk before the answer");
}
