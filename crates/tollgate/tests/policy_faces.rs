//! One limit for every face: a `[[policy]]` with `override` holds the gateway's metering,
//! `GET /v1/quota` and Envoy's rate limit service to the same counter and limit, the console
//! shows it, and a limit changed through `PUT /v1/policies` is what they all enforce next.
//! Against the real `tollgate serve`, with a real landing directory and a real gRPC client.

mod common;

use std::time::Duration;

use common::rls::{ask, client, descriptor, request, runtime, serve};
use common::{Status214, header_in};
use tollgate_rls::rls::rate_limit_response::Code;

/// A `[[policy]]` with `override` binds every face the same way: the gateway's embedded
/// metering of a route asking 1,000 a day, `GET /v1/quota` asking 1,000, Envoy's RLS asking
/// 1,000, and the console's overview, which shows the limit in force and whose it is. A limit
/// raised through `PUT /v1/policies` (the console's Limits page) is then what the gateway
/// enforces.
#[test]
fn an_override_policy_binds_every_face() {
    let dir = tempfile::tempdir().unwrap();
    let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
    let rest = r#"
[[rls.rule]]
domain = "edi"
descriptor = ["partner"]
metering_id = "ShipmentStatus:{partner}"
limit = 1000
unit = "day"

[[policy]]
match = "ShipmentStatus:*"
limit = 1
override = true
"#;
    let partner = "[[gateway.partner]]\nname = \"RR\"\nids = [\"ZZ:CARRIERA\"]\n";
    let config = common::gateway_toml(&inbound, &out, partner, rest);
    std::fs::create_dir_all(&inbound).unwrap();
    let (server, grpc) = serve(dir.path(), "memory", &config);
    for n in 1..=3 {
        let tmp = inbound.join(format!(".f{n}"));
        std::fs::write(&tmp, Status214::new("CARRIERA", n).build()).unwrap();
        std::fs::rename(&tmp, inbound.join(format!("f{n}.edi"))).unwrap();
    }
    let queue = |state: &str| -> Vec<serde_json::Value> {
        let answer = server.request("GET", &format!("/v1/queue?state={state}"), &[], b"");
        answer.json().as_array().cloned().unwrap_or_default()
    };
    common::wait_until("one delivered and two held", Duration::from_secs(30), || {
        queue("delivered").len() == 1 && queue("held").len() == 2
    });
    let held = queue("held");
    let reason = held[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("ShipmentStatus:RR allows 1 per"),
        "the gateway enforces the policy: {reason}"
    );

    // The header API asks 1,000 and is held to 1 too, on the counter the gateway used.
    let (status, head) = http_quota_asking(&server.addr, "ShipmentStatus:RR", 1000);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("\"limit\":1,"), "{head}");
    assert_eq!(header_in(&head, "tollgate-limit-source"), "policy");

    // Envoy's RLS: the rule asks 1,000, the policy says 1.
    runtime().block_on(async {
        let mut c = client(&grpc).await;
        let r = ask(&mut c, request("edi", vec![descriptor(&[("partner", "RR")], None)], 1)).await;
        assert_eq!(r.overall_code, Code::OverLimit as i32, "{r:?}");
    });

    // The console shows the limit in force and whose it is.
    let row = || {
        let answer = server.request("GET", "/ui/api/overview", &[], b"");
        let page = answer.json();
        let rows = page["rows"].as_array().unwrap().clone();
        rows.into_iter()
            .find(|r| r["metering_id"] == "ShipmentStatus:RR")
            .unwrap_or_else(|| panic!("{page}"))
    };
    let r = row();
    assert_eq!((r["limit"].as_u64(), r["limit_source"].as_str()), (Some(1), Some("policy")));

    // A functional team raises the partner's limit to 5: the gateway admits the held items.
    let body = br#"{"policies":[{"match":"ShipmentStatus:RR","limit":5,"override":true}]}"#;
    let put = server.request("PUT", "/v1/policies", &[("content-type", "application/json")], body);
    assert_eq!(put.status, 200, "{}", put.text());
    for item in &held {
        let id = item["id"].as_str().unwrap();
        let retry = server.request("POST", &format!("/v1/queue/{id}/retry"), &[], b"");
        assert_eq!(retry.status, 200, "{}", retry.text());
    }
    common::wait_until("all three delivered", Duration::from_secs(30), || {
        queue("delivered").len() == 3
    });
    let r = row();
    assert_eq!((r["limit"].as_u64(), r["limit_source"].as_str()), (Some(5), Some("policy")));
    assert_eq!(r["used"].as_u64(), Some(3));
}

/// `GET /v1/quota` for `id` asking `limit` a day: status and lower-cased head and body.
fn http_quota_asking(addr: &str, id: &str, limit: u64) -> (u16, String) {
    let limit = limit.to_string();
    let headers = [("metering-id", id), ("quota-limit", limit.as_str()), ("quota-timeunit", "day")];
    let m = common::request_at(addr, "GET", "/v1/quota", &headers, b"");
    (m.status, common::lowercased(&m))
}
