//! CPU time per buffered check of the embedded store, on several threads at once, with its
//! flusher writing behind: what a server's request threads and the flusher spend per answer.
//!
//! Run: `cargo run --release -p tollgate-quota --example embedded_cpu [-- ROUNDS [THREADS]]`.
//! Each round, THREADS threads (default 2) make 3,000,000 checks each over 10,000 ids in a
//! scattered order, with the default 100 ms flush interval. It prints the CPU time of the whole
//! process (the flusher included, from `/proc/self/stat`) and the wall time, both per check.

use std::hint::black_box;
use std::time::Instant;

use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore};
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit};

const CHECKS: usize = 3_000_000;
const IDS: usize = 10_000;
/// A prime step through the ids, so consecutive checks do not find neighbouring memory.
const SCATTER: usize = 7_919;

/// User plus system CPU time of this process so far, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let threads: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let Ok(dir) = tempfile::tempdir() else { return };
    let Ok(store) = EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("counters.redb")))
    else {
        return;
    };
    let Ok(spec) = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day) else { return };
    let ids: Vec<MeteringId> = (0..IDS)
        .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:Carrier{i:06}")).ok())
        .collect();
    // A tick is 10 ms on Linux (USER_HZ 100).
    let tick_ns = 1e9 / 100.0;
    println!("{:<8} {:>14} {:>14}", "threads", "CPU ns/check", "wall ns/check");
    for _ in 0..rounds {
        let (start_cpu, start) = (cpu_ticks(), Instant::now());
        std::thread::scope(|s| {
            for t in 0..threads {
                let (store, ids, spec) = (&store, &ids, &spec);
                s.spawn(move || {
                    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
                        return;
                    };
                    let mut i = t * 1_000;
                    rt.block_on(async {
                        for _ in 0..CHECKS {
                            i = (i + SCATTER) % IDS;
                            black_box(store.check(&ids[i], spec, 1).await.ok());
                        }
                    });
                });
            }
        });
        let checks = (CHECKS * threads) as f64;
        let cpu = (cpu_ticks() - start_cpu) as f64 * tick_ns / checks;
        let wall = start.elapsed().as_nanos() as f64 / checks;
        println!("{threads:<8} {cpu:>14.1} {wall:>14.1}");
    }
}
