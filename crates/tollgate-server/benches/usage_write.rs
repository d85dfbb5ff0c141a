//! The usage history's once-a-second write into `usage.redb`: 10,000 ids with one delta each
//! in the current bucket, as a flush under steady traffic writes them, with every id trimmed to
//! the retention start (what each flush did before the aggregate remembered its trims) and with
//! none (what a flush does between two moves of the retention start, every five minutes).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tollgate_quota::MeteringId;
use tollgate_quota::store::OnCorrupt;
use tollgate_server::usage::aggregate::{Batch, Delta};
use tollgate_server::usage::ledger::file::FileLedger;

const IDS: usize = 10_000;
/// A bucket index of 2026 (five-minute buckets since 1970).
const BUCKET: i64 = 5_900_000;
/// The retention start for `BUCKET`: seven days of buckets before it.
const CUTOFF: i64 = BUCKET - 2_016;

fn batch(ids: &[MeteringId], trim: bool) -> Batch {
    Batch {
        deltas: ids
            .iter()
            .map(|id| (id.clone(), Delta { admitted: 3, refused: 1, ..Delta::empty(BUCKET) }))
            .collect(),
        trim: if trim { ids.to_vec() } else { Vec::new() },
    }
}

fn write(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (ledger, _) = FileLedger::open(dir.path(), OnCorrupt::Refuse).expect("usage.redb");
    let ids: Vec<MeteringId> = (0..IDS)
        .filter_map(|i| MeteringId::new(&format!("ShipmentStatus:CARRIER{i:05}")).ok())
        .collect();
    // Each id has rows already, as under steady traffic.
    runtime.block_on(ledger.write(batch(&ids, true), CUTOFF, Vec::new())).expect("a first write");

    let mut group = c.benchmark_group("usage_write");
    group.sample_size(20);
    for (name, trim) in [("10000_ids_each_trimmed", true), ("10000_ids_none_trimmed", false)] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || batch(&ids, trim),
                |batch| runtime.block_on(ledger.write(batch, CUTOFF, Vec::new())),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, write);
criterion_main!(benches);
