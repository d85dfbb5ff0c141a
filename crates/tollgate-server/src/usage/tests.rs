//! The history on a memory ledger (reads merge flushed and pending units, the store's
//! observer records decisions and withheld units) and on the file ledger (a flush its caller
//! stopped waiting for writes once).

use super::*;

/// `secs` after the start of the bucket two hours ago: inside the retention whenever the test
/// runs (fixed dates fall out of it a week later).
fn at(secs: i64) -> Timestamp {
    bucket_start(bucket_of(Timestamp::now()) - 24) + jiff::SignedDuration::from_secs(secs)
}

#[tokio::test]
async fn series_merges_flushed_and_pending_units_per_bucket() {
    let h = UsageHistory::in_memory(10);
    let id = MeteringId::new("S:A").unwrap();
    h.record(&id, at(10), 10, 0);
    h.flush().await.unwrap();
    h.record(&id, at(299), 2, 3);
    h.record(&id, at(300), 0, 7);
    h.record_withheld(&id, at(360), Withheld::Held, 40);
    h.flush().await.unwrap();
    h.record_withheld(&id, at(420), Withheld::Held, 9);
    h.record_withheld(&id, at(600), Withheld::Duplicate, 5);
    let all = h.series("S:A", at(-3_300), at(3_900)).await;
    let all = all.unwrap();
    let bucket = |start, admitted, refused, held, duplicate| UsageBucket {
        start: at(start),
        admitted,
        refused,
        held,
        duplicate,
    };
    assert_eq!(all, [bucket(0, 12, 3, 0, 0), bucket(300, 0, 7, 49, 0), bucket(600, 0, 0, 0, 5)]);
    // `to` is exclusive, `from` rounds down to its bucket.
    let one = h.series("S:A", at(120), at(300)).await;
    assert_eq!(one.unwrap().len(), 1);
    assert!(h.series("S:B", at(-3_300), at(3_900)).await.unwrap().is_empty());
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

/// A caller that stops waiting for a flush (dropped after its write began) does not stop the
/// write: the file ledger commits the batch once, and the next flush does not send it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_whose_caller_stopped_waiting_writes_its_batch_once() {
    use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore};
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("c.redb"))).unwrap();
    let store = AnyStore::Embedded(store);
    let h = UsageHistory::open(&store, dir.path(), UsageOptions::default()).unwrap();
    let id = MeteringId::new("S:A").unwrap();
    for round in 1..=20u64 {
        h.record(&id, at(10), 1, 0);
        // Polled until it waits on the ledger's write (or done), then dropped.
        let flush = h.flush();
        let _ = tokio::time::timeout(std::time::Duration::from_micros(50), flush).await;
        h.flush().await.unwrap();
        let all = h.series("S:A", at(0), at(300)).await.unwrap();
        assert_eq!(all.iter().map(|b| b.admitted).sum::<u64>(), round, "{all:?}");
    }
}
