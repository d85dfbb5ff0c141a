//! Streams an EDI file through [`tollgate_edi::Reader`] and prints the counts, to measure peak
//! memory with `/usr/bin/time -v`. `stream generate FILE MB` writes a file of 214 batches first.
//!
//! `stream --in-memory FILE ROUNDS [reference]` scans a file held in memory ROUNDS times (or
//! only splits it on `~` with `memchr`), to measure CPU time per scan with `perf stat`.
//!
//! ```text
//! cargo run --release --example stream -- generate /tmp/edi-1g.edi 1024
//! /usr/bin/time -v target/release/examples/stream /tmp/edi-1g.edi
//! ```

use std::io::Write;
use std::time::Instant;

use tollgate_edi::{Reader, ReaderOptions};

#[path = "../benches/support/gen214.rs"]
mod gen214;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, path, mb] if cmd == "generate" => {
            let target: u64 = mb.parse::<u64>()? * 1024 * 1024;
            let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
            let mut expected = gen214::Expected::default();
            let mut buf = Vec::new();
            let mut n = 1;
            while expected.bytes < target {
                buf.clear();
                gen214::batch(n, &mut buf, &mut expected);
                file.write_all(&buf)?;
                n += 1;
            }
            file.flush()?;
            println!("{expected:?}");
        }
        [flag, path, rest @ ..] if flag == "--in-memory" => {
            let data = std::fs::read(path)?;
            let rule = "segment:AT7".parse()?;
            let rounds: usize = rest.first().map_or(Ok(5), |n| n.parse())?;
            let reference = rest.get(1).is_some_and(|m| m == "reference");
            for _ in 0..rounds {
                let started = Instant::now();
                if reference {
                    // The ceiling: split on the terminator with memchr alone.
                    let (mut segments, mut start) = (0u64, 0);
                    while let Some(i) = memchr::memchr(b'~', &data[start..]) {
                        segments += 1;
                        start += i + 1;
                    }
                    let secs = started.elapsed().as_secs_f64();
                    println!("memchr reference: segments {segments} seconds {secs:.3}");
                    continue;
                }
                let parsed = tollgate_edi::scan(&data, &rule);
                let secs = started.elapsed().as_secs_f64();
                let records: u64 = parsed.interchanges.iter().map(|i| i.counts.records).sum();
                println!(
                    "in memory: interchanges {} AT7 {records} seconds {secs:.3} MB/s {:.0}",
                    parsed.interchanges.len(),
                    data.len() as f64 / secs / 1e6
                );
            }
        }
        [path] => {
            let started = Instant::now();
            let file = std::fs::File::open(path)?;
            let opts = ReaderOptions { rule: "segment:AT7".parse()?, ..Default::default() };
            let mut reader = Reader::with_options(file, opts);
            let (mut interchanges, mut transactions, mut records, mut errors) = (0u64, 0, 0, 0);
            let mut bytes = 0;
            for ic in reader.by_ref() {
                let ic = ic?;
                interchanges += 1;
                transactions += ic.counts.transactions;
                records += ic.counts.records;
                errors += ic.errors.len();
                bytes = ic.span.end;
            }
            let secs = started.elapsed().as_secs_f64();
            println!(
                "interchanges {interchanges} transactions {transactions} AT7 {records} errors {errors} \
                 bytes {bytes} buffer {} seconds {secs:.3} MB/s {:.0}",
                reader.buffer_capacity(),
                bytes as f64 / secs / 1e6
            );
        }
        _ => {
            eprintln!(
                "usage: stream FILE | stream --in-memory FILE [ROUNDS [reference]] | stream generate FILE MB"
            );
            std::process::exit(2);
        }
    }
    Ok(())
}
