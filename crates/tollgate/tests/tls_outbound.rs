//! The gateway's outbound HTTPS calls verify the server's certificate: against
//! `[gateway.quota] ca_file` / `[gateway] deliver_ca_file` when set. A certificate from
//! another CA, or an expired one, is refused with a reason naming certificate verification:
//! the remote quota check holds the item (never delivered unmetered), a delivery is retried
//! with that reason. Certificates are made at test time; every server is a real `tollgate
//! serve`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use tollgate_testkit::tls::{Pem, TestCa};

/// A `tollgate serve` over HTTPS with `pem`.
fn https_server(dir: &Path, name: &str, pem: &Pem) -> Server {
    let (cert, key) = pem.write(dir, name);
    Server::start(&[
        "--store",
        "memory",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
}

/// A gateway (plain HTTP) in `dir/gw` metering against `quota_url` with `ca_file`.
fn gateway(dir: &Path, extra_gateway: &str) -> (Server, std::path::PathBuf) {
    let gw = dir.join("gw");
    std::fs::create_dir_all(gw.join("in")).unwrap();
    let cfg = gw.join("gateway.toml");
    std::fs::write(&cfg, gateway_toml(&gw.join("in"), &gw.join("out"), extra_gateway, "")).unwrap();
    let data = gw.join("data");
    let s = Server::start_logging(
        &["--config", cfg.to_str().unwrap(), "--store", "memory", "--data", data.to_str().unwrap()],
        &gw.join("log"),
    );
    (s, gw)
}

fn remote(url: &str, ca: &Path) -> String {
    format!(
        "[gateway.quota]\nmode = \"remote\"\ntimeout_ms = 5000\nurl = \"{url}/v1/quota\"\nca_file = {:?}\n",
        ca.to_str().unwrap()
    )
}

#[test]
fn a_quota_service_with_a_certificate_from_another_ca_or_expired_is_refused_and_the_item_held() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Quota CA");
    let trusted = ca.write(dir.path(), "quota-ca");

    for (name, pem, needle) in [
        ("wrong-ca", TestCa::new("Other CA").server("quota"), "UnknownIssuer"),
        ("expired", ca.expired_server("quota"), "certificate expired"),
    ] {
        let case = dir.path().join(name);
        std::fs::create_dir_all(&case).unwrap();
        let quota = https_server(&case, "quota", &pem);
        let (gw, gw_dir) = gateway(&case, &remote(&quota.url, &trusted));
        std::fs::write(gw_dir.join("in/a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
        wait_until(&format!("the item to be held ({name})"), Duration::from_secs(20), || {
            gw.get("/v1/queue?state=held").contains("TLS certificate verification failed")
        });
        let held = gw.get("/v1/queue?state=held");
        assert!(held.contains(needle), "{name}: {held}");
        let ready = gw.get("/readyz");
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(ready.contains("verification failed"), "{ready}");
        assert_eq!(delivered(&gw_dir.join("out")), 0, "{name}: never delivered unmetered");
    }

    // The right CA and a valid certificate: metered remotely and delivered.
    let case = dir.path().join("good");
    std::fs::create_dir_all(&case).unwrap();
    let quota = https_server(&case, "quota", &ca.server("quota"));
    let (_gw, gw_dir) = gateway(&case, &remote(&quota.url, &trusted));
    std::fs::write(gw_dir.join("in/a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
    wait_until("the delivery", Duration::from_secs(20), || delivered(&gw_dir.join("out")) == 1);

    // A ca_file that holds no certificate is a config error naming the key and the file.
    let bad = dir.path().join("empty.pem");
    std::fs::write(&bad, "nothing here\n").unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        gateway_toml(
            &dir.path().join("in"),
            &dir.path().join("out"),
            &remote(&quota.url, &bad),
            "",
        ),
    )
    .unwrap();
    let o = exit_within(&["serve", "--config", cfg.to_str().unwrap()], Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("gateway.quota.ca_file = ") && err.contains("no CERTIFICATE"), "{err}");
}

#[test]
fn a_delivery_target_with_a_bad_certificate_is_retried_with_a_reason_naming_verification() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Partner CA");
    let trusted = ca.write(dir.path(), "partner-ca");
    let target = https_server(dir.path(), "target", &ca.expired_server("target"));
    let deliver = format!("deliver_ca_file = {:?}\n", trusted.to_str().unwrap());
    let gw = dir.path().join("gw");
    std::fs::create_dir_all(gw.join("in")).unwrap();
    let cfg = gw.join("gateway.toml");
    let toml = gateway_toml(&gw.join("in"), &gw.join("out"), &deliver, "").replace(
        &format!("deliver = \"dir:{}\"", gw.join("out").display()),
        &format!("deliver = \"{}/healthz\"", target.url),
    );
    assert!(toml.contains("https://"), "{toml}");
    std::fs::write(&cfg, toml).unwrap();
    let data = gw.join("data");
    let g = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--store",
        "memory",
        "--data",
        data.to_str().unwrap(),
    ]);
    std::fs::write(gw.join("in/a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
    wait_until("a failed delivery attempt", Duration::from_secs(20), || {
        g.get("/v1/queue").contains("TLS certificate verification failed")
    });
    let queue = g.get("/v1/queue");
    assert!(queue.contains("certificate expired"), "{queue}");
}
