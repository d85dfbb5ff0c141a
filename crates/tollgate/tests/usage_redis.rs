//! The usage history on Redis through the real `tollgate serve` and a real `redis-server`: it
//! survives a restart, with a TTL; reads skip fields Tollgate did not write; a flush Redis
//! runs only after the flusher gave up on it (writes paused with `CLIENT PAUSE`) counts once
//! although it is sent again; and a key of another type loses only its own units without
//! holding up the rest.

mod common;

use std::time::Duration;

use common::usage::{config, decide_on, field_sum, get, quota, serve, today_key, totals, usage};
use common::{RedisCluster, RedisServer, Server, free_port, metric, wait_until};
use serde_json::Value;

/// A temp dir, a real `redis-server` and a config file with the store's timeout at `ms`;
/// `None` when redis-server is missing (`RedisServer::start` says so, and fails under CI).
fn redis_and_config(ms: u64) -> Option<(tempfile::TempDir, RedisServer, String)> {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start()?;
    let cfg = config(dir.path(), &format!("[store]\ntimeout_ms = {ms}\n"));
    Some((dir, redis, cfg))
}

#[test]
fn redis_keeps_the_history_across_a_restart_with_a_ttl() {
    // A generous store timeout: a slow call must not be answered from local memory.
    let Some((dir, redis, cfg)) = redis_and_config(2000) else { return };
    let url = redis.url();
    let id = format!("Usage:R{}", free_port());
    let server = serve(&url, &dir.path().join("a"), &cfg);
    decide_on(&server, &id);
    assert_eq!(totals(&usage(&server, &id, "")), (10, 25));
    assert!(server.sigterm().success());

    // Another instance (another data directory) reads what the first one wrote.
    let server = serve(&url, &dir.path().join("b"), &cfg);
    assert_eq!(totals(&usage(&server, &id, "")), (10, 25));
    let key = today_key(&id);
    let ttl: i64 =
        redis.command(&format!("TTL {key}")).unwrap().trim_start_matches(':').parse().unwrap();
    assert!((7 * 86_400..=8 * 86_400).contains(&ttl), "TTL of {key}: {ttl}");
    // kill -9 after several flush intervals: nothing is lost.
    assert_eq!(quota(&server, &id, 100, 7), 200);
    std::thread::sleep(Duration::from_millis(4_000));
    server.sigkill();
    let server = serve(&url, &dir.path().join("a"), &cfg);
    assert_eq!(totals(&usage(&server, &id, "")), (17, 25));
}

/// Fields of the usage hashes that Tollgate did not write (by hand, say; one ends in a
/// multi-byte character) are skipped, and a `to` in the year 9999 reads no further than a day
/// past now: the answer comes, with the units, instead of millions of days' reads.
#[test]
fn redis_reads_skip_foreign_fields_and_stop_a_day_past_now() {
    let Some((dir, redis, cfg)) = redis_and_config(2000) else { return };
    let id = format!("Usage:F{}", free_port());
    let server = serve(&redis.url(), &dir.path().join("a"), &cfg);
    decide_on(&server, &id);
    assert_eq!(totals(&usage(&server, &id, "")), (10, 25));
    let key = today_key(&id);
    for field in ["1\u{e9}", "x", "a"] {
        redis.command(&format!("HSET {key} {field} 3")).unwrap();
    }
    assert_eq!(totals(&usage(&server, &id, "")), (10, 25));
    let hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    let far = format!("/v1/usage?metering_id={id}&from={hour_ago}&to=9999-12-31T23:59:59Z");
    let (status, body) = get(&server, &far, "");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(totals(&answer), (10, 25));
    assert!(answer["to"].as_str().unwrap().starts_with("9999-12-"), "the `to` asked: {answer}");
}

/// A flush Redis takes but runs only after the flusher gave up on it (its writes paused) is
/// sent again, each second, while Redis holds the earlier copies: the batch's units count
/// once. Before batches were numbered, each copy counted (four times in one run).
#[test]
fn a_flush_redis_runs_after_the_flusher_gave_up_counts_once() {
    // The ledger waits max(timeout, 1 s) for a flush's reply.
    let Some((dir, redis, cfg)) = redis_and_config(1000) else { return };
    let id = format!("Usage:L{}", free_port());
    let server = serve(&redis.url(), &dir.path().join("a"), &cfg);
    let errors = || metric(&server.get("/metrics"), "tollgate_usage_flush_errors_total");
    assert_eq!(errors().unwrap_or(0.0), 0.0);
    decide_on(&server, &id);
    // The next flush (within a second) finds Redis's writes paused: Redis holds its script
    // calls, and those of the flushes that send the batch again, until the pause ends.
    let paused = std::time::Instant::now();
    assert_eq!(redis.command("CLIENT PAUSE 3000 WRITE").as_deref(), Some("+OK"));
    wait_until("a flush gives up", Duration::from_secs(15), || errors().unwrap_or(0.0) >= 1.0);
    std::thread::sleep(Duration::from_millis(3_300).saturating_sub(paused.elapsed()));
    // A decision now: its batch goes to Redis only after the held one.
    assert_eq!(quota(&server, &id, 100, 7), 200);
    let key = today_key(&id);
    wait_until("both batches written", Duration::from_secs(15), || {
        field_sum(&redis, &key, "a") >= 17
    });
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!((field_sum(&redis, &key, "a"), field_sum(&redis, &key, "r")), (17, 25));
    assert_eq!(totals(&usage(&server, &id, "")), (17, 25));
}

/// A usage key that is not a hash (set by hand) loses that id's units, counted as dropped;
/// the other ids of the same batches are written once each, and flushes go on.
#[test]
fn a_key_of_another_type_loses_only_its_units() {
    let Some((dir, redis, cfg)) = redis_and_config(2000) else { return };
    let (bad, good) = (format!("Usage:X{}", free_port()), format!("Usage:G{}", free_port()));
    assert_eq!(
        redis.command(&format!("SET {} not-a-hash", today_key(&bad))).as_deref(),
        Some("+OK")
    );
    let server = serve(&redis.url(), &dir.path().join("a"), &cfg);
    let scrape = || server.get("/metrics");
    decide_on(&server, &bad);
    decide_on(&server, &good);
    let key = today_key(&good);
    wait_until("the good id written", Duration::from_secs(10), || field_sum(&redis, &key, "a") > 0);
    wait_until("the bad id's units dropped", Duration::from_secs(10), || {
        metric(&scrape(), "tollgate_usage_dropped_total").unwrap_or(0.0) >= 1.0
    });
    // Several flushes later: written once, and no flush failed.
    assert_eq!(quota(&server, &good, 100, 7), 200);
    wait_until("the next batch", Duration::from_secs(10), || field_sum(&redis, &key, "a") == 17);
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!((field_sum(&redis, &key, "a"), field_sum(&redis, &key, "r")), (17, 25));
    assert_eq!(metric(&scrape(), "tollgate_usage_flush_errors_total").unwrap_or(0.0), 0.0);
    // Its two fields (admitted, refused), counted once although later flushes came.
    assert_eq!(metric(&scrape(), "tollgate_usage_dropped_total"), Some(2.0));
    assert_eq!(redis.command(&format!("GET {}", today_key(&bad))).as_deref(), Some("$10"));
}

/// On a three-master Redis Cluster each id's day is one script call on its key's master: the
/// units of ids spread over the masters are read back exactly by a second instance.
#[test]
fn a_cluster_keeps_each_ids_units_on_its_masters() {
    let Some(cluster) = RedisCluster::start(3, 0) else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "[store]\ntimeout_ms = 2000\n");
    let url = cluster.url();
    let start = |data: &str| {
        let data = dir.path().join(data);
        Server::start(&[
            "--store",
            &url,
            "--store-cluster",
            "--data",
            data.to_str().unwrap(),
            "--config",
            &cfg,
        ])
    };
    let ids: Vec<String> = (0..12).map(|i| format!("Usage:C{i}x{}", free_port())).collect();
    let masters: std::collections::HashSet<u16> =
        ids.iter().map(|id| cluster.master_of_slot(cluster.keyslot(&today_key(id)))).collect();
    assert!(masters.len() >= 2, "the ids' keys on one master only: {masters:?}");
    let server = start("a");
    wait_until("the cluster answers", Duration::from_secs(15), || {
        quota(&server, "Warm:up", 100, 1) == 200
    });
    for id in &ids {
        decide_on(&server, id);
    }
    // A graceful stop writes the last batch; the next instance reads Redis alone.
    assert!(server.sigterm().success());
    let server = start("b");
    for id in &ids {
        assert_eq!(totals(&usage(&server, id, "")), (10, 25), "{id}");
    }
}

/// A refused weight of 2^64 - 1 is past what a Redis hash field holds (2^63 - 1): it is
/// written as that much (the rest counted as dropped), the next increment of that field is
/// dropped and counted, once, and the other ids of the same flushes are written.
#[test]
fn a_count_past_what_redis_holds_loses_only_that_increment() {
    let Some((dir, redis, cfg)) = redis_and_config(2000) else { return };
    let (huge, good) = (format!("Usage:H{}", free_port()), format!("Usage:G{}", free_port()));
    let server = serve(&redis.url(), &dir.path().join("a"), &cfg);
    let scrape = || server.get("/metrics");
    // The whole test in one 5-minute bucket: the dropped increment needs the field before it.
    let into_bucket = jiff::Timestamp::now().as_second().rem_euclid(300);
    if into_bucket > 270 {
        std::thread::sleep(Duration::from_secs((301 - into_bucket) as u64));
    }
    let (huge_key, good_key) = (today_key(&huge), today_key(&good));
    // Heavier than the limit: refused, and counted as refused units.
    assert_eq!(quota(&server, &huge, 12, u64::MAX), 429);
    decide_on(&server, &good);
    wait_until("the first flush", Duration::from_secs(10), || {
        field_sum(&redis, &good_key, "a") == 10
    });
    // Past 2^63 - 1: written as that much.
    let huge_units = || totals(&usage(&server, &huge, ""));
    assert_eq!(huge_units(), (0, i64::MAX as u64));
    // Any more passes what the field holds: dropped, the next flushes go on.
    assert_eq!(quota(&server, &huge, 12, 13), 429);
    assert_eq!(quota(&server, &good, 100, 7), 200);
    wait_until("the next flush", Duration::from_secs(10), || {
        field_sum(&redis, &good_key, "a") == 17
    });
    wait_until("the increment dropped", Duration::from_secs(10), || {
        metric(&scrape(), "tollgate_usage_dropped_total").unwrap_or(0.0) >= 2.0
    });
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!((field_sum(&redis, &good_key, "a"), field_sum(&redis, &good_key, "r")), (17, 25));
    assert_eq!(huge_units(), (0, i64::MAX as u64));
    assert_eq!(redis.command(&format!("EXISTS {huge_key}")).as_deref(), Some(":1"));
    // One for the sum cut to 2^63 - 1, one for the 13.
    assert_eq!(metric(&scrape(), "tollgate_usage_dropped_total"), Some(2.0));
    assert_eq!(metric(&scrape(), "tollgate_usage_flush_errors_total").unwrap_or(0.0), 0.0);
}
