//! Bytes per live counter, and memory given back once the windows expire.
//!
//! Run: `cargo run --release -p tollgate-quota --example memory [-- COUNT [memory|embedded]]`
//! (default 1,000,000 on the memory store). It reads the resident set size (`VmRSS` in
//! `/proc/self/status`) before, with COUNT/2 and COUNT live one-minute counters, and after the
//! clock has moved past their windows and the sweep ran. The embedded store writes to a redb
//! file in a temp dir, committing every 10,000 checks; its figures are read after every check is
//! committed. "Per counter" is
//! the growth over all COUNT counters; "per counter, second half" leaves out what does not grow
//! with the count (such as redb's page cache once it is full).

use std::sync::Arc;
use std::time::Duration;
use tollgate_testkit::resident_bytes;

use jiff::Timestamp;
use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore, MemoryStore};
use tollgate_quota::{AnyStore, ManualClock, MeteringId, QuotaSpec, Store, TimeUnit};

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let kind = args.next().unwrap_or_else(|| "memory".into());
    let start: Timestamp = "2026-11-30T10:00:00Z".parse()?;
    let clock = ManualClock::new(start);
    let dir = tempfile::tempdir()?;
    let store = match kind.as_str() {
        "memory" => AnyStore::Memory(MemoryStore::with_clock(Arc::new(clock.clone()))),
        "embedded" => AnyStore::Embedded(EmbeddedStore::open_with_clock(
            EmbeddedOptions::new(dir.path().join("counters.redb")),
            Arc::new(clock.clone()),
        )?),
        other => return Err(format!("unknown store {other:?}: memory or embedded").into()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let spec = QuotaSpec::new(1_000, 1, TimeUnit::Minute)?;
    // Ids are built before the first reading, so only the store's own memory is measured.
    let ids: Vec<MeteringId> = (0..count)
        .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:C{i:07}")).ok())
        .collect();
    let fill = |ids: &[MeteringId]| -> Result<u64, Box<dyn std::error::Error>> {
        runtime.block_on(async {
            // Commits of 10,000 counters, as a server answering 100,000 checks a second
            // commits every 100 ms.
            for chunk in ids.chunks(10_000) {
                for id in chunk {
                    store.check(id, &spec, 1).await?;
                }
                store.flush().await?;
            }
            Ok(resident_bytes())
        })
    };

    let before = resident_bytes();
    let half = fill(&ids[..count / 2])?;
    let live = fill(&ids[count / 2..])?;
    let per_counter = live.saturating_sub(before) as f64 / count as f64;
    let marginal = live.saturating_sub(half) as f64 / (count - count / 2).max(1) as f64;
    println!("store                        {kind}");
    println!("ids (23 bytes each)          {count}");
    println!("rss before                   {:>8.1} MiB", mib(before));
    println!("rss with half the counters   {:>8.1} MiB", mib(half));
    println!("rss with live counters       {:>8.1} MiB", mib(live));
    println!("bytes per live counter       {per_counter:>8.1}");
    println!("  per counter, second half   {marginal:>8.1}");

    clock.advance(Duration::from_secs(61));
    // The background sweeps may already be at work; this sweep takes whatever is left.
    match &store {
        AnyStore::Memory(m) => {
            m.evict_expired();
        }
        _ => std::thread::sleep(Duration::from_secs(3)),
    }
    runtime.block_on(store.flush())?;
    let after = resident_bytes();
    let held = match &store {
        AnyStore::Memory(m) => m.len(),
        AnyStore::Embedded(e) => e.len(),
        _ => 0,
    };
    println!("counters held after expiry   {held}");
    println!("rss after expiry             {:>8.1} MiB", mib(after));
    println!(
        "memory given back            {:>8.1} %",
        100.0 * live.saturating_sub(after) as f64 / live.saturating_sub(before).max(1) as f64
    );
    Ok(())
}
