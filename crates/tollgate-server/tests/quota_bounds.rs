//! The bounds of what a request or a policy can ask for, over real HTTP: windows beyond a
//! century, far anchors, impossible offsets and limits that cannot be written back are refused
//! quickly with an error naming the header or key, and the server stays up.

mod common;

use common::{Options, Server};
use serde_json::Value;

/// The request that used to hang the service: a rolling window of 145,000 months (and other
/// windows beyond a century). Each gets a quick 400 naming the header, counts nothing, and the
/// server keeps answering `/healthz` and ordinary quota calls.
#[tokio::test]
async fn windows_beyond_a_century_are_refused_quickly_and_the_server_stays_up() {
    let s = Server::start().await;
    let deadline = std::time::Duration::from_secs(5);
    for (interval, unit, window) in [
        ("145000", "months", "rolling"),
        ("4294967295", "month", "rolling"),
        ("1201", "month", "calendar"),
        ("5218", "week", "flexi"),
        ("36526", "day", "rolling"),
        ("876601", "hour", "calendar"),
        ("52596001", "minute", "rolling"),
        ("3155760001", "second", "rolling"),
    ] {
        let headers = [
            ("metering-id", "Hang:me"),
            ("quota-limit", "10"),
            ("quota-interval", interval),
            ("quota-timeunit", unit),
            ("quota-window", window),
        ];
        let r = tokio::time::timeout(deadline, s.quota(&headers)).await.unwrap_or_else(|_| {
            panic!("{interval} {unit} {window}: no answer within {deadline:?}")
        });
        assert_eq!(r.status(), 400, "{interval} {unit} {window}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["invalid_header"], "quota-interval", "{b}");
        assert_eq!(b["value"], interval, "{b}");
        let detail = b["detail"].as_str().unwrap();
        assert!(detail.contains("100 years") && detail.contains(interval), "{detail}");
    }
    // The longest window allowed is decided at once.
    let r = s
        .quota(&[
            ("metering-id", "Hang:max"),
            ("quota-limit", "10"),
            ("quota-interval", "1200"),
            ("quota-timeunit", "month"),
            ("quota-window", "rolling"),
        ])
        .await;
    assert_eq!(r.status(), 200);
    let health = tokio::time::timeout(deadline, s.http.get(s.url("/healthz")).send())
        .await
        .expect("/healthz answers")
        .unwrap();
    assert_eq!(health.status(), 200);
    let listed = s.counters(None).await;
    assert!(!listed.to_string().contains("Hang:me"), "a refused request counted: {listed}");
    s.stop().await;
}

/// A policy limit above `i64::MAX` used to be accepted by `PUT /v1/policies`, then fail to be
/// written back as TOML: a 500 after the fact. It is now a 400 naming the policy and the key,
/// and the set in force does not change; so is a policy window longer than a century.
#[tokio::test]
async fn put_policies_refuses_a_limit_above_i64_max_and_a_window_beyond_a_century() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, "[[policy]]\nmatch = \"*\"\nlimit = 5\nunit = \"day\"\n").unwrap();
    let policies = tollgate_server::Policies::from_file(&file).unwrap();
    let s = Server::with(Options { policies, ..Options::default() }).await;
    for (body, needle) in [
        (
            r#"{"policies": [{"match": "*", "limit": 18446744073709551615, "unit": "day"}]}"#,
            "limit 18446744073709551615",
        ),
        (
            r#"{"policies": [{"match": "*", "limit": 9223372036854775808, "unit": "day"}]}"#,
            "limit 9223372036854775808",
        ),
        (
            r#"{"policies": [{"match": "*", "limit": 1, "interval": 145000, "unit": "month"}]}"#,
            "interval",
        ),
        (r#"{"policies": [{"match": "*", "limit": 1, "interval": 4000000000}]}"#, "interval"),
    ] {
        let r = s.http.put(s.url("/v1/policies")).body(body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let b: Value = r.json().await.unwrap();
        let detail = b["detail"].as_str().unwrap();
        assert!(detail.contains(needle) && detail.contains("\"*\""), "{detail}");
    }
    let max = r#"{"policies": [{"match": "*", "limit": 9223372036854775807, "unit": "day"}]}"#;
    let r = s.http.put(s.url("/v1/policies")).body(max).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("9223372036854775807"), "{text}");
    s.stop().await;
}

/// `quota-start` offsets past ±23:59 and dates past the anchor range are refused with the
/// reason; nothing is counted.
#[tokio::test]
async fn quota_start_offsets_and_far_dates_say_what_is_wrong() {
    let s = Server::start().await;
    for (start, needle) in [
        ("2026-01-01T00:00:00+25:00", "offset +25:00"),
        ("9999-12-31T23:59:59Z", "out of range"),
        ("2300-01-01T00:00:00Z", "out of range"),
    ] {
        let r = s
            .quota(&[
                ("metering-id", "Start:x"),
                ("quota-limit", "1"),
                ("quota-timeunit", "day"),
                ("quota-start", start),
            ])
            .await;
        assert_eq!(r.status(), 400, "{start}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(
            (b["invalid_header"].as_str(), b["value"].as_str()),
            (Some("quota-start"), Some(start))
        );
        assert!(b["detail"].as_str().unwrap().contains(needle), "{b}");
    }
    assert!(!s.counters(None).await.to_string().contains("Start:x"));
    s.stop().await;
}

/// The counter listing is paged: 1,000 counters by default, at most 10,000 per request, and
/// `next` leads through the rest once each; a bad `limit` or `after` is a 400 naming it.
#[tokio::test]
async fn the_counter_listing_comes_a_bounded_page_at_a_time() {
    let s = Server::start().await;
    for i in 0..1_005 {
        let id = format!("Page:{i:04}");
        let q = [("metering-id", id.as_str()), ("quota-limit", "9"), ("quota-timeunit", "day")];
        assert_eq!(s.quota(&q).await.status(), 200);
    }
    let get = |query: String| {
        let (http, url) = (s.http.clone(), s.url(&format!("/v1/counters?{query}")));
        async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = get("prefix=Page:".into()).await;
    assert_eq!(status, 200);
    assert_eq!(first["count"], 1_000, "the default page");
    assert_eq!(first["counters"][999]["identifier"], "Page:0999");
    let next = first["next"].as_str().expect("more after the default page").to_owned();
    let (_, rest) = get(format!("prefix=Page:&after={}", encode(&next))).await;
    let ids: Vec<&str> = rest["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["identifier"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["Page:1000", "Page:1001", "Page:1002", "Page:1003", "Page:1004"]);
    assert_eq!(rest["next"], Value::Null);

    for (query, parameter, value) in [
        ("limit=0", "limit", "0"),
        ("limit=10001", "limit", "10001"),
        ("limit=lots", "limit", "lots"),
        ("after=1.day.calendar", "after", "1.day.calendar"),
        ("after=1.fortnight.calendar.-.Page:0001", "after", "1.fortnight.calendar.-.Page:0001"),
    ] {
        let (status, b) = get(query.into()).await;
        assert_eq!(status, 400, "{query}: {b}");
        assert_eq!(b["type"], "https://tollgate.dev/problems/invalid-query", "{b}");
        assert_eq!((b["parameter"].as_str(), b["value"].as_str()), (Some(parameter), Some(value)));
        assert!(b["detail"].as_str().unwrap().contains(value), "{b}");
    }
    s.stop().await;
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
