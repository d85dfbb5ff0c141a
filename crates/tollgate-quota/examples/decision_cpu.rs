//! CPU time per decision, for machines too busy for wall-clock benchmarks.
//!
//! Run: `cargo run --release -p tollgate-quota --example decision_cpu [-- ROUNDS]`. Each round
//! makes 5,000,000 decisions per variant on one thread and reads the thread's own CPU time from
//! `/proc/thread-self/schedstat` (nanoseconds on CPU), so time spent waiting for a core that
//! other processes hold is not counted. The same key patterns as `benches/decision.rs`:
//! `MemoryStore::check_now` (clock included) against `governor`'s keyed limiter.

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use tollgate_quota::store::MemoryStore;
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit};

const DECISIONS: u64 = 5_000_000;

/// Nanoseconds this thread has spent on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn per_decision(f: impl FnOnce()) -> f64 {
    let start = cpu_ns();
    f();
    (cpu_ns() - start) as f64 / DECISIONS as f64
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let Ok(spec) = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day) else { return };
    let quota = Quota::per_second(NonZeroU32::MAX);
    println!("{:<10} {:>16} {:>16}", "keys", "tollgate ns/op", "governor ns/op");
    // An optional second argument runs one key count only (for a profiler).
    let only: Option<usize> = std::env::args().nth(2).and_then(|a| a.parse().ok());
    for keys in only.map_or(vec![1usize, 100_000], |k| vec![k.max(1)]) {
        let ids: Vec<MeteringId> = (0..keys)
            .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:Carrier{i:06}")).ok())
            .collect();
        let store = MemoryStore::new();
        let governor = RateLimiter::keyed(quota);
        for id in &ids {
            store.check_now(id, &spec, 1);
            let _ = governor.check_key(id);
        }
        for _ in 0..rounds {
            let ours = per_decision(|| {
                let mut i = 0;
                for _ in 0..DECISIONS {
                    i = (i + 1) % keys;
                    black_box(store.check_now(&ids[i], &spec, 1));
                }
            });
            let theirs = per_decision(|| {
                let mut i = 0;
                for _ in 0..DECISIONS {
                    i = (i + 1) % keys;
                    let _ = black_box(governor.check_key(&ids[i]));
                }
            });
            println!("{keys:<10} {ours:>16.1} {theirs:>16.1}");
        }
    }
}
