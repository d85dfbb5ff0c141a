//! The history on a memory ledger: reads merge flushed and pending units, and the store's
//! observer records decisions and withheld units.

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[tokio::test]
async fn series_merges_flushed_and_pending_units_per_bucket() {
    let h = UsageHistory::in_memory(10);
    let id = MeteringId::new("S:A").unwrap();
    h.record(&id, at("2026-12-01T15:55:10Z"), 10, 0);
    h.flush().await.unwrap();
    h.record(&id, at("2026-12-01T15:59:59Z"), 2, 3);
    h.record(&id, at("2026-12-01T16:00:00Z"), 0, 7);
    h.record_withheld(&id, at("2026-12-01T16:01:00Z"), Withheld::Held, 40);
    h.flush().await.unwrap();
    h.record_withheld(&id, at("2026-12-01T16:02:00Z"), Withheld::Held, 9);
    h.record_withheld(&id, at("2026-12-01T16:05:00Z"), Withheld::Duplicate, 5);
    let all = h.series("S:A", at("2026-12-01T15:00:00Z"), at("2026-12-01T17:00:00Z")).await;
    let all = all.unwrap();
    let bucket = |start, admitted, refused, held, duplicate| UsageBucket {
        start: at(start),
        admitted,
        refused,
        held,
        duplicate,
    };
    assert_eq!(
        all,
        [
            bucket("2026-12-01T15:55:00Z", 12, 3, 0, 0),
            bucket("2026-12-01T16:00:00Z", 0, 7, 49, 0),
            bucket("2026-12-01T16:05:00Z", 0, 0, 0, 5),
        ]
    );
    // `to` is exclusive, `from` rounds down to its bucket.
    let one = h.series("S:A", at("2026-12-01T15:57:00Z"), at("2026-12-01T16:00:00Z")).await;
    assert_eq!(one.unwrap().len(), 1);
    assert!(
        h.series("S:B", at("2026-12-01T15:00:00Z"), at("2026-12-01T17:00:00Z"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_store_observer_records_decisions_and_withheld_units() {
    use tollgate_quota::store::{MemoryStore, Store};
    let store = AnyStore::Memory(MemoryStore::new());
    let h = UsageHistory::in_memory(10);
    assert!(h.attach(&store));
    let id = MeteringId::new("S:A").unwrap();
    let spec = tollgate_quota::QuotaSpec::new(5, 1, tollgate_quota::TimeUnit::Day).unwrap();
    assert!(store.check(&id, &spec, 4).await.unwrap().allowed());
    assert!(!store.check(&id, &spec, 4).await.unwrap().allowed());
    store.withheld(&id, Withheld::Held, 4);
    store.withheld(&id, Withheld::Held, 6);
    store.withheld(&id, Withheld::Duplicate, 3);
    let now = Timestamp::now();
    let week = jiff::SignedDuration::from_hours(7 * 24);
    let all = h.series("S:A", now - week, now + week).await.unwrap();
    let sum = all.iter().fold((0, 0, 0, 0), |s, b| {
        (s.0 + b.admitted, s.1 + b.refused, s.2 + b.held, s.3 + b.duplicate)
    });
    assert_eq!(sum, (4, 4, 10, 3), "{all:?}");
}
