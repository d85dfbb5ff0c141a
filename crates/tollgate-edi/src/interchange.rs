//! The envelope model: interchanges, functional groups and transactions, with what the gateway
//! meters by (partner, document type, counts) and where each lives in the input.

use std::ops::Range;

use crate::delimiters::Delimiters;
use crate::error::EnvelopeError;

/// The EDI standard of an interchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Standard {
    /// ANSI ASC X12 (ISA ... IEA).
    X12,
    /// UN/EDIFACT (UNA? UNB ... UNZ).
    Edifact,
}

impl Standard {
    /// `x12` or `edifact`.
    pub fn as_str(self) -> &'static str {
        match self {
            Standard::X12 => "x12",
            Standard::Edifact => "edifact",
        }
    }
}

/// A trading partner id with its qualifier (ISA05/06, UNB S002 0004/0007). The id is trimmed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PartyId {
    /// Id qualifier (`ZZ`, `01`, `14`, ...); empty when the standard or partner gives none.
    pub qualifier: String,
    /// The id, without padding.
    pub id: String,
}

impl PartyId {
    /// A party id; both parts are trimmed of surrounding spaces.
    pub fn new(qualifier: &str, id: &str) -> PartyId {
        PartyId { qualifier: qualifier.trim().to_string(), id: id.trim().to_string() }
    }
}

impl std::fmt::Display for PartyId {
    /// `QUAL:ID`, or just `ID` without qualifier.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.qualifier.is_empty() {
            f.write_str(&self.id)
        } else {
            write!(f, "{}:{}", self.qualifier, self.id)
        }
    }
}

impl std::str::FromStr for PartyId {
    type Err = String;
    /// `QUAL:ID` as written in configuration (`ZZ:ACME`); both parts are trimmed, and both
    /// must be there.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((q, id)) if !q.trim().is_empty() && !id.trim().is_empty() => {
                Ok(PartyId::new(q, id))
            }
            _ => Err("expected QUALIFIER:ID, e.g. ZZ:ACME".to_owned()),
        }
    }
}

/// A control number or reference (ISA13, GS06, ST02, UNB 0020, UNH 0062) as received, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ControlNumber(pub String);

impl ControlNumber {
    /// The value as received (trimmed).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a trailer's reference designates this header: equal as text, or equal as
    /// numbers when both are all digits (`1` and `000000001`).
    pub fn matches(&self, other: &str) -> bool {
        let a = self.0.as_str();
        let b = other.trim();
        if a == b {
            return true;
        }
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        digits(a) && digits(b) && a.trim_start_matches('0') == b.trim_start_matches('0')
    }
}

impl std::fmt::Display for ControlNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Counts actually seen in an interchange (never the declared ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Segments, header and trailer included.
    pub segments: u64,
    /// Functional groups (explicit ones; the implicit EDIFACT group is not counted).
    pub groups: u64,
    /// Transaction sets / messages.
    pub transactions: u64,
    /// Records under the rule the scan was given (transactions unless told otherwise).
    pub records: u64,
}

/// One interchange (ISA..IEA or UNA/UNB..UNZ).
#[derive(Debug, Clone, PartialEq)]
pub struct Interchange {
    /// X12 or EDIFACT.
    pub standard: Standard,
    /// ISA05/ISA06, UNB S002.
    pub sender: PartyId,
    /// ISA07/ISA08, UNB S003.
    pub receiver: PartyId,
    /// ISA13, UNB 0020.
    pub control_number: ControlNumber,
    /// ISA12 (`00401`), or the EDIFACT syntax identifier and version (`UNOA:3`).
    pub version: String,
    /// ISA15 = `T`, UNB 0035 = `1`.
    pub test: bool,
    /// ISA09, UNB S004 0017.
    pub date: String,
    /// ISA10, UNB S004 0019.
    pub time: String,
    /// Functional groups; EDIFACT messages without UNG sit in one implicit group.
    pub groups: Vec<Group>,
    /// Every envelope error of this interchange, at any level, in input order.
    pub errors: Vec<EnvelopeError>,
    /// Bytes of the whole interchange in the input (UNA included).
    pub span: Range<usize>,
    /// The delimiters the interchange uses.
    pub delimiters: Delimiters,
    /// Bytes of the UNA service string advice, if any.
    pub una: Option<Range<usize>>,
    /// Bytes of the ISA / UNB segment (terminator included).
    pub header_span: Range<usize>,
    /// ISA14 = `1` or UNB 0031 = `1`: the sender asks for an acknowledgement.
    pub ack_requested: bool,
    /// A TA1 segment sits directly in the interchange (an interchange acknowledgement).
    pub has_ta1: bool,
    /// Whether the trailer (IEA / UNZ) was seen.
    pub complete: bool,
    /// Counts actually seen.
    pub counts: Counts,
    /// Errors not stored because the scan's error limit was reached.
    pub errors_suppressed: u64,
}

impl Interchange {
    /// All transactions of all groups, in input order.
    pub fn transactions(&self) -> impl Iterator<Item = &Transaction> {
        self.groups.iter().flat_map(|g| g.transactions.iter())
    }

    /// Whether the interchange is itself an acknowledgement (997, 999, CONTRL, or TA1 only),
    /// which must never be acknowledged.
    pub fn is_acknowledgement(&self) -> bool {
        let mut any = false;
        for g in &self.groups {
            if g.functional_id.as_deref() == Some("FA") {
                any = true;
                continue;
            }
            for t in &g.transactions {
                if !matches!(t.kind.as_str(), "997" | "999" | "CONTRL") {
                    return false;
                }
                any = true;
            }
            if g.transactions.is_empty() {
                return false;
            }
        }
        any || (self.has_ta1 && self.groups.is_empty())
    }
}

/// A functional group (GS..GE, UNG..UNE) or the implicit EDIFACT group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// GS01 / UNG 0038; `None` for the implicit group.
    pub functional_id: Option<String>,
    /// GS02 / UNG S006.
    pub application_sender: Option<PartyId>,
    /// GS03 / UNG S007.
    pub application_receiver: Option<PartyId>,
    /// GS06 / UNG 0048.
    pub control_number: Option<ControlNumber>,
    /// GS08 (`004010`, `005010X222A1`) / UNG S008 (`D:96A:EAN008A`).
    pub version: Option<String>,
    /// GS04 / UNG S004 date.
    pub date: Option<String>,
    /// GS05 / UNG S004 time.
    pub time: Option<String>,
    /// Transactions of the group (empty when the scan was told not to keep them).
    pub transactions: Vec<Transaction>,
    /// Transactions actually seen in the group.
    pub transaction_count: u64,
    /// Bytes of the group in the input.
    pub span: Range<usize>,
    /// Bytes of the GS / UNG segment; empty for the implicit group.
    pub header_span: Range<usize>,
}

/// A transaction set (ST..SE) or message (UNH..UNT).
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// ST01 (`214`) or UNH S009 0065 (`IFTSTA`).
    pub kind: String,
    /// ST02 / UNH 0062.
    pub control_number: ControlNumber,
    /// Segments actually seen, header and trailer included.
    pub segments: usize,
    /// EDIFACT message version (`D:01B:UN`): S009 0052, 0054, 0051.
    pub message_version: Option<String>,
    /// X12 ST03 implementation convention reference (`005010X222A1`), if present.
    pub implementation: Option<String>,
    /// Bytes of the transaction in the input (header through trailer terminator).
    pub span: Range<usize>,
    /// 1-based index of the header segment within the interchange.
    pub first_segment: usize,
    /// Whether the trailer (SE / UNT) was seen.
    pub complete: bool,
}

/// The result of [`parse`](crate::parse): every interchange found, plus errors about bytes that
/// belong to none (stray data, or no interchange at all).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedFile {
    /// Interchanges in input order.
    pub interchanges: Vec<Interchange>,
    /// File-level errors (code `FILE`).
    pub errors: Vec<EnvelopeError>,
}

impl ParsedFile {
    /// Whether any error was found, at file level or in any interchange.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.interchanges.iter().any(|i| !i.errors.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn party_ids_parse_trimmed_and_need_both_parts() {
        let p: PartyId = " ZZ : ACME CO  ".parse().unwrap();
        assert_eq!(p, PartyId::new("ZZ", "ACME CO"));
        assert_eq!(p.to_string(), "ZZ:ACME CO");
        for bad in ["ACME", "ZZ:", ":ACME", " : "] {
            assert!(bad.parse::<PartyId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn control_numbers_compare_as_numbers_when_numeric() {
        let c = ControlNumber("000000001".into());
        assert!(c.matches("1"));
        assert!(c.matches("000000001"));
        assert!(!c.matches("2"));
        assert!(!ControlNumber("A1".into()).matches("1"));
        assert!(ControlNumber("0".into()).matches("000"));
    }

    #[test]
    fn party_id_display() {
        assert_eq!(PartyId::new("ZZ", "ACME   ").to_string(), "ZZ:ACME");
        assert_eq!(PartyId::new("", "DEPT").to_string(), "DEPT");
    }
}
