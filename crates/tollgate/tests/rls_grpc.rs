//! Envoy's rate limit service (`[server] grpc_listen`) against the real `tollgate serve`, with
//! a real gRPC client generated from the same `.proto` files: every status, several
//! descriptors, weights, rules and policies, what matches nothing, a 400-way race counted
//! exactly, one counter shared with `GET /v1/quota` on every store (memory, embedded, Redis),
//! and `store_unavailable` (`local`, `allow`, `deny` → `UNAVAILABLE`) with Redis down.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::rls::{ask, client, descriptor, request, runtime, serve};
use common::{RedisServer, header_in};
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::rls::RateLimitResponse;
use tollgate_rls::rls::rate_limit_response::Code;
use tonic::transport::Channel;

const RULES: &str = r#"
[[rls.rule]]
domain = "edi"
descriptor = ["partner", "document"]
metering_id = "{document}:{partner}"
limit = 3
interval = 1
unit = "hour"
window = "flexi"

[[rls.rule]]
domain = "edi"
descriptor = ["partner"]
metering_id = "partner:{partner}"
limit = 5
unit = "hour"
window = "flexi"

[[rls.rule]]
domain = "edi"
descriptor = ["policy"]
metering_id = "Policy:{policy}"

[[policy]]
match = "Policy:shadow*"
limit = 1
unit = "day"
mode = "shadow"

[[policy]]
match = "Policy:daily*"
limit = 2
unit = "day"
"#;

fn headers(r: &RateLimitResponse) -> HashMap<String, String> {
    r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect()
}

fn doc(partner: &str, document: &str) -> RateLimitDescriptor {
    descriptor(&[("partner", partner), ("document", document)], None)
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

#[test]
fn statuses_limits_headers_weights_and_misses() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, grpc) = serve(dir.path(), "memory", RULES);
    runtime().block_on(async {
        let mut c = client(&grpc).await;

        // OK, with the limit, what is left and when it resets.
        let r = ask(&mut c, request("edi", vec![doc("ACME", "214")], 0)).await;
        assert_eq!(r.overall_code, OK);
        let s = &r.statuses[0];
        assert_eq!(s.code, OK);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(limit.requests_per_unit, 3);
        assert_eq!(limit.unit, 3, "HOUR");
        assert!(limit.name.starts_with("214:ACME"), "{}", limit.name);
        assert_eq!(s.limit_remaining, 2);
        let reset = s.duration_until_reset.unwrap();
        assert!((0..=3600).contains(&reset.seconds), "{reset:?}");
        let h = headers(&r);
        assert_eq!(h["ratelimit-policy"], "\"q\";q=3;w=3600");
        assert!(h["ratelimit"].starts_with("\"q\";r=2;t="), "{h:?}");
        assert!(!h.contains_key("retry-after"));

        // The request's hits_addend is the weight: 2 more fill the limit of 3.
        let r = ask(&mut c, request("edi", vec![doc("ACME", "214")], 2)).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
        // OVER_LIMIT, with Retry-After.
        let r = ask(&mut c, request("edi", vec![doc("ACME", "214")], 0)).await;
        assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OVER));
        let h = headers(&r);
        assert!(h["ratelimit"].starts_with("\"q\";r=0;t="), "{h:?}");
        let wait: u64 = h["retry-after"].parse().unwrap();
        assert!((1..=3600).contains(&wait), "{wait}");

        // A weight greater than the limit: OVER_LIMIT, never a Retry-After; counts nothing.
        let r = ask(&mut c, request("edi", vec![doc("BIG", "214")], 4)).await;
        assert_eq!(r.overall_code, OVER);
        assert!(!headers(&r).contains_key("retry-after"));
        assert_eq!(r.statuses[0].limit_remaining, 3);
        // The descriptor's own hits_addend beats the request's.
        let own = descriptor(&[("partner", "OWN"), ("document", "810")], Some(3));
        let r = ask(&mut c, request("edi", vec![own], 1)).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
        // Weight 0 on the descriptor is a probe: it counts nothing.
        let probe = descriptor(&[("partner", "PROBE"), ("document", "810")], Some(0));
        let r = ask(&mut c, request("edi", vec![probe], 1)).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 3));

        // Several descriptors: one over makes the whole answer OVER_LIMIT; the headers show it.
        let r = ask(
            &mut c,
            request(
                "edi",
                vec![
                    descriptor(&[("partner", "ACME")], None),
                    doc("ACME", "214"),
                    doc("NEW", "850"),
                ],
                0,
            ),
        )
        .await;
        assert_eq!(r.overall_code, OVER);
        let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
        assert_eq!(codes, [OK, OVER, OK]);
        assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().requests_per_unit, 5);
        assert_eq!(headers(&r)["ratelimit-policy"], "\"q\";q=3;w=3600");

        // A domain, or a set of keys, that matches nothing: OK without a limit or headers.
        for r in [
            request("web", vec![doc("ACME", "214")], 0),
            request("edi", vec![descriptor(&[("partner", "A"), ("colour", "red")], None)], 0),
            request("edi", vec![descriptor(&[("document", "214")], None)], 0),
            request("edi", vec![], 0),
        ] {
            let r = ask(&mut c, r).await;
            assert_eq!(r.overall_code, OK);
            assert!(r.statuses.iter().all(|s| s.code == OK && s.current_limit.is_none()));
            assert!(r.response_headers_to_add.is_empty(), "{r:?}");
        }

        // A rule without a limit takes the policy's; a shadow policy reports, never refuses.
        for expect in [OK, OK, OVER] {
            let d = descriptor(&[("policy", "daily-1")], None);
            let r = ask(&mut c, request("edi", vec![d], 0)).await;
            assert_eq!(r.overall_code, expect);
            assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().unit, 4, "DAY");
        }
        for shadowed in [false, true] {
            let d = descriptor(&[("policy", "shadow-1")], None);
            let r = ask(&mut c, request("edi", vec![d], 0)).await;
            assert_eq!(r.overall_code, OK);
            assert_eq!(headers(&r).contains_key("tollgate-shadow"), shadowed, "{r:?}");
        }

        // Refusals name what is wrong, and count nothing.
        let d = descriptor(&[("policy", "none")], None);
        let e = c.should_rate_limit(request("edi", vec![d], 0)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(
            e.message().contains("Policy:none") && e.message().contains("quota-limit"),
            "{e:?}"
        );
        let bad = doc("AC ME", "214");
        let e = c
            .should_rate_limit(request("edi", vec![doc("FRESH", "214"), bad], 0))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.message().contains("descriptors[1]") && e.message().contains("214:AC ME"),
            "{e:?}"
        );
        let r = ask(&mut c, request("edi", vec![doc("FRESH", "214")], 0)).await;
        assert_eq!(r.statuses[0].limit_remaining, 2, "the refused request counted nothing");

        // The standard health service.
        use tonic_health::pb::health_client::HealthClient;
        use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
        let channel = Channel::from_shared(format!("http://{grpc}")).unwrap().connect().await;
        let mut health = HealthClient::new(channel.unwrap());
        for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
            let req = HealthCheckRequest { service: service.into() };
            let s = health.check(req).await.unwrap().into_inner().status;
            assert_eq!(s, ServingStatus::Serving as i32, "{service:?}");
        }
    });
}

#[test]
fn a_400_way_race_admits_exactly_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[rls.rule]]\ndomain = \"race\"\ndescriptor = [\"k\"]\nmetering_id = \"Race:{k}\"\n\
                 limit = 150\nunit = \"hour\"\nwindow = \"flexi\"\n";
    let (_server, grpc) = serve(dir.path(), "embedded", rules);
    runtime().block_on(async {
        // Four connections, 100 concurrent calls on each.
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(client(&grpc).await);
        }
        let mut tasks = Vec::new();
        for i in 0..400 {
            let mut c = clients[i % 4].clone();
            tasks.push(tokio::spawn(async move {
                let d = descriptor(&[("k", "one")], None);
                ask(&mut c, request("race", vec![d], 0)).await.overall_code
            }));
        }
        let mut ok = 0;
        let mut over = 0;
        for t in tasks {
            match t.await.unwrap() {
                OK => ok += 1,
                OVER => over += 1,
                other => panic!("unexpected code {other}"),
            }
        }
        assert_eq!((ok, over), (150, 250));
    });
}

/// One `GET /v1/quota` (limit 4 per hour, flexi, like the rule below); status and lower-cased
/// head.
fn http_quota(addr: &str, id: &str) -> (u16, String) {
    let headers = [
        ("metering-id", id),
        ("quota-limit", "4"),
        ("quota-timeunit", "hour"),
        ("quota-window", "flexi"),
    ];
    let m = common::request_at(addr, "GET", "/v1/quota", &headers, b"");
    (m.status, common::lowercased(&m))
}

const SHARED: &str = "[[rls.rule]]\ndomain = \"edi\"\ndescriptor = [\"partner\"]\n\
                      metering_id = \"Shared:{partner}\"\nlimit = 4\nunit = \"hour\"\n\
                      window = \"flexi\"\n";

/// Two checks over gRPC and two over HTTP fill a limit of 4 on one id; the fifth is refused by
/// both, with the same header values.
async fn shared_counter(grpc: &str, http: &str) {
    let mut c = client(grpc).await;
    let d = || vec![descriptor(&[("partner", "ACME")], None)];
    assert_eq!(ask(&mut c, request("edi", d(), 0)).await.statuses[0].limit_remaining, 3);
    assert_eq!(http_quota(http, "Shared:ACME").0, 200);
    assert_eq!(ask(&mut c, request("edi", d(), 0)).await.statuses[0].limit_remaining, 1);
    let (status, head) = http_quota(http, "Shared:ACME");
    assert_eq!(status, 200);
    assert!(header_in(&head, "ratelimit").starts_with("\"q\";r=0;"), "{head}");
    let r = ask(&mut c, request("edi", d(), 0)).await;
    assert_eq!(r.overall_code, OVER);
    let (status, head) = http_quota(http, "Shared:ACME");
    assert_eq!(status, 429);
    let g = headers(&r);
    assert_eq!(g["ratelimit-policy"], header_in(&head, "ratelimit-policy"));
    assert!(g["ratelimit"].starts_with("\"q\";r=0;t="), "{g:?}");
    // Seconds may tick between the two answers.
    let secs = |v: &str| v.parse::<i64>().unwrap();
    assert!((secs(&g["retry-after"]) - secs(header_in(&head, "retry-after"))).abs() <= 1);
}

#[test]
fn grpc_and_http_share_one_counter_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let mut stores = vec!["memory".to_owned(), "embedded".to_owned()];
    if let Some(r) = &redis {
        stores.push(r.url());
    }
    for store in stores {
        let sub = dir.path().join(store.replace(['/', ':'], "_"));
        std::fs::create_dir_all(&sub).unwrap();
        let (server, grpc) = serve(&sub, &store, SHARED);
        runtime().block_on(shared_counter(&grpc, &server.addr));
    }
}

#[test]
fn store_unavailable_is_followed_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut redis) = RedisServer::start() else { return };
    let url = redis.url();
    let mut servers = Vec::new();
    for mode in ["local", "allow", "deny"] {
        let rest = format!("[store]\nstore_unavailable = \"{mode}\"\ntimeout_ms = 50\n{SHARED}");
        let sub = dir.path().join(mode);
        std::fs::create_dir_all(&sub).unwrap();
        servers.push((mode, serve(&sub, &url, &rest)));
    }
    redis.kill();
    runtime().block_on(async {
        for (mode, (_server, grpc)) in &servers {
            let mut c = client(grpc).await;
            let d = vec![descriptor(&[("partner", "DOWN")], None)];
            let r = c.should_rate_limit(request("edi", d, 0)).await;
            match *mode {
                "local" => {
                    let r = r.unwrap().into_inner();
                    assert_eq!(r.overall_code, OK);
                    assert_eq!(headers(&r)["tollgate-degraded"], "local");
                    assert_eq!(r.statuses[0].limit_remaining, 3);
                }
                "allow" => {
                    let r = r.unwrap().into_inner();
                    assert_eq!(r.overall_code, OK);
                    assert!(r.statuses[0].current_limit.is_none());
                    assert_eq!(headers(&r)["tollgate-degraded"], "store-unavailable");
                }
                _ => {
                    let e = r.unwrap_err();
                    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
                    assert!(e.message().contains("Shared:DOWN"), "{e:?}");
                }
            }
        }
    });
}

#[test]
fn bad_rules_stop_the_start_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let src = "[server]\ngrpc_listen = \"127.0.0.1:0\"\n\n[[rls.rule]]\ndomain = \"edi\"\n\
               descriptor = [\"partner\"]\nmetering_id = \"{document}\"\n";
    std::fs::write(&file, src).unwrap();
    let out = common::exit_within(
        &["serve", "--listen", "127.0.0.1:0", "--config", file.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("{}:7:15: [[rls.rule]] #1 metering_id = \"{{document}}\": ", file.display());
    assert!(err.starts_with(&want), "{err}");
}

#[test]
fn a_call_cut_at_its_deadline_leaves_the_connection_serving() {
    let dir = tempfile::tempdir().unwrap();
    let Some(redis) = RedisServer::start() else { return };
    let rest = format!("[store]\nstore_unavailable = \"deny\"\ntimeout_ms = 20000\n{SHARED}");
    let (_server, grpc) = serve(dir.path(), &redis.url(), &rest);
    runtime().block_on(async {
        let mut c = client(&grpc).await;
        let d = || vec![descriptor(&[("partner", "SLOW")], None)];
        assert_eq!(ask(&mut c, request("edi", d(), 0)).await.overall_code, OK);
        redis.pause();
        let mut asked = tonic::Request::new(request("edi", d(), 0));
        asked.set_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let e = c.should_rate_limit(asked).await.unwrap_err();
        let took = started.elapsed();
        redis.resume();
        assert_eq!(e.code(), tonic::Code::Cancelled, "{e:?}");
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5), "{took:?}");
        // The connection still serves calls once the store answers again.
        assert_eq!(ask(&mut c, request("edi", d(), 0)).await.overall_code, OK);
    });
}

#[test]
fn sigterm_ends_the_grpc_listener_with_a_client_still_connected() {
    let dir = tempfile::tempdir().unwrap();
    let (server, grpc) = serve(dir.path(), "memory", SHARED);
    let rt = runtime();
    // The client keeps its connection open through the shutdown.
    let mut c = rt.block_on(client(&grpc));
    let d = vec![descriptor(&[("partner", "STAY")], None)];
    assert_eq!(rt.block_on(ask(&mut c, request("edi", d, 0))).overall_code, OK);
    let started = std::time::Instant::now();
    assert!(server.sigterm().success());
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(std::net::TcpStream::connect(&grpc).is_err(), "the gRPC port is closed");
    drop(c);
}
