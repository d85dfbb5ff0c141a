//! Envelope scan throughput on ~100 MB of 214 batches, against the physical ceiling of
//! splitting the same bytes on the terminator with `memchr` alone.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memchr::memchr;
use tollgate_edi::{Reader, ReaderOptions, RecordRule, SegmentScanner, SegmentTag};

#[path = "support/gen214.rs"]
mod gen214;

fn scan(c: &mut Criterion) {
    let (data, expected) = gen214::generate(100 * 1024 * 1024);
    let at7: RecordRule = "segment:AT7".parse().expect("valid rule");

    // Check once that the scan counts what was generated.
    let parsed = tollgate_edi::scan(&data, &at7);
    assert_eq!(parsed.interchanges.len() as u64, expected.interchanges);
    let records: u64 = parsed.interchanges.iter().map(|i| i.counts.records).sum();
    assert_eq!(records, expected.at7);
    assert!(!parsed.has_errors());

    let mut group = c.benchmark_group("scan_214_100MB");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));

    group.bench_function("memchr_split_reference", |b| {
        b.iter(|| {
            let data = black_box(&data[..]);
            let (mut segments, mut first) = (0u64, 0u8);
            let mut start = 0;
            while let Some(i) = memchr(b'~', &data[start..]) {
                segments += 1;
                first ^= data[start];
                start += i + 1;
            }
            (segments, first)
        })
    });
    let delimiters = parsed.interchanges[0].delimiters;
    group.bench_function("segment_scanner_only", |b| {
        b.iter(|| {
            let mut scanner = SegmentScanner::new(black_box(&data), delimiters);
            let (mut segments, mut at7) = (0u64, 0u64);
            let tag = SegmentTag::new("AT7").expect("valid tag");
            while let Some(seg) = scanner.next_segment() {
                segments += 1;
                at7 += u64::from(seg.tag == tag);
            }
            (segments, at7)
        })
    });
    group.bench_function("envelope_scan_with_counts", |b| {
        b.iter(|| {
            let parsed = tollgate_edi::scan(black_box(&data), &at7);
            parsed.interchanges.iter().map(|i| i.counts.records).sum::<u64>()
        })
    });
    group.bench_function("reader_streaming_with_counts", |b| {
        b.iter(|| {
            let opts = ReaderOptions { rule: at7, ..Default::default() };
            Reader::with_options(black_box(&data[..]), opts)
                .filter_map(Result::ok)
                .map(|i| i.counts.records)
                .sum::<u64>()
        })
    });
    group.bench_function("parse_full_model", |b| {
        b.iter(|| tollgate_edi::parse(black_box(&data)).interchanges.len())
    });
    group.finish();
}

criterion_group!(benches, scan);
criterion_main!(benches);
