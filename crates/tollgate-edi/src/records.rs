//! Record counting for metering: transactions by default, or the number of segments with a
//! given tag (`AT7` status events in a 214, `STS` in an IFTSTA). Declared counts are never used.

use std::str::FromStr;

use crate::interchange::{Interchange, Transaction};
use crate::segment::{SegmentScanner, SegmentTag};

/// What one "record" is when weighing an interchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordRule {
    /// One record per transaction set / message (the default).
    #[default]
    Transactions,
    /// One record per segment with this tag inside transactions.
    Segment(SegmentTag),
}

impl FromStr for RecordRule {
    type Err = String;
    /// `transactions` or `segment:TAG` (e.g. `segment:AT7`). Segment tags are written in
    /// upper case (X12 and EDIFACT alike), so a lower-case tag, which would never match, is
    /// refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "transactions" {
            return Ok(RecordRule::Transactions);
        }
        match s.strip_prefix("segment:") {
            Some(tag) if tag.bytes().any(|b| b.is_ascii_lowercase()) => Err(format!(
                "record rule `{s}`: segment tags are upper case (`segment:{}`)",
                tag.to_ascii_uppercase()
            )),
            Some(tag) => tag.parse().map(RecordRule::Segment),
            None => Err(format!("record rule `{s}` is neither `transactions` nor `segment:TAG`")),
        }
    }
}

impl std::fmt::Display for RecordRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordRule::Transactions => f.write_str("transactions"),
            RecordRule::Segment(tag) => write!(f, "segment:{tag}"),
        }
    }
}

/// Records in one interchange under `rule`, counted from the bytes of `input`.
pub fn count_records(input: &[u8], ic: &Interchange, rule: &RecordRule) -> u64 {
    match rule {
        RecordRule::Transactions => ic.counts.transactions,
        RecordRule::Segment(tag) => {
            let kept = ic.transactions().count() as u64;
            if kept == ic.counts.transactions {
                ic.transactions().map(|tx| transaction_records(input, tx, rule, ic)).sum()
            } else {
                // Transactions were not kept: count the tag over the whole interchange.
                count_tag(input.get(ic.span.clone()).unwrap_or(&[]), ic, *tag)
            }
        }
    }
}

/// Records in one transaction under `rule` (1 for [`RecordRule::Transactions`]).
pub fn transaction_records(
    input: &[u8],
    tx: &Transaction,
    rule: &RecordRule,
    ic: &Interchange,
) -> u64 {
    match rule {
        RecordRule::Transactions => 1,
        RecordRule::Segment(tag) => count_tag(input.get(tx.span.clone()).unwrap_or(&[]), ic, *tag),
    }
}

fn count_tag(bytes: &[u8], ic: &Interchange, tag: SegmentTag) -> u64 {
    SegmentScanner::new(bytes, ic.delimiters).filter(|s| s.tag == tag).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print() {
        assert_eq!("transactions".parse::<RecordRule>(), Ok(RecordRule::Transactions));
        let r: RecordRule = "segment:AT7".parse().unwrap();
        assert_eq!(r.to_string(), "segment:AT7");
        assert!("segment:A".parse::<RecordRule>().is_err());
        assert!("segments".parse::<RecordRule>().is_err());
        assert!("segment:".parse::<RecordRule>().is_err());
        assert!("segment:ABCD".parse::<RecordRule>().is_err());
        let lower = "segment:at7".parse::<RecordRule>().unwrap_err();
        assert!(lower.contains("segment:AT7"), "{lower}");
    }
}
