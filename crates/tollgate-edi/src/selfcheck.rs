//! Consistency checks run by the fuzz target and by the test that replays its seed corpus:
//! whatever the input, parsing must not panic, spans must lie inside the input, the streaming
//! reader must agree with [`parse`](crate::parse), acknowledgements of clean interchanges must
//! parse back cleanly, and every piece of a split must be at least as valid as its source.

use std::collections::BTreeSet;

use crate::ack::{AckFormat, acknowledge};
use crate::interchange::Transaction;
use crate::reader::{Reader, ReaderOptions};
use crate::split::split;

/// Reads the EDI file at `path`, which must yield an interchange or an error, and runs
/// [`check`] on it; panics naming the file otherwise.
pub fn check_file(path: &std::path::Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let parsed = crate::parse(&bytes);
    assert!(
        !parsed.interchanges.is_empty() || !parsed.errors.is_empty(),
        "{} yields neither an interchange nor an error",
        path.display()
    );
    check(&bytes);
}

/// Runs every check on `data`; panics (deliberately, this is a test oracle) on a violation.
pub fn check(data: &[u8]) {
    let parsed = crate::parse(data);
    for ic in &parsed.interchanges {
        assert!(ic.span.start <= ic.span.end && ic.span.end <= data.len(), "interchange span");
        assert_eq!(ic.counts.transactions as usize, ic.transactions().count());
        for g in &ic.groups {
            assert!(g.span.end <= data.len(), "group span");
            for tx in &g.transactions {
                assert!(tx.span.start >= ic.span.start && tx.span.end <= ic.span.end, "tx span");
            }
        }
        let _ = crate::count_records(data, ic, &"segment:AT7".parse().unwrap_or_default());
        for format in [AckFormat::Auto, AckFormat::Ta1, AckFormat::X999, AckFormat::Contrl] {
            if let Some(ack) = acknowledge(data, ic, format, 7) {
                let back = crate::parse(&ack);
                assert_eq!(back.interchanges.len(), 1, "acknowledgement parses");
                if ic.errors.is_empty() {
                    assert!(!back.has_errors(), "acknowledgement of a clean interchange is clean");
                }
            }
        }
        if ic.errors.is_empty() && ic.complete {
            let all: Vec<usize> = (0..ic.transactions().count()).collect();
            let piece = split(data, ic, &all, "42").expect("a complete, clean interchange splits");
            assert!(!crate::parse(&piece).has_errors(), "split of a clean interchange is clean");
        }
    }
    check_split(data);
    // Whole reads, and reads of a few bytes at a time so that every chunk boundary (inside a
    // header, a terminator, a release sequence) is crossed.
    for chunk in [usize::MAX, 7, 1] {
        if chunk == 1 && data.len() > 4096 {
            continue;
        }
        let opts =
            ReaderOptions { buffer_size: 1024, max_errors: usize::MAX, ..Default::default() };
        let mut reader = Reader::with_options(Trickle { data, chunk }, opts);
        let streamed: Vec<_> = reader.by_ref().filter_map(Result::ok).collect();
        assert_eq!(streamed.len(), parsed.interchanges.len(), "reader finds the same interchanges");
        for (s, p) in streamed.iter().zip(&parsed.interchanges) {
            assert_eq!(s.span, p.span);
            assert_eq!(s.counts, p.counts);
            assert_eq!(s.errors, p.errors);
        }
        assert_eq!(reader.file_errors(), parsed.errors.as_slice());
    }
}

/// At most this many single-transaction pieces are checked per interchange.
const MAX_PIECES: usize = 16;

/// Splits every interchange of `data` into single-transaction pieces (the first 16,
/// `MAX_PIECES`) and into one piece with all its transactions, and checks the promise of
/// [`split`]: each piece is read back as exactly one interchange with no error the source did
/// not have (compared by code) and holds the chosen transactions of the source. Only an
/// interchange with errors (a truncated one) may be refused. Panics on a violation.
pub fn check_split(data: &[u8]) {
    let parsed = crate::parse(data);
    for (i, ic) in parsed.interchanges.iter().enumerate() {
        let all: Vec<&Transaction> = ic.transactions().collect();
        if all.is_empty() {
            continue;
        }
        let source: BTreeSet<&str> = ic.errors.iter().map(|e| e.code.as_str()).collect();
        let mut choices: Vec<Vec<usize>> =
            (0..all.len().min(MAX_PIECES)).map(|t| vec![t]).collect();
        choices.push((0..all.len()).collect());
        for keep in choices {
            let piece = match split(data, ic, &keep, "42") {
                Ok(piece) => piece,
                Err(e) => {
                    assert!(!ic.errors.is_empty(), "interchange {i}: a clean one is refused: {e}");
                    continue;
                }
            };
            let shown = || String::from_utf8_lossy(&piece).into_owned();
            let back = crate::parse(&piece);
            assert!(
                back.errors.is_empty() && back.interchanges.len() == 1,
                "interchange {i}, piece {keep:?} is not read as one interchange: {:?}\n{}",
                back.errors,
                shown()
            );
            let b = &back.interchanges[0];
            for e in &b.errors {
                assert!(
                    source.contains(e.code.as_str()),
                    "interchange {i}, piece {keep:?} has an error its source has not: {e}\n{}",
                    shown()
                );
            }
            let want: Vec<_> =
                keep.iter().map(|&k| (&all[k].kind, &all[k].control_number)).collect();
            let got: Vec<_> = b.transactions().map(|t| (&t.kind, &t.control_number)).collect();
            assert_eq!(got, want, "interchange {i}, piece {keep:?} keeps the transactions");
        }
    }
}

/// A reader that hands out at most `chunk` bytes per call.
struct Trickle<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.chunk.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}
