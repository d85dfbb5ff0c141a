//! Transaction dedup on the embedded store: fingerprint each transaction of an interchange and
//! look the keys up (what every copy costs), side by side with fingerprint and claim (what
//! every new transaction costs: one durable redb commit per interchange). The store already
//! remembers 100,000 transactions. Before measuring, it prints the disk taken per remembered
//! transaction (the `seen` table's growth over 100,000 claims, after compaction) and, when a
//! `redis-server` is installed, Redis's `used_memory` per remembered transaction.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate_gateway::bench::fingerprint_key;
use tollgate_quota::Seen;
use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore, RedisOptions, RedisStore};
use tollgate_testkit::{RedisServer, Status214};

/// Interchanges per measured iteration, and transactions in each.
const INTERCHANGES: u32 = 100;
const PER_INTERCHANGE: usize = 10;
/// Transactions remembered before measuring.
const REMEMBERED: u32 = 100_000;
const TTL: Duration = Duration::from_secs(30 * 86_400);
const OWNER: &str = "0123456789abcdef/1764590400000-000001-17";

/// 100 interchanges of ten 214s (10 AT7 each, about 0.5 KB a transaction), shipments counted
/// from `first`.
fn interchanges(first: u32) -> Vec<Vec<u8>> {
    (0..INTERCHANGES)
        .map(|i| {
            Status214::new("CARRIERA", first + i)
                .transactions(PER_INTERCHANGE)
                .events(10)
                .shipment(first + i * PER_INTERCHANGE as u32)
                .build()
        })
        .collect()
}

/// The fingerprint keys of one interchange's transactions (the gateway's parse computes them
/// from the parse it makes anyway: the parse is not counted here, as in the pipeline).
fn keys(bytes: &[u8], parsed: &tollgate_edi::ParsedFile) -> Vec<String> {
    let ic = &parsed.interchanges[0];
    ic.transactions()
        .map(|tx| {
            let fp = tollgate_edi::fingerprint(bytes, tx, ic).to_string();
            fingerprint_key("CarrierA", "ZZ:ACME", "214", &fp)
        })
        .collect()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Remembers `n` distinct keys in batches of 1,000 claims.
async fn remember(store: &impl Seen, n: u32) {
    for batch in 0..n / 1000 {
        let ks: Vec<String> = (0..1000)
            .map(|i| {
                fingerprint_key("CarrierA", "ZZ:ACME", "214", &format!("{:032x}", batch * 1000 + i))
            })
            .collect();
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        store.claim(&refs, OWNER, TTL).await.expect("claim");
    }
}

fn dedup(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("counters.redb");

    // Disk per remembered transaction: the file's growth over 100,000 claims, compacted.
    {
        let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).expect("store");
        drop(store);
        let empty = file_len(&path);
        let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).expect("store");
        rt.block_on(remember(&store, REMEMBERED));
        drop(store);
        let mut db = redb::Database::open(&path).expect("reopen");
        db.compact().expect("compact");
        drop(db);
        let full = file_len(&path);
        eprintln!(
            "embedded: {REMEMBERED} transactions remembered take {} bytes on disk, {} B each",
            full - empty,
            (full - empty) / u64::from(REMEMBERED)
        );
    }
    redis_memory(&rt);

    let store = Arc::new(EmbeddedStore::open(EmbeddedOptions::new(&path)).expect("store"));
    // Half of the measured transactions were admitted before: looked up, they are copies.
    let files = interchanges(1);
    let parsed: Vec<_> = files.iter().map(|f| tollgate_edi::parse(f)).collect();
    for (f, p) in files.iter().zip(&parsed).step_by(2) {
        let ks = keys(f, p);
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        rt.block_on(store.claim(&refs, OWNER, TTL)).expect("claim");
    }

    let mut group = c.benchmark_group("dedup_embedded");
    group.throughput(Throughput::Elements(u64::from(INTERCHANGES) * PER_INTERCHANGE as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("fingerprint_and_lookup", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut copies = 0;
                for (f, p) in files.iter().zip(&parsed) {
                    let ks = keys(black_box(f), p);
                    let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
                    let seen = store.seen(&refs, "someone-else").await.expect("seen");
                    copies += seen.iter().filter(|s| **s).count();
                }
                assert_eq!(copies, INTERCHANGES as usize / 2 * PER_INTERCHANGE);
            })
        })
    });
    group.bench_function("fingerprint_and_claim", |b| {
        b.iter(|| {
            rt.block_on(async {
                for (f, p) in files.iter().zip(&parsed) {
                    let ks = keys(black_box(f), p);
                    let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
                    store.claim(&refs, OWNER, TTL).await.expect("claim");
                }
            })
        })
    });
    group.finish();
}

/// Redis's `used_memory` per remembered transaction, over 100,000 claims (skipped, with a
/// notice, without a `redis-server`).
fn redis_memory(rt: &tokio::runtime::Runtime) {
    let Some(server) = RedisServer::start() else { return };
    let used = |s: &RedisServer| -> u64 {
        s.info("memory")
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let store =
        rt.block_on(RedisStore::connect(RedisOptions::new(server.url()))).expect("redis store");
    let before = used(&server);
    rt.block_on(remember(&store, REMEMBERED));
    let after = used(&server);
    eprintln!(
        "redis: {REMEMBERED} transactions remembered take {} bytes of used_memory, {} B each",
        after.saturating_sub(before),
        after.saturating_sub(before) / u64::from(REMEMBERED)
    );
}

criterion_group!(benches, dedup);
criterion_main!(benches);
