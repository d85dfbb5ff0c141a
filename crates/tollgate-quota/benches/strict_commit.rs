//! Decisions per second of the embedded store with `durability = strict` (each answer waits
//! for the group commit that holds it) next to `buffered`, in one run, in-process.
//!
//! Run: `cargo bench -p tollgate-quota --bench strict_commit`. One store per durability, in a
//! temp dir on the disk the bench runs from; `IN_FLIGHT` checks are kept in flight (as
//! concurrent HTTP requests would: 16 and 64) over 16 ids, limits never reached, so every
//! decision is the admit path and every strict one waits for a commit (one redb write
//! transaction and fsync for all checks waiting). Criterion's throughput is decisions per
//! second.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use tollgate_quota::store::{Durability, EmbeddedOptions, EmbeddedStore};
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit};

const IDS: usize = 16;

fn strict_commit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let ids: Vec<MeteringId> = (0..IDS)
        .map(|i| MeteringId::new(&format!("ShipmentStatus:Carrier{i:02}")).unwrap())
        .collect();
    let spec = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day).unwrap();
    let mut group = c.benchmark_group("embedded_decisions");
    group.sample_size(20).warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for (name, durability) in [("strict", Durability::Strict), ("buffered", Durability::Buffered)] {
        let mut opts = EmbeddedOptions::new(dir.path().join(format!("{name}.redb")));
        opts.durability = durability;
        let store = EmbeddedStore::open(opts).expect("embedded store");
        for in_flight in [16usize, 64] {
            group.throughput(Throughput::Elements(in_flight as u64));
            group.bench_function(BenchmarkId::new(name, in_flight), |b| {
                b.iter(|| {
                    let batch = (0..in_flight).map(|i| {
                        let (id, store, spec) = (&ids[i % IDS], &store, &spec);
                        async move { store.check(id, spec, 1).await.expect("decision") }
                    });
                    black_box(rt.block_on(join_all(batch)));
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, strict_commit);
criterion_main!(benches);
