//! One page of the live counters' listing, the pass behind `GET /v1/counters`, `tollgate
//! counters list` and the console's overview: every counter is offered to the page's bounded
//! selection, which keeps the first `limit` by id after the cursor.
//!
//! Run: `cargo bench -p tollgate-quota --bench listing`. A memory store holds 200,000 counters
//! (ids of 28 bytes, made in a scattered order); the pages asked: the first 1,000, 1,000 from the
//! middle (a cursor), the first 10,000 (the CLI's page) and the first 100,000 (the console's
//! cap). Criterion's throughput is counters offered per second.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tollgate_quota::store::{CounterListing, MemoryStore};
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit};

const COUNTERS: usize = 200_000;

fn listing(c: &mut Criterion) {
    let store = MemoryStore::new();
    let spec = QuotaSpec::new(1_000_000, 1, TimeUnit::Day).expect("spec");
    // Every 7,919th of the ids in turn, so the slots' order is not the ids' order.
    for i in 0..COUNTERS {
        let n = i * 7_919 % COUNTERS;
        let id = MeteringId::new(&format!("ShipmentStatus:Carrier{n:06}")).expect("id");
        store.check_now(&id, &spec, 1);
    }
    let core = store.counters_core();
    let middle = {
        let first = CounterListing { prefix: "", after: None, limit: COUNTERS / 2 };
        core.counters_at(&first, jiff::Timestamp::now()).next
    };
    let mut group = c.benchmark_group("listing");
    group.sample_size(10).warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(COUNTERS as u64));
    let pages = [
        ("first_1000", None, 1_000),
        ("middle_1000", middle, 1_000),
        ("first_10000", None, 10_000),
        ("first_100000", None, 100_000),
    ];
    for (name, after, limit) in pages {
        let listing = CounterListing { prefix: "", after, limit };
        group.bench_with_input(BenchmarkId::from_parameter(name), &listing, |b, l| {
            b.iter(|| {
                let page = core.counters_at(l, jiff::Timestamp::now());
                assert_eq!(page.counters.len(), l.limit);
                black_box(page)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, listing);
criterion_main!(benches);
