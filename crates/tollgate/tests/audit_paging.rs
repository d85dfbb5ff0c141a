//! `GET /v1/audit` a page at a time through the real `tollgate serve`: following the `Link`
//! header lists every record once, newest first, with the filters kept; `action`, `who` and
//! `target` find texts in any case; a cursor still names the same record after more changes;
//! bad values are refused with 400 naming the parameter and the value.

mod common;

use common::{Server, sha256_hex};
use serde_json::Value;

/// A server with the admin token `root-token` and the `limits` user `lena`.
fn server(dir: &std::path::Path) -> Server {
    let cfg = dir.join("tollgate.toml");
    let text = format!(
        "[server]\nadmin_token = \"root-token\"\ndata = \"{}\"\n\n\
         [[user]]\nname = \"lena\"\ntoken_sha256 = \"{}\"\nrole = \"limits\"\n",
        dir.join("data").display(),
        sha256_hex("lena-token"),
    );
    std::fs::write(&cfg, text).unwrap();
    Server::start(&["--config", cfg.to_str().unwrap(), "--store", "memory"])
}

fn get(server: &Server, path: &str) -> common::Message {
    server.call("GET", path, &[("authorization", "Bearer root-token")], "")
}

fn reset(server: &Server, token: &str, id: &str) {
    let auth = format!("Bearer {token}");
    let reply =
        server.call("DELETE", &format!("/v1/counters/{id}"), &[("authorization", &auth)], "");
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// The `rel="next"` target of a `Link` header.
fn next_link(reply: &common::Message) -> Option<String> {
    let link = reply.header("link")?;
    assert!(link.ends_with(">; rel=\"next\""), "{link}");
    Some(link.trim_start_matches('<').split('>').next()?.to_owned())
}

/// The targets listed by following the pages from `first`, and how many pages there were.
fn follow(server: &Server, first: &str) -> (Vec<String>, usize) {
    let (mut targets, mut pages, mut url) = (Vec::new(), 0, Some(first.to_owned()));
    while let Some(u) = url {
        let reply = get(server, &u);
        assert_eq!(reply.status, 200, "{u}: {reply:?}");
        pages += 1;
        let records = reply.json();
        for r in records.as_array().unwrap() {
            targets.push(r["target"].as_str().unwrap().to_owned());
        }
        url = next_link(&reply);
        assert!(pages < 100, "the pages never end");
    }
    (targets, pages)
}

#[test]
fn pages_follow_the_link_with_the_filters_and_a_cursor_stays_put() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    for i in 0..12 {
        reset(&server, "root-token", &format!("Carrier:A{i:02}"));
        reset(&server, "lena-token", &format!("Bank:B{i:02}"));
    }
    let all: Vec<String> =
        (0..12).rev().flat_map(|i| [format!("Bank:B{i:02}"), format!("Carrier:A{i:02}")]).collect();
    assert_eq!(follow(&server, "/v1/audit?limit=5"), (all.clone(), 5));
    assert_eq!(follow(&server, "/v1/audit?limit=24"), (all, 1), "no Link after the last page");

    // Filters, in any case, kept in the Link of every page.
    let lena: Vec<String> = (0..12).rev().map(|i| format!("Bank:B{i:02}")).collect();
    assert_eq!(follow(&server, "/v1/audit?limit=5&who=LEN"), (lena, 3));
    let first = get(&server, "/v1/audit?limit=2&action=Counter.Reset&target=carrier%3Aa0");
    let link = next_link(&first).unwrap();
    assert!(
        link.contains("action=Counter.Reset") && link.contains("target=carrier%3Aa0"),
        "{link}"
    );
    assert!(link.contains("limit=2&") && link.contains("&before="), "{link}");
    let (targets, pages) = follow(&server, "/v1/audit?limit=2&action=RESET&target=carrier:a0");
    assert_eq!(targets, (0..10).rev().map(|i| format!("Carrier:A{i:02}")).collect::<Vec<_>>());
    assert_eq!(pages, 5);
    let none = get(&server, "/v1/audit?who=nobody");
    assert_eq!((none.status, none.json(), none.header("link")), (200, Value::Array(vec![]), None));

    // The cursor names a record, not a count from the newest: more changes move nothing.
    let page = get(&server, "/v1/audit?limit=3");
    let older = next_link(&page).unwrap();
    reset(&server, "root-token", "Carrier:NEW");
    let records = get(&server, &older).json();
    let targets: Vec<&str> =
        records.as_array().unwrap().iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(&targets[..3], ["Carrier:A10", "Bank:B09", "Carrier:A09"]);
    // Empty filters and an empty cursor filter nothing.
    assert_eq!(
        get(&server, "/v1/audit?before=&action=&who=&target=").json().as_array().unwrap().len(),
        25
    );
}

#[test]
fn bad_audit_queries_are_refused_naming_the_parameter_and_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    reset(&server, "root-token", "Carrier:A");
    let long = "x".repeat(201);
    for (query, parameter, value) in [
        ("limit=0", "limit", "0"),
        ("limit=1001", "limit", "1001"),
        ("limit=ten", "limit", "ten"),
        ("before=abc", "before", "abc"),
        ("before=1-2-3", "before", "1-2-3"),
        ("before=1.20", "before", "1.20"),
        ("before=-5", "before", "-5"),
        ("before=99999999999999999999-1", "before", "99999999999999999999-1"),
        (&format!("action={long}") as &str, "action", long.as_str()),
        (&format!("who={long}"), "who", &long),
        (&format!("target={long}"), "target", &long),
    ] {
        let reply = get(&server, &format!("/v1/audit?{query}"));
        assert_eq!(reply.status, 400, "{query}: {reply:?}");
        assert_eq!(reply.header("content-type"), Some("application/problem+json"), "{query}");
        let p = reply.json();
        assert_eq!(p["type"], "https://tollgate.dev/problems/invalid-query", "{query}: {p}");
        assert_eq!(
            (p["invalid_parameter"].as_str(), p["value"].as_str()),
            (Some(parameter), Some(value))
        );
        assert!(p["detail"].as_str().unwrap().contains(parameter), "{query}: {p}");
    }
    // 200 characters are still searched for.
    let reply = get(&server, &format!("/v1/audit?target={}", "x".repeat(200)));
    assert_eq!(reply.status, 200, "{reply:?}");
}
