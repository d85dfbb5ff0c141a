//! The usage aggregate under real threads: decisions recorded from several threads while a
//! flush drains it and releases what it drained, as the runtime's workers and the flush task
//! do. Every unit recorded comes out of exactly one drain, in its own bucket, and the pending
//! count that bounds memory comes back to zero.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tollgate_quota::MeteringId;
use tollgate_server::usage::aggregate::{Aggregate, Delta, Recorded};

const THREADS: u64 = 4;
const RECORDS: u64 = 20_000;
const IDS: u64 = 50;
/// Buckets the records cycle through, so that an id's newest delta is often replaced while
/// older ones wait beside it.
const BUCKETS: i64 = 3;

#[test]
fn records_racing_drains_lose_and_double_no_unit() {
    let ids: Vec<MeteringId> =
        (0..IDS).map(|i| MeteringId::new(&format!("Route:P{i}")).unwrap()).collect();
    // Room for every (id, bucket) pending at once and one drained batch not yet released:
    // no record is ever refused while the count stays right.
    let cap = 2 * (IDS as usize) * (BUCKETS as usize);
    let aggregate = Aggregate::new(IDS as usize, cap);
    let done = AtomicBool::new(false);
    let refused = AtomicUsize::new(0);
    let mut drained: HashMap<(MeteringId, i64), u64> = HashMap::new();
    let mut trims = 0usize;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (aggregate, ids, refused) = (&aggregate, &ids, &refused);
                s.spawn(move || {
                    for n in 0..RECORDS {
                        let id = &ids[((n * 7 + t) % IDS) as usize];
                        let bucket = 100 + (n as i64 / 64 + t as i64) % BUCKETS;
                        let d = Delta { admitted: t + 1, ..Delta::empty(bucket) };
                        // Counted, not asserted here: a panicking worker would leave the
                        // drainer waiting for `done`.
                        if aggregate.record(id, d) != Recorded::Kept {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        let drainer = s.spawn(|| {
            let mut out = Vec::new();
            while !done.load(Ordering::Acquire) {
                let batch = aggregate.drain(0);
                aggregate.release(batch.deltas.len());
                out.push(batch);
                std::thread::yield_now();
            }
            out
        });
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let tail = aggregate.drain(0);
        aggregate.release(tail.deltas.len());
        for batch in drainer.join().unwrap().into_iter().chain([tail]) {
            trims += batch.trim.len();
            for (id, d) in batch.deltas {
                *drained.entry((id, d.bucket)).or_default() += d.admitted;
            }
        }
    });

    let mut want: HashMap<(MeteringId, i64), u64> = HashMap::new();
    for t in 0..THREADS {
        for n in 0..RECORDS {
            let id = ids[((n * 7 + t) % IDS) as usize].clone();
            let bucket = 100 + (n as i64 / 64 + t as i64) % BUCKETS;
            *want.entry((id, bucket)).or_default() += t + 1;
        }
    }
    assert_eq!(refused.into_inner(), 0, "records refused: the pending count ran past the cap");
    assert_eq!(drained, want);
    assert_eq!(trims, IDS as usize, "each id is listed for trimming once for one retention start");
    let last = aggregate.drain(0);
    assert!(last.is_empty());
    // Everything drained was released: the whole cap is free again, and no more.
    for n in 0..cap as i64 {
        let d = Delta { admitted: 1, ..Delta::empty(200 + n / IDS as i64) };
        assert_eq!(aggregate.record(&ids[(n % IDS as i64) as usize], d), Recorded::Kept, "{n}");
    }
    let d = Delta { admitted: 1, ..Delta::empty(999) };
    assert_eq!(aggregate.record(&ids[0], d), Recorded::Dropped);
}
