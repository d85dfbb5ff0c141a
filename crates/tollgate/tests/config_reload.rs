//! Hot reload of a real `tollgate serve`'s config file validates the whole file, as start-up
//! does: a mistake outside `[[policy]]` is refused as a whole (the old limits stay, the error
//! shows in `/readyz` and the metrics), a valid change outside `[[policy]]` is reported as
//! needing a restart, and a file the reload accepted always starts again.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

fn file(limit: u64, extra: &str) -> String {
    format!(
        "[server]\nheader_timeout_ms = 20000\n{extra}\n[[policy]]\nmatch = \"R:*\"\nlimit = {limit}\nunit = \"day\"\noverride = true\n"
    )
}

/// A GET over a plain socket: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let headers = [("metering-id", "R:probe"), ("message-weight", "0")];
    let m = common::request_at(addr, "GET", path, &headers, b"");
    (m.status, m.text())
}

fn json(addr: &str, path: &str) -> Value {
    serde_json::from_str(&get(addr, path).1).unwrap()
}

/// Polls `/readyz` until `pred` holds (10 s at most: the fallback poll is every 2 s).
fn wait_ready(addr: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = json(addr, "/readyz");
        if pred(&r) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn limit(addr: &str) -> Value {
    json(addr, "/v1/quota")["limit"].clone()
}

#[test]
fn a_mistake_outside_policies_is_refused_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let p = path.to_str().unwrap();
    std::fs::write(&path, file(10, "")).unwrap();
    let s = Server::start(&["--store", "memory", "--config", p]);
    assert_eq!(limit(&s.addr), 10);

    // Each of these also raises the limit; none may take effect.
    let bad = [
        // Each error names its table, entry and `KEY = VALUE`.
        (file(20, "listen_typo = 1"), "[server] listen_typo = 1: unknown field"),
        (file(21, "max_connections = 0"), "[server] max_connections = 0"),
        (format!("{}[store]\nkind = \"redis\"\n", file(22, "")), "url"),
        (
            format!(
                "{}[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"fortnight\"\ndeliver = \"dir:x\"\n",
                file(23, "")
            ),
            "[[gateway.route]] #1 (name = \"S\") unit = \"fortnight\"",
        ),
    ];
    let mut errors = 0;
    for (body, needle) in bad {
        std::fs::write(&path, &body).unwrap();
        let r = wait_ready(&s.addr, |r| {
            r["policies"]["last_error"].as_str().is_some_and(|e| e.contains(needle))
        });
        let err = r["policies"]["last_error"].as_str().unwrap_or_default();
        assert!(err.contains(needle) && err.contains(p), "{needle}: {r}");
        assert_eq!(r["status"], "degraded", "{r}");
        assert_eq!(limit(&s.addr), 10, "a refused file changed the limit: {body}");
        errors += 1;
    }
    assert_eq!(errors, 4);
    let metrics = get(&s.addr, "/metrics").1;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_policy_reload_errors_total"))
        .unwrap_or_else(|| panic!("{metrics}"));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 4.0, "{line}");

    // A valid file applies its policies and clears the error.
    std::fs::write(&path, file(30, "")).unwrap();
    let r = wait_ready(&s.addr, |r| r["status"] == "ready");
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(limit(&s.addr), 30);
    assert_eq!(r["restart_needed"], serde_json::json!([]), "{r}");
}

#[test]
fn changes_that_need_a_restart_are_reported_and_the_file_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let p = path.to_str().unwrap();
    std::fs::write(&path, file(10, "")).unwrap();
    let s = Server::start(&["--store", "memory", "--config", p]);

    let changed = format!(
        "{}[store]\nflush_interval_ms = 50\n",
        file(40, "max_connections = 100\nadmin_token = \"new-secret\"")
    );
    std::fs::write(&path, &changed).unwrap();
    let r = wait_ready(&s.addr, |r| r["restart_needed"].as_array().is_some_and(|a| !a.is_empty()));
    let needed: Vec<&str> =
        r["restart_needed"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(needed.contains(&"[server] max_connections changed: restart to apply"), "{r}");
    assert!(needed.contains(&"[server] admin_token changed: restart to apply"), "{r}");
    assert!(needed.contains(&"[store] changed: restart to apply"), "{r}");
    assert!(!r.to_string().contains("new-secret"), "a secret is shown: {r}");
    assert_eq!(r["status"], "ready");
    // The policies are live already.
    assert_eq!(limit(&s.addr), 40);

    // What the reload accepted, a restart accepts too.
    assert_eq!(s.sigterm().code(), Some(0));
    let s = Server::start(&["--store", "memory", "--config", p]);
    assert_eq!(limit(&s.addr), 40);
    let r = json(&s.addr, "/readyz");
    assert_eq!(r["restart_needed"], serde_json::json!([]), "{r}");
}
