//! The usage history (`GET /v1/usage`) through the real `tollgate serve`: decisions from
//! `/v1/quota`, gRPC and the gateway show up as admitted and refused units in 5-minute buckets;
//! the gateway's held and duplicate interchanges as held and duplicate units, equal to what its
//! queue holds (embedded and Redis);
//! the history survives a graceful restart and a kill -9 (embedded; Redis: `usage_redis.rs`);
//! bad parameters are 400 naming them; `usage_history = false` turns it off (404); the `read`
//! permission is enforced once users exist; and the id cap holds (counted in a metric).

mod common;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::usage::{
    config, decide_on, field_sum, get, quota, serve, today_key, totals, units, usage,
};
use common::{RedisServer, Server, Status214, gateway_toml, wait_until};
use serde_json::Value;

const SHADOW: &str =
    "[[policy]]\nmatch = \"Shadow:*\"\nlimit = 4\nunit = \"day\"\nmode = \"shadow\"\n";

#[test]
fn decisions_count_in_units_and_survive_a_restart_and_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), SHADOW);
    let server = serve("embedded", &data, &cfg);
    decide_on(&server, "Usage:ACME");
    // A shadow would-reject answers 200 but counts as refused (the engine refused it).
    assert_eq!(quota(&server, "Shadow:ACME", 4, 3), 200);
    assert_eq!(quota(&server, "Shadow:ACME", 4, 3), 200);
    // Read before any flush: the pending units are in the answer already.
    let answer = usage(&server, "Usage:ACME", "");
    assert_eq!(answer["metering_id"], "Usage:ACME");
    assert_eq!(totals(&answer), (10, 25), "{answer}");
    assert_eq!(totals(&usage(&server, "Shadow:ACME", "")), (3, 3));
    assert_eq!(totals(&usage(&server, "Usage:Nobody", "")), (0, 0));
    // Default range: the last 7 days, `to` about now.
    let from: jiff::Timestamp = answer["from"].as_str().unwrap().parse().unwrap();
    let to: jiff::Timestamp = answer["to"].as_str().unwrap().parse().unwrap();
    let span = to.as_second() - from.as_second();
    assert!((7 * 86_400 - 300..=7 * 86_400).contains(&span), "{answer}");
    assert!((jiff::Timestamp::now().as_second() - to.as_second()).abs() < 60, "{answer}");

    // A graceful stop flushes; the history is read back from usage.redb.
    assert!(server.sigterm().success());
    assert!(data.join("usage.redb").exists());
    let server = serve("embedded", &data, &cfg);
    assert_eq!(totals(&usage(&server, "Usage:ACME", "")), (10, 25));
    assert_eq!(totals(&usage(&server, "Shadow:ACME", "")), (3, 3));

    // kill -9 loses at most the last flush interval (1 s): after 4 s all is on disk, even on
    // a busy machine.
    assert_eq!(quota(&server, "Usage:ACME", 100, 7), 200);
    std::thread::sleep(Duration::from_millis(4_000));
    server.sigkill();
    let server = serve("embedded", &data, &cfg);
    assert_eq!(totals(&usage(&server, "Usage:ACME", "")), (17, 25));
}

#[test]
fn grpc_and_gateway_decisions_are_recorded_too() {
    use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use tollgate_rls::rls::RateLimitRequest;
    use tollgate_rls::rls::rate_limit_service_client::RateLimitServiceClient;

    let dir = tempfile::tempdir().unwrap();
    let rest = "[server]\ngrpc_listen = \"127.0.0.1:0\"\n\n[[rls.rule]]\ndomain = \"edi\"\n\
                descriptor = [\"partner\"]\nmetering_id = \"Grpc:{partner}\"\nlimit = 5\n\
                unit = \"hour\"\n";
    let landing = dir.path().join("in");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&landing).unwrap();
    let cfg = config(dir.path(), &gateway_toml(&landing, &out, "", rest));
    let server = serve("embedded", &dir.path().join("data"), &cfg);
    let grpc = server.grpc_addr();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = RateLimitServiceClient::connect(format!("http://{grpc}")).await.unwrap();
        for hits in [3, 2, 4] {
            let d = RateLimitDescriptor {
                entries: vec![Entry { key: "partner".into(), value: "ACME".into() }],
                hits_addend: None,
            };
            let r =
                RateLimitRequest { domain: "edi".into(), descriptors: vec![d], hits_addend: hits };
            c.should_rate_limit(r).await.unwrap();
        }
    });
    assert_eq!(totals(&usage(&server, "Grpc:ACME", "")), (5, 4), "3 + 2 admitted, 4 over 5");

    std::fs::write(landing.join("a.edi"), Status214::new("CARRIERA", 1).shipment(3).build())
        .unwrap();
    wait_until("the gateway delivers", Duration::from_secs(10), || {
        std::fs::read_dir(&out).map(|d| d.count() > 0).unwrap_or(false)
    });
    let (status, counters) = get(&server, "/v1/counters?prefix=ShipmentStatus:", "");
    assert_eq!(status, 200, "{counters}");
    let counters: Value = serde_json::from_str(&counters).unwrap();
    let counter = &counters["counters"][0];
    let used = counter["used"].as_u64().unwrap();
    let id = counter["identifier"].as_str().unwrap();
    assert!(used > 0, "{counters}");
    assert_eq!(totals(&usage(&server, id, "")), (used, 0), "the gateway's units, as counted");
}

/// A config with `rest` first, then a `[gateway]` taking uploads, whose one 214 route allows
/// `limit` units a day (never split) and delivers to `out`.
fn small_route(out: &Path, limit: u64, rest: &str) -> String {
    format!(
        "{rest}\n[gateway]\n\n[[gateway.route]]\nname = \"ShipmentStatus\"\ndocuments = [\"214\"]\n\
         limit = {limit}\nunit = \"day\"\ndeliver = \"dir:{}\"\n",
        out.display()
    )
}

/// `POST /v1/interchanges` with `body` (must be 202).
fn upload(server: &Server, body: &[u8]) {
    let m = server.request("POST", "/v1/interchanges", &[], body);
    assert_eq!(m.status, 202, "{}", m.text());
}

/// The queue's items in `state` (one page of up to 1,000 is all of them here).
fn queue(server: &Server, state: &str) -> Vec<Value> {
    let (status, body) = get(server, &format!("/v1/queue?state={state}&limit=1000"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap().as_array().unwrap().clone()
}

/// The queue's units per state: `[admitted or delivered, held, duplicate]`, and the one
/// metering id of its items.
fn queued_units(server: &Server) -> ([u64; 3], String) {
    let weight = |items: &[Value]| items.iter().map(|i| i["weight"].as_u64().unwrap()).sum();
    let (admitted, delivered) = (queue(server, "admitted"), queue(server, "delivered"));
    let (held, duplicate) = (queue(server, "held"), queue(server, "duplicate"));
    let mut ids: Vec<&str> = [&admitted, &delivered, &held, &duplicate]
        .into_iter()
        .flatten()
        .map(|i| i["metering_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1, "one metering id: {ids:?}");
    let units = [weight(&admitted) + weight(&delivered), weight(&held), weight(&duplicate)];
    (units, ids[0].to_owned())
}

/// Eight interchanges of CARRIERA (weights 2, 1, 2, 1, …) against 7 units a day, then the
/// first one again: four are delivered, the fifth does not fit and is held (refused once) with
/// the three after it waiting behind, and the copy is a duplicate. The usage history shows
/// what the queue holds. Returns the metering id and the units per state.
fn hold_and_resend(server: &Server) -> (String, [u64; 3]) {
    let burst: Vec<u8> = (1..=8)
        .flat_map(|c| Status214::new("CARRIERA", c).transactions(1 + c as usize % 2).build())
        .collect();
    upload(server, &burst);
    wait_until("eight interchanges delivered or held", Duration::from_secs(20), || {
        queue(server, "delivered").len() + queue(server, "held").len() == 8
    });
    upload(server, &Status214::new("CARRIERA", 1).transactions(2).build());
    wait_until("the copy marked duplicate", Duration::from_secs(20), || {
        queue(server, "duplicate").len() == 1
    });
    let (queued, id) = queued_units(server);
    assert_eq!(queued, [2 + 1 + 2 + 1, 2 + 1 + 2 + 1, 2], "the fifth does not fit");
    let [admitted, held, duplicate] = queued;
    let [a, r, h, d] = units(&usage(server, &id, ""));
    assert_eq!((a, h, d), (admitted, held, duplicate), "usage of {id} against the queue");
    assert_eq!(r, 2, "the fifth interchange was refused once; those behind it never asked");
    (id, queued)
}

#[test]
fn held_and_duplicate_units_equal_what_the_queue_holds_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), &small_route(&dir.path().join("out"), 7, ""));
    let server = serve("embedded", &data, &cfg);
    let (id, [admitted, held, duplicate]) = hold_and_resend(&server);

    // Reloaded held items are not reported again; the history is read back from usage.redb.
    let before = units(&usage(&server, &id, ""));
    assert!(server.sigterm().success());
    let server = serve("embedded", &data, &cfg);
    assert_eq!(
        queue(&server, "held").iter().map(|i| i["weight"].as_u64().unwrap()).sum::<u64>(),
        held
    );
    assert_eq!(units(&usage(&server, &id, "")), before);
    assert_eq!([before[0], before[2], before[3]], [admitted, held, duplicate]);
}

#[test]
fn redis_keeps_held_and_duplicate_units_in_their_own_fields() {
    let dir = tempfile::tempdir().unwrap();
    let Some(redis) = RedisServer::start() else { return };
    let rest = "[store]\ntimeout_ms = 2000\n";
    let cfg = config(dir.path(), &small_route(&dir.path().join("out"), 7, rest));
    let server = serve(&redis.url(), &dir.path().join("data"), &cfg);
    let (id, [_, held, duplicate]) = hold_and_resend(&server);
    // Once flushed, the day's hash has `<bucket>h` and `<bucket>d` fields summing to them.
    let key = today_key(&id);
    let sum = |kind: &str| field_sum(&redis, &key, kind);
    wait_until("the held and duplicate fields flushed", Duration::from_secs(10), || {
        (sum("h"), sum("d")) == (held, duplicate)
    });
    // Read back by another instance on the same Redis.
    assert!(server.sigterm().success());
    let server = serve(&redis.url(), &dir.path().join("other"), &cfg);
    let [_, _, h, d] = units(&usage(&server, &id, ""));
    assert_eq!((h, d), (held, duplicate));
}

#[test]
fn bad_parameters_are_400_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve("memory", &dir.path().join("d"), &config(dir.path(), ""));
    for (query, param, value) in [
        ("", "metering_id", ""),
        ("metering_id=", "metering_id", ""),
        ("metering_id=A%20B", "metering_id", "A B"),
        ("metering_id=A:1&from=yesterday", "from", "yesterday"),
        ("metering_id=A:1&to=2026-13-01T00:00:00Z", "to", "2026-13-01T00:00:00Z"),
        (
            "metering_id=A:1&from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z",
            "from",
            "2026-12-02T00:00:00Z",
        ),
    ] {
        let (status, body) = get(&server, &format!("/v1/usage?{query}"), "");
        assert_eq!(status, 400, "{query}: {body}");
        let p: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(p["invalid_parameter"], param, "{query}: {body}");
        assert_eq!(p["value"], value, "{query}: {body}");
    }
    // Older than 7 days is clamped to the history's start; a range before it is empty.
    let (status, body) = get(&server, "/v1/usage?metering_id=A:1&from=2020-01-01T00:00:00Z", "");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let from: jiff::Timestamp = answer["from"].as_str().unwrap().parse().unwrap();
    assert!(jiff::Timestamp::now().as_second() - from.as_second() <= 7 * 86_400, "{body}");
    let (status, body) = get(
        &server,
        "/v1/usage?metering_id=A:1&from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z",
        "",
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["from"], answer["to"], "{body}");
    assert_eq!(answer["buckets"], Value::Array(vec![]), "{body}");
}

#[test]
fn usage_history_false_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let server = serve("embedded", &data, &config(dir.path(), "[server]\nusage_history = false\n"));
    assert_eq!(quota(&server, "Off:1", 10, 1), 200);
    let (status, body) = get(&server, "/v1/usage?metering_id=Off:1", "");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("usage-history-off"), "{body}");
    assert!(!data.join("usage.redb").exists());
}

#[test]
fn the_read_permission_is_enforced_once_users_exist() {
    let dir = tempfile::tempdir().unwrap();
    let digest = sha256_of("viewer-token").expect("sha256sum (coreutils) runs");
    let cfg = format!(
        "[server]\nadmin_token = \"root\"\n\n[[user]]\nname = \"vera\"\ntoken_sha256 = \"{digest}\"\nrole = \"viewer\"\n"
    );
    let server = serve("memory", &dir.path().join("d"), &config(dir.path(), &cfg));
    assert_eq!(quota(&server, "Auth:1", 10, 2), 200);
    let (status, body) = get(&server, "/v1/usage?metering_id=Auth:1", "");
    assert_eq!(status, 401, "{body}");
    let (status, _) =
        get(&server, "/v1/usage?metering_id=Auth:1", "authorization: Bearer nope\r\n");
    assert_eq!(status, 401);
    let answer = usage(&server, "Auth:1", "authorization: Bearer viewer-token\r\n");
    assert_eq!(totals(&answer), (2, 0));
    assert_eq!(totals(&usage(&server, "Auth:1", "authorization: Bearer root\r\n")), (2, 0));
}

fn sha256_of(token: &str) -> Option<String> {
    let mut c = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    c.stdin.take()?.write_all(token.as_bytes()).ok()?;
    let out = c.wait_with_output().ok()?;
    Some(String::from_utf8(out.stdout).ok()?.split_whitespace().next()?.to_owned())
}

#[test]
fn ids_beyond_the_cap_are_not_tracked_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "[server]\nusage_max_ids = 2\n");
    let server = serve("memory", &dir.path().join("d"), &cfg);
    for id in ["Cap:1", "Cap:2", "Cap:3", "Cap:3"] {
        assert_eq!(quota(&server, id, 10, 1), 200);
    }
    assert_eq!(totals(&usage(&server, "Cap:1", "")), (1, 0));
    assert_eq!(totals(&usage(&server, "Cap:2", "")), (1, 0));
    assert_eq!(totals(&usage(&server, "Cap:3", "")), (0, 0), "beyond the cap");
    let metrics = server.get("/metrics");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_usage_untracked_total"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.ends_with(" 2"), "{line}");
}
