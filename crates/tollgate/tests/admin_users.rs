//! `[[user]]`s of the admin API through the real `tollgate serve`: each role may do what it is
//! for and gets 403 (naming the role) for the rest, the admin token still does everything, a
//! wrong token is 401, every change lands in the audit log (durable across a restart), and a
//! bad `token_sha256` stops the start with `FILE:LINE:COL`.

mod common;

use std::time::Duration;

use common::{Server, Status214, exit_within, gateway_toml, wait_until};

fn sha256(token: &str) -> String {
    common::sha256_hex(token)
}

/// One request with an optional bearer token; the status and the body.
fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("authorization", a)).into_iter().collect();
    let reply = server.call(method, path, &headers, body);
    (reply.status, reply.text())
}

#[test]
fn each_role_does_what_it_is_for_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let users = format!(
        "[server]\nadmin_token = \"root-token\"\ndata = \"{data}\"\n\n\
         [[user]]\nname = \"vera\"\ntoken_sha256 = \"{v}\"\nrole = \"viewer\"\n\n\
         [[user]]\nname = \"otto\"\ntoken_sha256 = \"{o}\"\nrole = \"operator\"\n\n\
         [[user]]\nname = \"lena\"\ntoken_sha256 = \"{l}\"\nrole = \"limits\"\n",
        data = dir.path().join("data").display(),
        v = sha256("vera-token"),
        o = sha256("otto-token"),
        l = sha256("lena-token"),
    );
    let landing = dir.path().join("in");
    let text = gateway_toml(&landing, &dir.path().join("out"), "", &users)
        .replace("limit = 1000", "limit = 1");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    std::fs::create_dir_all(&landing).unwrap();
    std::fs::write(landing.join("a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
    std::fs::write(landing.join("b.edi"), Status214::new("CARRIERA", 2).build()).unwrap();
    let held = || call(&server, "GET", "/v1/queue?state=held", Some("vera-token"), "");
    wait_until("one item held", Duration::from_secs(20), || held().1.contains("\"id\""));
    let id = serde_json::from_str::<serde_json::Value>(&held().1).unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let release = format!("/v1/queue/{id}/release");
    let policies = r#"{"policies":[{"match":"X:*","limit":5,"unit":"day"}]}"#;

    assert_eq!(call(&server, "GET", "/v1/counters", None, "").0, 401);
    assert_eq!(call(&server, "GET", "/v1/counters", Some("nobody"), "").0, 401);
    assert_eq!(call(&server, "GET", "/v1/counters", Some("vera-token"), "").0, 200);
    assert_eq!(call(&server, "GET", "/v1/policies", Some("otto-token"), "").0, 200);

    let (status, body) = call(&server, "POST", &release, Some("vera-token"), "");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"role\":\"viewer\"") && body.contains("vera"), "{body}");
    assert_eq!(call(&server, "PUT", "/v1/policies", Some("otto-token"), policies).0, 403);
    assert_eq!(call(&server, "POST", &release, Some("lena-token"), "").0, 403);
    assert_eq!(call(&server, "DELETE", "/v1/counters/X:1", Some("otto-token"), "").0, 403);

    let (status, body) = call(&server, "POST", &release, Some("otto-token"), "");
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&server, "PUT", "/v1/policies", Some("lena-token"), policies);
    assert_eq!(status, 200, "{body}");
    assert_eq!(call(&server, "DELETE", "/v1/counters/X:1", Some("lena-token"), "").0, 200);
    assert_eq!(call(&server, "GET", "/v1/counters", Some("root-token"), "").0, 200);
    assert!(std::fs::read_to_string(&cfg).unwrap().contains("match = \"X:*\""));

    // Every change is in the audit log, newest first, with who, what, before and after; the
    // refused calls are not. It survives a restart.
    let audit = |server: &Server| {
        let (status, body) = call(server, "GET", "/v1/audit", Some("vera-token"), "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Vec<serde_json::Value>>(&body).unwrap()
    };
    let check = |records: &[serde_json::Value]| {
        let seen: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r["action"].as_str().unwrap(), r["who"].as_str().unwrap()))
            .collect();
        assert_eq!(
            seen,
            [("counter.reset", "lena"), ("policies.replace", "lena"), ("queue.release", "otto")]
        );
        assert_eq!(records[2]["target"], id.as_str());
        assert_eq!(records[2]["before"]["state"], "held");
        assert_eq!(records[2]["after"]["state"], "admitted");
        assert_eq!(records[1]["after"][0]["match"], "X:*");
        assert!(records.iter().all(|r| r["at"].as_str().is_some_and(|t| t.ends_with('Z'))));
    };
    check(&audit(&server));
    assert_eq!(call(&server, "GET", "/v1/audit?limit=0", Some("vera-token"), "").0, 400);
    server.sigterm();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    check(&audit(&server));
    assert_eq!(call(&server, "GET", "/v1/audit", None, "").0, 401);
}

#[test]
fn a_bad_user_table_stops_the_start_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("t.toml");
    std::fs::write(&cfg, "[[user]]\nname = \"vera\"\ntoken_sha256 = \"abc\"\nrole = \"viewer\"\n")
        .unwrap();
    let o = exit_within(&["serve", "--config", cfg.to_str().unwrap()], Duration::from_secs(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("t.toml:3:") && err.contains("token_sha256"), "{err}");
    assert!(err.contains("64 hexadecimal digits"), "{err}");
    std::fs::write(
        &cfg,
        "[[user]]\nname = \"vera\"\ntoken_sha256 = \"{}\"\nrole = \"owner\"\n"
            .replace("{}", &"a".repeat(64)),
    )
    .unwrap();
    let o = exit_within(&["serve", "--config", cfg.to_str().unwrap()], Duration::from_secs(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("t.toml:4:") && err.contains("role = \"owner\""), "{err}");
}
