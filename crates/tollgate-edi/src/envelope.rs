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
//! It is one state machine and reads best whole:
//! - [`Parser`] has two states: `Between` interchanges (BOM, layout and garbage skipping,
//!   sniffing a header: see `delimiters::sniff`) and `Inside` one, where a `Builder` receives
//!   one segment at a time.
//! - `Builder::segment` is the hot path: a body segment inside an open transaction is counted
//!   inline; every envelope segment goes to `segment_slow`, which opens and closes groups and
//!   transactions by their [`Role`] and reports what is missing or out of place.
//! - Trailer checks (counts, control references) live in [`crate::validate`]; error codes in
//!   [`crate::error`]. Add a rule there, not here.
//! - Chunking must not change the result: a decision that quotes or depends on bytes not yet in
//!   view returns "need more" until they are (the streaming reader and `parse` must agree byte
//!   for byte; `selfcheck` and the fuzz target hold them to it).

use memchr::memchr2;

use crate::delimiters::{Delimiters, Header, Sniff, show, sniff};
use crate::error::{EnvelopeError, ErrorKind, Level};
use crate::interchange::{
    ControlNumber, Counts, Group, Interchange, ParsedFile, PartyId, Standard, Transaction,
};
use crate::segment::{Segment, SegmentScanner, SegmentTag, decode};
use crate::validate;

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

const ISA: SegmentTag = SegmentTag::from_bytes(b"ISA");
const IEA: SegmentTag = SegmentTag::from_bytes(b"IEA");
const GS: SegmentTag = SegmentTag::from_bytes(b"GS");
const GE: SegmentTag = SegmentTag::from_bytes(b"GE");
const ST: SegmentTag = SegmentTag::from_bytes(b"ST");
const SE: SegmentTag = SegmentTag::from_bytes(b"SE");
const TA1: SegmentTag = SegmentTag::from_bytes(b"TA1");
const ISB: SegmentTag = SegmentTag::from_bytes(b"ISB");
const ISE: SegmentTag = SegmentTag::from_bytes(b"ISE");
const ISX: SegmentTag = SegmentTag::from_bytes(b"ISX");
const UNA: SegmentTag = SegmentTag::from_bytes(b"UNA");
const UNB: SegmentTag = SegmentTag::from_bytes(b"UNB");
const UNZ: SegmentTag = SegmentTag::from_bytes(b"UNZ");
const UNG: SegmentTag = SegmentTag::from_bytes(b"UNG");
const UNE: SegmentTag = SegmentTag::from_bytes(b"UNE");
const UNH: SegmentTag = SegmentTag::from_bytes(b"UNH");
const UNT: SegmentTag = SegmentTag::from_bytes(b"UNT");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    InterchangeHeader,
    InterchangeTrailer,
    GroupHeader,
    GroupTrailer,
    TxHeader,
    TxTrailer,
    Other,
}

/// A cheap filter: `false` means the tag is certainly not an envelope segment.
#[inline]
fn maybe_envelope(standard: Standard, tag: SegmentTag) -> bool {
    match standard {
        Standard::X12 => matches!(tag.first(), b'S' | b'G' | b'I'),
        Standard::Edifact => tag.first() == b'U' && tag.second() == b'N',
    }
}

#[inline]
fn role(standard: Standard, tag: SegmentTag) -> Role {
    match standard {
        Standard::X12 => {
            if tag == SE {
                Role::TxTrailer
            } else if tag == ST {
                Role::TxHeader
            } else if tag == GS {
                Role::GroupHeader
            } else if tag == GE {
                Role::GroupTrailer
            } else if tag == IEA {
                Role::InterchangeTrailer
            } else if tag == ISA {
                Role::InterchangeHeader
            } else {
                Role::Other
            }
        }
        Standard::Edifact => {
            if tag == UNT {
                Role::TxTrailer
            } else if tag == UNH {
                Role::TxHeader
            } else if tag == UNG {
                Role::GroupHeader
            } else if tag == UNE {
                Role::GroupTrailer
            } else if tag == UNZ {
                Role::InterchangeTrailer
            } else if tag == UNB || tag == UNA {
                Role::InterchangeHeader
            } else {
                Role::Other
            }
        }
    }
}

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

enum Step {
    Continue,
    Done,
    Restart,
}

struct OpenGroup {
    group: Group,
    implicit: bool,
}

struct OpenTx {
    tx: Transaction,
    records: u64,
}

/// One interchange under construction.
struct Builder {
    /// A finished transaction whose strings are reused when transactions are not kept.
    spare: Option<Box<OpenTx>>,
    ic: Interchange,
    delimiters: Delimiters,
    expect_header: bool,
    segment_index: usize,
    group: Option<OpenGroup>,
    tx: Option<Box<OpenTx>>,
    unexpected_run: bool,
    saw_group: bool,
}

impl Builder {
    fn new(header: &Header, start: usize) -> Builder {
        let first = start + header.first_segment;
        Builder {
            ic: Interchange {
                standard: header.standard,
                sender: PartyId::default(),
                receiver: PartyId::default(),
                control_number: ControlNumber::default(),
                version: String::new(),
                test: false,
                date: String::new(),
                time: String::new(),
                groups: Vec::new(),
                errors: Vec::new(),
                span: start..first,
                delimiters: header.delimiters,
                una: header.una.clone().map(|r| start + r.start..start + r.end),
                header_span: first..first,
                ack_requested: false,
                has_ta1: false,
                complete: false,
                counts: Counts::default(),
                errors_suppressed: 0,
            },
            spare: None,
            delimiters: header.delimiters,
            expect_header: true,
            segment_index: 0,
            group: None,
            tx: None,
            unexpected_run: false,
            saw_group: false,
        }
    }

    fn error(
        &mut self,
        opts: &Options,
        level: Level,
        kind: ErrorKind,
        message: String,
        segment: usize,
        offset: usize,
    ) {
        if self.ic.errors.len() >= opts.max_errors {
            self.ic.errors_suppressed += 1;
            return;
        }
        let mut e =
            EnvelopeError::new(Some(self.ic.standard), level, kind, message, segment, offset);
        if matches!(level, Level::Group | Level::Transaction) {
            e.group = Some(self.ic.groups.len());
        }
        if level == Level::Transaction {
            e.transaction = self.group.as_ref().map(|g| g.group.transaction_count as usize);
        }
        self.ic.errors.push(e);
    }

    /// Feeds one segment. The common case, a body segment inside a transaction, is handled
    /// here and inlined into the scan loop; everything else goes to `segment_slow`.
    #[inline(always)]
    fn segment(&mut self, seg: &Segment<'_>, opts: &Options) -> Step {
        // Invariant: `tx` is `None` while `expect_header` is set.
        if self.tx.is_some() && !maybe_envelope(self.ic.standard, seg.tag) {
            return self.body_segment(seg, opts);
        }
        self.segment_slow(seg, opts)
    }

    /// Counts a body segment of the open transaction (when there is one).
    #[inline(always)]
    fn body_segment(&mut self, seg: &Segment<'_>, opts: &Options) -> Step {
        if let Some(open) = &mut self.tx {
            open.tx.segments += 1;
            open.tx.span.end = seg.end;
            if opts.record_tag == Some(seg.tag) {
                open.records += 1;
            }
        }
        self.segment_index += 1;
        self.ic.span.end = seg.end;
        Step::Continue
    }

    /// Every segment that `segment` does not count as a body segment at once: envelope
    /// segments, and segments whose tag only looks like one (`SV1` in X12, say).
    #[inline(never)]
    fn segment_slow(&mut self, seg: &Segment<'_>, opts: &Options) -> Step {
        let r = role(self.ic.standard, seg.tag);
        if r == Role::Other && self.tx.is_some() {
            return self.body_segment(seg, opts);
        }
        if self.expect_header {
            self.expect_header = false;
            self.segment_index += 1;
            self.ic.span.end = seg.end;
            self.ic.header_span = seg.offset..seg.end;
            self.header(seg, opts);
            return Step::Continue;
        }
        if r == Role::InterchangeHeader {
            return Step::Restart;
        }
        self.segment_index += 1;
        self.ic.span.end = seg.end;
        let idx = self.segment_index;
        let d = self.delimiters;
        let std = self.ic.standard;
        if r != Role::Other {
            self.unexpected_run = false;
        }
        match r {
            Role::Other => self.outside(seg, opts),
            Role::TxHeader => {
                if self.tx.is_some() {
                    self.close_tx(None, seg, opts);
                }
                if self.group.is_none() {
                    if std == Standard::X12 {
                        self.error(
                            opts,
                            Level::Transaction,
                            ErrorKind::TransactionOutsideGroup,
                            format!(
                                "ST `{}` is not inside a functional group (GS)",
                                seg.text(&d, 2)
                            ),
                            idx,
                            seg.offset,
                        );
                    }
                    self.group = Some(OpenGroup { group: empty_group(seg.offset), implicit: true });
                }
                // Reuse the strings of the last transaction when transactions are not kept,
                // so a counting scan does not allocate per transaction.
                let mut open = self.spare.take().unwrap_or_else(|| {
                    Box::new(OpenTx {
                        tx: Transaction {
                            kind: String::new(),
                            control_number: ControlNumber::default(),
                            segments: 0,
                            message_version: None,
                            implementation: None,
                            span: 0..0,
                            first_segment: 0,
                            complete: false,
                        },
                        records: 0,
                    })
                });
                let tx = &mut open.tx;
                match std {
                    Standard::X12 => {
                        let mut els = seg.elements(&d).skip(1);
                        decode_into(els.next().unwrap_or_default(), &d, &mut tx.kind);
                        decode_into(els.next().unwrap_or_default(), &d, &mut tx.control_number.0);
                        tx.implementation = els
                            .next()
                            .filter(|raw| !raw.is_empty())
                            .map(|raw| decode(raw, &d).trim().to_string());
                        tx.message_version = None;
                    }
                    Standard::Edifact => {
                        let s009 = seg.components(&d, 2);
                        tx.message_version =
                            (s009.len() > 1).then(|| s009[1..s009.len().min(4)].join(":"));
                        tx.kind = trimmed(s009.first().cloned().unwrap_or_default());
                        tx.control_number = ControlNumber(trimmed(seg.text(&d, 1)));
                        tx.implementation = None;
                    }
                }
                tx.segments = 1;
                tx.span = seg.offset..seg.end;
                tx.first_segment = idx;
                tx.complete = false;
                open.records = 0;
                self.tx = Some(open);
            }
            Role::TxTrailer => {
                if self.tx.is_some() {
                    self.close_tx(Some(seg), seg, opts);
                } else {
                    let level =
                        if self.group.is_some() { Level::Group } else { Level::Interchange };
                    self.unmatched_trailer(seg, Level::Transaction, level, opts);
                }
            }
            Role::GroupHeader => {
                if self.tx.is_some() {
                    self.close_tx(None, seg, opts);
                }
                if self.group.is_some() {
                    self.close_group(None, seg, opts);
                }
                self.saw_group = true;
                self.ic.counts.groups += 1;
                let mut group = empty_group(seg.offset);
                group.header_span = seg.offset..seg.end;
                group.span.end = seg.end;
                match std {
                    Standard::X12 => {
                        group.functional_id = Some(seg.text(&d, 1).trim().to_string());
                        group.application_sender = Some(PartyId::new("", &seg.text(&d, 2)));
                        group.application_receiver = Some(PartyId::new("", &seg.text(&d, 3)));
                        group.date = Some(seg.text(&d, 4));
                        group.time = Some(seg.text(&d, 5));
                        group.control_number =
                            Some(ControlNumber(seg.text(&d, 6).trim().to_string()));
                        group.version = Some(seg.text(&d, 8).trim().to_string());
                    }
                    Standard::Edifact => {
                        let party = |c: Vec<String>| {
                            PartyId::new(c.get(1).map_or("", |s| s), c.first().map_or("", |s| s))
                        };
                        let dt = seg.components(&d, 4);
                        group.functional_id = Some(seg.text(&d, 1).trim().to_string());
                        group.application_sender = Some(party(seg.components(&d, 2)));
                        group.application_receiver = Some(party(seg.components(&d, 3)));
                        group.date = dt.first().cloned();
                        group.time = dt.get(1).cloned();
                        group.control_number =
                            Some(ControlNumber(seg.text(&d, 5).trim().to_string()));
                        let v = seg.components(&d, 7);
                        group.version = (!v.is_empty()).then(|| v[..v.len().min(3)].join(":"));
                    }
                }
                self.group = Some(OpenGroup { group, implicit: false });
            }
            Role::GroupTrailer => {
                if self.tx.is_some() {
                    self.close_tx(None, seg, opts);
                }
                if self.group.as_ref().is_some_and(|g| !g.implicit) {
                    self.close_group(Some(seg), seg, opts);
                } else {
                    self.unmatched_trailer(seg, Level::Group, Level::Interchange, opts);
                }
            }
            Role::InterchangeTrailer => {
                if self.tx.is_some() {
                    self.close_tx(None, seg, opts);
                }
                if self.group.is_some() {
                    self.close_group(None, seg, opts);
                }
                let (actual, what) = if std == Standard::Edifact && !self.saw_group {
                    (self.ic.counts.transactions, "messages")
                } else {
                    (self.ic.counts.groups, "groups")
                };
                let names = validate::names(std, Level::Interchange);
                let control = self.ic.control_number.clone();
                for (kind, message) in
                    validate::check_trailer(seg, &d, names, what, actual, &control)
                {
                    self.error(opts, Level::Interchange, kind, message, idx, seg.offset);
                }
                self.ic.complete = true;
                return Step::Done;
            }
            Role::InterchangeHeader => return Step::Restart,
        }
        Step::Continue
    }

    /// A non-envelope segment outside any transaction.
    fn outside(&mut self, seg: &Segment<'_>, opts: &Options) {
        let std = self.ic.standard;
        if std == Standard::X12 && self.group.is_none() && !self.saw_group {
            if seg.tag == TA1 {
                self.ic.has_ta1 = true;
                return;
            }
            if seg.tag == ISB || seg.tag == ISE || seg.tag == ISX {
                return;
            }
        }
        if self.unexpected_run {
            return;
        }
        self.unexpected_run = true;
        let level = if self.group.as_ref().is_some_and(|g| !g.implicit) {
            Level::Group
        } else {
            Level::Interchange
        };
        let place = match std {
            Standard::X12 => "outside any transaction set (ST..SE)",
            Standard::Edifact => "outside any message (UNH..UNT)",
        };
        let idx = self.segment_index;
        self.error(
            opts,
            level,
            ErrorKind::UnexpectedSegment,
            format!(
                "unexpected segment `{}` {place}: `{}`",
                seg.tag,
                show(&seg.bytes[..seg.bytes.len().min(40)])
            ),
            idx,
            seg.offset,
        );
    }

    /// Closes the open transaction; `trailer` is its SE/UNT, or `None` when it is missing and
    /// `at` is the segment that revealed it.
    /// Reports a transaction or group trailer (`trailer_of`) that closes nothing, at `level`.
    /// Element 2 of every such trailer (SE02, GE02, UNT 0062, UNE 0048) is its control number.
    fn unmatched_trailer(
        &mut self,
        seg: &Segment<'_>,
        trailer_of: Level,
        level: Level,
        opts: &Options,
    ) {
        let names = validate::names(self.ic.standard, trailer_of);
        let message = format!(
            "{} `{}` without a matching {}",
            names.trailer,
            seg.text(&self.delimiters, 2),
            names.header
        );
        let idx = self.segment_index;
        self.error(opts, level, ErrorKind::UnexpectedSegment, message, idx, seg.offset);
    }

    fn close_tx(&mut self, trailer: Option<&Segment<'_>>, at: &Segment<'_>, opts: &Options) {
        let Some(mut open) = self.tx.take() else {
            return;
        };
        let d = self.delimiters;
        let std = self.ic.standard;
        let names = validate::names(std, Level::Transaction);
        // Put the transaction back while reporting, so errors get its index.
        let mut errors = Vec::new();
        match trailer {
            Some(seg) => {
                open.tx.segments += 1;
                open.tx.span.end = seg.end;
                open.tx.complete = true;
                errors = validate::check_trailer(
                    seg,
                    &d,
                    names,
                    "segments",
                    open.tx.segments as u64,
                    &open.tx.control_number,
                );
            }
            None => errors.push((
                ErrorKind::MissingTrailer,
                format!(
                    "{} `{}` ({}) has no {}: {}",
                    names.header,
                    open.tx.control_number,
                    open.tx.kind,
                    names.trailer,
                    found_first(at)
                ),
            )),
        }
        for (kind, message) in errors {
            self.error(opts, Level::Transaction, kind, message, self.segment_index, at.offset);
        }
        let records = match opts.record_tag {
            Some(_) => open.records,
            None => 1,
        };
        self.ic.counts.transactions += 1;
        self.ic.counts.records += records;
        if let Some(g) = &mut self.group {
            g.group.transaction_count += 1;
            g.group.span.end = open.tx.span.end;
            if opts.keep_transactions {
                g.group.transactions.push(open.tx);
            } else {
                self.spare = Some(open);
            }
        }
    }

    /// Closes the open group; `trailer` is its GE/UNE, or `None` when missing.
    fn close_group(&mut self, trailer: Option<&Segment<'_>>, at: &Segment<'_>, opts: &Options) {
        let Some(open) = &self.group else {
            return;
        };
        let d = self.delimiters;
        let std = self.ic.standard;
        let names = validate::names(std, Level::Group);
        let mut errors = Vec::new();
        if !open.implicit {
            let control = open.group.control_number.clone().unwrap_or_default();
            match trailer {
                Some(seg) => {
                    errors = validate::check_trailer(
                        seg,
                        &d,
                        names,
                        "transactions",
                        open.group.transaction_count,
                        &control,
                    );
                }
                None => errors.push((
                    ErrorKind::MissingTrailer,
                    format!(
                        "{} `{}` has no {}: {}",
                        names.header,
                        control,
                        names.trailer,
                        found_first(at)
                    ),
                )),
            }
        }
        for (kind, message) in errors {
            self.error(opts, Level::Group, kind, message, self.segment_index, at.offset);
        }
        if let Some(mut open) = self.group.take() {
            if let Some(seg) = trailer {
                open.group.span.end = seg.end;
            }
            self.ic.groups.push(open.group);
        }
    }

    fn header(&mut self, seg: &Segment<'_>, opts: &Options) {
        let d = self.delimiters;
        let idx = self.segment_index;
        match self.ic.standard {
            Standard::X12 => {
                let ic = &mut self.ic;
                ic.sender = PartyId::new(&seg.text(&d, 5), &seg.text(&d, 6));
                ic.receiver = PartyId::new(&seg.text(&d, 7), &seg.text(&d, 8));
                ic.date = seg.text(&d, 9).trim().to_string();
                ic.time = seg.text(&d, 10).trim().to_string();
                ic.version = seg.text(&d, 12).trim().to_string();
                ic.control_number = ControlNumber(seg.text(&d, 13).trim().to_string());
                ic.ack_requested = seg.text(&d, 14).trim() == "1";
                ic.test = seg.text(&d, 15).trim() == "T";
                for (note, message) in validate::check_isa(seg, &d) {
                    self.error(
                        opts,
                        Level::Interchange,
                        ErrorKind::InvalidHeader { note },
                        message,
                        idx,
                        seg.offset,
                    );
                }
            }
            Standard::Edifact => {
                let ic = &mut self.ic;
                let party = |c: Vec<String>| {
                    PartyId::new(c.get(1).map_or("", |s| s), c.first().map_or("", |s| s))
                };
                let s001 = seg.components(&d, 1);
                ic.version = s001[..s001.len().min(2)].join(":");
                ic.sender = party(seg.components(&d, 2));
                ic.receiver = party(seg.components(&d, 3));
                let s004 = seg.components(&d, 4);
                ic.date = s004.first().cloned().unwrap_or_default();
                ic.time = s004.get(1).cloned().unwrap_or_default();
                ic.control_number = ControlNumber(seg.text(&d, 5).trim().to_string());
                ic.ack_requested = seg.text(&d, 9).trim() == "1";
                ic.test = seg.text(&d, 11).trim() == "1";
                if let Some(v) = s001.get(1)
                    && v.trim() == "4"
                    && self.delimiters.repetition.is_none()
                    && ic.una.is_none()
                {
                    // Syntax version 4 repeats with `*` at level A and with IS2 (0x19) at
                    // level B.
                    let repetition = if d.element == 0x1D { 0x19 } else { b'*' };
                    if let Some(nd) = Delimiters::edifact(
                        d.component,
                        d.element,
                        d.decimal.unwrap_or(b'.'),
                        d.release,
                        Some(repetition),
                        d.terminator()[0],
                    ) {
                        self.delimiters = nd;
                        self.ic.delimiters = nd;
                    }
                }
                for (note, message) in validate::check_unb(seg, &d) {
                    self.error(
                        opts,
                        Level::Interchange,
                        ErrorKind::InvalidHeader { note },
                        message,
                        idx,
                        seg.offset,
                    );
                }
            }
        }
    }

    fn finish(mut self) -> Interchange {
        self.ic.counts.segments = self.segment_index as u64;
        self.ic
    }

    /// Ends an interchange whose trailer never came: at end of input (`next` = `None`) or
    /// because `next` starts a new interchange.
    fn finish_unterminated(
        self,
        end: usize,
        next: Option<&Segment<'_>>,
        opts: &Options,
    ) -> Interchange {
        let why = match next {
            None => "the input ends (premature end of file)".to_string(),
            Some(s) => format!("`{}` starts a new interchange", s.tag),
        };
        self.abandon(end, next, &why, opts)
    }

    /// Ends an interchange early, closing open envelopes with missing-trailer errors.
    fn abandon(
        mut self,
        end: usize,
        next: Option<&Segment<'_>>,
        why: &str,
        opts: &Options,
    ) -> Interchange {
        let at = Segment {
            bytes: next.map_or(&[][..], |s| s.bytes),
            offset: next.map_or(end, |s| s.offset),
            end,
            tag: next.map_or(SegmentTag::from_bytes(b"EOF"), |s| s.tag),
        };
        if self.tx.is_some() {
            self.close_tx(None, &at, opts);
        }
        if self.group.is_some() {
            self.close_group(None, &at, opts);
        }
        let names = validate::names(self.ic.standard, Level::Interchange);
        let msg = format!(
            "{} `{}` has no {}: {why}",
            names.header, self.ic.control_number, names.trailer
        );
        let idx = self.segment_index;
        self.error(opts, Level::Interchange, ErrorKind::MissingTrailer, msg, idx, at.offset);
        self.finish()
    }
}

/// Says what came instead of a trailer: a segment, or the end of the input.
fn found_first(at: &Segment<'_>) -> String {
    if at.bytes.is_empty() {
        "the input ends first".to_string()
    } else {
        format!("`{}` found first", at.tag)
    }
}

fn empty_group(start: usize) -> Group {
    Group {
        functional_id: None,
        application_sender: None,
        application_receiver: None,
        control_number: None,
        version: None,
        date: None,
        time: None,
        transactions: Vec::new(),
        transaction_count: 0,
        span: start..start,
        header_span: start..start,
    }
}

/// Trims surrounding whitespace, reusing the allocation when there is none.
fn trimmed(s: String) -> String {
    if s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        s.trim().to_string()
    } else {
        s
    }
}

/// Decodes a raw value into `out` (cleared first), trimmed, reusing its allocation.
fn decode_into(raw: &[u8], d: &Delimiters, out: &mut String) {
    out.clear();
    let plain = crate::segment::is_plain(raw, d);
    match std::str::from_utf8(raw) {
        Ok(text) if plain => out.push_str(text.trim()),
        _ => out.push_str(decode(raw, d).trim()),
    }
}
