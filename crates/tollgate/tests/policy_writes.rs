//! `PUT /v1/policies` from several operators at once, through the real `tollgate serve`: the
//! writes are serialized, so the config file parses after every round and holds the set in
//! force; `GET /v1/policies` answers an `ETag`, a `PUT` whose `If-Match` names an older version
//! is refused with 412 (naming both versions) and leaves no audit record, and every 200 has
//! exactly one `policies.replace` record.

mod common;

use std::time::Duration;

use common::{Message, Server, call_at, jitter};
use serde_json::{Value, json};

/// A config file with another section and a comment that every rewrite must keep.
fn start(dir: &std::path::Path) -> (Server, std::path::PathBuf) {
    let cfg = dir.join("tollgate.toml");
    let text = format!(
        "# Limits agreed with the carriers.\n[server]\ndata = \"{}\"\n\n\
         [[policy]]\nmatch = \"Carrier:*\" # every carrier\nlimit = 100\nunit = \"day\"\n",
        dir.join("data").display()
    );
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    (server, cfg)
}

/// A policy set of `n` rules whose limits all derive from `tag` (distinct tags, distinct sets).
fn policies(tag: u64, n: u64) -> String {
    let rules: Vec<Value> = (0..n)
        .map(|i| json!({"match": format!("Carrier{i}:*"), "limit": tag * 1000 + i, "unit": "day"}))
        .collect();
    json!({ "policies": rules }).to_string()
}

fn replace_records(server: &Server) -> usize {
    let reply = server.call("GET", "/v1/audit?limit=1000", &[], "");
    assert_eq!(reply.status, 200, "{reply:?}");
    let records = reply.json();
    records.as_array().unwrap().iter().filter(|r| r["action"] == "policies.replace").count()
}

/// The version `GET /v1/policies` answers, and the policies in force.
fn version(server: &Server) -> (String, Value) {
    let reply = server.call("GET", "/v1/policies", &[], "");
    assert_eq!(reply.status, 200, "{reply:?}");
    let etag = reply.header("etag").unwrap_or_else(|| panic!("no ETag: {reply:?}"));
    (etag.to_owned(), reply.json()["policies"].clone())
}

/// The file parses (as `serve` would read it) and holds exactly `in_force`.
fn assert_file_holds(cfg: &std::path::Path, in_force: &Value, round: u64) {
    let text = std::fs::read_to_string(cfg).unwrap();
    let parsed: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("round {round}: {e}\n{text}"));
    assert!(text.starts_with("# Limits agreed with the carriers."), "round {round}: {text}");
    assert!(parsed.contains_key("server"), "round {round}: {text}");
    let in_file: Vec<(String, u64)> = parsed["policy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["match"].as_str().unwrap().to_owned(), p["limit"].as_integer().unwrap() as u64))
        .collect();
    let in_force: Vec<(String, u64)> = in_force
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["match"].as_str().unwrap().to_owned(), p["limit"].as_u64().unwrap()))
        .collect();
    assert_eq!(in_file, in_force, "round {round}: the file holds the set in force");
}

#[test]
fn four_puts_at_once_keep_the_file_whole_and_each_200_has_one_record() {
    let dir = tempfile::tempdir().unwrap();
    let (server, cfg) = start(dir.path());
    let mut records = replace_records(&server);
    for round in 1..=25u64 {
        let (etag, _) = version(&server);
        // Two editors send the version they loaded, two send none (a script).
        let replies: Vec<(u64, Message)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|n| {
                    let (addr, etag) = (server.addr.clone(), etag.clone());
                    s.spawn(move || {
                        std::thread::sleep(Duration::from_micros(jitter(round * 4 + n) % 3000));
                        let body = policies(round * 10 + n, 60);
                        let conditional = n < 2;
                        let headers: Vec<(&str, &str)> =
                            if conditional { vec![("if-match", &etag)] } else { vec![] };
                        (n, call_at(&addr, "PUT", "/v1/policies", &headers, &body))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ok_conditional = 0;
        for (n, reply) in &replies {
            let conditional = *n < 2;
            match (conditional, reply.status) {
                (_, 200) => {
                    assert!(reply.header("etag").is_some(), "round {round}: {reply:?}");
                    // The answer shows the set this PUT put in force (with its version), even
                    // when another PUT has replaced it since.
                    let first = &reply.json()["policies"][0]["limit"];
                    assert_eq!(first, &json!((round * 10 + n) * 1000), "round {round}");
                    if conditional {
                        ok_conditional += 1;
                    }
                }
                (true, 412) => {
                    let p = reply.json();
                    assert_eq!(p["status"], 412, "round {round}: {p}");
                    assert_eq!(p["if_match"], etag.as_str(), "names the stale version: {p}");
                    let ct = reply.header("content-type").unwrap_or_default();
                    assert_eq!(ct, "application/problem+json", "round {round}");
                }
                _ => panic!("round {round}: {reply:?}"),
            }
        }
        // Every 200 changes the version, so one loaded version is applied at most once.
        assert!(ok_conditional <= 1, "round {round}: {replies:?}");
        let oks = replies.iter().filter(|(_, r)| r.status == 200).count();
        assert!(oks >= 2, "the unconditional PUTs always apply: {replies:?}");
        let (_, in_force) = version(&server);
        assert_file_holds(&cfg, &in_force, round);
        let now = replace_records(&server);
        assert_eq!(now - records, oks, "round {round}: one audit record per 200");
        records = now;
    }
    // The file is what a restart reads.
    server.sigkill();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let (_, in_force) = version(&server);
    assert_file_holds(&cfg, &in_force, 0);
}

#[test]
fn a_stale_if_match_is_refused_with_412_and_leaves_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let (server, cfg) = start(dir.path());
    let (loaded, _) = version(&server);
    assert!(loaded.starts_with('"') && loaded.ends_with('"'), "a strong ETag: {loaded}");

    // Someone else applies a change first: the version moves on.
    let first = server.call("PUT", "/v1/policies", &[("if-match", &loaded)], &policies(1, 3));
    assert_eq!(first.status, 200, "{first:?}");
    let (current, in_force) = version(&server);
    assert_ne!(current, loaded);
    assert_eq!(first.header("etag"), Some(current.as_str()), "the 200 names it too");
    let file = std::fs::read_to_string(&cfg).unwrap();
    let records = replace_records(&server);

    // The editor who loaded the older version is refused, naming both versions.
    let stale = server.call("PUT", "/v1/policies", &[("if-match", &loaded)], &policies(2, 3));
    assert_eq!(stale.status, 412, "{stale:?}");
    let p = stale.json();
    assert_eq!(p["if_match"], loaded.as_str(), "{p}");
    assert_eq!(p["current"], current.as_str(), "{p}");
    assert!(p["detail"].as_str().unwrap().contains("reload"), "{p}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), file, "the file is untouched");
    assert_eq!(version(&server), (current.clone(), in_force), "the set in force is untouched");
    assert_eq!(replace_records(&server), records, "a refused change has no record");

    // A weak tag never matches; a malformed one is a 400 naming the header and value.
    let weak = format!("W/{current}");
    let reply = server.call("PUT", "/v1/policies", &[("if-match", &weak)], &policies(3, 3));
    assert_eq!(reply.status, 412, "{reply:?}");
    let reply = server.call("PUT", "/v1/policies", &[("if-match", "abc")], &policies(3, 3));
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.json()["invalid_header"], "if-match", "{reply:?}");
    assert_eq!(reply.json()["value"], "abc", "{reply:?}");
    assert_eq!(replace_records(&server), records);

    // The current version in a list, or `*`, applies; so does a PUT without If-Match.
    let list = format!("\"nope\", {current}");
    let reply = server.call("PUT", "/v1/policies", &[("if-match", &list)], &policies(4, 3));
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = server.call("PUT", "/v1/policies", &[("if-match", "*")], &policies(5, 3));
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = server.call("PUT", "/v1/policies", &[], &policies(6, 3));
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(replace_records(&server), records + 3);
}
