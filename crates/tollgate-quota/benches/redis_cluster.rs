//! Decisions per second of the Redis store on one redis-server against a three-master Redis
//! Cluster, side by side in one run.
//!
//! Run: `cargo bench -p tollgate-quota --bench redis_cluster`. Both are started by the bench on
//! loopback (redis-server and redis-cli must be on PATH; without them the bench says so and
//! measures nothing). One store instance keeps `IN_FLIGHT` checks in flight over 10,000 ids,
//! limits never reached, so every decision is the admit path: one `EVALSHA` each. Criterion's
//! throughput is decisions per second.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use tollgate_quota::store::{OnStoreUnavailable, RedisOptions, RedisStore};
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit};
use tollgate_testkit::{RedisCluster, RedisServer};

/// Checks kept in flight by the one store instance (as concurrent HTTP requests would).
const IN_FLIGHT: usize = 256;
const IDS: usize = 10_000;

fn ids() -> Vec<MeteringId> {
    (0..IDS).map(|i| MeteringId::new(&format!("ShipmentStatus:Carrier{i:06}")).unwrap()).collect()
}

fn connect(rt: &tokio::runtime::Runtime, url: String, cluster: bool) -> Arc<RedisStore> {
    let mut opts = RedisOptions::new(url);
    opts.timeout = Duration::from_secs(5);
    opts.on_unavailable = OnStoreUnavailable::Deny;
    opts.cluster = cluster;
    let store = rt.block_on(RedisStore::connect(opts)).expect("redis store");
    Arc::new(store)
}

fn redis(c: &mut Criterion) {
    let (Some(single), Some(cluster)) = (RedisServer::start(), RedisCluster::start(3, 0)) else {
        eprintln!("redis-server or redis-cli missing: nothing measured");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ids = ids();
    let spec = QuotaSpec::new(1_000_000_000_000, 1, TimeUnit::Day).unwrap();
    let mut group = c.benchmark_group("redis_decisions");
    group.throughput(Throughput::Elements(IN_FLIGHT as u64));
    group.sample_size(20).warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(5));
    let stores = [
        ("one_redis", connect(&rt, single.url(), false)),
        ("cluster_3_masters", connect(&rt, cluster.url(), true)),
    ];
    for (name, store) in stores {
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new(name, IN_FLIGHT), |b| {
            b.iter(|| {
                let first = next;
                let batch = (0..IN_FLIGHT).map(|i| {
                    let id = &ids[(first + i) % IDS];
                    let store = &store;
                    let spec = &spec;
                    async move { store.check(id, spec, 1).await.expect("decision") }
                });
                next = (next + IN_FLIGHT) % IDS;
                black_box(rt.block_on(join_all(batch)));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, redis);
criterion_main!(benches);
