//! The envelope assembler: an incremental state machine fed with byte chunks. Between
//! interchanges it skips a BOM and whitespace and sniffs `ISA` / `UNA` / `UNB`; inside one it
//! walks segments with the [`SegmentScanner`] and builds the [`Interchange`] model, validating
//! control references and counts. It never stops at an error: a missing trailer closes the open
//! envelope, a new header starts a new interchange, stray bytes are reported and skipped.
//!
//! [`parse`](crate::parse) feeds it the whole input at once; the streaming
//! [`Reader`](crate::reader::Reader) feeds it a bounded buffer and compacts what was consumed.
//!
//! # Guide for whoever changes it
//! It is one state machine in three files:
//! - [`Parser`] (here) has two states: `Between` interchanges (BOM, layout and garbage
//!   skipping, sniffing a header: see `delimiters::sniff`) and `Inside` one, where a
//!   [`Builder`] receives one segment at a time.
//! - `Builder::segment` ([`builder`]) is the hot path: a body segment inside an open
//!   transaction is counted inline; every envelope segment goes to `segment_slow`, which opens
//!   and closes groups and transactions by their role and reports what is missing or out of
//!   place.
//! - What a header segment says (ISA/UNB, GS/UNG, ST/UNH values) is read in [`headers`].
//! - Trailer checks (counts, control references) and header element checks live in
//!   [`crate::validate`]; error codes in [`crate::error`]. Add a rule there, not here.
//! - Chunking must not change the result: a decision that quotes or depends on bytes not yet in
//!   view returns "need more" until they are (the streaming reader and `parse` must agree byte
//!   for byte; `selfcheck` and the fuzz target hold them to it).

mod builder;
mod headers;
mod roles;

use memchr::memchr2;

use crate::delimiters::{Sniff, sniff};
use crate::error::{EnvelopeError, ErrorKind, Level};
use crate::interchange::{Interchange, ParsedFile};
use crate::segment::{SegmentScanner, SegmentTag};
use builder::{Builder, Step};

/// How much of the model a scan keeps and what it counts as a record.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Keep every transaction in its group (`false`: counts only, memory independent of size).
    pub keep_transactions: bool,
    /// Count segments with this tag as records instead of transactions.
    pub record_tag: Option<SegmentTag>,
    /// At most this many errors are stored per interchange (and at file level).
    pub max_errors: usize,
}

impl Options {
    pub(crate) fn full() -> Options {
        Options { keep_transactions: true, record_tag: None, max_errors: usize::MAX }
    }
}

/// Parses all of `input` in one feed.
pub(crate) fn parse_all(input: &[u8], opts: &Options) -> ParsedFile {
    let mut parser = Parser::new(opts.clone());
    let mut out = ParsedFile::default();
    parser.feed(input, 0, true, &mut |ic| out.interchanges.push(ic));
    out.errors = parser.finish();
    out
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The incremental parser: feed it chunks, it emits finished interchanges.
pub(crate) struct Parser {
    opts: Options,
    state: State,
    file_errors: Vec<EnvelopeError>,
    interchanges_seen: u64,
    in_garbage: bool,
    bytes_seen: usize,
}

enum State {
    Between,
    Inside(Box<Builder>),
}

impl Parser {
    pub(crate) fn new(opts: Options) -> Parser {
        Parser {
            opts,
            state: State::Between,
            file_errors: Vec::new(),
            interchanges_seen: 0,
            in_garbage: false,
            bytes_seen: 0,
        }
    }

    fn file_error(&mut self, message: String, offset: usize) {
        if self.file_errors.len() < self.opts.max_errors {
            self.file_errors.push(EnvelopeError::new(
                None,
                Level::File,
                ErrorKind::NotAnInterchange,
                message,
                0,
                offset,
            ));
        }
    }

    /// Processes `buf` (which starts at absolute offset `base`) and returns how many of its
    /// bytes were consumed; the caller passes the rest again, with more bytes, next time.
    /// With `eof` everything is consumed.
    pub(crate) fn feed(
        &mut self,
        buf: &[u8],
        base: usize,
        eof: bool,
        emit: &mut dyn FnMut(Interchange),
    ) -> usize {
        self.bytes_seen = self.bytes_seen.max(base + buf.len());
        let mut pos = 0;
        loop {
            match std::mem::replace(&mut self.state, State::Between) {
                State::Between => {
                    while pos < buf.len() {
                        if buf[pos..].starts_with(BOM) {
                            pos += 3;
                        } else if matches!(buf[pos], b' ' | b'\t' | b'\r' | b'\n' | 0 | 0x1A) {
                            pos += 1;
                        } else {
                            break;
                        }
                    }
                    if pos >= buf.len() || (!eof && BOM.starts_with(&buf[pos..])) {
                        return pos;
                    }
                    match sniff(&buf[pos..], eof) {
                        Sniff::NeedMore => return pos,
                        // Decide on stray bytes only with enough of them in view, so that the
                        // error quotes the same bytes however the input was chunked.
                        Sniff::Invalid(_) if !eof && buf.len() - pos < 32 => return pos,
                        Sniff::Found(header) => {
                            self.in_garbage = false;
                            self.interchanges_seen += 1;
                            let first = pos + header.first_segment;
                            let builder = Builder::new(&header, base + pos);
                            pos = first;
                            self.state = State::Inside(Box::new(builder));
                        }
                        Sniff::Invalid(why) => {
                            if !self.in_garbage {
                                let what = if self.interchanges_seen == 0 {
                                    "before the first interchange"
                                } else {
                                    "between interchanges"
                                };
                                self.file_error(
                                    format!("unexpected data {what} at byte {}: {why}", base + pos),
                                    base + pos,
                                );
                            }
                            self.in_garbage = true;
                            match next_candidate(&buf[pos + 1..]) {
                                Some(k) => pos += 1 + k,
                                None if eof => return buf.len(),
                                None => return buf.len().saturating_sub(2).max(pos),
                            }
                        }
                    }
                }
                State::Inside(mut builder) => {
                    let mut scanner =
                        SegmentScanner::with_base(&buf[pos..], base + pos, builder.delimiters);
                    loop {
                        let seg = match scanner.next_segment() {
                            Some(seg) => seg,
                            None if !eof => {
                                self.state = State::Inside(builder);
                                return pos + scanner.position();
                            }
                            None => match scanner.take_tail() {
                                Some(seg) => seg,
                                None => {
                                    let end = base + buf.len();
                                    emit(builder.finish_unterminated(end, None, &self.opts));
                                    return buf.len();
                                }
                            },
                        };
                        match builder.segment(&seg, &self.opts) {
                            Step::Continue => {}
                            Step::Done => {
                                emit(builder.finish());
                                pos += scanner.position();
                                break;
                            }
                            Step::Restart => {
                                let end = seg.offset;
                                emit(builder.finish_unterminated(end, Some(&seg), &self.opts));
                                pos = seg.offset - base;
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Ends the scan: returns file-level errors (including "no interchange at all").
    pub(crate) fn finish(&mut self) -> Vec<EnvelopeError> {
        if self.interchanges_seen == 0 && self.file_errors.is_empty() {
            let msg = if self.bytes_seen == 0 {
                "the input is empty: no interchange (ISA, UNA or UNB) found".to_string()
            } else {
                "no interchange (ISA, UNA or UNB) found in the input".to_string()
            };
            self.file_error(msg, 0);
        } else if self.interchanges_seen == 0
            && let Some(e) = self.file_errors.first_mut()
        {
            e.message = format!("no interchange found; {}", e.message);
        }
        std::mem::take(&mut self.file_errors)
    }

    /// Gives up on the segment being read (it has no terminator within the reader's limit):
    /// the open interchange ends with an error at `at`, and the bytes up to the next
    /// interchange start are skipped.
    pub(crate) fn abandon(&mut self, at: usize, limit: usize, emit: &mut dyn FnMut(Interchange)) {
        if let State::Inside(builder) = std::mem::replace(&mut self.state, State::Between) {
            let why = format!("no segment terminator within {limit} bytes after byte {at}");
            emit(builder.abandon(at, None, &why, &self.opts));
        }
        self.in_garbage = true;
    }

    /// Whether the parser is in the middle of an interchange.
    pub(crate) fn inside(&self) -> bool {
        matches!(self.state, State::Inside(_))
    }
}

/// The position of the next `ISA`, `UNA` or `UNB` in `buf`.
fn next_candidate(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = memchr2(b'I', b'U', &buf[from..]) {
        let i = from + k;
        let rest = &buf[i..];
        if rest.starts_with(b"ISA")
            || rest.starts_with(b"UNA")
            || rest.starts_with(b"UNB")
            || rest.len() < 3
        {
            return Some(i);
        }
        from = i + 1;
    }
    None
}
