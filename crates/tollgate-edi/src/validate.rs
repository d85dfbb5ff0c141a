//! Validation rules of the envelope: header element checks (ISA, UNB) and the comparison of a
//! trailer's declared count and control reference with what was actually seen.

use crate::delimiters::{Delimiters, show};
use crate::error::ErrorKind;
use crate::interchange::{ControlNumber, Standard};
use crate::segment::Segment;

/// Element names used in messages, per standard and level: (count, trailer ref, header ref).
pub(crate) struct Names {
    pub count: &'static str,
    pub trailer_ref: &'static str,
    pub header_ref: &'static str,
    pub header: &'static str,
    pub trailer: &'static str,
}

pub(crate) const X12_TX: Names =
    Names { count: "SE01", trailer_ref: "SE02", header_ref: "ST02", header: "ST", trailer: "SE" };
pub(crate) const X12_GROUP: Names =
    Names { count: "GE01", trailer_ref: "GE02", header_ref: "GS06", header: "GS", trailer: "GE" };
pub(crate) const X12_IC: Names = Names {
    count: "IEA01",
    trailer_ref: "IEA02",
    header_ref: "ISA13",
    header: "ISA",
    trailer: "IEA",
};
pub(crate) const EDI_TX: Names = Names {
    count: "UNT 0074",
    trailer_ref: "UNT 0062",
    header_ref: "UNH 0062",
    header: "UNH",
    trailer: "UNT",
};
pub(crate) const EDI_GROUP: Names = Names {
    count: "UNE 0060",
    trailer_ref: "UNE 0048",
    header_ref: "UNG 0048",
    header: "UNG",
    trailer: "UNE",
};
pub(crate) const EDI_IC: Names = Names {
    count: "UNZ 0036",
    trailer_ref: "UNZ 0020",
    header_ref: "UNB 0020",
    header: "UNB",
    trailer: "UNZ",
};

/// Compares a trailer's count (element 1) and reference (element 2) with the actual values;
/// returns the errors as (kind, message).
pub(crate) fn check_trailer(
    seg: &Segment<'_>,
    d: &Delimiters,
    names: &Names,
    what: &str,
    actual: u64,
    header_ref: &ControlNumber,
) -> Vec<(ErrorKind, String)> {
    let mut out = Vec::new();
    let mut elements = seg.elements(d).skip(1);
    let raw_count = elements.next().unwrap_or(b"");
    let raw_ref = elements.next().unwrap_or(b"");
    // Fast path: plain digits equal to the count and a reference equal byte for byte.
    if parse_count(raw_count) == Some(actual) && raw_ref == header_ref.0.as_bytes() {
        return out;
    }
    let declared = seg.text(d, 1);
    let declared_trim = declared.trim();
    if declared_trim.parse::<u64>().ok() != Some(actual) {
        out.push((
            ErrorKind::CountMismatch { declared: declared_trim.to_string(), actual },
            format!("{} declares `{}` {what} but {actual} were found", names.count, declared_trim),
        ));
    }
    let trailer_ref = seg.text(d, 2);
    if !header_ref.matches(&trailer_ref) {
        out.push((
            ErrorKind::ReferenceMismatch {
                header: header_ref.0.clone(),
                trailer: trailer_ref.trim().to_string(),
            },
            format!(
                "{} `{}` does not match {} `{}`",
                names.trailer_ref,
                trailer_ref.trim(),
                names.header_ref,
                header_ref
            ),
        ));
    }
    out
}

/// A count made of ASCII digits only, without allocating.
fn parse_count(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 18 {
        return None;
    }
    let mut n = 0u64;
    for &b in raw {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

fn digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// Checks the fixed-format ISA elements; returns (TA1 note code, message) pairs.
pub(crate) fn check_isa(seg: &Segment<'_>, d: &Delimiters) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let count = seg.element_count(d);
    if count != 16 {
        out.push(("022", format!("ISA has {count} elements, 16 are required")));
    }
    let el = |i: usize| seg.text(d, i);
    let mut check = |note: &'static str, name: &str, ok: bool, value: String, want: &str| {
        if !ok {
            out.push((note, format!("{name} `{}` is not {want}", show(value.as_bytes()))));
        }
    };
    let v = el(5);
    check("005", "ISA05", !v.trim().is_empty(), v, "an id qualifier");
    let v = el(6);
    check("006", "ISA06", !v.trim().is_empty(), v, "a sender id");
    let v = el(7);
    check("007", "ISA07", !v.trim().is_empty(), v, "an id qualifier");
    let v = el(8);
    check("008", "ISA08", !v.trim().is_empty(), v, "a receiver id");
    let v = el(9);
    check("014", "ISA09", digits(v.trim(), 6), v, "a YYMMDD date");
    let v = el(10);
    check("015", "ISA10", digits(v.trim(), 4), v, "an HHMM time");
    let v = el(12);
    check("017", "ISA12", digits(v.trim(), 5), v, "a 5-digit version");
    let v = el(13);
    check("018", "ISA13", digits(v.trim(), 9), v, "a 9-digit control number");
    let v = el(14);
    check("019", "ISA14", matches!(v.trim(), "0" | "1"), v, "0 or 1");
    let v = el(15);
    check("020", "ISA15", matches!(v.trim(), "P" | "T" | "I"), v, "P, T or I");
    out
}

/// Checks the UNB elements the envelope needs; returns (CONTRL 0085 code, message) pairs.
pub(crate) fn check_unb(seg: &Segment<'_>, d: &Delimiters) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let need = |i: usize, name: &str, out: &mut Vec<(&'static str, String)>| {
        let v = seg.components(d, i);
        if v.first().is_none_or(|s| s.trim().is_empty()) {
            out.push(("13", format!("UNB {name} is missing")));
        }
    };
    need(1, "S001 (syntax identifier)", &mut out);
    need(2, "S002 (interchange sender)", &mut out);
    need(3, "S003 (interchange recipient)", &mut out);
    need(5, "0020 (interchange control reference)", &mut out);
    out
}

/// The standard of a header tag, for messages.
pub(crate) fn names(standard: Standard, level: crate::error::Level) -> &'static Names {
    use crate::error::Level::*;
    match (standard, level) {
        (Standard::X12, Transaction) => &X12_TX,
        (Standard::X12, Group) => &X12_GROUP,
        (Standard::X12, _) => &X12_IC,
        (Standard::Edifact, Transaction) => &EDI_TX,
        (Standard::Edifact, Group) => &EDI_GROUP,
        (Standard::Edifact, _) => &EDI_IC,
    }
}
