//! Policies hot-reloaded from a real file: an edit in place, an atomic rename, and an invalid
//! edit that is refused while the old policies stay in force (visible in `/readyz` and
//! `/metrics`).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Options, Server};
use serde_json::Value;
use tollgate_server::Policies;

fn policy(limit: u64) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[[policy]]\nmatch = \"R:*\"\nlimit = {limit}\nunit = \"day\"\noverride = true\n"
    )
}

/// Polls `/v1/quota` for a fresh id until the answer's limit is `want` (or 5 s pass).
async fn wait_for_limit(s: &Server, want: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n = 0;
    while Instant::now() < deadline {
        n += 1;
        let id = format!("R:probe{n}");
        let r = s.quota(&[("metering-id", &id), ("message-weight", "0")]).await;
        if r.status() == 200 && r.json::<Value>().await.unwrap()["limit"] == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn start(file: &Path) -> (Server, tollgate_server::PolicyWatcher) {
    let policies = Policies::from_file(file).unwrap();
    // A long poll, so only the file-system watch can make these tests pass in time.
    let watcher =
        policies.watch(Duration::from_secs(3600), tollgate_http::AccessGuard::new(None, true));
    let s = Server::with(Options { policies, ..Options::default() }).await;
    (s, watcher)
}

#[tokio::test]
async fn an_edit_in_place_is_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, policy(10)).unwrap();
    let (s, _w) = start(&file).await;
    assert!(wait_for_limit(&s, 10).await);
    std::fs::write(&file, policy(20)).unwrap();
    assert!(wait_for_limit(&s, 20).await, "the edit was not picked up");
    s.stop().await;
}

#[tokio::test]
async fn an_atomic_rename_is_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, policy(10)).unwrap();
    let (s, _w) = start(&file).await;
    assert!(wait_for_limit(&s, 10).await);
    let tmp = dir.path().join("tollgate.toml.new");
    std::fs::write(&tmp, policy(30)).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    assert!(wait_for_limit(&s, 30).await, "the renamed file was not picked up");
    // And again: the watch survives the inode change.
    std::fs::write(&tmp, policy(40)).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    assert!(wait_for_limit(&s, 40).await, "the second rename was not picked up");
    s.stop().await;
}

#[tokio::test]
async fn an_invalid_edit_is_refused_and_the_old_policies_stay() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, policy(10)).unwrap();
    let (s, _w) = start(&file).await;
    std::fs::write(&file, "[[policy]]\nmatch = \"R:*\"\nlimit = 99\nunit = \"fortnight\"\n")
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let ready = loop {
        let r: Value = s.http.get(s.url("/readyz")).send().await.unwrap().json().await.unwrap();
        if r["status"] == "degraded" || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ready["status"], "degraded", "{ready}");
    let err = ready["policies"]["last_error"].as_str().unwrap();
    assert!(err.contains("tollgate.toml:4:"), "{err}");
    assert!(err.contains("fortnight"), "{err}");
    // The old limit is still enforced.
    assert!(wait_for_limit(&s, 10).await);
    let m = s.http.get(s.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = m.lines().find(|l| l.starts_with("tollgate_policy_reload_errors_total")).unwrap();
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 1.0, "{line}");

    // A valid file clears the error.
    std::fs::write(&file, policy(11)).unwrap();
    assert!(wait_for_limit(&s, 11).await);
    let r: Value = s.http.get(s.url("/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(r["status"], "ready");
    assert_eq!(r["policies"]["last_error"], Value::Null);
    s.stop().await;
}

#[tokio::test]
async fn the_poll_catches_changes_without_events() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, policy(10)).unwrap();
    let policies = Policies::from_file(&file).unwrap();
    // No watch at all: a reload call stands in for one poll tick.
    let s = Server::with(Options { policies: policies.clone(), ..Options::default() }).await;
    std::fs::write(&file, policy(12)).unwrap();
    assert_eq!(policies.reload(), Ok(true));
    assert!(wait_for_limit(&s, 12).await);
    s.stop().await;
}

#[tokio::test]
async fn put_rewrites_the_file_and_keeps_other_sections() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, policy(10)).unwrap();
    let (s, _w) = start(&file).await;
    let r = s
        .http
        .put(s.url("/v1/policies"))
        .body(r#"{"policies":[{"match":"R:*","limit":55,"unit":"day","override":true}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(wait_for_limit(&s, 55).await);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("limit = 55"), "{text}");
    assert!(text.contains("[server]"), "{text}");
    // The watcher sees our own write and keeps the same set.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(wait_for_limit(&s, 55).await);
    s.stop().await;
}
