//! What the usage history adds to each decision: one [`Aggregate::record`] on an id already
//! tracked, on one thread, over 10,000 and 100,000 ids visited in a scattered order (every
//! 7,919th), as decisions for many partners arrive.

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_quota::MeteringId;
use tollgate_server::usage::aggregate::{Aggregate, Delta};

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("usage_record");
    for count in [10_000usize, 100_000] {
        let ids: Vec<MeteringId> = (0..count)
            .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:CARRIER{i:06}")).ok())
            .collect();
        let aggregate = Aggregate::new(count, 16 * count);
        let delta = Delta { admitted: 1, ..Delta::empty(5_900_000) };
        for id in &ids {
            aggregate.record(id, delta);
        }
        let mut at = 0usize;
        group.bench_function(format!("{count}_ids_scattered"), |b| {
            b.iter(|| {
                at = (at + 7_919) % count;
                aggregate.record(&ids[at], delta)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
