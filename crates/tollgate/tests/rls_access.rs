//! Envoy's rate limit service follows `/v1/quota`'s rules for callers and is counted in the same
//! metrics, against the real `tollgate serve` and a real gRPC client: once `[[client]]` keys
//! are configured both need a key (gRPC: `x-api-key` metadata or `authorization: Bearer`),
//! a client's `allow` globs limit both, a refused call counts nothing, and gRPC decisions
//! appear in `tollgate_decisions_total` with `transport="grpc"`.

mod common;

use common::rls::{client, runtime, serve};
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_rls::rls::RateLimitRequest;
use tollgate_rls::rls::rate_limit_response::Code;

const CONFIG: &str = r#"
[[client]]
name = "acme"
key = "acme-key-0123456789"
allow = ["Doc:ACME*"]

[[client]]
name = "ops"
key = "ops-key-0123456789"

[[rls.rule]]
domain = "edi"
descriptor = ["partner"]
metering_id = "Doc:{partner}"
limit = 2
unit = "day"
"#;

fn partner(p: &str) -> tonic::Request<RateLimitRequest> {
    tonic::Request::new(RateLimitRequest {
        domain: "edi".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry { key: "partner".into(), value: p.into() }],
            hits_addend: None,
        }],
        hits_addend: 0,
    })
}

fn with(
    mut r: tonic::Request<RateLimitRequest>,
    key: &str,
    value: &str,
) -> tonic::Request<RateLimitRequest> {
    r.metadata_mut()
        .insert(key.parse::<tonic::metadata::MetadataKey<_>>().unwrap(), value.parse().unwrap());
    r
}

/// `GET path` with extra header lines: the status and the whole answer.
fn http_get(addr: &str, path: &str, extra: &str) -> (u16, String) {
    let m = common::request_at(addr, "GET", path, &common::header_pairs(extra), b"");
    (m.status, format!("{}\n{}", m.head(), m.text()))
}

/// The value of the `tollgate_decisions_total` series with these labels (0 when absent).
fn decisions(metrics: &str, outcome: &str, transport: &str) -> u64 {
    let series =
        format!("tollgate_decisions_total{{outcome=\"{outcome}\",transport=\"{transport}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.trim().parse().unwrap())
}

#[test]
fn client_keys_are_required_over_grpc_as_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (server, grpc) = serve(dir.path(), "memory", CONFIG);

    // HTTP, the rule being followed: no key 401, a key 200, an id outside `allow` 403.
    let quota = "/v1/quota";
    let id = "metering-id: Doc:ACME\r\nquota-limit: 2\r\nquota-timeunit: day\r\n";
    assert_eq!(http_get(&server.addr, quota, id).0, 401);
    let acme = "x-api-key: acme-key-0123456789\r\n";
    assert_eq!(http_get(&server.addr, quota, &format!("{id}{acme}")).0, 200);
    let other = "metering-id: Doc:GLOBEX\r\nquota-limit: 2\r\nquota-timeunit: day\r\n";
    assert_eq!(http_get(&server.addr, quota, &format!("{other}{acme}")).0, 403);

    runtime().block_on(async {
        let mut c = client(&grpc).await;
        // No key, a wrong key, a key under another scheme: UNAUTHENTICATED, nothing counted.
        for r in [
            partner("ACME"),
            with(partner("ACME"), "x-api-key", "wrong"),
            with(partner("ACME"), "authorization", "Bearer wrong"),
            with(partner("ACME"), "authorization", "Basic acme-key-0123456789"),
        ] {
            let e = c.should_rate_limit(r).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        }
        // The key as x-api-key or as a bearer token (any case of the scheme) is let in.
        let r = c
            .should_rate_limit(with(partner("ACME"), "x-api-key", "acme-key-0123456789"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, 0, "HTTP and gRPC share the counter");
        let r = c
            .should_rate_limit(with(partner("ACME"), "authorization", "bearer acme-key-0123456789"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, Code::OverLimit as i32, "the third check of a limit of 2");
        // An id outside the client's `allow`: PERMISSION_DENIED, and it counts nothing (the
        // client without `allow` then finds the whole limit left).
        let e = c
            .should_rate_limit(with(partner("GLOBEX"), "x-api-key", "acme-key-0123456789"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("Doc:GLOBEX"), "{}", e.message());
        let r = c
            .should_rate_limit(with(partner("GLOBEX"), "x-api-key", "ops-key-0123456789"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.statuses[0].limit_remaining, 1);
    });

    // Every gRPC refusal and decision above is in the metrics, apart from HTTP's.
    let (_, m) = http_get(&server.addr, "/metrics", "");
    assert_eq!(decisions(&m, "unauthorized", "grpc"), 4, "{m}");
    assert_eq!(decisions(&m, "forbidden", "grpc"), 1, "{m}");
    assert_eq!(decisions(&m, "allowed", "grpc"), 2, "{m}");
    assert_eq!(decisions(&m, "exceeded", "grpc"), 1, "{m}");
    assert_eq!(decisions(&m, "allowed", "http"), 1, "{m}");
    assert_eq!(decisions(&m, "unauthorized", "http"), 1, "{m}");
    assert_eq!(decisions(&m, "forbidden", "http"), 1, "{m}");
}

/// Wrong client keys over gRPC count against the address as over HTTP: after ten, calls with
/// a key from it are refused on both faces, the right key too, until the window ends.
/// (Before, gRPC took guesses at full speed and never locked anyone out.)
#[test]
fn wrong_grpc_keys_lock_the_address_out_on_both_faces() {
    let dir = tempfile::tempdir().unwrap();
    let (server, grpc) = serve(dir.path(), "memory", CONFIG);
    let quota = "/v1/quota";
    let acme = "metering-id: Doc:ACME\r\nquota-limit: 2\r\nquota-timeunit: day\r\n\
                x-api-key: acme-key-0123456789\r\n";
    runtime().block_on(async {
        let mut c = client(&grpc).await;
        for n in 0..10 {
            let e = c
                .should_rate_limit(with(partner("ACME"), "x-api-key", &format!("guess-{n}")))
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "guess {n}: {e:?}");
        }
        let e = c
            .should_rate_limit(with(partner("ACME"), "x-api-key", "acme-key-0123456789"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("10 wrong credentials"), "{}", e.message());
    });
    let (status, answer) = http_get(&server.addr, quota, acme);
    assert_eq!(status, 429, "{answer}");
    assert!(answer.contains("too-many-failed-logins"), "{answer}");
    // Nothing was counted for ACME by the refused calls.
    let (status, counters) = http_get(&server.addr, "/v1/counters", "");
    assert_eq!(status, 200, "{counters}");
    assert!(!counters.contains("Doc:ACME"), "{counters}");
}

#[test]
fn without_client_keys_grpc_needs_none_and_counts_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[rls.rule]]\ndomain = \"edi\"\ndescriptor = [\"partner\"]\n\
                 metering_id = \"Doc:{partner}\"\nlimit = 1\nunit = \"day\"\n\
                 [[rls.rule]]\ndomain = \"edi\"\ndescriptor = [\"nolimit\"]\n\
                 metering_id = \"Free:{nolimit}\"\n";
    let (server, grpc) = serve(dir.path(), "memory", rules);
    runtime().block_on(async {
        let mut c = client(&grpc).await;
        for _ in 0..3 {
            c.should_rate_limit(partner("ACME")).await.unwrap();
        }
        // A rule without a limit and no policy: FAILED_PRECONDITION, a bad request.
        let r = tonic::Request::new(RateLimitRequest {
            domain: "edi".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry { key: "nolimit".into(), value: "x".into() }],
                hits_addend: None,
            }],
            hits_addend: 0,
        });
        let e = c.should_rate_limit(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    });
    let (_, m) = http_get(&server.addr, "/metrics", "");
    assert_eq!(decisions(&m, "allowed", "grpc"), 1, "{m}");
    assert_eq!(decisions(&m, "exceeded", "grpc"), 2, "{m}");
    assert_eq!(decisions(&m, "bad_request", "grpc"), 1, "{m}");
    assert_eq!(decisions(&m, "allowed", "http"), 0, "{m}");
    assert!(m.contains("tollgate_store_latency_seconds_count"), "{m}");
}
