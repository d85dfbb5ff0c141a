//! The Redis store against a real `redis-server`: exactness across instances, time from Redis,
//! one command per decision, outages in each mode, and the admin operations.

use tollgate_testkit as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tollgate_quota::store::{OnStoreUnavailable, RedisOptions, RedisStore, StoreHealth};
use tollgate_quota::{
    CounterListing, MeteringId, Outcome, QuotaSpec, Store, StoreError, TimeUnit, WindowKind,
};

fn id(s: &str) -> MeteringId {
    MeteringId::new(s).unwrap()
}

async fn store(
    server: &support::RedisServer,
    prefix: &str,
    mode: OnStoreUnavailable,
    timeout_ms: u64,
) -> RedisStore {
    let mut opts = RedisOptions::new(server.url());
    opts.key_prefix = prefix.to_owned();
    opts.timeout = Duration::from_millis(timeout_ms);
    opts.on_unavailable = mode;
    RedisStore::connect(opts).await.unwrap()
}

/// Three store instances (as three servers would have) on one Redis: 600 concurrent checks,
/// limit 200, exactly 200 admitted; the same with weight 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_admit_exactly_the_limit() {
    let Some(server) = support::RedisServer::start() else { return };
    for (weight, key) in [(1u64, "Exact:unit"), (2, "Exact:weighted")] {
        let mut instances = Vec::new();
        for _ in 0..3 {
            instances.push(Arc::new(store(&server, "t:", OnStoreUnavailable::Deny, 2_000).await));
        }
        // Flexi: no top of the hour can fall inside the race.
        let spec = QuotaSpec::new(200, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Flexi);
        let tasks: Vec<_> = (0..600)
            .map(|i| {
                let s = Arc::clone(&instances[i % 3]);
                tokio::spawn(async move { s.check(&id(key), &spec, weight).await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            let d = t.await.unwrap();
            assert!(!d.degraded);
            if d.allowed() {
                admitted += weight;
            }
        }
        assert_eq!(admitted, 200, "weight {weight}");
        let d = instances[0].check(&id(key), &spec, 0).await.unwrap();
        assert_eq!(d.used, 200);
        assert_eq!(d.exceed_count, 600 - 200 / weight + 1);
    }
}

/// Without a test clock, windows come from Redis' TIME (the same machine's clock here).
#[tokio::test]
async fn windows_follow_redis_time() {
    let Some(server) = support::RedisServer::start() else { return };
    let s = store(&server, "t:", OnStoreUnavailable::Deny, 2_000).await;
    let before = Timestamp::now();
    let d =
        s.check(&id("Time:a"), &QuotaSpec::new(5, 1, TimeUnit::Minute).unwrap(), 1).await.unwrap();
    let after = Timestamp::now();
    let (start, end) = (d.window_start().unwrap(), d.window_end().unwrap());
    assert_eq!(end.duration_since(start).as_secs(), 60);
    assert_eq!(start.as_second() % 60, 0);
    assert!(start <= after && end > before, "{start}..{end} around {before}");
    assert!(d.reset_after() <= Duration::from_secs(60));
    // Rolling: no window bounds, and the reset is within the look-back.
    let r = QuotaSpec::new(1, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Rolling);
    s.check(&id("Time:r"), &r, 1).await.unwrap();
    let d = s.check(&id("Time:r"), &r, 1).await.unwrap();
    assert_eq!((d.outcome, d.window_start()), (Outcome::Exceeded, None));
    assert!(d.retry_after().unwrap() <= Duration::from_secs(60));
    assert!(d.retry_after().unwrap() >= Duration::from_secs(50));
}

/// One decision is one command sent to Redis: EVALSHA (seen in INFO commandstats).
#[tokio::test]
async fn one_redis_command_per_decision() {
    let Some(server) = support::RedisServer::start() else { return };
    let s = store(&server, "t:", OnStoreUnavailable::Deny, 2_000).await;
    let spec = QuotaSpec::new(1_000, 1, TimeUnit::Day).unwrap();
    // The first call loads the script (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA).
    s.check(&id("Cmd:a"), &spec, 1).await.unwrap();
    assert_eq!(server.command("CONFIG RESETSTAT").as_deref(), Some("+OK"));
    for _ in 0..100 {
        s.check(&id("Cmd:a"), &spec, 1).await.unwrap();
    }
    let stats = server.info("commandstats");
    let calls = |cmd: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    eprintln!("INFO commandstats after 100 decisions:\n{stats}");
    assert_eq!(calls("evalsha"), 100);
    assert_eq!(calls("eval"), 0);
    assert_eq!(calls("script|load"), 0);
}

/// Kill Redis mid-run: each mode answers within the timeout; after a restart on the same port,
/// exact shared counting resumes without a new store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_modes_and_recovery() {
    let Some(mut server) = support::RedisServer::start() else { return };
    // 500 ms: the checks while Redis is up must not time out on a busy machine.
    let local = store(&server, "o:", OnStoreUnavailable::Local, 500).await;
    let allow = store(&server, "o:", OnStoreUnavailable::Allow, 500).await;
    let deny = store(&server, "o:", OnStoreUnavailable::Deny, 500).await;
    // Flexi: no top of the hour can fall between the checks that fill the limit.
    let spec = QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Flexi);
    for s in [&local, &allow, &deny] {
        assert!(
            !s.check(&id("Out:warm"), &QuotaSpec::new(99, 1, TimeUnit::Hour).unwrap(), 1)
                .await
                .unwrap()
                .degraded
        );
    }

    server.kill();
    // A request never waits much longer than the 500 ms timeout (generous bound: 2.5 s).
    let bounded = Duration::from_millis(2_500);
    let t = Instant::now();
    let d = local.check(&id("Out:a"), &spec, 1).await.unwrap();
    assert!(t.elapsed() < bounded, "local took {:?}", t.elapsed());
    assert!(d.degraded && d.allowed());
    assert!(local.check(&id("Out:a"), &spec, 1).await.unwrap().allowed());
    let d = local.check(&id("Out:a"), &spec, 1).await.unwrap();
    assert_eq!(
        (d.degraded, d.outcome),
        (true, Outcome::Exceeded),
        "local counting enforces the limit"
    );
    for s in [&allow, &deny] {
        let t = Instant::now();
        let e = s.check(&id("Out:a"), &spec, 1).await.unwrap_err();
        assert!(t.elapsed() < bounded, "took {:?}", t.elapsed());
        assert!(matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_)), "{e}");
        assert!(matches!(s.health(), StoreHealth::Degraded(_)));
    }

    server.restart();
    // Poll (with a deadline) until the shared store answers again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let d = local.check(&id("Out:probe"), &spec, 0).await.unwrap();
        if !d.degraded {
            break;
        }
        assert!(Instant::now() < deadline, "redis was not reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while allow.check(&id("Out:probe"), &spec, 0).await.is_err()
        || deny.check(&id("Out:probe"), &spec, 0).await.is_err()
    {
        assert!(Instant::now() < deadline, "redis was not reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(local.health(), StoreHealth::Ok);
    // Exact shared counting again, across the three instances.
    let mut admitted = 0;
    for i in 0..6 {
        let s = [&local, &allow, &deny][i % 3];
        let d = s.check(&id("Out:after"), &spec, 1).await.unwrap();
        assert!(!d.degraded);
        admitted += u64::from(d.allowed());
    }
    assert_eq!(admitted, 2);
}

#[tokio::test]
async fn a_store_starts_while_redis_is_down_and_a_bad_url_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut opts = RedisOptions::new(format!("redis://127.0.0.1:{port}/0"));
    opts.on_unavailable = OnStoreUnavailable::Deny;
    let s = RedisStore::connect(opts).await.unwrap();
    assert!(
        s.check(&id("Down:a"), &QuotaSpec::new(1, 1, TimeUnit::Hour).unwrap(), 1).await.is_err()
    );
    assert!(RedisStore::connect(RedisOptions::new("http://nope")).await.is_err());
}

/// The admin listing and reset work through SCAN on the shared keys.
#[tokio::test]
async fn counters_and_reset() {
    let Some(server) = support::RedisServer::start() else { return };
    let s = store(&server, "adm:", OnStoreUnavailable::Deny, 2_000).await;
    let week = QuotaSpec::new(10, 1, TimeUnit::Week).unwrap();
    let day = QuotaSpec::new(10, 1, TimeUnit::Day).unwrap();
    let rolling = week.with_window(WindowKind::Rolling);
    let flexi = week.with_window(WindowKind::Flexi);
    let acme = id("Invoice:ACME");
    s.check(&acme, &week, 3).await.unwrap();
    s.check(&acme, &week, 30).await.unwrap();
    s.check(&acme, &day, 2).await.unwrap();
    s.check(&acme, &rolling, 4).await.unwrap();
    s.check(&acme, &flexi, 5).await.unwrap();
    s.check(&id("Invoice:*glob"), &week, 1).await.unwrap();
    s.check(&id("Order:X"), &week, 1).await.unwrap();

    let list = s.counters(&CounterListing::all("Invoice:ACME")).await.unwrap().counters;
    assert_eq!(list.len(), 4, "{list:?}");
    let h =
        list.iter().find(|c| c.unit == TimeUnit::Week && c.window == WindowKind::Calendar).unwrap();
    assert_eq!((h.used, h.exceed_count, h.total_exceed_count), (3, 1, 1));
    assert!(h.window_start.is_some() && h.window_end.is_some());
    let r = list.iter().find(|c| c.window == WindowKind::Rolling).unwrap();
    assert_eq!((r.used, r.window_start), (4, None));
    let f = list.iter().find(|c| c.window == WindowKind::Flexi).unwrap();
    assert_eq!(f.used, 5);
    assert_eq!(s.counters(&CounterListing::all("Invoice:")).await.unwrap().counters.len(), 5);
    // Glob characters in a prefix are literal.
    assert_eq!(s.counters(&CounterListing::all("Invoice:*")).await.unwrap().counters.len(), 1);

    assert_eq!(s.reset(&acme).await.unwrap(), 4);
    assert!(s.counters(&CounterListing::all("Invoice:ACME")).await.unwrap().counters.is_empty());
    assert_eq!(s.counters(&CounterListing::all("")).await.unwrap().counters.len(), 2);
    assert_eq!(s.check(&acme, &week, 0).await.unwrap().used, 0);
}

/// Resetting `A` used to delete the counters of `A}:x` (its keys matched `{A}:*`), and ids
/// holding glob or brace characters could reach each other's keys. Every id here keeps its
/// count when any other is reset, and listing by prefix returns only ids with that prefix.
#[tokio::test]
async fn reset_and_listing_never_reach_another_ids_keys() {
    let Some(server) = support::RedisServer::start() else { return };
    let s = store(&server, "iso:", OnStoreUnavailable::Deny, 2_000).await;
    let ids = ["A", "A}:x", "A}", "{A}", "A%7D:x", "A*", "A?", "[A]", "A\\", "A:x", "%"];
    let day = QuotaSpec::new(100, 1, TimeUnit::Day).unwrap();
    let rolling = day.with_window(WindowKind::Rolling);
    let flexi = day.with_window(WindowKind::Flexi);
    for (n, raw) in ids.iter().enumerate() {
        for spec in [&day, &rolling, &flexi] {
            let d = s.check(&id(raw), spec, n as u64 + 1).await.unwrap();
            assert_eq!(d.used, n as u64 + 1, "{raw}");
        }
    }
    for (n, raw) in ids.iter().enumerate() {
        assert_eq!(s.reset(&id(raw)).await.unwrap(), 3, "{raw}: its own three counters");
        for (m, other) in ids.iter().enumerate().skip(n + 1) {
            for spec in [&day, &rolling, &flexi] {
                let d = s.check(&id(other), spec, 0).await.unwrap();
                assert_eq!(d.used, m as u64 + 1, "resetting {raw:?} touched {other:?}");
            }
        }
        let d = s.check(&id(raw), &day, 0).await.unwrap();
        assert_eq!(d.used, 0, "{raw} was reset");
    }
    // Listing by prefix: `A}` lists itself and `A}:x`, never `A` or `A%7D:x`.
    for raw in ["A", "A}:x", "A}", "A%7D:x", "A*"] {
        s.check(&id(raw), &day, 1).await.unwrap();
    }
    for (prefix, want) in [("A}", &["A}", "A}:x"][..]), ("A*", &["A*"][..])] {
        let page = s.counters(&CounterListing::all(prefix)).await.unwrap();
        let listed: Vec<String> =
            page.counters.into_iter().map(|c| c.identifier.to_string()).collect();
        assert_eq!(listed, want, "{prefix}");
    }
}
