//! `rediss://` against a real `redis-server` listening with TLS (certificates made at test
//! time): the server's certificate is verified against `[store] ca_file`; one from another
//! CA leaves the store degraded with a reason naming the refused certificate (answers follow
//! `store_unavailable`), and a URL asking to skip verification (`#insecure`) is refused.

mod common;

use std::time::{Duration, Instant};

use common::{RedisServer, Server, exit_within};
use tollgate_testkit::tls::TestCa;

fn readyz(s: &Server) -> serde_json::Value {
    let raw = s.get("/readyz");
    serde_json::from_str(raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")).unwrap()
}

fn wait_readyz(s: &Server, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = readyz(s);
        if pred(&r) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rediss_verifies_the_server_certificate_against_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Redis CA");
    let (cert, key) = ca.server("redis").write(dir.path(), "redis");
    let Some(redis) = RedisServer::start_tls(&cert, &key) else { return };
    let url = redis.rediss_url();

    let trusted = ca.write(dir.path(), "redis-ca");
    let conf = dir.path().join("good.toml");
    std::fs::write(&conf, format!("[store]\nca_file = {:?}\n", trusted.to_str().unwrap())).unwrap();
    let s = Server::start(&["--store", &url, "--config", conf.to_str().unwrap()]);
    let r = wait_readyz(&s, |r| r["store_error"].is_null());
    assert!(r["store_error"].is_null(), "{r}");
    drop(s);

    // A certificate from a CA the file does not hold: never connected, and /readyz says why.
    let other = TestCa::new("Other CA").write(dir.path(), "other-ca");
    let conf = dir.path().join("bad.toml");
    std::fs::write(&conf, format!("[store]\nca_file = {:?}\n", other.to_str().unwrap())).unwrap();
    let s = Server::start(&["--store", &url, "--config", conf.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(500));
    let r =
        wait_readyz(&s, |r| r["store_error"].as_str().is_some_and(|e| e.contains("certificate")));
    let err = r["store_error"].as_str().unwrap_or_default();
    assert!(err.contains("invalid peer certificate") && err.contains("UnknownIssuer"), "{r}");

    // Skipping verification is not offered.
    let o = exit_within(
        &["serve", "--listen", "127.0.0.1:0", "--store", &format!("{url}#insecure")],
        Duration::from_secs(20),
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "a config mistake exits 2: {e}");
    assert!(e.contains("#insecure would skip the verification"), "{e}");
}
