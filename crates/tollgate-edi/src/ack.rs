//! Acknowledgements: TA1 (interchange), 997 (004010 groups), 999 (005010 groups, with
//! IK3/IK4/IK5) and CONTRL (EDIFACT, UCI/UCF/UCM, in `ack/contrl.rs`). Sender and receiver are
//! swapped, the caller supplies fresh control numbers, and an interchange that is itself an
//! acknowledgement is never acknowledged. What an acknowledgement cannot carry as received (a
//! party too long for the ISA, a UNB without sender) is listed by [`gaps`].

mod contrl;

use crate::delimiters::Delimiters;
use crate::error::{EnvelopeError, ErrorKind, Level};
use crate::interchange::{Group, Interchange, PartyId, Standard, Transaction};

/// Which acknowledgement to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckFormat {
    /// X12: TA1 when requested (ISA14), on interchange errors or without groups, plus a 997
    /// (before 005010) or 999 (005010 and later) per group. EDIFACT: CONTRL.
    Auto,
    /// X12 TA1 only.
    Ta1,
    /// X12 997 for every group.
    X997,
    /// X12 999 for every group.
    X999,
    /// EDIFACT CONTRL.
    Contrl,
}

impl std::str::FromStr for AckFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" => AckFormat::Auto,
            "ta1" => AckFormat::Ta1,
            "997" => AckFormat::X997,
            "999" => AckFormat::X999,
            "contrl" => AckFormat::Contrl,
            _ => return Err(format!("ack format `{s}` is not auto, ta1, 997, 999 or contrl")),
        })
    }
}

/// The acknowledgement of `ic` (parsed from `input`) as a new interchange with control number
/// `control_number`; `None` when `ic` is itself an acknowledgement or `format` does not fit its
/// standard.
pub fn acknowledge(
    input: &[u8],
    ic: &Interchange,
    format: AckFormat,
    control_number: u64,
) -> Option<Vec<u8>> {
    let _ = input;
    if ic.is_acknowledgement() {
        return None;
    }
    match (ic.standard, format) {
        (Standard::X12, AckFormat::Contrl)
        | (Standard::Edifact, AckFormat::Ta1)
        | (Standard::Edifact, AckFormat::X997)
        | (Standard::Edifact, AckFormat::X999) => None,
        (Standard::X12, f) => Some(x12(ic, f, control_number)),
        (Standard::Edifact, _) => Some(contrl::contrl(ic, control_number)),
    }
}

/// What the acknowledgement of `ic` in `format` cannot carry as the standard wants it, because
/// the input lacks it or it does not fit: one sentence each, naming the input's element and
/// the value received. Empty when nothing is missing (or `format` does not apply). The
/// acknowledgement is written either way; this says where it falls short.
pub fn gaps(ic: &Interchange, format: AckFormat) -> Vec<String> {
    match (ic.standard, format) {
        (Standard::X12, AckFormat::Contrl) => Vec::new(),
        (Standard::X12, _) => x12_gaps(ic),
        (Standard::Edifact, AckFormat::Auto | AckFormat::Contrl) => contrl::gaps(ic),
        (Standard::Edifact, _) => Vec::new(),
    }
}

/// The parties of an X12 acknowledgement's ISA are the input's, swapped, in fixed-width fields:
/// a party that is empty or longer than its field cannot be carried as received.
fn x12_gaps(ic: &Interchange) -> Vec<String> {
    let mut out = Vec::new();
    for (element, value, width, into) in [
        ("ISA05", &ic.sender.qualifier, 2, "ISA07"),
        ("ISA06", &ic.sender.id, 15, "ISA08"),
        ("ISA07", &ic.receiver.qualifier, 2, "ISA05"),
        ("ISA08", &ic.receiver.id, 15, "ISA06"),
    ] {
        let n = value.chars().count();
        if n == 0 {
            out.push(format!(
                "the input's {element} is empty: the acknowledgement's {into} is blank"
            ));
        } else if n > width {
            let kept: String = value.chars().take(width).collect();
            out.push(format!(
                "the input's {element} `{value}` has {n} characters: the acknowledgement's \
                 {into} holds {width}, so it carries `{kept}`"
            ));
        }
    }
    out
}

/// Writes segments with an interchange's delimiters, escaping EDIFACT values.
struct Writer {
    out: Vec<u8>,
    d: Delimiters,
    segments: usize,
}

impl Writer {
    fn new(d: Delimiters) -> Self {
        Writer { out: Vec::new(), d, segments: 0 }
    }

    fn esc(&self, value: &str) -> Vec<u8> {
        self.d.escape(value)
    }

    /// One segment; each element is a list of components.
    fn seg(&mut self, tag: &str, elements: &[&[&str]]) {
        self.out.extend_from_slice(tag.as_bytes());
        // Trailing empty elements are left out, as the standards require.
        let used =
            elements.iter().rposition(|el| el.iter().any(|c| !c.is_empty())).map_or(0, |i| i + 1);
        for el in &elements[..used] {
            self.out.push(self.d.element);
            for (i, c) in el.iter().enumerate() {
                if i > 0 {
                    self.out.push(self.d.component);
                }
                let e = self.esc(c);
                self.out.extend_from_slice(&e);
            }
        }
        self.end();
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        self.end();
    }

    fn end(&mut self) {
        self.out.extend_from_slice(self.d.terminator());
        if !matches!(self.d.terminator(), b"\n" | b"\r") {
            self.out.push(b'\n');
        }
        self.segments += 1;
    }
}

/// Current UTC date and time as (CCYYMMDD, HHMM).
pub(crate) fn now() -> (String, String) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (format!("{year:04}{month:02}{day:02}"), format!("{:02}{:02}", rem / 3600, (rem % 3600) / 60))
}

fn pad(s: &str, n: usize) -> String {
    let mut v: String = s.chars().take(n).collect();
    while v.chars().count() < n {
        v.push(' ');
    }
    v
}

fn errors_of(
    ic: &Interchange,
    level: Level,
    group: Option<usize>,
    tx: Option<usize>,
) -> impl Iterator<Item = &EnvelopeError> {
    ic.errors.iter().filter(move |e| {
        e.level == level
            && (level == Level::Interchange || e.group == group)
            && (level != Level::Transaction || e.transaction == tx)
    })
}

fn x12(ic: &Interchange, format: AckFormat, control_number: u64) -> Vec<u8> {
    let d = ic.delimiters;
    let mut w = Writer::new(d);
    let (date8, hhmm) = now();
    let cn9 = format!("{:09}", control_number % 1_000_000_000);
    let version = if ic.version.len() == 5 && ic.version.bytes().all(|b| b.is_ascii_digit()) {
        ic.version.clone()
    } else {
        "00401".to_string()
    };
    // Delimiters are bytes (often not ASCII: ISA16 is frequently 0x80 or above), so the ISA is
    // assembled as bytes; formatting them as `char` would write two bytes for one.
    // The parties are values like any other: escaped, so that no byte of theirs reads as a
    // delimiter. Bytes of the input that were not UTF-8 read as U+FFFD (EF BF BD), and any of
    // those three may be a delimiter of the interchange: such a character is replaced whole, so
    // a party keeps its length in characters and fits the field it came from.
    let (rq, rid) = (w.esc(&pad(&ic.receiver.qualifier, 2)), w.esc(&pad(&ic.receiver.id, 15)));
    let (sq, sid) = (w.esc(&pad(&ic.sender.qualifier, 2)), w.esc(&pad(&ic.sender.id, 15)));
    let blank = pad("", 10);
    let isa11 = d.repetition.map_or([b'U'], |r| [r]);
    let usage = if ic.test { "T" } else { "P" };
    let fields: [&[u8]; 16] = [
        b"00",
        blank.as_bytes(),
        b"00",
        blank.as_bytes(),
        &rq,
        &rid,
        &sq,
        &sid,
        &date8.as_bytes()[2..],
        hhmm.as_bytes(),
        &isa11,
        version.as_bytes(),
        cn9.as_bytes(),
        b"0",
        usage.as_bytes(),
        &[d.component],
    ];
    let mut isa = b"ISA".to_vec();
    for field in fields {
        isa.push(d.element);
        isa.extend_from_slice(field);
    }
    w.raw(&isa);
    let ta1_errors: Vec<&EnvelopeError> = errors_of(ic, Level::Interchange, None, None).collect();
    let with_ta1 = format == AckFormat::Ta1
        || (format == AckFormat::Auto
            && (ic.ack_requested || !ta1_errors.is_empty() || ic.groups.is_empty()));
    if with_ta1 {
        let (code, note) = match ta1_errors.first() {
            None => ("A", "000".to_string()),
            Some(_) if ta1_errors.iter().all(|e| matches!(e.standard_code(), "001" | "021")) => {
                ("E", ta1_errors[0].standard_code().to_string())
            }
            Some(e) => ("R", e.standard_code().to_string()),
        };
        let isa13 = format!("{:0>9}", ic.control_number.as_str());
        w.seg("TA1", &[&[&isa13], &[&ic.date], &[&ic.time], &[code], &[&note]]);
    }
    let mut groups = 0u64;
    if format != AckFormat::Ta1 {
        for (gi, g) in ic.groups.iter().enumerate() {
            let Some(fid) = g.functional_id.as_deref() else {
                continue;
            };
            if fid == "FA" {
                continue;
            }
            let v999 = match format {
                AckFormat::X999 => true,
                AckFormat::X997 => false,
                _ => has_999(g.version.as_deref().unwrap_or("")),
            };
            let gcn = (control_number + groups).to_string();
            groups += 1;
            x12_group(&mut w, ic, gi, g, v999, &gcn, &date8, &hhmm);
        }
    }
    w.seg("IEA", &[&[&groups.to_string()], &[&cn9]]);
    w.out
}

/// Whether `code` is a functional group acknowledge code (X12 list 716): 1-6, 10-19, 23-26.
fn is_group_code(code: &str) -> bool {
    matches!(code.parse::<u8>(), Ok(1..=6 | 10..=19 | 23..=26))
}

/// Whether a group's GS08 version (`005010X231A1`, `004010`, `4010`, …) allows a 999: only
/// when it begins with six digits at `005010` or later. Anything else gets a 997.
fn has_999(gs08: &str) -> bool {
    gs08.get(..6).is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit()) && v >= "005010")
}

#[allow(clippy::too_many_arguments)]
fn x12_group(
    w: &mut Writer,
    ic: &Interchange,
    gi: usize,
    g: &Group,
    v999: bool,
    gcn: &str,
    date8: &str,
    hhmm: &str,
) {
    let id = |p: &Option<PartyId>| p.as_ref().map_or(String::new(), |p| p.id.clone());
    let version = if v999 { "005010X231" } else { "004010" };
    w.seg(
        "GS",
        &[
            &["FA"],
            &[&id(&g.application_receiver)],
            &[&id(&g.application_sender)],
            &[date8],
            &[hhmm],
            &[gcn],
            &["X"],
            &[version],
        ],
    );
    let start = w.segments;
    if v999 {
        w.seg("ST", &[&["999"], &["0001"], &[version]]);
    } else {
        w.seg("ST", &[&["997"], &["0001"]]);
    }
    let fid = g.functional_id.clone().unwrap_or_default();
    let gcn_in = g.control_number.as_ref().map_or(String::new(), |c| c.0.clone());
    let gver = g.version.clone().unwrap_or_default();
    if v999 {
        w.seg("AK1", &[&[&fid], &[&gcn_in], &[&gver]]);
    } else {
        w.seg("AK1", &[&[&fid], &[&gcn_in]]);
    }
    let mut accepted = 0u64;
    for (ti, tx) in g.transactions.iter().enumerate() {
        let errs: Vec<&EnvelopeError> =
            errors_of(ic, Level::Transaction, Some(gi), Some(ti)).collect();
        x12_transaction(w, tx, &errs, v999);
        if errs.is_empty() {
            accepted += 1;
        }
    }
    let group_errors: Vec<&EnvelopeError> = errors_of(ic, Level::Group, Some(gi), None).collect();
    let declared = group_errors
        .iter()
        .find_map(|e| match &e.kind {
            ErrorKind::CountMismatch { declared, .. } => Some(declared.clone()),
            _ => None,
        })
        .unwrap_or_else(|| g.transaction_count.to_string());
    let received = g.transaction_count;
    // AK905-AK909 take functional group codes only (list 716); an error without one
    // rejects the group with no code.
    let coded: Vec<&str> =
        group_errors.iter().map(|e| e.standard_code()).filter(|c| is_group_code(c)).collect();
    let status = if accepted == received && group_errors.is_empty() {
        "A"
    } else if accepted == 0 || coded.len() < group_errors.len() {
        "R"
    } else if accepted == received {
        "E"
    } else {
        "P"
    };
    let mut ak9: Vec<Vec<String>> = vec![
        vec![status.into()],
        vec![declared],
        vec![received.to_string()],
        vec![accepted.to_string()],
    ];
    for code in coded.into_iter().take(5) {
        ak9.push(vec![code.to_string()]);
    }
    let ak9_refs: Vec<Vec<&str>> =
        ak9.iter().map(|v| v.iter().map(String::as_str).collect()).collect();
    let ak9_els: Vec<&[&str]> = ak9_refs.iter().map(Vec::as_slice).collect();
    w.seg("AK9", &ak9_els);
    let count = (w.segments - start + 1).to_string();
    w.seg("SE", &[&[&count], &["0001"]]);
    w.seg("GE", &[&["1"], &[gcn]]);
}

fn x12_transaction(w: &mut Writer, tx: &Transaction, errs: &[&EnvelopeError], v999: bool) {
    let imp = tx.implementation.clone().unwrap_or_default();
    if v999 && !imp.is_empty() {
        w.seg("AK2", &[&[&tx.kind], &[tx.control_number.as_str()], &[&imp]]);
    } else {
        w.seg("AK2", &[&[&tx.kind], &[tx.control_number.as_str()]]);
    }
    // A wrong SE01 or SE02 is said by the AK5/IK5 code itself (4, 3): no AK3/AK4 with code 7
    // ("invalid code value"), which would name a code list those elements do not have.
    let mut ak5: Vec<String> = vec![if errs.is_empty() { "A" } else { "R" }.to_string()];
    ak5.extend(errs.iter().take(5).map(|e| e.standard_code().to_string()));
    let refs: Vec<&str> = ak5.iter().map(String::as_str).collect();
    let els: Vec<&[&str]> = refs.iter().map(std::slice::from_ref).collect();
    w.seg(if v999 { "IK5" } else { "AK5" }, &els);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn today_is_a_plausible_date() {
        let (d, t) = now();
        assert_eq!(d.len(), 8);
        assert!(d.as_str() > "20240101");
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_999_only_from_005010() {
        for v in ["005010", "005010X231A1", "006020", "007030X1"] {
            assert!(has_999(v), "{v}");
        }
        for v in ["004010", "00204", "4010", "UNKNOWN", "", "00501", "X05010"] {
            assert!(!has_999(v), "{v}");
        }
    }

    #[test]
    fn formats_parse() {
        assert_eq!("999".parse::<AckFormat>(), Ok(AckFormat::X999));
        assert_eq!("CONTRL".parse::<AckFormat>(), Ok(AckFormat::Contrl));
        assert!("998".parse::<AckFormat>().is_err());
    }
}
