//! The gateway's per-file preparation, as the pipeline runs it: the one parse of a received
//! file (envelopes, weights under the route's rule, stray bytes), then dedup lookups in
//! `gateway.redb` and the queue items. Beside it, the parser's full parse alone on the same
//! bytes, so the gateway's cost can be read against the parser figures in BENCHMARKS.md.
//!
//! ```text
//! cargo bench -p tollgate-gateway --bench prepare -- --warm-up-time 1 --measurement-time 5
//! ```

use std::collections::HashSet;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate_gateway::bench::{self as receipt, Deliverer, FileRecord, Meter, Parts, Spool};
use tollgate_gateway::{GatewayConfig, Plan, SpoolOptions};
use tollgate_quota::AnyStore;
use tollgate_quota::store::MemoryStore;

#[path = "../../tollgate-edi/benches/support/gen214.rs"]
mod gen214;

/// The 214 route, weighed by AT7 events, split or not.
fn plan(split: bool) -> Plan {
    let text = format!(
        r#"
[[route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000000000
interval = 1
unit = "hour"
weight = "segment:AT7"
split = {split}
deliver = "dir:/nonexistent"
"#
    );
    let config: GatewayConfig = toml::from_str(&text).expect("valid config");
    config.plan().expect("valid plan")
}

/// Parts over a spool in `dir` holding `bytes` as one received file.
fn parts(dir: &std::path::Path, plan: Plan, bytes: &[u8]) -> (Parts, FileRecord) {
    let spool = Arc::new(Spool::open(dir, SpoolOptions::default()).expect("spool"));
    let rec = spool.receive(&[(bytes, "bench".to_owned())]).expect("spooled").remove(0);
    let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
    let meter = Meter::embedded(tollgate_policy::Decider::without_policies(store.clone()));
    let deliverer = Deliverer::new(&plan.routes, None).expect("deliverer");
    (Parts { plan, spool, meter, deliverer, seen: store }, rec)
}

fn bench_file(c: &mut Criterion, name: &str, data: &[u8], samples: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (parts, rec) = parts(dir.path(), plan(false), data);
    let split_plan = plan(true);

    // Check once that the gateway sees what was generated, and counts the same as the parser.
    let parsed = receipt::parse(data, &parts.plan);
    assert!(parsed.strays.is_empty() && parsed.scan.error.is_none());
    let (_, items, dedup) = receipt::prepare(&parts, rec.clone(), &HashSet::new());
    assert_eq!(items.len(), parsed.scan.envelopes.len());
    assert_eq!(dedup.len(), items.len(), "every interchange is new");
    let at7 = "segment:AT7".parse().expect("rule");
    let want: u64 =
        tollgate_edi::scan(data, &at7).interchanges.iter().map(|i| i.counts.records).sum();
    assert_eq!(items.iter().map(|i| i.weight).sum::<u64>(), want);

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(samples);
    group.bench_function("parser_full_parse", |b| {
        b.iter(|| tollgate_edi::parse(black_box(data)).interchanges.len())
    });
    group.bench_function("gateway_parse", |b| {
        b.iter(|| receipt::parse(black_box(data), &parts.plan).scan.envelopes.len())
    });
    group.bench_function("gateway_parse_split_route", |b| {
        b.iter(|| receipt::parse(black_box(data), &split_plan).scan.envelopes.len())
    });
    // What the pipeline does for a file intake already parsed: dedup lookups and items.
    let intake = FileRecord { parsed: Some(Arc::new(parsed)), ..rec.clone() };
    group.bench_function("prepare_after_intake_parse", |b| {
        b.iter(|| receipt::prepare(&parts, intake.clone(), &HashSet::new()).1.len())
    });
    // The whole per-file preparation: spool read, the parse, weights, dedup lookups, items.
    group.bench_function("prepare_whole", |b| {
        b.iter(|| receipt::prepare(&parts, rec.clone(), &HashSet::new()).1.len())
    });
    group.finish();
}

fn prepare(c: &mut Criterion) {
    let (big, expected) = gen214::generate(10 * 1024 * 1024);
    assert!(expected.interchanges > 1);
    bench_file(c, "gateway_prepare_214_10MB", &big, 10);
    // One interchange of about 1 KB (one 214 with 10 AT7): the per-file costs dominate.
    let mut small = String::from(
        "ISA*00*          *00*          *02*SCAC           *ZZ*ACMEERP        *240102*0930*U*\
         00401*000000001*0*P*>~\nGS*QM*SCAC*ACMEERP*20240102*0930*1*X*004010~\n\
         ST*214*0001~\nB10*PRO1*SHP1*SCAC~\nL11*PO1*PO~\nN1*SH*ACME PLANT 7*93*ACME07~\n\
         N3*100 INDUSTRIAL WAY~\nN4*DAYTON*OH*45402*US~\nN1*CN*BIGBOX STORE 1123*93*BB1123~\n\
         N3*4500 MARKET ST~\nN4*COLUMBUS*OH*43215*US~\nLX*1~\n",
    );
    for e in 0..10 {
        small.push_str(&format!(
            "AT7*X6*NS***2024010{d}*09{e:02}*LT~\nMS1*COLUMBUS*OH*US~\n",
            d = e % 9 + 1
        ));
    }
    small.push_str("SE*31*0001~\nGE*1*1~\nIEA*1*000000001~\n");
    bench_file(c, "gateway_prepare_214_1KB", small.as_bytes(), 50);
}

criterion_group!(benches, prepare);
criterion_main!(benches);
