//! What a header segment says, read into the model: the interchange header (ISA, UNB: parties,
//! date, version, control number, and the repetition separator EDIFACT syntax 4 implies), group
//! headers (GS, UNG) and transaction headers (ST, UNH). Values are decoded and trimmed.

use std::borrow::Cow;

use crate::delimiters::Delimiters;
use crate::interchange::{ControlNumber, Group, Interchange, PartyId, Standard, Transaction};
use crate::segment::{Segment, decode, decode_cow};
use crate::validate;

/// An EDIFACT party (S002, S003, S006, S007): id, then its qualifier.
fn party(c: Vec<String>) -> PartyId {
    PartyId::new(c.get(1).map_or("", |s| s), c.first().map_or("", |s| s))
}

/// Reads the ISA / UNB `seg` into `ic` (read with `d`) and returns its elements of the wrong
/// shape as (note code, message). Under EDIFACT syntax 4 without UNA, `ic.delimiters` gains the
/// repetition separator the syntax implies.
pub(super) fn interchange(
    ic: &mut Interchange,
    seg: &Segment<'_>,
    d: &Delimiters,
) -> Vec<(&'static str, String)> {
    match ic.standard {
        Standard::X12 => {
            // Decoded once: every element is read here and checked below.
            let el: Vec<Cow<'_, str>> = seg.elements(d).map(|raw| decode_cow(raw, d)).collect();
            let text = |i: usize| el.get(i).map_or("", |e| e.as_ref());
            ic.sender = PartyId::new(text(5), text(6));
            ic.receiver = PartyId::new(text(7), text(8));
            ic.date = text(9).trim().to_string();
            ic.time = text(10).trim().to_string();
            ic.version = text(12).trim().to_string();
            ic.control_number = ControlNumber(text(13).trim().to_string());
            ic.ack_requested = text(14).trim() == "1";
            ic.test = text(15).trim() == "T";
            validate::check_isa(&el)
        }
        Standard::Edifact => {
            let s001 = seg.components(d, 1);
            ic.version = s001[..s001.len().min(2)].join(":");
            ic.sender = party(seg.components(d, 2));
            ic.receiver = party(seg.components(d, 3));
            let s004 = seg.components(d, 4);
            ic.date = s004.first().cloned().unwrap_or_default();
            ic.time = s004.get(1).cloned().unwrap_or_default();
            ic.control_number = ControlNumber(seg.text(d, 5).trim().to_string());
            ic.ack_requested = seg.text(d, 9).trim() == "1";
            ic.test = seg.text(d, 11).trim() == "1";
            if let Some(v) = s001.get(1)
                && v.trim() == "4"
                && d.repetition.is_none()
                && ic.una.is_none()
            {
                // Syntax version 4 repeats with `*` at level A and with IS2 (0x19) at level B.
                let repetition = if d.element == 0x1D { 0x19 } else { b'*' };
                if let Some(nd) = Delimiters::edifact(
                    d.component,
                    d.element,
                    d.decimal.unwrap_or(b'.'),
                    d.release,
                    Some(repetition),
                    d.terminator()[0],
                ) {
                    ic.delimiters = nd;
                }
            }
            validate::check_unb(seg, d)
        }
    }
}

/// Reads the GS / UNG `seg` into `group`.
pub(super) fn group(group: &mut Group, seg: &Segment<'_>, standard: Standard, d: &Delimiters) {
    group.functional_id = Some(seg.text(d, 1).trim().to_string());
    match standard {
        Standard::X12 => {
            group.application_sender = Some(PartyId::new("", &seg.text(d, 2)));
            group.application_receiver = Some(PartyId::new("", &seg.text(d, 3)));
            group.date = Some(seg.text(d, 4));
            group.time = Some(seg.text(d, 5));
            group.control_number = Some(ControlNumber(seg.text(d, 6).trim().to_string()));
            group.version = Some(seg.text(d, 8).trim().to_string());
        }
        Standard::Edifact => {
            let dt = seg.components(d, 4);
            group.application_sender = Some(party(seg.components(d, 2)));
            group.application_receiver = Some(party(seg.components(d, 3)));
            group.date = dt.first().cloned();
            group.time = dt.get(1).cloned();
            group.control_number = Some(ControlNumber(seg.text(d, 5).trim().to_string()));
            let v = seg.components(d, 7);
            group.version = (!v.is_empty()).then(|| v[..v.len().min(3)].join(":"));
        }
    }
}

/// Reads the ST / UNH `seg` into `tx`, reusing its strings' allocations where it can (a
/// counting scan reads every transaction into the same one).
pub(super) fn transaction(
    tx: &mut Transaction,
    seg: &Segment<'_>,
    standard: Standard,
    d: &Delimiters,
) {
    match standard {
        Standard::X12 => {
            let mut els = seg.elements(d).skip(1);
            decode_into(els.next().unwrap_or_default(), d, &mut tx.kind);
            decode_into(els.next().unwrap_or_default(), d, &mut tx.control_number.0);
            tx.implementation = els
                .next()
                .filter(|raw| !raw.is_empty())
                .map(|raw| decode(raw, d).trim().to_string());
            tx.message_version = None;
        }
        Standard::Edifact => {
            let s009 = seg.components(d, 2);
            tx.message_version = (s009.len() > 1).then(|| s009[1..s009.len().min(4)].join(":"));
            tx.kind = trimmed(s009.first().cloned().unwrap_or_default());
            tx.control_number = ControlNumber(trimmed(seg.text(d, 1)));
            tx.implementation = None;
        }
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
