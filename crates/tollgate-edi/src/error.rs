//! Envelope errors (with the standard's code) and I/O errors of the streaming reader.

use crate::interchange::Standard;

/// The envelope level an error belongs to; it decides which acknowledgement reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Bytes outside any interchange (garbage, no interchange at all).
    File,
    /// The interchange envelope (ISA/IEA, UNB/UNZ): TA1, CONTRL UCI.
    Interchange,
    /// The functional group (GS/GE, UNG/UNE): 997/999 AK9, CONTRL UCF.
    Group,
    /// The transaction set or message (ST/SE, UNH/UNT): AK5/IK5, CONTRL UCM.
    Transaction,
}

/// What went wrong, independent of the standard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// A trailer's control reference differs from its header's.
    ReferenceMismatch {
        /// The header's value (ISA13, GS06, ST02, UNB 0020, ...).
        header: String,
        /// The trailer's value.
        trailer: String,
    },
    /// A trailer's declared count differs from the count actually seen.
    CountMismatch {
        /// The declared value, as received.
        declared: String,
        /// What was counted.
        actual: u64,
    },
    /// A header with no matching trailer (including a premature end of file).
    MissingTrailer,
    /// A segment where the envelope grammar allows none, or a trailer without header.
    UnexpectedSegment,
    /// An X12 transaction set outside any functional group.
    TransactionOutsideGroup,
    /// An EDIFACT interchange with both groups (UNG) and messages outside any group.
    MixedGroupsAndMessages,
    /// A header element with an invalid value; `note` is the standard's note code (e.g. TA1 `018`).
    InvalidHeader {
        /// The standard's note/error code for this element.
        note: &'static str,
    },
    /// Bytes that are not part of any interchange, or a file without an interchange.
    NotAnInterchange,
}

/// One envelope error: the standard's code, a message naming the segment, element and value,
/// the 1-based index of the segment within its interchange and the byte offset in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeError {
    /// `TA1-001`, `AK9-5`, `AK5-4`, `UCI-28`, `UCF-29`, `UCM-13`; `AK9` alone for a group
    /// error no functional group code fits; `FILE` for stray bytes.
    pub code: String,
    /// Human-readable explanation naming the segment, element and value received.
    pub message: String,
    /// 1-based index of the offending segment within its interchange (0 for file-level errors).
    pub segment: usize,
    /// Byte offset of the offending segment in the input.
    pub offset: usize,
    /// What went wrong.
    pub kind: ErrorKind,
    /// Which envelope level the error belongs to.
    pub level: Level,
    /// Index of the group (within the interchange) the error belongs to, if any.
    pub group: Option<usize>,
    /// Index of the transaction (within its group) the error belongs to, if any.
    pub transaction: Option<usize>,
}

impl EnvelopeError {
    /// The numeric part of the code as the acknowledgement carries it (`001`, `5`, `29`);
    /// empty when the standard's code list has no code for this error (`AK9`, `FILE`).
    pub fn standard_code(&self) -> &str {
        self.code.split_once('-').map_or("", |(_, n)| n)
    }

    pub(crate) fn new(
        standard: Option<Standard>,
        level: Level,
        kind: ErrorKind,
        message: String,
        segment: usize,
        offset: usize,
    ) -> Self {
        let code = code_for(standard, level, &kind);
        EnvelopeError {
            code,
            message,
            segment,
            offset,
            kind,
            level,
            group: None,
            transaction: None,
        }
    }
}

impl std::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at segment {} (byte {}): {}",
            self.code, self.segment, self.offset, self.message
        )
    }
}

/// The standard's code for an error: TA1 I18 notes, AK9 (716), AK5/IK5 (718), CONTRL 0085.
fn code_for(standard: Option<Standard>, level: Level, kind: &ErrorKind) -> String {
    use ErrorKind::*;
    match (standard, level) {
        (None, _) | (_, Level::File) => "FILE".to_string(),
        (Some(Standard::X12), level) => {
            let (prefix, n) = match (level, kind) {
                (_, InvalidHeader { note }) => ("TA1", *note),
                (Level::Interchange, ReferenceMismatch { .. }) => ("TA1", "001"),
                (Level::Interchange, CountMismatch { .. }) => ("TA1", "021"),
                (Level::Interchange, MissingTrailer) => ("TA1", "023"),
                (Level::Group, ReferenceMismatch { .. }) => ("AK9", "4"),
                (Level::Group, CountMismatch { .. }) => ("AK9", "5"),
                (Level::Group, MissingTrailer) => ("AK9", "3"),
                (Level::Transaction, ReferenceMismatch { .. }) => ("AK5", "3"),
                (Level::Transaction, CountMismatch { .. }) => ("AK5", "4"),
                (Level::Transaction, MissingTrailer) => ("AK5", "2"),
                (Level::Transaction, TransactionOutsideGroup) => ("AK5", "18"),
                // No functional group code (AK9, list 716) fits a stray segment between GS and
                // ST: the group is rejected without a code, never with one from another list.
                (Level::Group, _) => ("AK9", ""),
                _ => ("TA1", "024"),
            };
            if n.is_empty() { prefix.to_string() } else { format!("{prefix}-{n}") }
        }
        (Some(Standard::Edifact), level) => {
            let prefix = match level {
                Level::Interchange | Level::File => "UCI",
                Level::Group => "UCF",
                Level::Transaction => "UCM",
            };
            let n = match kind {
                ReferenceMismatch { .. } => "28",
                CountMismatch { .. } => "29",
                // Code list 0085: 30 "functional groups and messages mixed".
                MixedGroupsAndMessages => "30",
                MissingTrailer => "13",
                InvalidHeader { note } => note,
                UnexpectedSegment | TransactionOutsideGroup | NotAnInterchange => "33",
            };
            format!("{prefix}-{n}")
        }
    }
}

/// Errors of the streaming [`Reader`](crate::reader::Reader): only I/O and resource limits,
/// envelope problems are [`EnvelopeError`]s inside the interchanges.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The underlying reader failed.
    #[error("reading the input failed: {0}")]
    Io(#[from] std::io::Error),
}
