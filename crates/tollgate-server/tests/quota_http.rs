//! `/v1/quota` over real HTTP: every status code and header of the contract, each bad input,
//! and proof that refused requests count nothing.

mod common;

use common::{Options, Server, policies};
use serde_json::Value;

const MOTIVATING: &[(&str, &str)] = &[
    ("metering-id", "ShipmentStatus:CarrierXYZ"),
    ("quota-limit", "1000"),
    ("quota-interval", "24"),
    ("quota-timeunit", "hours"),
    ("message-weight", "50"),
];

#[tokio::test]
async fn allowed_then_exceeded_with_body_and_ratelimit_headers() {
    let s = Server::start().await;
    for i in 1..=20u64 {
        let r = s.quota(MOTIVATING).await;
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()["ratelimit-policy"], "\"q\";q=1000;w=86400");
        assert_eq!(
            r.headers()["ratelimit"].to_str().unwrap(),
            format!("\"q\";r={};t=50400", 1000 - 50 * i)
        );
        assert!(r.headers().get("retry-after").is_none());
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["allowed"], true);
        assert_eq!(b["used"], 50 * i);
        assert_eq!(b["retry_after_s"], Value::Null);
    }
    let r = s.quota(MOTIVATING).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "50400");
    assert_eq!(r.headers()["ratelimit"], "\"q\";r=0;t=50400");
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        b,
        serde_json::json!({
            "allowed": false,
            "identifier": "ShipmentStatus:CarrierXYZ",
            "limit": 1000,
            "used": 1000,
            "available": 0,
            "weight": 50,
            "exceed_count": 1,
            "total_exceed_count": 1,
            "window_start": "2026-11-30T00:00:00Z",
            "window_end": "2026-12-01T00:00:00Z",
            "retry_after_s": 50400,
        })
    );
    s.stop().await;
}

#[tokio::test]
async fn weight_above_limit_is_a_problem_without_retry_after() {
    let s = Server::start().await;
    let r = s
        .quota(&[
            ("metering-id", "Big"),
            ("quota-limit", "10"),
            ("quota-timeunit", "day"),
            ("message-weight", "11"),
        ])
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(r.headers().get("retry-after").is_none());
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/weight-exceeds-limit");
    assert_eq!(b["status"], 429);
    assert_eq!(b["weight"], 11);
    assert_eq!(b["limit"], 10);
    s.stop().await;
}

#[tokio::test]
async fn weight_zero_probes_without_consuming() {
    let s = Server::start().await;
    let h = |w: &'static str| {
        [
            ("metering-id", "P"),
            ("quota-limit", "1"),
            ("quota-timeunit", "day"),
            ("message-weight", w),
        ]
    };
    let r = s.quota(&h("0")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["used"], 0);
    assert_eq!(s.quota(&h("1")).await.status(), 200);
    assert_eq!(s.quota(&h("0")).await.status(), 429);
    s.stop().await;
}

/// Request headers, the header the 400 must name, and the value it must echo.
type Case = (Vec<(&'static str, String)>, &'static str, Value);

#[tokio::test]
async fn each_bad_input_is_a_400_naming_header_and_value_and_counts_nothing() {
    let s = Server::start().await;
    let long = "x".repeat(257);
    let base = |extra: (&'static str, &str)| {
        let mut v = vec![("metering-id", "Bad:1"), ("quota-limit", "5"), ("quota-timeunit", "day")];
        v.retain(|(k, _)| *k != extra.0);
        v.push((extra.0, extra.1));
        v.into_iter().map(|(k, v)| (k, v.to_owned())).collect::<Vec<_>>()
    };
    let cases: Vec<Case> = vec![
        (base(("quota-limit", "ten")), "quota-limit", "ten".into()),
        (base(("quota-limit", "-5")), "quota-limit", "-5".into()),
        (base(("quota-limit", "2.5")), "quota-limit", "2.5".into()),
        (base(("message-weight", "-1")), "message-weight", "-1".into()),
        (base(("message-weight", "1.5")), "message-weight", "1.5".into()),
        (base(("message-weight", "lots")), "message-weight", "lots".into()),
        (base(("quota-interval", "0")), "quota-interval", "0".into()),
        (base(("quota-interval", "x")), "quota-interval", "x".into()),
        (base(("quota-timeunit", "fortnight")), "quota-timeunit", "fortnight".into()),
        (base(("quota-window", "sliding")), "quota-window", "sliding".into()),
        (base(("quota-start", "last tuesday")), "quota-start", "last tuesday".into()),
        (base(("metering-id", "")), "metering-id", "".into()),
        (base(("metering-id", &long)), "metering-id", long.clone().into()),
        (base(("metering-id", "has space")), "metering-id", "has space".into()),
        (
            vec![("quota-limit", "5".into()), ("quota-timeunit", "day".into())],
            "metering-id",
            Value::Null,
        ),
        (
            vec![("metering-id", "Bad:1".into()), ("quota-timeunit", "day".into())],
            "quota-limit",
            Value::Null,
        ),
        (
            vec![("metering-id", "Bad:1".into()), ("quota-limit", "5".into())],
            "quota-timeunit",
            Value::Null,
        ),
    ];
    for (headers, header, value) in &cases {
        let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = s.quota(&hs).await;
        assert_eq!(r.status(), 400, "{header} {value}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["type"], "https://tollgate.dev/problems/invalid-header");
        assert_eq!(b["status"], 400);
        assert_eq!(&b["invalid_header"], header, "{b}");
        assert_eq!(&b["value"], value, "{b}");
        assert!(b["detail"].as_str().unwrap().contains(header), "{b}");
    }
    // Nothing was counted: no counter exists, and the first good request sees a fresh one.
    assert_eq!(s.counters(None).await["count"], 0);
    let r =
        s.quota(&[("metering-id", "Bad:1"), ("quota-limit", "5"), ("quota-timeunit", "day")]).await;
    assert_eq!(r.json::<Value>().await.unwrap()["used"], 1);
    s.stop().await;
}

#[tokio::test]
async fn unknown_path_and_wrong_method_are_problems() {
    let s = Server::start().await;
    let r = s.http.get(s.url("/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/not-found");
    assert_eq!(b["path"], "/v2/nothing");

    let r = s.http.post(s.url("/v1/quota")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(r.headers()["allow"].to_str().unwrap().contains("GET"));
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/method-not-allowed");
    assert_eq!(b["method"], "POST");
    s.stop().await;
}

#[tokio::test]
async fn oversized_headers_get_431_problem_and_count_nothing() {
    let s = Server::start().await;
    let big = "y".repeat(9 * 1024);
    let r = s
        .quota(&[
            ("metering-id", "H"),
            ("quota-limit", "5"),
            ("quota-timeunit", "day"),
            ("x-padding", &big),
        ])
        .await;
    assert_eq!(r.status(), 431);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/headers-too-large");
    assert_eq!(b["limit"], 8192);
    assert_eq!(s.counters(None).await["count"], 0);
    // Just under the limit is fine.
    let ok = "y".repeat(7 * 1024);
    let r = s
        .quota(&[
            ("metering-id", "H"),
            ("quota-limit", "5"),
            ("quota-timeunit", "day"),
            ("x-padding", &ok),
        ])
        .await;
    assert_eq!(r.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn oversized_body_gets_413_problem() {
    let s = Server::start().await;
    let body = format!("{{\"policies\": [], \"pad\": \"{}\"}}", "z".repeat(300 * 1024));
    let r = s.http.put(s.url("/v1/policies")).body(body).send().await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/body-too-large");
    s.stop().await;
}

#[tokio::test]
async fn policy_fills_missing_headers_and_override_beats_them() {
    let s = Server::with(Options {
        policies: policies(
            r#"
[[policy]]
match = "ShipmentStatus:*"
limit = 2
unit = "day"

[[policy]]
match = "Invoice:*"
limit = 1
unit = "day"
override = true
"#,
        ),
        ..Options::default()
    })
    .await;
    // Fill: no limit header → the policy's 2.
    let fill = [("metering-id", "ShipmentStatus:A")];
    assert_eq!(s.quota(&fill).await.status(), 200);
    assert_eq!(s.quota(&fill).await.status(), 200);
    assert_eq!(s.quota(&fill).await.status(), 429);
    // Fill: the header's limit wins over the policy.
    let r = s.quota(&[("metering-id", "ShipmentStatus:B"), ("quota-limit", "100")]).await;
    assert_eq!(r.json::<Value>().await.unwrap()["limit"], 100);
    // Override: the policy's 1 beats the header's 100.
    let over = [("metering-id", "Invoice:A"), ("quota-limit", "100"), ("quota-timeunit", "hour")];
    let r = s.quota(&over).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"q\";q=1;w=86400");
    assert_eq!(s.quota(&over).await.status(), 429);
    s.stop().await;
}

#[tokio::test]
async fn shadow_mode_never_answers_429() {
    let s = Server::with(Options {
        policies: policies(
            r#"
[[policy]]
match = "*"
limit = 3
unit = "minute"
override = true
mode = "shadow"
"#,
        ),
        ..Options::default()
    })
    .await;
    let mut would_reject = 0;
    for w in ["1", "1", "1", "1", "1", "50", "0"] {
        let r = s.quota(&[("metering-id", "Any:thing"), ("message-weight", w)]).await;
        assert_eq!(r.status(), 200, "weight {w}");
        if r.headers().get("tollgate-shadow").map(|v| v.as_bytes()) == Some(b"would-reject") {
            would_reject += 1;
            assert_eq!(r.json::<Value>().await.unwrap()["allowed"], true);
        }
    }
    // 3 admitted; the 4th, 5th, the weight-50 one and the probe at 0 available would be refused.
    assert_eq!(would_reject, 4);
    let m = s.http.get(s.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("outcome=\"shadow_would_reject\""), "{m}");
    s.stop().await;
}

#[tokio::test]
async fn client_keys_401_and_403() {
    let s = Server::with(Options {
        clients: vec![tollgate_http::config::ClientKey {
            key: Some(tollgate_http::config::ClientSecret::new("pi-key").unwrap()),
            subject: None,
            name: "sap-pi".into(),
            allow: Some(vec!["ShipmentStatus:*".parse().unwrap()]),
            partners: None,
        }],
        ..Options::default()
    })
    .await;
    let q = [("metering-id", "ShipmentStatus:A"), ("quota-limit", "5"), ("quota-timeunit", "day")];
    let r = s.quota(&q).await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["type"],
        "https://tollgate.dev/problems/missing-api-key"
    );
    let mut wrong = q.to_vec();
    wrong.push(("x-api-key", "nope"));
    let r = s.quota(&wrong).await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["type"],
        "https://tollgate.dev/problems/invalid-api-key"
    );
    let mut good = q.to_vec();
    good.push(("x-api-key", "pi-key"));
    assert_eq!(s.quota(&good).await.status(), 200);
    let r = s
        .quota(&[
            ("metering-id", "Invoice:A"),
            ("quota-limit", "5"),
            ("quota-timeunit", "day"),
            ("x-api-key", "pi-key"),
        ])
        .await;
    assert_eq!(r.status(), 403);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["metering_id"], "Invoice:A");
    // Refused requests counted nothing: only ShipmentStatus:A exists, with 1 used.
    let c = s.counters(None).await;
    assert_eq!(c["count"], 1);
    assert_eq!(c["counters"][0]["identifier"], "ShipmentStatus:A");
    assert_eq!(c["counters"][0]["used"], 1);
    s.stop().await;
}

#[tokio::test]
async fn admin_needs_the_token_when_one_is_configured() {
    let s = Server::with(Options { token: Some("s3cret"), ..Options::default() }).await;
    for path in ["/v1/counters", "/v1/policies"] {
        let r = s.http.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        assert!(r.headers().get("www-authenticate").is_some());
        let r = s.http.get(s.url(path)).bearer_auth("wrong").send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = s.http.get(s.url(path)).bearer_auth("s3cret").send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = s.http.delete(s.url("/v1/counters/X")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    s.stop().await;
}

#[tokio::test]
async fn admin_without_token_is_refused_off_loopback() {
    let s = Server::with(Options { token: None, loopback: false, ..Options::default() }).await;
    let r = s.http.get(s.url("/v1/counters")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/admin-token-required");
    let r = s.http.put(s.url("/v1/policies")).body("{\"policies\":[]}").send().await.unwrap();
    assert_eq!(r.status(), 403);
    s.stop().await;
}

#[tokio::test]
async fn counters_list_by_prefix_and_reset() {
    let s = Server::start().await;
    for id in ["A:1", "A:2", "B:1"] {
        assert_eq!(
            s.quota(&[("metering-id", id), ("quota-limit", "1"), ("quota-timeunit", "day")])
                .await
                .status(),
            200
        );
    }
    let r: Value =
        s.http.get(s.url("/v1/counters?prefix=A:")).send().await.unwrap().json().await.unwrap();
    assert_eq!(r["count"], 2);
    assert_eq!(r["counters"][0]["identifier"], "A:1");
    assert_eq!(r["counters"][0]["used"], 1);
    assert_eq!(r["counters"][0]["unit"], "day");
    let q = [("metering-id", "A:1"), ("quota-limit", "1"), ("quota-timeunit", "day")];
    assert_eq!(s.quota(&q).await.status(), 429);
    let r = s.http.delete(s.url("/v1/counters/A:1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["removed"], 1);
    assert_eq!(s.quota(&q).await.status(), 200, "a reset counter starts from zero");
    s.stop().await;
}

#[tokio::test]
async fn put_policies_validates_then_replaces() {
    let s = Server::start().await;
    let bad = r#"{"policies":[{"match":"X:*","limit":1,"unit":"fortnight"}]}"#;
    let r = s.http.put(s.url("/v1/policies")).body(bad).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["type"], "https://tollgate.dev/problems/invalid-policies");
    assert!(b["detail"].as_str().unwrap().contains("fortnight"), "{b}");
    let q = [("metering-id", "X:1")];
    assert_eq!(s.quota(&q).await.status(), 400, "no policy yet: limit missing");

    let good = r#"{"policies":[{"match":"X:*","limit":1,"unit":"day"}]}"#;
    let r = s.http.put(s.url("/v1/policies")).body(good).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["policies"][0]["match"], "X:*");
    assert_eq!(b["generation"], 2);
    assert_eq!(s.quota(&q).await.status(), 200);
    assert_eq!(s.quota(&q).await.status(), 429);
    // What GET returns can be PUT back unchanged.
    let got: Value = s.http.get(s.url("/v1/policies")).send().await.unwrap().json().await.unwrap();
    let r = s.http.put(s.url("/v1/policies")).json(&got).send().await.unwrap();
    assert_eq!(r.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn metrics_and_health() {
    let s = Server::start().await;
    let q = [("metering-id", "M:1"), ("quota-limit", "1"), ("quota-timeunit", "day")];
    s.quota(&q).await;
    s.quota(&q).await;
    s.quota(&[("metering-id", "M:1"), ("quota-limit", "x")]).await;
    let r = s.http.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let m = r.text().await.unwrap();
    for needle in [
        "tollgate_decisions_total{outcome=\"allowed\",transport=\"http\"}",
        "tollgate_decisions_total{outcome=\"exceeded\",transport=\"http\"}",
        "tollgate_decisions_total{outcome=\"bad_request\",transport=\"http\"}",
        "tollgate_store_latency_seconds_bucket",
        "tollgate_live_counters",
        "tollgate_policy_reload_errors_total",
    ] {
        assert!(m.contains(needle), "missing {needle} in\n{m}");
    }
    // One id, one shape: one counter (the bad request made none).
    assert!(m.lines().any(|l| l == "tollgate_live_counters 1"), "{m}");
    let r = s.http.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ok");
    let r = s.http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["status"], "ready");
    assert_eq!(b["store"], "memory");

    s.state
        .add_readiness_check("gateway", std::sync::Arc::new(|| Err("spool not writable".into())));
    let r = s.http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["checks"]["gateway"]["error"], "spool not writable");
    s.stop().await;
}

/// Without client keys, a loopback listener answers `/v1/quota` and its refund only for this
/// host: a page whose DNS name was rebound to 127.0.0.1 (Host `rebind.example`) spends and
/// gives back nothing. (Before, it could use up a partner's quota from the operator's browser.)
#[tokio::test]
async fn a_rebound_host_neither_spends_nor_gives_back_quota() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start().await;
    let ask = |method: &'static str, path: &'static str, host: &'static str| async move {
        let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {host}\r\nmetering-id: Doc:A\r\nquota-limit: 5\r\n\
             quota-timeunit: day\r\nquota-request-id: r-1\r\ncontent-length: 0\r\n\
             connection: close\r\n\r\n"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.unwrap();
        answer
    };
    for (method, path) in [("GET", "/v1/quota"), ("POST", "/v1/quota/refund")] {
        let answer = ask(method, path, "rebind.example:8080").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
        assert!(answer.contains("cross-origin-refused"), "{path}: {answer}");
    }
    assert_eq!(s.counters(None).await["count"], 0, "nothing counted");
    let answer = ask("GET", "/v1/quota", "127.0.0.1").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
