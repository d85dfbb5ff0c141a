//! One quota decision on the in-memory store, next to the `governor` crate's keyed limiter
//! (DashMap state) on the same key pattern.
//!
//! Run: `cargo bench -p tollgate-quota --bench decision`. Both limiters are given limits they
//! never reach, so every decision takes the admit path and updates its counter. With 2 threads
//! the figure is wall time divided by all decisions of both threads (aggregate throughput).
//!
//! Keys come in the order they were added, and with 100,000 keys also scattered (every
//! 7,919th key, wrapping), where the next key's memory is not next to the last one's.

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use tollgate_quota::store::MemoryStore;
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit};

/// The step between keys checked in scattered order: a prime that does not divide 100,000, so
/// every key comes in turn.
const SCATTER: usize = 7_919;

fn ids(n: usize) -> Vec<MeteringId> {
    (0..n).map(|i| MeteringId::new(&format!("ShipmentStatus:Carrier{i:06}")).unwrap()).collect()
}

/// Polls a future that never waits, without a runtime.
fn poll_ready<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(f).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("the memory store never waits"),
    }
}

/// Runs `per_thread(thread, iterations)` on `threads` threads and returns the wall time.
fn on_threads(threads: usize, iters: u64, per_thread: impl Fn(usize, u64) + Sync) -> Duration {
    let share = iters.div_ceil(threads as u64);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 1..threads {
            let per_thread = &per_thread;
            s.spawn(move || per_thread(t, share));
        }
        // Thread 0 is the benchmark's own (warm) thread.
        per_thread(0, share);
    });
    start.elapsed()
}

fn decision(c: &mut Criterion) {
    let spec = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day).unwrap();
    let quota = Quota::per_second(NonZeroU32::MAX);
    let mut group = c.benchmark_group("decision");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    for (keys, step) in [(1usize, 1usize), (100_000, 1), (100_000, SCATTER)] {
        let ids = ids(keys);
        let store = MemoryStore::new();
        let governor = RateLimiter::keyed(quota);
        // Fill both maps first, so the 100,000-key runs measure lookups, not inserts.
        for id in &ids {
            store.check_now(id, &spec, 1);
            let _ = governor.check_key(id);
        }

        for threads in [1usize, 2] {
            let order = if step == 1 { "" } else { "-scattered" };
            let label = format!("{keys}keys{order}/{threads}t");
            group.bench_function(BenchmarkId::new("tollgate_memory", &label), |b| {
                b.iter_custom(|iters| {
                    on_threads(threads, iters, |t, n| {
                        let mut i = t * 7_919;
                        for _ in 0..n {
                            i = (i + step) % keys;
                            // By reference: passing the decision by value would time a copy
                            // of it into `black_box` as well.
                            let decision = store.check_now(&ids[i], &spec, 1);
                            black_box(&decision);
                        }
                    })
                })
            });
            group.bench_function(BenchmarkId::new("governor_keyed", &label), |b| {
                b.iter_custom(|iters| {
                    on_threads(threads, iters, |t, n| {
                        let mut i = t * 7_919;
                        for _ in 0..n {
                            i = (i + step) % keys;
                            let _ = black_box(governor.check_key(&ids[i]));
                        }
                    })
                })
            });
        }

        if step != 1 {
            continue;
        }
        let label = format!("{keys}keys/1t");
        group.bench_function(BenchmarkId::new("tollgate_memory_async_trait", &label), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys;
                let decision = poll_ready(store.check(&ids[i], &spec, 1));
                black_box(&decision);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
