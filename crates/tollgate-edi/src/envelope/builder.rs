//! One interchange under construction: the [`Builder`] receives the segments of an interchange
//! one at a time, opens and closes its groups and transactions by their role, counts what it
//! sees and reports what is missing or out of place. See the guide in [`super`].

use crate::delimiters::{Delimiters, Header, show};
use crate::error::{EnvelopeError, ErrorKind, Level};
use crate::interchange::{
    ControlNumber, Counts, Group, Interchange, PartyId, Standard, Transaction,
};
use crate::segment::{Segment, SegmentTag};
use crate::validate;

mod trailers;

use super::Options;
use super::headers;
use super::roles::{ISB, ISE, ISX, Role, TA1, maybe_envelope, role};

pub(super) enum Step {
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
pub(super) struct Builder {
    /// A finished transaction whose strings are reused when transactions are not kept.
    spare: Option<Box<OpenTx>>,
    ic: Interchange,
    pub(super) delimiters: Delimiters,
    expect_header: bool,
    segment_index: usize,
    group: Option<OpenGroup>,
    tx: Option<Box<OpenTx>>,
    unexpected_run: bool,
    saw_group: bool,
    /// A transaction was opened outside any group (the implicit group).
    saw_ungrouped: bool,
    /// The mix of groups and ungrouped messages was reported (once per interchange).
    mixed_reported: bool,
}

impl Builder {
    pub(super) fn new(header: &Header, start: usize) -> Builder {
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
            saw_ungrouped: false,
            mixed_reported: false,
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
    pub(super) fn segment(&mut self, seg: &Segment<'_>, opts: &Options) -> Step {
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
                    } else if self.saw_group {
                        self.mixed(
                            seg,
                            "is outside any group, but the interchange has groups (UNG)",
                            opts,
                        );
                    }
                    self.saw_ungrouped = true;
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
                headers::transaction(tx, seg, std, &d);
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
                if std == Standard::Edifact && self.saw_ungrouped {
                    self.mixed(
                        seg,
                        "starts a group, but the interchange has messages outside groups (UNH)",
                        opts,
                    );
                }
                self.saw_group = true;
                self.ic.counts.groups += 1;
                let mut group = empty_group(seg.offset);
                group.header_span = seg.offset..seg.end;
                group.span.end = seg.end;
                headers::group(&mut group, seg, std, &d);
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

    /// Reports an EDIFACT interchange that holds both groups and messages outside any group,
    /// which ISO 9735 does not allow (one or the other): once, at the first segment (`seg`,
    /// a UNH or UNG, that makes the mix; `what` says how).
    fn mixed(&mut self, seg: &Segment<'_>, what: &str, opts: &Options) {
        if self.mixed_reported {
            return;
        }
        self.mixed_reported = true;
        let message = format!(
            "{} `{}` {what}: ISO 9735 allows groups or messages directly in an interchange, \
             not both",
            seg.tag,
            seg.text(&self.delimiters, if seg.tag.as_bytes() == b"UNG" { 5 } else { 1 }),
        );
        let (idx, offset) = (self.segment_index, seg.offset);
        self.error(
            opts,
            Level::Interchange,
            ErrorKind::MixedGroupsAndMessages,
            message,
            idx,
            offset,
        );
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

    /// Reads the ISA / UNB into the model and reports its elements of the wrong shape.
    fn header(&mut self, seg: &Segment<'_>, opts: &Options) {
        let idx = self.segment_index;
        for (note, message) in headers::interchange(&mut self.ic, seg, &self.delimiters) {
            let kind = ErrorKind::InvalidHeader { note };
            self.error(opts, Level::Interchange, kind, message, idx, seg.offset);
        }
        self.delimiters = self.ic.delimiters;
    }

    pub(super) fn finish(mut self) -> Interchange {
        self.ic.counts.segments = self.segment_index as u64;
        self.ic
    }

    /// Ends an interchange whose trailer never came: at end of input (`next` = `None`) or
    /// because `next` starts a new interchange.
    pub(super) fn finish_unterminated(
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
    pub(super) fn abandon(
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
