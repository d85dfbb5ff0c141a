//! `tollgate-edi`: a byte-oriented, zero-copy scanner for X12 and UN/EDIFACT envelopes.
//!
//! The crate is split like `csv` / `csv-core`: [`SegmentScanner`] walks the segments of
//! an interchange over `&[u8]` without allocating, [`Delimiters`] finds those of each
//! interchange, and the envelope assembler turns the segment stream into the [`Interchange`]
//! model, checking control numbers and declared counts as it goes. [`parse`] reads a whole file
//! held in memory; [`Reader`] streams from any `Read` with a bounded buffer.
//!
//! ```
//! let file = b"ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       \
//! *240101*1200*U*00401*000000001*0*P*>~GS*QM*S*R*20240101*1200*1*X*004010~\
//! ST*214*0001~B10*1*2*SCAC~SE*3*0001~GE*1*1~IEA*1*000000001~";
//! let parsed = tollgate_edi::parse(file);
//! assert!(parsed.errors.is_empty());
//! let ic = &parsed.interchanges[0];
//! assert_eq!(ic.sender.to_string(), "ZZ:SENDER");
//! assert_eq!(ic.transactions().count(), 1);
//! assert!(ic.errors.is_empty());
//! ```
//!
//! The public surface is the `pub use` list below; the modules are private.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod ack;
mod delimiters;
mod envelope;
mod error;
mod fingerprint;
mod interchange;
mod reader;
mod records;
mod segment;
mod selfcheck;
mod split;
mod validate;

pub use ack::{AckFormat, acknowledge, gaps};
pub use delimiters::Delimiters;
pub use error::{EnvelopeError, ErrorKind, Level, ReadError};
pub use fingerprint::{Fingerprint, fingerprint};
pub use interchange::{
    ControlNumber, Counts, Group, Interchange, ParsedFile, PartyId, Standard, Transaction,
};
pub use reader::{Reader, ReaderOptions};
pub use records::{RecordRule, count_records, transaction_records};
pub use segment::{Segment, SegmentScanner, SegmentTag};
pub use selfcheck::{
    check as self_check, check_file as self_check_file, check_split as self_check_split,
};
pub use split::{Outline, OutlineGroup, SplitError, split, split_outline};

/// Parses every interchange in `input` (a whole file in memory).
///
/// Never panics and never stops at an error: envelope errors are collected in each interchange,
/// data that belongs to no interchange is reported in [`ParsedFile::errors`].
pub fn parse(input: &[u8]) -> ParsedFile {
    envelope::parse_all(input, &envelope::Options::full())
}

/// Scans `input` for envelopes and counts only: groups are kept but not their transactions,
/// and [`Counts::records`] follows `rule`. This is the fast path used for metering.
pub fn scan(input: &[u8], rule: &RecordRule) -> ParsedFile {
    let record_tag = match rule {
        RecordRule::Transactions => None,
        RecordRule::Segment(tag) => Some(*tag),
    };
    let opts = envelope::Options { keep_transactions: false, record_tag, max_errors: 1000 };
    envelope::parse_all(input, &opts)
}
