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
    /// How the trailer's reference is compared with the header's.
    pub reference: Reference,
}

/// How a trailer's control reference is compared with its header's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reference {
    /// A numeric data element (ISA13/IEA02, GS06/GE02): `1` and `000000001` are equal.
    Numeric,
    /// An identifier (ST02/SE02, UNH/UNT 0062, UNG/UNE 0048, UNB/UNZ 0020): equal strings only,
    /// so `000121` and `0000121` differ.
    Text,
}

pub(crate) const X12_TX: Names = Names {
    count: "SE01",
    trailer_ref: "SE02",
    header_ref: "ST02",
    header: "ST",
    trailer: "SE",
    reference: Reference::Text,
};
pub(crate) const X12_GROUP: Names = Names {
    count: "GE01",
    trailer_ref: "GE02",
    header_ref: "GS06",
    header: "GS",
    trailer: "GE",
    reference: Reference::Numeric,
};
pub(crate) const X12_IC: Names = Names {
    count: "IEA01",
    trailer_ref: "IEA02",
    header_ref: "ISA13",
    header: "ISA",
    trailer: "IEA",
    reference: Reference::Numeric,
};
pub(crate) const EDI_TX: Names = Names {
    count: "UNT 0074",
    trailer_ref: "UNT 0062",
    header_ref: "UNH 0062",
    header: "UNH",
    trailer: "UNT",
    reference: Reference::Text,
};
pub(crate) const EDI_GROUP: Names = Names {
    count: "UNE 0060",
    trailer_ref: "UNE 0048",
    header_ref: "UNG 0048",
    header: "UNG",
    trailer: "UNE",
    reference: Reference::Text,
};
pub(crate) const EDI_IC: Names = Names {
    count: "UNZ 0036",
    trailer_ref: "UNZ 0020",
    header_ref: "UNB 0020",
    header: "UNB",
    trailer: "UNZ",
    reference: Reference::Text,
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
    let same = match names.reference {
        Reference::Numeric => header_ref.matches(&trailer_ref),
        Reference::Text => header_ref.as_str() == trailer_ref.trim(),
    };
    if !same {
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

/// The value of the ASCII digits `s` (at most 4 of them).
fn number(s: &str) -> u32 {
    s.bytes().fold(0, |n, b| n * 10 + u32::from(b - b'0'))
}

/// A real calendar date as YYMMDD. The century is unknown, so 29 February is a date in every
/// year divisible by 4 (2000 was a leap year; 1900 is out of X12's range).
fn is_yymmdd(s: &str) -> bool {
    if !digits(s, 6) {
        return false;
    }
    let (yy, mm, dd) = (number(&s[0..2]), number(&s[2..4]), number(&s[4..6]));
    let days = match mm {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if yy % 4 == 0 => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&dd)
}

/// A real time of day as HHMM (00:00 to 23:59).
fn is_hhmm(s: &str) -> bool {
    digits(s, 4) && number(&s[0..2]) < 24 && number(&s[2..4]) < 60
}

/// Checks the fixed-format ISA elements (`el`: the segment's elements, decoded, the tag
/// first); returns (TA1 note code, message) pairs.
///
/// Each element is checked for its length and character class as X12.5 defines it. Padding is
/// layout: a value shorter than its fixed width, or longer only by trailing spaces, is not
/// reported (many partners do not pad); one with more significant characters than the width,
/// or with a control character, is.
pub(crate) fn check_isa(el: &[std::borrow::Cow<'_, str>]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let count = el.len().saturating_sub(1);
    if count != 16 {
        out.push(("022", format!("ISA has {count} elements, 16 are required")));
    }
    let el = |i: usize| el.get(i).map_or("", |e| e.as_ref());
    let mut check = |note: &'static str, name: &str, problem: Option<String>, value: &str| {
        if let Some(problem) = problem {
            out.push((note, format!("{name} `{}` {problem}", show(value.as_bytes()))));
        }
    };
    for (i, name, note) in
        [(1, "ISA01", "010"), (3, "ISA03", "012"), (5, "ISA05", "005"), (7, "ISA07", "007")]
    {
        let v = el(i);
        check(note, name, id_problem(v), v);
    }
    for (i, name, note, width, required) in [
        (2, "ISA02", "011", 10, false),
        (4, "ISA04", "013", 10, false),
        (6, "ISA06", "006", 15, true),
        (8, "ISA08", "008", 15, true),
    ] {
        let v = el(i);
        check(note, name, an_problem(v, width, required), v);
    }
    let v = el(9);
    check("014", "ISA09", (!is_yymmdd(v.trim())).then(|| "is not a YYMMDD date".into()), v);
    let v = el(10);
    check("015", "ISA10", (!is_hhmm(v.trim())).then(|| "is not an HHMM time".into()), v);
    let v = el(11);
    // `U`, or from 00402 the repetition separator, which may be any byte a delimiter may be.
    let one = v.chars().count() == 1 && v != " ";
    let problem = (!one).then(|| "is not one character (`U` or the repetition separator)".into());
    check("016", "ISA11", problem, v);
    let v = el(12);
    check("017", "ISA12", (!digits(v.trim(), 5)).then(|| "is not a 5-digit version".into()), v);
    let v = el(13);
    let problem = (!digits(v.trim(), 9)).then(|| "is not a 9-digit control number".into());
    check("018", "ISA13", problem, v);
    let v = el(14);
    check("019", "ISA14", (!matches!(v.trim(), "0" | "1")).then(|| "is not 0 or 1".into()), v);
    let v = el(15);
    let problem = (!matches!(v.trim(), "P" | "T" | "I")).then(|| "is not P, T or I".into());
    check("020", "ISA15", problem, v);
    let v = el(16);
    let problem = (v.chars().count() != 1).then(|| "is not one component separator".into());
    check("027", "ISA16", problem, v);
    out
}

/// Whether `s` holds a control character, which no X12 character set has.
fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// What is wrong with an ISA identifier element (ID 2/2: ISA01, 03, 05, 07), if anything:
/// its code is two upper-case letters or digits.
fn id_problem(v: &str) -> Option<String> {
    let t = v.trim();
    let ok = t.len() == 2 && t.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
    (!ok).then(|| "is not a code of 2 upper-case letters or digits".to_string())
}

/// What is wrong with an ISA string element (AN `width`/`width`), if anything: more
/// significant characters (trailing spaces are padding) than `width`, a control character, or
/// nothing at all when `required`.
fn an_problem(v: &str, width: usize, required: bool) -> Option<String> {
    let significant = v.trim_end_matches(' ').chars().count();
    if required && v.trim().is_empty() {
        Some("is empty".to_string())
    } else if significant > width {
        Some(format!("has {significant} characters, more than the {width} of its field"))
    } else if has_control(v) {
        Some("holds a control character".to_string())
    } else {
        None
    }
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
    let s001 = seg.components(d, 1);
    if s001.first().is_some_and(|id| !id.trim().is_empty())
        && s001.get(1).is_none_or(|v| v.trim().is_empty())
    {
        out.push(("13", "UNB S001 0002 (syntax version number) is missing".to_string()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isa_dates_and_times_are_real_ones() {
        for ok in ["261130", "240229", "000229", "991231", "260131"] {
            assert!(is_yymmdd(ok), "{ok}");
        }
        for bad in ["261131", "250229", "261301", "260000", "260100", "2611300", "26113a", ""] {
            assert!(!is_yymmdd(bad), "{bad}");
        }
        for ok in ["0000", "2359", "1200"] {
            assert!(is_hhmm(ok), "{ok}");
        }
        for bad in ["3339", "2400", "1260", "123", "12:0"] {
            assert!(!is_hhmm(bad), "{bad}");
        }
    }
}
