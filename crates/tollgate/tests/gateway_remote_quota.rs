//! The gateway metering against another real `tollgate serve` as its remote quota service: the
//! `[gateway.quota] api_key` is sent as `x-api-key`, and a wrong key is a misconfiguration
//! (held, shown by `/readyz` and a metric), never an outage that delivers unmetered; a
//! `Retry-After` no window could need (a broken or hostile service) holds until the longest
//! window's end instead of stopping the gateway or retrying in a loop.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;

fn gateway_config(dir: &Path, quota: &str, api_key: &str) -> std::path::PathBuf {
    let file = dir.join("gateway.toml");
    let remote = format!(
        "[gateway.quota]\nmode = \"remote\"\nurl = \"{quota}/v1/quota\"\ntimeout_ms = 5000\n{api_key}"
    );
    std::fs::write(&file, gateway_toml(&dir.join("in"), &dir.join("out"), &remote, "")).unwrap();
    file
}

#[test]
fn a_wrong_api_key_holds_instead_of_failing_open_and_the_right_one_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let quota_cfg = dir.path().join("quota.toml");
    std::fs::write(&quota_cfg, "[[client]]\nkey = \"k-right\"\nname = \"gateway\"\n").unwrap();
    let quota = Server::start(&["--config", quota_cfg.to_str().unwrap(), "--store", "memory"]);

    // A wrong key: the quota service answers 401. The default on_unavailable is "deliver", yet
    // nothing may be delivered unmetered.
    let gw_dir = dir.path().join("gw");
    std::fs::create_dir_all(gw_dir.join("in")).unwrap();
    let cfg = gateway_config(&gw_dir, &quota.url, "api_key = \"k-wrong\"");
    let data = gw_dir.join("data");
    let args =
        ["--config", cfg.to_str().unwrap(), "--store", "memory", "--data", data.to_str().unwrap()];
    let gw = Server::start(&args);
    std::fs::write(gw_dir.join("in/a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
    wait_until("the item to be held", Duration::from_secs(20), || {
        gw.get("/v1/queue?state=held").contains("quota misconfigured")
    });
    let held = gw.get("/v1/queue?state=held");
    assert!(held.contains("401"), "the reason names the answer: {held}");
    let ready = gw.get("/readyz");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(ready.contains("gateway_quota") && ready.contains("401"), "{ready}");
    let metrics = gw.get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_gateway_quota_misconfigured_total")
                && !l.ends_with(" 0")),
        "{metrics}"
    );
    assert_eq!(delivered(&gw_dir.join("out")), 0, "never delivered unmetered");
    drop(gw);

    // The right key from the environment overrides the file; the held item is metered and
    // delivered after the restart, and the quota service counted it.
    let gw = Server::start_with_env(&args, &[("TOLLGATE_GATEWAY_QUOTA_API_KEY", "k-right")]);
    wait_until("the delivery", Duration::from_secs(20), || delivered(&gw_dir.join("out")) == 1);
    let ready = gw.get("/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let counters = quota.get("/v1/counters");
    assert!(counters.contains("CARRIERA"), "the quota service metered it: {counters}");
}

#[test]
fn a_retry_after_past_any_window_holds_without_stopping_or_spinning() {
    // u64::MAX seconds overflowed the wait (a panic that silently stopped the gateway's
    // processing); 9223372000000000 s overflowed the due time (a retry loop in release).
    for retry_after in ["18446744073709551615", "9223372000000000"] {
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&asked);
        let quota = HttpStub::start(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Message::reply(429, r#"{"limit":1}"#).with("retry-after", retry_after)
        });
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        let cfg = gateway_config(dir.path(), &quota.url(), "");
        let data = dir.path().join("data");
        let args = ["--config", cfg.to_str().unwrap(), "--store", "memory"];
        let gw = Server::start(&[&args[..], &["--data", data.to_str().unwrap()]].concat());
        for (n, partner) in ["CARRIERA", "CARRIERB"].into_iter().enumerate() {
            let file = dir.path().join(format!("in/{n}.edi"));
            std::fs::write(file, Status214::new(partner, 1).build()).unwrap();
            wait_until("the item held", Duration::from_secs(20), || {
                gw.get("/v1/queue?state=held").contains(partner)
            });
        }
        std::thread::sleep(Duration::from_secs(2));
        let held = gw.request("GET", "/v1/queue?state=held", &[], b"").json();
        let items = held.as_array().unwrap();
        assert_eq!(items.len(), 2, "{held}");
        for item in items {
            assert_eq!(item["attempts"], 0, "no retry loop ({retry_after}): {item}");
            let at = item["next_attempt_at"].as_str().unwrap_or_default();
            assert!(at.starts_with("21"), "due within the longest window ({retry_after}): {item}");
        }
        assert_eq!(asked.load(Ordering::SeqCst), 2, "one question per item ({retry_after})");
        assert_eq!(delivered(&dir.path().join("out")), 0);
    }
}
