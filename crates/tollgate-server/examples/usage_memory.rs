//! Memory the usage history holds in the server per tracked metering id, before its once-a-second
//! flush and after it.
//!
//! Run: `cargo run --release -p tollgate-server --example usage_memory [-- COUNT]` (default
//! 1,000,000). Every id gets one decision in one five-minute bucket, as a fresh id per request
//! would; the figures are the growth of the resident set size (`VmRSS`) divided by COUNT.

use tollgate_quota::MeteringId;
use tollgate_server::usage::aggregate::{Aggregate, Delta};
use tollgate_testkit::resident_bytes;

fn main() {
    let count: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let ids: Vec<MeteringId> = (0..count)
        .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:C{i:07}")).ok())
        .collect();
    // The server's defaults: `usage_max_ids` ids, 16 pending deltas per tracked id.
    let aggregate = Aggregate::new(count, 16 * count);
    let before = resident_bytes();
    for id in &ids {
        aggregate.record(id, Delta { admitted: 1, ..Delta::empty(5_900_000) });
    }
    let pending = resident_bytes();
    let drained = aggregate.drain(0);
    let flushed_len = drained.deltas.len();
    drop(drained);
    let after = resident_bytes();
    let per = |bytes: u64| bytes.saturating_sub(before) as f64 / count as f64;
    println!("tracked ids                  {}", aggregate.tracked());
    println!("bytes per id, before flush   {:>8.1}", per(pending));
    println!("bytes per id, after flush    {:>8.1}  ({flushed_len} deltas written)", per(after));
}
