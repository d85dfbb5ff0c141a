//! Streaming: reads interchanges from any `Read` through a bounded buffer, so memory depends
//! on the longest segment, not on the file. Interchanges larger than the buffer are still
//! counted, because the assembler consumes segment by segment and keeps only counters (unless
//! told to keep transactions).

use std::collections::VecDeque;
use std::io::{ErrorKind as IoErrorKind, Read};

use crate::envelope::{Options, Parser};
use crate::error::{EnvelopeError, ReadError};
use crate::interchange::Interchange;
use crate::records::RecordRule;

/// Settings of a [`Reader`].
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// Initial buffer size in bytes; it only grows for a single segment longer than this.
    pub buffer_size: usize,
    /// What [`Counts::records`](crate::Counts::records) counts.
    pub rule: RecordRule,
    /// Keep every transaction in its group (memory then grows with the interchange).
    pub keep_transactions: bool,
    /// At most this many errors are kept per interchange; the rest are only counted.
    pub max_errors: usize,
    /// The buffer never grows beyond this: a segment longer than this ends its interchange
    /// with an error and the scan goes on at the next interchange.
    pub max_segment: usize,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            buffer_size: 64 * 1024,
            rule: RecordRule::Transactions,
            keep_transactions: false,
            max_errors: 1000,
            max_segment: 16 * 1024 * 1024,
        }
    }
}

/// Yields the interchanges of a stream one by one.
///
/// ```
/// use tollgate_edi::{Reader, ReaderOptions, RecordRule};
/// let file: &[u8] = b"UNB+UNOA:3+S:ZZZ+R:ZZZ+240101:1200+7'UNH+1+IFTSTA:D:01B:UN'\
/// STS+1'STS+2'UNT+4+1'UNZ+1+7'";
/// let opts = ReaderOptions { rule: "segment:STS".parse().unwrap(), ..Default::default() };
/// let mut reader = Reader::with_options(file, opts);
/// let ic = reader.next().unwrap().unwrap();
/// assert_eq!(ic.counts.records, 2);
/// assert!(reader.next().is_none());
/// ```
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    base: usize,
    eof: bool,
    done: bool,
    parser: Parser,
    ready: VecDeque<Interchange>,
    file_errors: Vec<EnvelopeError>,
    max_segment: usize,
}

impl<R: Read> Reader<R> {
    /// A reader with default options (64 KiB buffer, transactions as records).
    pub fn new(inner: R) -> Self {
        Self::with_options(inner, ReaderOptions::default())
    }

    /// A reader with the given options.
    pub fn with_options(inner: R, opts: ReaderOptions) -> Self {
        let record_tag = match opts.rule {
            RecordRule::Transactions => None,
            RecordRule::Segment(tag) => Some(tag),
        };
        Reader {
            inner,
            buf: vec![0; opts.buffer_size.max(1024)],
            start: 0,
            end: 0,
            base: 0,
            eof: false,
            done: false,
            parser: Parser::new(Options {
                keep_transactions: opts.keep_transactions,
                record_tag,
                max_errors: opts.max_errors,
            }),
            ready: VecDeque::new(),
            file_errors: Vec::new(),
            max_segment: opts.max_segment.max(opts.buffer_size.max(1024)),
        }
    }

    /// File-level errors (stray bytes, no interchange); complete once iteration has ended.
    pub fn file_errors(&self) -> &[EnvelopeError] {
        &self.file_errors
    }

    /// Current buffer capacity (grows only for a segment longer than the buffer).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.len()
    }

    fn fill(&mut self) -> Result<(), ReadError> {
        if self.start > 0 && (self.end == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.max_segment {
                // One segment fills the whole buffer: give it up rather than grow for ever.
                let Reader { parser, ready, .. } = self;
                parser.abandon(self.base, self.max_segment, &mut |ic| ready.push_back(ic));
                self.base += self.end;
                self.start = 0;
                self.end = 0;
                return Ok(());
            }
            let grown = (self.buf.len() * 2).min(self.max_segment);
            self.buf.resize(grown, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == IoErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Interchange, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(ic) = self.ready.pop_front() {
                return Some(Ok(ic));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
            let Reader { buf, start, end, base, eof, parser, ready, .. } = self;
            let consumed = parser
                .feed(&buf[*start..*end], *base + *start, *eof, &mut |ic| ready.push_back(ic));
            *start += consumed;
            if *eof {
                debug_assert!(!parser.inside());
                self.file_errors = self.parser.finish();
                self.done = true;
            }
        }
    }
}
