//! CPU time per decision, for machines too busy for wall-clock benchmarks.
//!
//! Run: `cargo run --release -p tollgate-quota --example decision_cpu [-- ROUNDS]`. Each round
//! makes 5,000,000 decisions per variant on one thread and reads the thread's own CPU time from
//! `/proc/thread-self/schedstat` (nanoseconds on CPU), so time spent waiting for a core that
//! other processes hold is not counted. The key patterns of `benches/decision.rs`, and one more:
//! `MemoryStore::check_now` (clock included) against `governor`'s keyed limiter.
//!
//! Keys are checked in the order they were added (`in order`), and with 100,000 keys also in a
//! scattered order (`scattered`: every 7,919th key, wrapping), where neither limiter finds the
//! next key's memory next to the last one's, as with real traffic.
//!
//! `CHUNK=n` in the environment interleaves the two limiters within each round, n decisions of
//! one, then n of the other, until each has made its 5,000,000; each side's CPU time is summed
//! over its chunks. On a machine whose speed changes from one second to the next, both then run
//! in the same states. Unset, each limiter makes its 5,000,000 in one go.

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use tollgate_quota::store::MemoryStore;
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit};

const DECISIONS: u64 = 5_000_000;

/// The step between keys checked in scattered order: a prime that does not divide 100,000, so
/// every key comes in turn.
const SCATTER: usize = 7_919;

/// Nanoseconds this thread has spent on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Runs `ours(n)` and `theirs(n)` in turns of `chunk` decisions until each has made
/// [`DECISIONS`]; returns each side's CPU nanoseconds per decision.
fn interleaved(chunk: u64, mut ours: impl FnMut(u64), mut theirs: impl FnMut(u64)) -> (f64, f64) {
    let (mut ours_ns, mut theirs_ns, mut done) = (0, 0, 0);
    while done < DECISIONS {
        let n = chunk.min(DECISIONS - done);
        let start = cpu_ns();
        ours(n);
        let mid = cpu_ns();
        theirs(n);
        ours_ns += mid - start;
        theirs_ns += cpu_ns() - mid;
        done += n;
    }
    (ours_ns as f64 / DECISIONS as f64, theirs_ns as f64 / DECISIONS as f64)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let chunk: u64 =
        std::env::var("CHUNK").ok().and_then(|c| c.parse().ok()).unwrap_or(DECISIONS).max(1);
    let Ok(spec) = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day) else { return };
    let quota = Quota::per_second(NonZeroU32::MAX);
    println!("{:<20} {:>16} {:>16}", "keys", "tollgate ns/op", "governor ns/op");
    // An optional second argument runs one key count only (for a profiler), and a third one
    // the step between keys (1: in order).
    let only: Option<usize> = std::env::args().nth(2).and_then(|a| a.parse().ok());
    let step: Option<usize> = std::env::args().nth(3).and_then(|a| a.parse().ok());
    let patterns = match only {
        Some(k) => vec![(k.max(1), step.unwrap_or(1))],
        None => vec![(1, 1), (100_000, 1), (100_000, SCATTER)],
    };
    for (keys, step) in patterns {
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
            // Each side walks the keys from where its last chunk stopped.
            let (mut i, mut j) = (0, 0);
            let (ours, theirs) = interleaved(
                chunk,
                |n| {
                    for _ in 0..n {
                        i = (i + step) % keys;
                        // By reference, as in `benches/decision.rs`: by value would time a copy.
                        let decision = store.check_now(&ids[i], &spec, 1);
                        black_box(&decision);
                    }
                },
                |n| {
                    for _ in 0..n {
                        j = (j + step) % keys;
                        let _ = black_box(governor.check_key(&ids[j]));
                    }
                },
            );
            let label =
                if step == 1 { format!("{keys} in order") } else { format!("{keys} scattered") };
            println!("{label:<20} {ours:>16.1} {theirs:>16.1}");
        }
    }
}
