//! The same sequences of checks, at the same instants, against every store: memory, embedded and
//! Redis (whose Lua script re-implements the windows) must give identical decisions, calendar
//! boundaries included.

use tollgate_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tollgate_quota::store::{
    EmbeddedOptions, EmbeddedStore, MemoryStore, RedisOptions, RedisStore,
};
use tollgate_quota::{
    CounterInfo, CounterListing, Decision, ManualClock, MeteringId, QuotaSpec, Store, TimeUnit,
    WindowKind,
};

/// One check: at `at`, `weight` units of `id` under `spec`.
struct Step {
    at: Timestamp,
    id: &'static str,
    spec: QuotaSpec,
    weight: u64,
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn spec(limit: u64, interval: u32, unit: TimeUnit, window: WindowKind) -> QuotaSpec {
    QuotaSpec::new(limit, interval, unit).unwrap().with_window(window)
}

/// Hand-written boundary cases plus a deterministic pseudo-random walk.
fn steps() -> Vec<Step> {
    use TimeUnit::*;
    use WindowKind::*;
    let mut v = Vec::new();
    let mut add = |at: &str, id: &'static str, spec: QuotaSpec, weight: u64| {
        v.push(Step { at: ts(at), id, spec, weight })
    };
    // Months: Jan 31 → Feb 1, the leap day, and a monthly anchor on the 31st.
    let month = spec(5, 1, Month, Calendar);
    add("2028-01-31T23:59:59Z", "m", month, 3);
    add("2028-01-31T23:59:59.999999Z", "m", month, 3);
    add("2028-02-01T00:00:00Z", "m", month, 3);
    add("2028-02-29T12:00:00Z", "m", month, 2);
    add("2028-02-29T12:00:01Z", "m", month, 1);
    add("2028-03-01T00:00:00Z", "m", month, 0);
    let anchored = month.with_start(ts("2027-10-31T06:00:00Z"));
    add("2028-02-29T06:00:00Z", "ma", anchored, 4);
    add("2028-02-29T07:00:00Z", "ma", anchored, 4);
    add("2028-03-31T05:59:59Z", "ma", anchored, 1);
    add("2028-03-31T06:00:00Z", "ma", anchored, 5);
    // Quarters.
    let quarter = spec(2, 3, Month, Calendar);
    add("2028-03-31T00:00:00Z", "q", quarter, 2);
    add("2028-04-01T00:00:00Z", "q", quarter, 2);
    // Weeks: Sunday night → Monday; 7-day windows from the epoch (Thursdays).
    let week = spec(3, 1, Week, Calendar);
    add("2026-11-29T23:59:59Z", "w", week, 3);
    add("2026-11-29T23:59:59Z", "w", week, 1);
    add("2026-11-30T00:00:00Z", "w", week, 1);
    let seven = spec(3, 7, Day, Calendar);
    add("2026-11-25T23:00:00Z", "d7", seven, 3);
    add("2026-11-26T00:00:00Z", "d7", seven, 3);
    // Weight over the limit and probes.
    let hour = spec(4, 1, Hour, Calendar);
    add("2026-11-30T10:00:00Z", "h", hour, 5);
    add("2026-11-30T10:00:00Z", "h", hour, 0);
    add("2026-11-30T10:10:00Z", "h", hour, 4);
    add("2026-11-30T10:20:00Z", "h", hour, 0);
    // The limit is not part of the key: a lower limit applies at once.
    add("2026-11-30T10:30:00Z", "h", spec(2, 1, Hour, Calendar), 0);
    add("2026-11-30T11:00:00Z", "h", spec(8, 1, Hour, Calendar), 1);
    // Flexi: opened by the first admission, not by rejections.
    let flexi = spec(2, 90, Second, Flexi);
    add("2026-11-30T10:00:00Z", "f", flexi, 3);
    add("2026-11-30T10:00:05Z", "f", flexi, 2);
    add("2026-11-30T10:01:00Z", "f", flexi, 1);
    add("2026-11-30T10:01:35Z", "f", flexi, 1);
    add("2026-11-30T10:05:00Z", "f", flexi, 1);
    let flexi_month = spec(1, 1, Month, Flexi);
    add("2027-01-31T10:00:00Z", "fm", flexi_month, 1);
    add("2027-02-28T09:59:59Z", "fm", flexi_month, 1);
    add("2027-02-28T10:00:00Z", "fm", flexi_month, 1);
    // Rolling: a minute and a month.
    let rolling = spec(3, 1, Minute, Rolling);
    add("2026-11-30T10:00:00Z", "r", rolling, 1);
    add("2026-11-30T10:00:30Z", "r", rolling, 2);
    add("2026-11-30T10:00:40Z", "r", rolling, 1);
    add("2026-11-30T10:01:00.5Z", "r", rolling, 1);
    add("2026-11-30T10:01:31Z", "r", rolling, 2);
    let rolling_month = spec(2, 1, Month, Rolling);
    add("2026-02-28T08:13:00Z", "rm", rolling_month, 2);
    add("2026-03-28T04:00:00Z", "rm", rolling_month, 1);
    add("2026-03-29T00:00:00Z", "rm", rolling_month, 1);
    add("2026-03-31T00:00:00Z", "rm", rolling_month, 1);
    // A pseudo-random walk over all three kinds, including gaps longer than a window, so that
    // the carried totals lapse.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut now = ts("2026-06-01T00:00:00Z");
    let kinds =
        [spec(6, 10, Second, Calendar), spec(6, 10, Second, Flexi), spec(6, 10, Second, Rolling)];
    let names = ["rc", "rf", "rr"];
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now += Duration::from_micros(
            x % 4_000_000 + if x.is_multiple_of(17) { 25_000_000 } else { 0 },
        );
        let k = (x >> 20) as usize % 3;
        v.push(Step { at: now, id: names[k], spec: kinds[k], weight: (x >> 8) % 5 });
    }
    v
}

async fn run(store: &impl Store, clock: &ManualClock, steps: &[Step]) -> Vec<Decision> {
    let mut out = Vec::new();
    for s in steps {
        clock.set(s.at);
        let id = MeteringId::new(s.id).unwrap();
        out.push(store.check(&id, &s.spec, s.weight).await.unwrap());
    }
    out
}

fn assert_same(name: &str, reference: &[Decision], other: &[Decision], steps: &[Step]) {
    for (i, ((a, b), s)) in reference.iter().zip(other).zip(steps).enumerate() {
        assert_eq!(a, b, "{name} differs at step {i} ({} w={} at {})", s.id, s.weight, s.at);
    }
    assert_eq!(reference.len(), other.len());
}

#[tokio::test]
async fn every_store_gives_the_same_answers() {
    let steps = steps();
    let clock = ManualClock::new(steps[0].at);

    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let reference = run(&memory, &clock, &steps).await;
    // A sanity check that the sequence exercises what it should.
    assert!(reference.iter().any(|d| d.outcome == tollgate_quota::Outcome::Exceeded));
    assert!(reference.iter().any(|d| d.outcome == tollgate_quota::Outcome::WeightExceedsLimit));
    assert!(reference.iter().filter(|d| d.allowed()).count() > 50);

    let dir = tempfile::tempdir().unwrap();
    // The defaults: 100 ms flush interval, buffered.
    let opts = EmbeddedOptions::new(dir.path().join("c.redb"));
    let embedded = EmbeddedStore::open_with_clock(opts, Arc::new(clock.clone())).unwrap();
    let answers = run(&embedded, &clock, &steps).await;
    assert_same("embedded", &reference, &answers, &steps);

    let Some(server) = support::RedisServer::start() else { return };
    let mut opts = RedisOptions::new(server.url());
    opts.timeout = Duration::from_secs(2);
    opts.on_unavailable = tollgate_quota::store::OnStoreUnavailable::Deny;
    let redis = RedisStore::connect(opts).await.unwrap().with_clock(Arc::new(clock.clone()));
    let answers = run(&redis, &clock, &steps).await;
    assert_same("redis", &reference, &answers, &steps);
}

/// Every counter under `prefix`, read a page of `limit` at a time.
async fn paged(store: &impl Store, prefix: &str, limit: usize) -> Vec<CounterInfo> {
    let mut listing = CounterListing { prefix, after: None, limit };
    let mut out = Vec::new();
    for _ in 0..100 {
        let page = store.counters(&listing).await.unwrap();
        assert!(page.counters.len() <= limit, "a page of {limit} held {}", page.counters.len());
        out.extend(page.counters);
        match page.next {
            Some(next) => listing.after = Some(next.to_string().parse().unwrap()),
            None => return out,
        }
    }
    panic!("the listing of {prefix:?} did not end in 100 pages");
}

#[tokio::test]
async fn every_store_lists_the_same_counters_a_page_at_a_time() {
    use TimeUnit::*;
    use WindowKind::*;
    let start = ts("2026-03-02T10:00:00Z");
    let clock = ManualClock::new(start);
    let day = spec(100, 1, Day, Calendar);
    let checks = [
        ("P:a", day),
        ("P:a", spec(100, 1, Hour, Flexi)),
        ("P:a", spec(100, 1, Hour, Rolling)),
        ("P:a.b", day),
        ("P:b", spec(100, 2, Day, Calendar)),
        ("P:b", day),
        ("P", day),
        ("Q:x", day),
    ];
    // Each id's day counter also in yesterday's window: Redis holds its ended key beside the
    // live one, both at one position.
    let steps: Vec<Step> = [start - jiff::SignedDuration::from_hours(24), start]
        .into_iter()
        .flat_map(|at| checks.iter().map(move |&(id, spec)| Step { at, id, spec, weight: 3 }))
        .collect();

    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    run(&memory, &clock, &steps).await;
    let whole = memory.counters(&CounterListing::all("P:")).await.unwrap();
    assert_eq!(whole.next, None);
    let ids: Vec<_> = whole.counters.iter().map(|c| c.identifier.as_str()).collect();
    assert_eq!(ids, ["P:a", "P:a", "P:a", "P:a.b", "P:b", "P:b"], "in order, only P:…");
    assert!(whole.counters.iter().all(|c| c.used == 3), "yesterday's window is not listed");
    for limit in [1, 2, 4, 6] {
        assert_eq!(paged(&memory, "P:", limit).await, whole.counters, "memory, pages of {limit}");
    }

    let dir = tempfile::tempdir().unwrap();
    let opts = EmbeddedOptions::new(dir.path().join("c.redb"));
    let embedded = EmbeddedStore::open_with_clock(opts, Arc::new(clock.clone())).unwrap();
    run(&embedded, &clock, &steps).await;
    for limit in [1, 2, 4, 6] {
        assert_eq!(paged(&embedded, "P:", limit).await, whole.counters, "embedded, {limit}");
    }

    let Some(server) = support::RedisServer::start() else { return };
    let mut opts = RedisOptions::new(server.url());
    opts.timeout = Duration::from_secs(2);
    let redis = RedisStore::connect(opts).await.unwrap().with_clock(Arc::new(clock.clone()));
    run(&redis, &clock, &steps).await;
    for limit in [1, 2, 4, 6] {
        assert_eq!(paged(&redis, "P:", limit).await, whole.counters, "redis, pages of {limit}");
    }
}
