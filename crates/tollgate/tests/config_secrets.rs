//! A configured secret never shows in what the real `tollgate serve` says about a bad config
//! file: not in the exit message at start-up, not in `/readyz` (which needs no credentials)
//! or the log after a refused reload. The error still names the key.

mod common;

use std::time::Duration;

use common::{Server, exit_within, wait_until};

/// Bad files, each with the secret it must not show and the key it must name.
const BAD: &[(&str, &str, &str)] = &[
    ("[server]\nadmin_token = 987654321\n", "987654321", "admin_token"),
    ("[server]\nadmin_token = 1.5e9\n", "1500000000", "admin_token"),
    ("[server]\nadmin_token = 31337.25\n", "31337", "admin_token"),
    ("[[client]]\nname = \"a\"\nkey = 12345678\n", "12345678", "key"),
    ("[gateway.quota]\napi_key = 44444444\n", "44444444", "api_key"),
    ("[store]\nkind = \"redis\"\nurl = \"http://u:pw-s3cret-99@h/0\"\n", "pw-s3cret-99", "url"),
    ("[store]\nkind = \"redis\"\nurl = \"redis://u:pw-s3cret-98@/0\"\n", "pw-s3cret-98", "redis"),
    (
        "[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"day\"\n\
         deliver = \"http://u:pw-s3cret-97@h/in\"\n",
        "pw-s3cret-97",
        "(name = \"S\") deliver",
    ),
    (
        "[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"day\"\n\
         deliver = \"http://h/in\"\n[gateway.route.delivery]\nheaders = { X-Key = 55555555 }\n",
        "55555555",
        "headers",
    ),
    (
        "[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"day\"\n\
         deliver = \"http://h/in\"\n[gateway.route.delivery]\n\
         headers = { \"Content-Type\" = \"hv-s3cret-96\" }\n",
        "hv-s3cret-96",
        "headers",
    ),
];

#[test]
fn a_refused_file_at_start_up_names_the_key_but_never_shows_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    let data = dir.path().join("data");
    for (body, secret, key) in BAD {
        std::fs::write(&file, body).unwrap();
        let args = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
            "--config",
            file.to_str().unwrap(),
        ];
        let o = exit_within(&args, Duration::from_secs(20));
        let said =
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(!o.status.success(), "{body}: started");
        assert!(!said.contains(secret), "{body}: the secret shows: {said}");
        assert!(said.contains(key), "{body}: the key is not named: {said}");
    }
}

#[test]
fn a_refused_reload_never_shows_the_secret_in_readyz_or_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (file, log) = (dir.path().join("t.toml"), dir.path().join("log"));
    std::fs::write(&file, "[server]\nadmin_token = \"first-token-of-the-admin\"\n").unwrap();
    let s = Server::start_logging(&["--store", "memory", "--config", file.to_str().unwrap()], &log);
    std::fs::write(&file, "[server]\nadmin_token = 987654321\n").unwrap();
    let mut ready = String::new();
    wait_until("the reload refused", Duration::from_secs(20), || {
        ready = s.get("/readyz");
        ready.contains("\"last_error\":\"")
    });
    assert!(!ready.contains("987654321"), "{ready}");
    assert!(ready.contains("admin_token"), "{ready}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("admin_token"), "{logged}");
    assert!(!logged.contains("987654321"), "{logged}");
    assert!(!logged.contains("first-token-of-the-admin"), "{logged}");
}
