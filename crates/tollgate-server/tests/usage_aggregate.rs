//! The usage aggregate under real threads: decisions recorded from several threads while a
//! flush drains it, as the runtime's workers and the flush task do. Every unit recorded comes
//! out of exactly one drain, in its own bucket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let aggregate = Aggregate::new(IDS as usize, usize::MAX);
    let done = AtomicBool::new(false);
    let mut drained: HashMap<(MeteringId, i64), u64> = HashMap::new();
    let mut trims = 0usize;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (aggregate, ids) = (&aggregate, &ids);
                s.spawn(move || {
                    for n in 0..RECORDS {
                        let id = &ids[((n * 7 + t) % IDS) as usize];
                        let bucket = 100 + (n as i64 / 64 + t as i64) % BUCKETS;
                        let d = Delta { admitted: t + 1, ..Delta::empty(bucket) };
                        assert_eq!(aggregate.record(id, d), Recorded::Kept);
                    }
                })
            })
            .collect();
        let drainer = s.spawn(|| {
            let mut out = Vec::new();
            while !done.load(Ordering::Acquire) {
                out.push(aggregate.drain(0));
                std::thread::yield_now();
            }
            out
        });
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        for batch in drainer.join().unwrap().into_iter().chain([aggregate.drain(0)]) {
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
    assert_eq!(drained, want);
    assert_eq!(trims, IDS as usize, "each id is listed for trimming once for one retention start");
    assert!(aggregate.drain(0).is_empty());
}
