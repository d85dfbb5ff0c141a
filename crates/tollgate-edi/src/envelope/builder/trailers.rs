//! Closing transactions and groups: each is checked against its trailer (declared count and
//! control reference, see [`crate::validate`]) or reported without one, and handed to its
//! group or interchange.

use crate::error::{ErrorKind, Level};
use crate::segment::Segment;
use crate::validate;

use super::Builder;
use crate::envelope::Options;

impl Builder {
    /// Reports a transaction or group trailer (`trailer_of`) that closes nothing, at `level`.
    /// Element 2 of every such trailer (SE02, GE02, UNT 0062, UNE 0048) is its control number.
    pub(super) fn unmatched_trailer(
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

    /// Closes the open transaction; `trailer` is its SE/UNT, or `None` when it is missing and
    /// `at` is the segment that revealed it.
    pub(super) fn close_tx(
        &mut self,
        trailer: Option<&Segment<'_>>,
        at: &Segment<'_>,
        opts: &Options,
    ) {
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
    pub(super) fn close_group(
        &mut self,
        trailer: Option<&Segment<'_>>,
        at: &Segment<'_>,
        opts: &Options,
    ) {
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
}

/// Says what came instead of a trailer: a segment, or the end of the input.
fn found_first(at: &Segment<'_>) -> String {
    if at.bytes.is_empty() {
        "the input ends first".to_string()
    } else {
        format!("`{}` found first", at.tag)
    }
}
