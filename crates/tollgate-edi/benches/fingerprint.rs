//! Transaction fingerprints per second over realistic 214s (8–12 AT7 events each, about
//! 1.3 KB), side by side with the full parse of the same bytes that every fingerprint needs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "support/gen214.rs"]
mod gen214;

fn fingerprints(c: &mut Criterion) {
    let (data, expected) = gen214::generate(8 * 1024 * 1024);
    let parsed = tollgate_edi::parse(&data);
    assert!(!parsed.has_errors());
    let transactions: Vec<_> = parsed
        .interchanges
        .iter()
        .flat_map(|ic| ic.transactions().map(move |tx| (ic, tx)))
        .collect();
    assert_eq!(transactions.len() as u64, expected.transactions);

    let mut group = c.benchmark_group("fingerprint_214");
    group.throughput(Throughput::Elements(expected.transactions));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("parse_only", |b| b.iter(|| tollgate_edi::parse(black_box(&data))));
    group.bench_function("fingerprint_parsed_transactions", |b| {
        b.iter(|| {
            transactions
                .iter()
                .map(|(ic, tx)| tollgate_edi::fingerprint(black_box(&data), tx, ic).as_bytes()[0])
                .fold(0u8, |a, b| a ^ b)
        })
    });
    group.finish();
}

criterion_group!(benches, fingerprints);
criterion_main!(benches);
