//! The embedded store through the real binary: counters survive a graceful stop (SIGTERM), a
//! SIGKILL after the flush interval, and, with `durability = "strict"`, a SIGKILL right after
//! the answer.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(data: &Path, config: &Path) -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--store", "embedded", "--data"])
            .arg(data)
            .arg("--config")
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
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(20)).expect("no `listening on` line");
        Self { child, url }
    }

    /// `tollgate check` against this server; returns (exit code, used).
    fn check(&self, id: &str, weight: u64) -> (i32, u64) {
        let o = Command::new(BIN)
            .args(["check", "--url", &self.url, "--id", id, "--limit", "5", "--unit", "day"])
            .args(["--weight", &weight.to_string()])
            .output()
            .unwrap();
        let j: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
        (o.status.code().unwrap_or(-1), j["used"].as_u64().unwrap())
    }

    fn sigterm(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Restart:A", 3), (0, 3));
    assert_eq!(s.sigterm(), Some(0));
    assert!(data.join("counters.redb").exists());

    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Restart:A", 0), (0, 3), "the probe sees the 3 counted before the restart");
    assert_eq!(s.check("Restart:A", 3).0, 3, "3 + 3 > 5");
    assert_eq!(s.check("Restart:A", 2), (0, 5));
}

#[test]
fn counter_survives_sigkill_after_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "flush_interval_ms = 50");
    let data = dir.path().join("data");
    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Crash:A", 4), (0, 4));
    // Several flush intervals pass before the kill.
    std::thread::sleep(Duration::from_millis(500));
    s.sigkill();

    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Crash:A", 0), (0, 4));
    assert_eq!(s.check("Crash:A", 2).0, 3, "4 + 2 > 5");
}

#[test]
fn strict_durability_survives_sigkill_right_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "durability = \"strict\"\nflush_interval_ms = 1000");
    let data = dir.path().join("data");
    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Strict:A", 5), (0, 5));
    s.sigkill();

    let s = Serve::start(&data, &conf);
    assert_eq!(s.check("Strict:A", 1).0, 3, "the 5 were on disk before the answer");
}
