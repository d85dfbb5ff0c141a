//! Bytes per live counter, and memory given back once the windows expire.
//!
//! Run: `cargo run --release -p tollgate-quota --example memory [-- COUNT]` (default 1,000,000).
//! It reads the resident set size (`VmRSS` in `/proc/self/status`) before, with COUNT live
//! one-minute counters, and after the clock has moved past their windows and the sweep ran.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tollgate_quota::store::MemoryStore;
use tollgate_quota::{ManualClock, MeteringId, QuotaSpec, TimeUnit};

/// The resident set size in bytes, or 0 where `/proc` is not available.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let count: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let start: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
    let clock = ManualClock::new(start);
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let Ok(spec) = QuotaSpec::new(1_000, 1, TimeUnit::Minute) else {
        return;
    };
    // Ids are built before the first reading, so only the store's own memory is measured.
    let ids: Vec<MeteringId> = (0..count)
        .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:C{i:07}")).ok())
        .collect();

    let before = rss();
    for id in &ids {
        store.check_now(id, &spec, 1);
    }
    let live = rss();
    let per_counter = live.saturating_sub(before) as f64 / count as f64;
    println!("ids (23 bytes each)          {count}");
    println!("counters held                {}", store.len());
    println!("rss before                   {:>8.1} MiB", before as f64 / 1048576.0);
    println!("rss with live counters       {:>8.1} MiB", live as f64 / 1048576.0);
    println!("bytes per live counter       {per_counter:>8.1}");

    clock.advance(Duration::from_secs(61));
    // The background sweeper may already be at work; this sweep takes whatever is left.
    store.evict_expired();
    let after = rss();
    println!("counters held after expiry   {}", store.len());
    println!("rss after expiry             {:>8.1} MiB", after as f64 / 1048576.0);
    println!(
        "memory given back            {:>8.1} %",
        100.0 * live.saturating_sub(after) as f64 / live.saturating_sub(before).max(1) as f64
    );
}
