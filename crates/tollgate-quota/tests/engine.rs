//! The decision core against simple reference models, under random sequences and under
//! concurrency.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use tollgate_quota::{
    Counters, ManualClock, MeteringId, Outcome, QuotaSpec, TimeUnit, WindowKind, store::MemoryStore,
};
use tollgate_quota::{RollingLayout, Window};

fn base() -> Timestamp {
    "2026-02-27T23:59:00Z".parse().unwrap()
}

fn unit_strategy() -> impl Strategy<Value = TimeUnit> {
    prop_oneof![Just(TimeUnit::Second), Just(TimeUnit::Minute), Just(TimeUnit::Month)]
}

/// (limit, interval, unit, steps of (weight, micros since the previous step)).
fn scenario() -> impl Strategy<Value = (u64, u32, TimeUnit, Vec<(u64, u64)>)> {
    (0u64..20, 1u32..4, unit_strategy()).prop_flat_map(|(limit, interval, unit)| {
        let len_us = match unit.fixed_seconds() {
            Some(s) => s as u64 * 1_000_000 * interval as u64,
            None => 28 * 86_400 * 1_000_000 * interval as u64,
        };
        let step = (0..=limit + 2, prop_oneof![Just(0u64), 0..len_us / 8, 0..len_us * 2]);
        (Just(limit), Just(interval), Just(unit), prop::collection::vec(step, 1..120))
    })
}

fn id() -> MeteringId {
    MeteringId::new("prop:key").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Calendar windows: the store answers exactly like "sum admitted in this window + w ≤ limit",
    /// admitted units per window never pass the limit, and a rejection changes `used` by 0.
    #[test]
    fn calendar_matches_the_reference((limit, interval, unit, steps) in scenario()) {
        let spec = QuotaSpec::new(limit, interval, unit).unwrap();
        let shape = spec.counter_shape();
        let c = Counters::new();
        let swept = Counters::new();
        let mut per_window: HashMap<Timestamp, u64> = HashMap::new();
        let mut now = base();
        for (weight, dt) in steps {
            now += Duration::from_micros(dt);
            let w = Window::calendar(&shape, now);
            let used = per_window.entry(w.start).or_default();
            let d = c.check_at(&id(), &spec, weight, now);
            // Eviction never changes an answer: a twin swept before every check agrees.
            swept.evict_expired(now);
            prop_assert_eq!(&swept.check_at(&id(), &spec, weight, now), &d);
            let expected = if weight > limit {
                Outcome::WeightExceedsLimit
            } else if weight == 0 {
                if *used < limit { Outcome::Allowed } else { Outcome::Exceeded }
            } else if *used + weight <= limit {
                Outcome::Allowed
            } else {
                Outcome::Exceeded
            };
            prop_assert_eq!(d.outcome, expected);
            if d.outcome == Outcome::Allowed {
                *used += weight;
            }
            prop_assert_eq!(d.used, *used, "rejections change used by 0");
            prop_assert!(*used <= limit);
            prop_assert_eq!(d.window_start(), Some(w.start));
            prop_assert_eq!(d.window_end(), Some(w.end));
            if d.outcome == Outcome::Exceeded {
                prop_assert_eq!(d.retry_after(), Some(w.end.duration_since(now).unsigned_abs()));
            } else {
                prop_assert_eq!(d.retry_after(), None);
            }
        }
    }

    /// Flexi windows against a model that opens a window at each first admission.
    #[test]
    fn flexi_matches_the_reference((limit, interval, unit, steps) in scenario()) {
        let spec = QuotaSpec::new(limit, interval, unit).unwrap().with_window(WindowKind::Flexi);
        let shape = spec.counter_shape();
        let c = Counters::new();
        let swept = Counters::new();
        let mut open: Option<(Window, u64)> = None;
        let mut now = base();
        for (weight, dt) in steps {
            now += Duration::from_micros(dt);
            if open.is_some_and(|(w, _)| now >= w.end) {
                open = None;
            }
            let used = open.map_or(0, |(_, u)| u);
            let d = c.check_at(&id(), &spec, weight, now);
            // Eviction never changes an answer: a twin swept before every check agrees.
            swept.evict_expired(now);
            prop_assert_eq!(&swept.check_at(&id(), &spec, weight, now), &d);
            let admit = weight <= limit && (if weight == 0 { used < limit } else { used + weight <= limit });
            prop_assert_eq!(d.allowed(), admit);
            if admit && weight > 0 {
                let w = open.map_or_else(|| Window::flexi(&shape, now), |(w, _)| w);
                open = Some((w, used + weight));
            }
            let used = open.map_or(0, |(_, u)| u);
            prop_assert_eq!(d.used, used);
            prop_assert!(used <= limit);
            if let Some((w, _)) = open {
                prop_assert_eq!(d.window_start(), Some(w.start));
                prop_assert_eq!(d.window_end(), Some(w.end));
            }
        }
    }

    /// Rolling windows: the answer matches "sum of admissions in the counted sub-buckets", and,
    /// independently of the bucket layout, no span of one window minus one sub-bucket ever holds
    /// more than `limit` admitted units.
    #[test]
    fn rolling_matches_the_reference((limit, interval, unit, steps) in scenario()) {
        let spec = QuotaSpec::new(limit, interval, unit).unwrap().with_window(WindowKind::Rolling);
        let shape = spec.counter_shape();
        let layout = RollingLayout::of(&shape);
        let c = Counters::new();
        let swept = Counters::new();
        let mut admitted: Vec<(i64, u64)> = Vec::new();
        let mut now = base();
        for (weight, dt) in steps {
            now += Duration::from_micros(dt);
            let now_us = now.as_microsecond();
            let first = layout.first_counted(now_us);
            let used: u64 = admitted
                .iter()
                .filter(|(t, _)| layout.bucket_of(*t) >= first)
                .map(|(_, w)| w)
                .sum();
            let d = c.check_at(&id(), &spec, weight, now);
            // Eviction never changes an answer: a twin swept before every check agrees.
            swept.evict_expired(now);
            prop_assert_eq!(&swept.check_at(&id(), &spec, weight, now), &d);
            let admit = weight <= limit && (if weight == 0 { used < limit } else { used + weight <= limit });
            prop_assert_eq!(d.allowed(), admit, "used before: {}", used);
            let after = used + if admit { weight } else { 0 };
            prop_assert_eq!(d.used, after);
            if admit && weight > 0 {
                admitted.push((now_us, weight));
            }
            // Model-free bound: everything admitted within (now - window + one bucket, now].
            let width = i64::try_from(layout.bucket_width().as_micros()).unwrap();
            let lookback = match unit.fixed_seconds() {
                Some(s) => s * 1_000_000 * i64::from(interval),
                None => 28 * 86_400 * 1_000_000 * i64::from(interval),
            };
            let recent: u64 = admitted
                .iter()
                .filter(|(t, _)| *t > now_us - lookback + width)
                .map(|(_, w)| w)
                .sum();
            prop_assert!(recent <= limit, "{} units admitted within one window", recent);
        }
    }
}

/// 8 threads × 10,000 checks on one key admit exactly `limit`.
#[test]
fn eight_threads_admit_exactly_the_limit() {
    let clock = ManualClock::new("2026-11-30T10:00:00Z".parse().unwrap());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let spec = QuotaSpec::new(25_000, 1, TimeUnit::Day).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let k = MeteringId::new("ShipmentStatus:CarrierXYZ").unwrap();
                let mut admitted = 0u64;
                for i in 0..10_000u64 {
                    // Weights 1..=3 mixed, so exactness also covers weighted requests.
                    let w = 1 + (i + t) % 3;
                    if store.check_now(&k, &spec, w).allowed() {
                        admitted += w;
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(admitted, 25_000);
    let k = MeteringId::new("ShipmentStatus:CarrierXYZ").unwrap();
    let d = store.check_now(&k, &spec, 1);
    assert_eq!((d.used, d.outcome), (25_000, Outcome::Exceeded));
}

/// Unit-weight variant: exactly `limit` requests, and every other one counted as exceeded.
#[test]
fn eight_threads_unit_weight_count_every_rejection() {
    let clock = ManualClock::new("2026-11-30T10:00:00Z".parse().unwrap());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let spec = QuotaSpec::new(1_000, 1, TimeUnit::Hour).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let k = MeteringId::new("one").unwrap();
                (0..10_000).filter(|_| store.check_now(&k, &spec, 1).allowed()).count()
            })
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(admitted, 1_000);
    let d = store.check_now(&MeteringId::new("one").unwrap(), &spec, 0);
    assert_eq!(d.exceed_count, 79_000 + 1);
    assert_eq!(d.total_exceed_count, 79_001);
}

/// New keys (which take every part of their shard's lock, and move the shard's slots as they
/// grow) race checks on a known key: the known key still admits exactly its limit, and every
/// new key holds exactly the one unit it was given.
#[test]
fn new_keys_racing_checks_on_a_known_key_stay_exact() {
    let clock = ManualClock::new("2026-11-30T10:00:00Z".parse().unwrap());
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock)));
    let spec = QuotaSpec::new(20_000, 1, TimeUnit::Day).unwrap();
    let known = MeteringId::new("ShipmentStatus:Known").unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let (store, known) = (Arc::clone(&store), known.clone());
            std::thread::spawn(move || {
                let mut admitted = 0u64;
                for i in 0..30_000u64 {
                    if t < 2 {
                        admitted += u64::from(store.check_now(&known, &spec, 1).allowed());
                    } else {
                        let id = MeteringId::new(&format!("new-{t}-{i}")).unwrap();
                        assert!(store.check_now(&id, &spec, 1).allowed(), "new key {t}-{i}");
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(admitted, 20_000);
    assert_eq!(store.check_now(&known, &spec, 0).used, 20_000);
    for t in 2..4 {
        for i in (0..30_000).step_by(997) {
            let id = MeteringId::new(&format!("new-{t}-{i}")).unwrap();
            assert_eq!(store.check_now(&id, &spec, 0).used, 1, "new key {t}-{i}");
        }
    }
    assert_eq!(store.len(), 60_001);
}

/// Without any further traffic, the background sweeper drops expired counters.
#[test]
fn idle_memory_store_drops_expired_counters() {
    let clock = ManualClock::new("2026-11-30T10:00:00Z".parse().unwrap());
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let spec = QuotaSpec::new(5, 1, TimeUnit::Second).unwrap();
    for i in 0..1_000 {
        store.check_now(&MeteringId::new(&format!("idle-{i}")).unwrap(), &spec, 1);
    }
    assert_eq!(store.len(), 1_000);
    clock.advance(Duration::from_secs(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store.is_empty() {
        assert!(std::time::Instant::now() < deadline, "{} counters left", store.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}
