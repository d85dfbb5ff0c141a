//! The decision core's behaviour, one store-independent case at a time.

use super::*;
use crate::decision::Outcome;
use crate::spec::QuotaSpec;
use crate::spec::{TimeUnit, WindowKind};
use crate::store::CounterListing;
use crate::window::RollingLayout;
use state::Bucket;
use std::time::Duration;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn id(s: &str) -> MeteringId {
    MeteringId::new(s).unwrap()
}

#[test]
fn admits_up_to_the_limit_and_counts_rejections() {
    let c = Counters::new();
    let spec = QuotaSpec::new(1000, 24, TimeUnit::Hour).unwrap();
    let k = id("ShipmentStatus:CarrierXYZ");
    let now = at("2026-11-30T10:00:00Z");
    for i in 1..=20 {
        let d = c.check_at(&k, &spec, 50, now);
        assert_eq!(d.outcome, Outcome::Allowed, "check {i}");
        assert_eq!(d.used, 50 * i);
    }
    let d = c.check_at(&k, &spec, 50, now);
    assert_eq!(d.outcome, Outcome::Exceeded);
    assert_eq!((d.used, d.available(), d.exceed_count, d.total_exceed_count), (1000, 0, 1, 1));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(14 * 3600)));
    assert_eq!(d.reset_after(), Duration::from_secs(14 * 3600));
    assert_eq!(d.window_start(), Some(at("2026-11-30T00:00:00Z")));
    assert_eq!(d.window_end(), Some(at("2026-12-01T00:00:00Z")));
    // Next window: used restarts, the total is carried.
    let d = c.check_at(&k, &spec, 50, at("2026-12-01T00:00:00Z"));
    assert_eq!(
        (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
        (Outcome::Allowed, 50, 0, 1)
    );
}

#[test]
fn weight_zero_probes_and_weight_over_limit_is_never_admissible() {
    let c = Counters::new();
    let spec = QuotaSpec::new(2, 1, TimeUnit::Minute).unwrap();
    let k = id("probe");
    let now = at("2026-11-30T10:00:30Z");
    let d = c.check_at(&k, &spec, 0, now);
    assert_eq!((d.outcome, d.used), (Outcome::Allowed, 0));
    let d = c.check_at(&k, &spec, 3, now);
    assert_eq!((d.outcome, d.used, d.retry_after()), (Outcome::WeightExceedsLimit, 0, None));
    assert_eq!(c.check_at(&k, &spec, 2, now).outcome, Outcome::Allowed);
    let d = c.check_at(&k, &spec, 0, now);
    assert_eq!((d.outcome, d.retry_after()), (Outcome::Exceeded, Some(Duration::from_secs(30))));
}

#[test]
fn an_unvalidated_zero_interval_never_panics() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:30Z");
    for unit in [TimeUnit::Second, TimeUnit::Month] {
        for window in [WindowKind::Calendar, WindowKind::Flexi, WindowKind::Rolling] {
            let spec = QuotaSpec { limit: 1, interval: 0, unit, window, start: None };
            assert!(c.check_at(&id("zero"), &spec, 1, now).allowed());
        }
    }
}

#[test]
fn counters_read_back_with_extreme_values_never_overflow() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:30Z");
    let rolling = QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Rolling);
    let shape = rolling.counter_shape();
    let b = RollingLayout::of(&shape).bucket_of(now.as_microsecond());
    let full = |index| Bucket { index, used: u64::MAX, exceed: u64::MAX };
    let hostile = Counter {
        used: u64::MAX,
        exceed: u64::MAX,
        total_exceed: u64::MAX,
        mark_us: i64::MAX,
        buckets: Some(Box::new(vec![full(b - 1), full(b)])),
    };
    assert!(c.restore(id("r"), &shape, hostile.clone(), now));
    let d = c.check_at(&id("r"), &rolling, 1, now);
    assert_eq!(
        (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
        (Outcome::Exceeded, u64::MAX, u64::MAX, u64::MAX)
    );
    assert_eq!(c.counters_at(&CounterListing::all("r"), now).counters[0].used, u64::MAX);
    let calendar = QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap();
    let hostile = Counter { buckets: None, ..hostile };
    assert!(c.restore(id("c"), &calendar.counter_shape(), hostile, now));
    let d = c.check_at(&id("c"), &calendar, 1, now);
    assert_eq!((d.outcome, d.total_exceed_count), (Outcome::Exceeded, u64::MAX));
}

#[test]
fn limit_is_not_part_of_the_key() {
    let c = Counters::new();
    let k = id("k");
    let now = at("2026-11-30T10:00:00Z");
    let s10 = QuotaSpec::new(10, 1, TimeUnit::Hour).unwrap();
    let s5 = QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap();
    assert_eq!(c.check_at(&k, &s10, 6, now).used, 6);
    let d = c.check_at(&k, &s5, 1, now);
    assert_eq!((d.outcome, d.used, d.available()), (Outcome::Exceeded, 6, 0));
    assert_eq!(c.len(), 1);
}

#[test]
fn flexi_opens_at_the_first_admitted_request() {
    let c = Counters::new();
    let spec = QuotaSpec::new(2, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Flexi);
    let k = id("f");
    let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:00:10Z"));
    assert_eq!(d.window_end(), Some(at("2026-11-30T10:01:10Z")));
    c.check_at(&k, &spec, 1, at("2026-11-30T10:00:20Z"));
    let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:01:09Z"));
    assert_eq!((d.outcome, d.retry_after()), (Outcome::Exceeded, Some(Duration::from_secs(1))));
    let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:05:00Z"));
    assert_eq!((d.outcome, d.used), (Outcome::Allowed, 1));
    assert_eq!(d.window_start(), Some(at("2026-11-30T10:05:00Z")));
}

#[test]
fn rolling_frees_units_as_sub_buckets_leave() {
    let c = Counters::new();
    let spec = QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Rolling);
    let k = id("r");
    c.check_at(&k, &spec, 1, at("2026-11-30T10:00:00Z"));
    c.check_at(&k, &spec, 2, at("2026-11-30T10:00:30Z"));
    let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:00:40Z"));
    assert_eq!(d.outcome, Outcome::Exceeded);
    assert_eq!(d.window_start(), None);
    // The first unit leaves one minute after its sub-bucket started (10:00:00 is a bucket
    // boundary: 64 buckets of 0.9375 s tile a minute).
    assert_eq!(d.retry_after(), Some(Duration::from_secs(20)));
    let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:01:00Z"));
    assert_eq!((d.outcome, d.used), (Outcome::Allowed, 3));
    let d = c.check_at(&k, &spec, 3, at("2026-11-30T10:02:00Z"));
    assert_eq!((d.outcome, d.used), (Outcome::Allowed, 3));
}

#[test]
fn expired_counters_are_evicted_and_memory_returns() {
    let c = Counters::new();
    let spec = QuotaSpec::new(5, 1, TimeUnit::Second).unwrap();
    let now = at("2026-11-30T10:00:00Z");
    for i in 0..10_000 {
        c.check_at(&id(&format!("id-{i}")), &spec, 1, now);
    }
    assert_eq!(c.len(), 10_000);
    assert_eq!(c.evict_expired(at("2026-11-30T10:00:00.5Z")), 0);
    assert_eq!(c.evict_expired(at("2026-11-30T10:00:01Z")), 10_000);
    assert!(c.is_empty());
    let cap: usize = c.shards.iter().map(|lane| lane.read().capacity()).sum();
    assert!(cap <= c.shards.len() * 64, "tables shrank: {cap}");
}

#[test]
fn evicted_keys_put_back_are_taken_again_with_later_ones() {
    let c = Counters::with_eviction_log();
    let spec = QuotaSpec::new(5, 1, TimeUnit::Second).unwrap();
    let now = at("2026-11-30T10:00:00Z");
    c.check_at(&id("first"), &spec, 1, now);
    assert_eq!(c.evict_expired(at("2026-11-30T10:00:01Z")), 1);
    let taken = c.take_evicted();
    assert_eq!(taken.len(), 1);
    // The batch holding them failed: back they go, and a later sweep adds its own.
    c.requeue_evicted(taken);
    c.check_at(&id("second"), &spec, 1, at("2026-11-30T10:00:02Z"));
    assert_eq!(c.evict_expired(at("2026-11-30T10:00:03Z")), 1);
    let mut ids: Vec<String> = c.take_evicted().into_iter().map(|(id, _)| id).collect();
    ids.sort();
    assert_eq!(ids, ["first", "second"]);
    assert!(c.take_evicted().is_empty());
}

#[test]
fn counters_lists_live_ones_and_reset_drops_every_shape() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:00Z");
    let k = id("Invoice:ACME");
    c.check_at(&k, &QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap(), 2, now);
    c.check_at(&k, &QuotaSpec::new(5, 1, TimeUnit::Day).unwrap(), 1, now);
    c.check_at(&id("Other"), &QuotaSpec::new(5, 1, TimeUnit::Day).unwrap(), 1, now);
    let list = c.counters_at(&CounterListing::all("Invoice:"), now).counters;
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|i| i.identifier == k));
    assert_eq!(c.reset(&k), 2);
    assert!(c.counters_at(&CounterListing::all("Invoice:"), now).counters.is_empty());
    assert_eq!(c.counters_at(&CounterListing::all(""), now).counters.len(), 1);
}

#[test]
fn a_limit_too_large_for_a_cell_moves_the_counter_under_a_lock_and_keeps_its_count() {
    let c = Counters::new();
    let k = id("Invoice:BIG");
    let now = at("2026-11-30T10:00:00Z");
    let small = QuotaSpec::new(10, 1, TimeUnit::Hour).unwrap();
    let huge = QuotaSpec::new(u64::MAX, 1, TimeUnit::Hour).unwrap();
    assert_eq!(c.check_at(&k, &small, 7, now).used, 7);
    let d = c.check_at(&k, &huge, u64::MAX - 7, now);
    assert_eq!((d.outcome, d.used, d.available()), (Outcome::Allowed, u64::MAX, 0));
    assert_eq!(c.len(), 1, "moved, not copied");
    let d = c.check_at(&k, &small, 1, now);
    assert_eq!((d.outcome, d.used, d.exceed_count), (Outcome::Exceeded, u64::MAX, 1));
}

#[test]
fn calendar_counters_written_behind_read_back_the_same() {
    let c = Counters::new();
    let spec = QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap();
    let shape = spec.counter_shape();
    let now = at("2026-11-30T10:20:00Z");
    for _ in 0..7 {
        c.check_at(&id("A"), &spec, 1, now);
    }
    let saved = c.snapshot(b"A", &shape, now).unwrap();
    assert_eq!((saved.used, saved.exceed, saved.total_exceed), (5, 2, 2));
    assert_eq!(saved.mark_us, at("2026-11-30T11:00:00Z").as_microsecond());
    let back = Counters::new();
    assert!(back.restore(id("A"), &shape, saved.clone(), now));
    assert_eq!(back.snapshot(b"A", &shape, now), Some(saved));
    let d = back.check_at(&id("A"), &spec, 1, at("2026-11-30T11:00:00Z"));
    assert_eq!(
        (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
        (Outcome::Allowed, 1, 0, 2)
    );
}

#[test]
fn sweeps_compact_ids_and_forget_unused_shapes() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:00Z");
    let short = QuotaSpec::new(5, 1, TimeUnit::Second).unwrap();
    let long = QuotaSpec::new(5, 1, TimeUnit::Day).unwrap();
    // Every other id is too long for its slot, so its bytes are in the arena.
    let name = |kind: &str, i: u32| match i % 2 {
        0 => format!("{kind}-{i}"),
        _ => format!("{kind}-{i}-{}", "x".repeat(40)),
    };
    for i in 0..5_000 {
        c.check_at(&id(&name("short", i)), &short, 1, now);
        c.check_at(&id(&name("long", i)), &QuotaSpec { interval: 1 + i % 50, ..long }, 1, now);
    }
    assert_eq!(c.evict_expired(at("2026-11-30T10:00:02Z")), 5_000);
    // Every long counter is still found, whatever moved in the arena and the shape lists.
    for i in 0..5_000 {
        let d =
            c.check_at(&id(&name("long", i)), &QuotaSpec { interval: 1 + i % 50, ..long }, 1, now);
        assert_eq!(d.used, 2, "{}", name("long", i));
    }
    assert_eq!(c.reset(&id(&name("long", 17))), 1);
    assert_eq!(c.reset(&id(&name("long", 18))), 1);
    assert_eq!(c.len(), 4_998);
}

#[test]
fn ids_of_every_length_are_told_apart() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:00Z");
    let spec = QuotaSpec::new(100, 1, TimeUnit::Hour).unwrap();
    // Every length from 1 to the longest, on both sides of what a slot holds; ids that share
    // a prefix, so only the last byte tells two of them apart.
    let name = |len: usize, last: char| format!("{}{last}", "k".repeat(len - 1));
    for len in 1..=MeteringId::MAX_LEN {
        c.check_at(&id(&name(len, 'a')), &spec, 1, now);
        c.check_at(&id(&name(len, 'b')), &spec, 2, now);
    }
    for len in 1..=MeteringId::MAX_LEN {
        assert_eq!(c.check_at(&id(&name(len, 'a')), &spec, 0, now).used, 1, "length {len}");
        assert_eq!(c.check_at(&id(&name(len, 'b')), &spec, 0, now).used, 2, "length {len}");
    }
    assert_eq!(c.len(), 2 * MeteringId::MAX_LEN);
    for len in (1..=MeteringId::MAX_LEN).step_by(7) {
        assert_eq!(c.reset(&id(&name(len, 'a'))), 1, "length {len}");
        assert_eq!(c.check_at(&id(&name(len, 'b')), &spec, 0, now).used, 2, "length {len}");
    }
}

#[test]
fn shapes_beyond_a_shards_list_are_counted_exactly_under_a_lock() {
    let c = Counters::new();
    let now = at("2026-11-30T10:00:00Z");
    let k = id("Many:Shapes");
    // More shapes than all the shards' lists hold together: some shard gets more than its own.
    let shapes = c.shards.len() as u32 * 64 + 1_000;
    for interval in 1..=shapes {
        let spec = QuotaSpec::new(2, interval, TimeUnit::Hour).unwrap();
        assert!(c.check_at(&k, &spec, 2, now).allowed());
        let d = c.check_at(&k, &spec, 1, now);
        assert_eq!((d.outcome, d.used, d.exceed_count), (Outcome::Exceeded, 2, 1), "{interval} h");
    }
    let locked: usize = c.shards.iter().map(|lane| lane.read().locked_len()).sum();
    assert!(locked > 0, "every shape found a cell");
    assert_eq!(c.len(), shapes as usize);
    assert_eq!(c.reset(&k), u64::from(shapes));
}
