//! `quota-request-id` and `POST /v1/quota/refund` through real `tollgate serve` processes: the
//! same request id sent 100 times at once to three instances on one real Redis (and to one
//! instance on the embedded store) counts once and answers alike; a refund after a backend
//! failure lets the retry through in a full window, once per admission, never below zero; bad
//! request ids are refused by name and count nothing.

mod common;

use common::{RedisServer, Server, free_port};
use tollgate_testkit::http::Message;

fn check(addr: &str, id: &str, limit: &str, weight: &str, rid: Option<&str>) -> Message {
    let mut headers = vec![
        ("metering-id", id),
        ("quota-limit", limit),
        ("quota-timeunit", "day"),
        ("message-weight", weight),
    ];
    if let Some(rid) = rid {
        headers.push(("quota-request-id", rid));
    }
    common::request_at(addr, "GET", "/v1/quota", &headers, b"")
}

fn refund(addr: &str, id: &str, rid: Option<&str>) -> Message {
    let mut headers = vec![("metering-id", id), ("quota-limit", "1"), ("quota-timeunit", "day")];
    if let Some(rid) = rid {
        headers.push(("quota-request-id", rid));
    }
    common::request_at(addr, "POST", "/v1/quota/refund", &headers, b"")
}

/// Units counted now, read with a probe (weight 0, no request id) that counts nothing.
fn used(addr: &str, id: &str, limit: &str) -> u64 {
    check(addr, id, limit, "0", None).json()["used"].as_u64().unwrap()
}

/// 100 checks with one request id, spread over `addrs`, all at once: every answer is the
/// first one, and one unit is counted.
fn hundred_at_once(addrs: &[String], id: &str) {
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let addr = addrs[i % addrs.len()].clone();
            let id = id.to_owned();
            std::thread::spawn(move || check(&addr, &id, "1000", "1", Some("MSG-1")))
        })
        .collect();
    let answers: Vec<Message> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for a in &answers {
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.header("ratelimit"), answers[0].header("ratelimit"), "the first answer");
        assert_eq!(a.json()["used"], 1, "{}", a.text());
    }
    let replayed =
        answers.iter().filter(|a| a.header("quota-request-replayed") == Some("true")).count();
    assert_eq!(replayed, 99, "all but the first are replays");
    for addr in addrs {
        assert_eq!(used(addr, id, "1000"), 1, "counted once, seen from {addr}");
    }
    // A new request id counts again.
    assert_eq!(check(&addrs[0], id, "1000", "1", Some("MSG-2")).json()["used"], 2);
}

#[test]
fn one_request_id_counts_once_across_three_instances_on_redis() {
    let Some(redis) = RedisServer::start() else { return };
    let url = redis.url();
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&["--store", &url])).collect();
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    hundred_at_once(&addrs, &format!("Orders:{}", free_port()));
    refunds_let_the_retry_through(&addrs);
}

#[test]
fn one_request_id_counts_once_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let server = Server::start(&["--store", "embedded", "--data", data]);
    let addrs = vec![server.addr.clone()];
    hundred_at_once(&addrs, "Orders:embedded");
    refunds_let_the_retry_through(&addrs);
}

/// Limit 1: A is admitted and its backend fails; the refund frees the unit for the retry.
fn refunds_let_the_retry_through(addrs: &[String]) {
    let (a, b) = (&addrs[0], &addrs[addrs.len() - 1]);
    let id = format!("Invoice:{}", free_port());
    assert_eq!(check(a, &id, "1", "1", Some("A")).status, 200);
    assert_eq!(check(b, &id, "1", "0", None).status, 429, "the window is full");

    let r = refund(b, &id, Some("A"));
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(
        (body["given_back"].as_u64(), body["window_ended"].as_bool()),
        (Some(1), Some(false))
    );
    assert_eq!(body["request_id"], "A");
    assert_eq!(used(a, &id, "1"), 0);

    let twice = refund(a, &id, Some("A"));
    assert_eq!(twice.status, 409, "{}", twice.text());
    assert_eq!(twice.json()["type"].as_str().map(|t| t.ends_with("already-refunded")), Some(true));
    assert_eq!(used(a, &id, "1"), 0, "never below zero");

    // The retry, under a new request id, is admitted in what was a full window.
    let retry = check(b, &id, "1", "1", Some("B"));
    assert_eq!((retry.status, retry.json()["used"].as_u64()), (200, Some(1)));
    // A refunded request id is decided afresh: the window is full again.
    let again = check(a, &id, "1", "1", Some("A"));
    assert_eq!(again.status, 429, "{}", again.text());
    assert_eq!(again.header("quota-request-replayed"), None);
    let not_admitted = refund(a, &id, Some("A"));
    assert_eq!(not_admitted.status, 409);
    assert!(not_admitted.text().contains("not-admitted"), "{}", not_admitted.text());

    let unknown = refund(a, &id, Some("never-sent"));
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    assert_eq!(unknown.json()["invalid_header"], "quota-request-id");
    let missing = refund(a, &id, None);
    assert_eq!(
        (missing.status, missing.json()["invalid_header"].as_str()),
        (400, Some("quota-request-id"))
    );
    let weight = common::request_at(
        a,
        "POST",
        "/v1/quota/refund",
        &[("metering-id", &id), ("quota-request-id", "B"), ("message-weight", "5")],
        b"",
    );
    assert_eq!(
        (weight.status, weight.json()["invalid_header"].as_str()),
        (400, Some("message-weight"))
    );
    assert_eq!(used(a, &id, "1"), 1, "nothing given back by refused refunds");
}

#[test]
fn a_bad_request_id_is_refused_by_name_and_counts_nothing() {
    // A data directory of its own: request-id records are durable, so a shared one would
    // replay an earlier run's answers.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["--data", dir.path().to_str().unwrap()]);
    let long = "x".repeat(129);
    for bad in ["a b", "", long.as_str(), "caf\u{e9}"] {
        let m = check(&server.addr, "Bad:rid", "5", "1", Some(bad));
        assert_eq!(m.status, 400, "{bad:?}: {}", m.text());
        let p = m.json();
        assert_eq!(p["invalid_header"], "quota-request-id", "{bad:?}");
        if bad.is_ascii() {
            assert_eq!(p["value"], bad);
        }
    }
    assert_eq!(used(&server.addr, "Bad:rid", "5"), 0, "nothing counted");
    // A refused check is answered again while its Retry-After lasts, and nothing is counted.
    let first = check(&server.addr, "Bad:heavy", "5", "3", Some("H"));
    assert_eq!(first.status, 200);
    let over = check(&server.addr, "Bad:heavy", "5", "3", Some("H2"));
    assert_eq!(over.status, 429);
    let again = check(&server.addr, "Bad:heavy", "5", "3", Some("H2"));
    assert_eq!((again.status, again.header("quota-request-replayed")), (429, Some("true")));
    assert_eq!(again.header("retry-after"), over.header("retry-after"));
    assert_eq!(used(&server.addr, "Bad:heavy", "5"), 3);
}
