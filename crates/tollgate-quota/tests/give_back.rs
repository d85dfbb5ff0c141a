//! Giving units back, the same on every store: only to the window (rolling: the sub-bucket)
//! they were counted in, while it still counts, never below zero; and what a give-back frees
//! is admitted again at once.

use tollgate_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tollgate_quota::store::{
    EmbeddedOptions, EmbeddedStore, MemoryStore, RedisOptions, RedisStore,
};
use tollgate_quota::{
    GivenBack, ManualClock, MeteringId, Outcome, QuotaSpec, Store, TimeUnit, WindowKind,
};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// What one store answered along the script, as text to compare across stores.
async fn script(store: &impl Store, clock: &ManualClock) -> Vec<String> {
    let mut out = Vec::new();
    let cases = [
        ("cal", QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap(), "2026-11-30T10:59:00Z"),
        ("mon", QuotaSpec::new(2, 1, TimeUnit::Month).unwrap(), "2026-11-30T23:00:00Z"),
        (
            "flx",
            QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Flexi),
            "2026-11-30T10:59:00Z",
        ),
        (
            "rol",
            QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Rolling),
            "2026-11-30T10:59:00Z",
        ),
    ];
    for (name, spec, late) in cases {
        let id = MeteringId::new(name).unwrap();
        clock.set(ts("2026-11-30T10:00:00Z"));
        let first = store.check(&id, &spec, 2).await.unwrap();
        assert_eq!(first.outcome, Outcome::Allowed, "{name}");
        clock.set(ts("2026-11-30T10:00:01Z"));
        let full = store.check(&id, &spec, 1).await.unwrap();
        assert_eq!(full.outcome, Outcome::Exceeded, "{name}: full");
        let back = store.give_back(&id, &spec, &first.counted(), 1).await.unwrap();
        assert_eq!(back, GivenBack::Units(1), "{name}");
        let again = store.check(&id, &spec, 1).await.unwrap();
        assert_eq!((again.outcome, again.used), (Outcome::Allowed, 2), "{name}: freed");
        // Three asked, two held: never below zero.
        clock.set(ts(late));
        let back = store.give_back(&id, &spec, &first.counted(), 3).await.unwrap();
        assert_eq!(back, GivenBack::Units(2), "{name}: saturates");
        let probe = store.check(&id, &spec, 0).await.unwrap();
        out.push(format!("{name} after: used {} exceed {}", probe.used, probe.exceed_count));
        // A later window: what was counted before is gone, nothing is given back.
        let counted = store.check(&id, &spec, 1).await.unwrap().counted();
        clock.set(ts("2027-01-15T00:00:00Z"));
        let gone = store.give_back(&id, &spec, &counted, 1).await.unwrap();
        assert_eq!(gone, GivenBack::WindowGone, "{name}: window gone");
        let fresh = store.check(&id, &spec, 2).await.unwrap();
        assert_eq!((fresh.outcome, fresh.used), (Outcome::Allowed, 2), "{name}: untouched");
        out.push(format!("{name} fresh: {:?}", fresh.window_start()));
    }
    let unknown = MeteringId::new("never").unwrap();
    let spec = QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap();
    let counted = store.check(&MeteringId::new("other").unwrap(), &spec, 1).await.unwrap();
    let gone = store.give_back(&unknown, &spec, &counted.counted(), 1).await.unwrap();
    assert_eq!(gone, GivenBack::WindowGone, "no counter, nothing given back");
    out
}

#[tokio::test]
async fn every_store_gives_back_alike() {
    let clock = ManualClock::new(ts("2026-11-30T10:00:00Z"));
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let reference = script(&memory, &clock).await;

    let dir = tempfile::tempdir().unwrap();
    let opts = EmbeddedOptions::new(dir.path().join("c.redb"));
    let embedded = EmbeddedStore::open_with_clock(opts, Arc::new(clock.clone())).unwrap();
    assert_eq!(script(&embedded, &clock).await, reference, "embedded");
    embedded.flush().await.unwrap();
    drop(embedded);
    // What was given back is written behind like an admission.
    let opts = EmbeddedOptions::new(dir.path().join("c.redb"));
    let reopened = EmbeddedStore::open_with_clock(opts, Arc::new(clock.clone())).unwrap();
    let spec = QuotaSpec::new(2, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Rolling);
    let d = reopened.check(&MeteringId::new("rol").unwrap(), &spec, 0).await.unwrap();
    assert_eq!(d.used, 2, "the fresh window's two units, read back");

    let Some(server) = support::RedisServer::start() else { return };
    let mut opts = RedisOptions::new(server.url());
    opts.timeout = Duration::from_secs(2);
    opts.on_unavailable = tollgate_quota::store::OnStoreUnavailable::Deny;
    let redis = RedisStore::connect(opts).await.unwrap().with_clock(Arc::new(clock.clone()));
    assert_eq!(script(&redis, &clock).await, reference, "redis");
}
