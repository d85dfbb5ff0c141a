//! The real `tollgate serve`'s log output as an operator's pipeline gets it: through a pipe
//! (never a terminal here), so no ANSI escape codes; with `--log-format json` or
//! `[server] log_format = "json"`, one JSON object per line carrying the record's fields (a
//! failed gateway delivery names its item, partner and metering id); `RUST_LOG` filters; and
//! the `listening on http://ADDR` line on stdout is the same in both formats.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{BIN, Status214, free_port};

/// A gateway whose only route delivers to a port nobody listens on, so every delivery fails
/// and is logged at warn with its item's fields.
fn config(dir: &Path, extra_server: &str) -> PathBuf {
    let file = dir.join("tollgate.toml");
    let port = free_port();
    let text = format!(
        r#"
[server]
data = "{data}"
{extra_server}

[gateway]
inbound = ["{inbound}"]
poll_ms = 20
settle_ms = 0

[[gateway.partner]]
name = "CarrierXYZ"
ids = ["ZZ:CARRIERXYZ"]

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000
unit = "day"
deliver = "http://127.0.0.1:{port}/in"
"#,
        data = dir.join("data").display(),
        inbound = dir.join("in").display(),
    );
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(&file, text).unwrap();
    file
}

/// A running server whose stderr is collected line by line; killed when dropped.
struct Logged {
    child: Child,
    listening: String,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Logged {
    fn start(args: &[&str], rust_log: Option<&str>) -> Logged {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .env_remove("NO_COLOR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match rust_log {
            Some(v) => cmd.env("RUST_LOG", v),
            None => cmd.env_remove("RUST_LOG"),
        };
        let mut child = cmd.spawn().unwrap();
        let (out_tx, out_rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = out_tx.send(line);
            }
        });
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            // Raw bytes, so an escape code cannot hide in a lossy conversion.
            let mut all = Vec::new();
            let mut r = BufReader::new(stderr);
            let mut buf = [0u8; 4096];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                }
                while let Some(nl) = all.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = all.drain(..=nl).collect();
                    let _ = tx.send(String::from_utf8_lossy(&line[..nl]).into_owned());
                }
            }
        });
        let listening = out_rx.recv_timeout(Duration::from_secs(20)).expect("no stdout line");
        Logged { child, listening, lines, seen: Vec::new() }
    }

    /// Collects stderr lines until one satisfies `f`, failing the test after 20 s.
    fn wait_for(&mut self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("no log line {what}; seen:\n{}", self.seen.join("\n")),
            }
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drop_214(dir: &Path) {
    let tmp = dir.join("in").join("a.part");
    std::fs::write(&tmp, Status214::new("CARRIERXYZ", 7).build()).unwrap();
    std::fs::rename(&tmp, dir.join("in").join("a.edi")).unwrap();
}

#[test]
fn piped_text_logs_have_no_escape_codes_and_rust_log_filters() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "");
    let mut s = Logged::start(&["--config", conf.to_str().unwrap()], Some("debug"));
    assert!(s.listening.starts_with("listening on http://127.0.0.1:"), "{}", s.listening);
    s.wait_for("gateway started", |l| l.contains("gateway started"));
    drop_214(dir.path());
    let line = s.wait_for("delivery failed", |l| l.contains("delivery failed; retrying"));
    assert!(line.contains("WARN") && line.contains("partner=CarrierXYZ"), "{line}");
    for l in &s.seen {
        assert!(!l.contains('\x1b'), "escape code in piped log: {l:?}");
    }
    drop(s);

    // RUST_LOG=warn leaves out the info records, keeps the warnings.
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "");
    let mut s = Logged::start(&["--config", conf.to_str().unwrap()], Some("warn"));
    drop_214(dir.path());
    s.wait_for("delivery failed", |l| l.contains("delivery failed; retrying"));
    assert!(
        !s.seen.iter().any(|l| l.contains(" INFO ") || l.contains("gateway started")),
        "info records under RUST_LOG=warn:\n{}",
        s.seen.join("\n")
    );
}

fn check_json(mut s: Logged, dir: &Path) {
    assert!(s.listening.starts_with("listening on http://127.0.0.1:"), "{}", s.listening);
    s.wait_for("gateway started", |l| l.contains("gateway started"));
    drop_214(dir);
    let line = s.wait_for("delivery failed", |l| l.contains("delivery failed; retrying"));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN", "{line}");
    assert_eq!(v["message"], "delivery failed; retrying", "{line}");
    assert_eq!(v["partner"], "CarrierXYZ", "{line}");
    assert_eq!(v["metering_id"], "ShipmentStatus:CarrierXYZ", "{line}");
    assert_eq!(v["attempts"], 1, "{line}");
    assert!(v["item"].as_str().is_some_and(|i| !i.is_empty()), "{line}");
    assert!(v["reason"].as_str().is_some_and(|r| !r.is_empty()), "{line}");
    assert!(v["timestamp"].is_string() && v["target"].is_string(), "{line}");
    for l in &s.seen {
        let v: serde_json::Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {l:?}"));
        assert!(v.is_object() && v["message"].is_string() && v["level"].is_string(), "{l}");
    }
}

#[test]
fn json_logs_are_one_object_per_line_with_the_record_fields() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "");
    let s = Logged::start(&["--config", conf.to_str().unwrap(), "--log-format", "json"], None);
    check_json(s, dir.path());
}

#[test]
fn the_config_key_chooses_json_and_a_bad_value_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "log_format = \"json\"");
    let s = Logged::start(&["--config", conf.to_str().unwrap()], None);
    check_json(s, dir.path());

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nlog_format = \"yaml\"\n").unwrap();
    let out = common::exit_within(&["serve", "--config", bad.to_str().unwrap()], secs(10));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let want =
        format!("{}:2:14: [server] log_format = \"yaml\": expected text or json", bad.display());
    assert!(err.contains(&want), "{err}");
    let out = common::exit_within(&["serve", "--log-format", "xml"], secs(10));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("xml"));
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
