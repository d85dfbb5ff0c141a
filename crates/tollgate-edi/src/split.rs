//! Splitting: rebuilds one interchange into a new valid interchange holding a subset of its
//! transactions, with a new control number and recomputed group and interchange counts. The
//! gateway uses it to admit part of a batch. Transactions are copied byte for byte.
//!
//! Invariant: every piece is a well-formed envelope. A segment that would be copied without
//! its terminator (a truncated interchange) refuses the split, since the rebuilt trailer
//! would otherwise be glued onto it as data.

use std::collections::BTreeSet;
use std::ops::Range;

use crate::delimiters::{Delimiters, show};
use crate::interchange::{Interchange, Standard};
use crate::segment::Split;

/// Why an interchange cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A segment that would be copied has no terminator: the interchange is truncated there.
    #[error(
        "segment `{segment}` at byte {offset} has no segment terminator (the interchange is \
         truncated); it cannot be split into well-formed interchanges"
    )]
    Truncated {
        /// The start of the unterminated segment, as received (at most 40 bytes, escaped).
        segment: String,
        /// Its byte offset in the input.
        offset: usize,
    },
}

/// Checks that the bytes at `span` end with a segment terminator.
fn terminated(input: &[u8], span: &Range<usize>, d: &Delimiters) -> Result<(), SplitError> {
    let bytes = input.get(span.clone()).unwrap_or(&[]);
    let t = d.terminator();
    let trimmed = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
    if bytes.is_empty() || trimmed.ends_with(t) || bytes.ends_with(t) {
        return Ok(());
    }
    // The unterminated segment starts after the last terminator of the span.
    let start = bytes.windows(t.len()).rposition(|w| w == t).map_or(0, |i| i + t.len());
    let rest = &bytes[start..];
    let lead = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let segment = &rest[lead..];
    Err(SplitError::Truncated {
        segment: show(&segment[..segment.len().min(40)]),
        offset: span.start + start + lead,
    })
}

/// What splitting needs of an interchange, and nothing more: its delimiters, the spans of its
/// UNA, header and group headers, its groups' control numbers and its transactions' spans.
/// Every span is relative to the start of the interchange, so an outline kept from parsing a
/// whole file applies to the interchange's bytes cut out of it (see [`split_outline`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outline {
    /// X12 or EDIFACT.
    pub standard: Standard,
    /// The interchange's delimiters.
    pub delimiters: Delimiters,
    /// The UNA service string advice, if any.
    pub una: Option<Range<usize>>,
    /// The ISA / UNB segment (terminator included).
    pub header: Range<usize>,
    /// The groups, in order (EDIFACT messages without UNG sit in one implicit group).
    pub groups: Vec<OutlineGroup>,
}

/// One group of an [`Outline`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlineGroup {
    /// The GS / UNG segment; empty for the implicit EDIFACT group.
    pub header: Range<usize>,
    /// GS06 / UNG 0048, repeated in the rebuilt trailer.
    pub control_number: Option<String>,
    /// The transactions' spans, header through trailer terminator.
    pub transactions: Vec<Range<usize>>,
}

impl Outline {
    /// The outline of a parsed interchange, relative to `ic.span.start`.
    pub fn of(ic: &Interchange) -> Outline {
        let base = ic.span.start;
        let rel = |r: &Range<usize>| r.start.saturating_sub(base)..r.end.saturating_sub(base);
        Outline {
            standard: ic.standard,
            delimiters: ic.delimiters,
            una: ic.una.as_ref().map(rel),
            header: rel(&ic.header_span),
            groups: ic
                .groups
                .iter()
                .map(|g| OutlineGroup {
                    header: if g.header_span.is_empty() { 0..0 } else { rel(&g.header_span) },
                    control_number: g.control_number.as_ref().map(|c| c.as_str().to_owned()),
                    transactions: g.transactions.iter().map(|t| rel(&t.span)).collect(),
                })
                .collect(),
        }
    }

    /// The number of transactions in all groups.
    pub fn transactions(&self) -> usize {
        self.groups.iter().map(|g| g.transactions.len()).sum()
    }
}

/// One new interchange holding the transactions at indices `keep` of `ic.transactions()`
/// (out-of-range indices are ignored), with interchange control number `control_number`
/// (X12: left-padded with zeros to 9 digits). Groups without a kept transaction are left out.
///
/// # Errors
/// [`SplitError::Truncated`] when a segment to be copied has no terminator.
pub fn split(
    input: &[u8],
    ic: &Interchange,
    keep: &[usize],
    control_number: &str,
) -> Result<Vec<u8>, SplitError> {
    let bytes = input.get(ic.span.clone()).unwrap_or(&[]);
    match split_outline(bytes, &Outline::of(ic), keep, control_number) {
        Ok((out, _)) => Ok(out),
        Err(SplitError::Truncated { segment, offset }) => {
            Err(SplitError::Truncated { segment, offset: offset + ic.span.start })
        }
    }
}

/// [`split`] without parsing: `interchange` is the interchange's bytes alone and `outline` is
/// what a parse of it kept ([`Outline::of`]). Returns the new interchange and its own outline,
/// so a piece can be split again without being parsed. Error offsets are relative to
/// `interchange`.
///
/// # Errors
/// [`SplitError::Truncated`] when a segment to be copied has no terminator.
pub fn split_outline(
    interchange: &[u8],
    outline: &Outline,
    keep: &[usize],
    control_number: &str,
) -> Result<(Vec<u8>, Outline), SplitError> {
    let input = interchange;
    let keep: BTreeSet<usize> = keep.iter().copied().collect();
    let d = outline.delimiters;
    terminated(input, &outline.header, &d)?;
    let mut out = Vec::new();
    let mut piece = Outline {
        standard: outline.standard,
        delimiters: d,
        una: None,
        header: 0..0,
        groups: Vec::new(),
    };
    let cn = match outline.standard {
        Standard::X12 => format!("{control_number:0>9}"),
        Standard::Edifact => control_number.to_string(),
    };
    if let Some(una) = &outline.una
        && let Some(bytes) = input.get(una.clone())
    {
        out.extend_from_slice(bytes);
        piece.una = Some(0..out.len());
        out.push(b'\n');
    }
    let header =
        rebuild_header(segment_bytes(input, &outline.header, &d), outline.standard, &d, &cn);
    piece.header = push_segment(&mut out, &header, &d);
    let mut index = 0usize;
    let mut groups = 0u64;
    let mut messages = 0u64;
    for g in &outline.groups {
        let kept: Vec<_> = g
            .transactions
            .iter()
            .enumerate()
            .filter(|(i, _)| keep.contains(&(index + i)))
            .map(|(_, t)| t)
            .collect();
        index += g.transactions.len();
        if kept.is_empty() {
            continue;
        }
        let mut group = OutlineGroup {
            header: 0..0,
            control_number: g.control_number.clone(),
            transactions: Vec::with_capacity(kept.len()),
        };
        let explicit = !g.header.is_empty();
        let mut reference = None;
        if explicit {
            terminated(input, &g.header, &d)?;
            groups += 1;
            let gs = strip_line_breaks(segment_bytes(input, &g.header, &d), &d);
            reference = reference_as_written(&gs, outline.standard, &d);
            group.header = push_segment(&mut out, &gs, &d);
        }
        for span in &kept {
            terminated(input, span, &d)?;
            if let Some(bytes) = input.get((*span).clone()) {
                let at = out.len();
                out.extend_from_slice(bytes);
                group.transactions.push(at..out.len());
                if !matches!(d.terminator(), b"\n" | b"\r") {
                    out.push(b'\n');
                }
                messages += 1;
            }
        }
        if explicit {
            let gcn =
                reference.unwrap_or_else(|| d.escape(g.control_number.as_deref().unwrap_or("")));
            let trailer = match outline.standard {
                Standard::X12 => "GE",
                Standard::Edifact => "UNE",
            };
            let seg = join(trailer, &[kept.len().to_string().as_bytes(), &gcn], &d);
            push_segment(&mut out, &seg, &d);
        }
        piece.groups.push(group);
    }
    let (trailer, count) = match outline.standard {
        Standard::X12 => ("IEA", groups),
        Standard::Edifact if groups > 0 => ("UNZ", groups),
        Standard::Edifact => ("UNZ", messages),
    };
    let seg = join(trailer, &[count.to_string().as_bytes(), &d.escape(&cn)], &d);
    push_segment(&mut out, &seg, &d);
    Ok((out, piece))
}

/// The group header's reference (GS06 / UNG 0048) as written in `header`, for the rebuilt
/// trailer to repeat byte for byte: escaping the value read would write a component separator
/// in it as a substitute, and the trailer would no longer match its header.
fn reference_as_written(header: &[u8], standard: Standard, d: &Delimiters) -> Option<Vec<u8>> {
    let index = match standard {
        Standard::X12 => 6,
        Standard::Edifact => 5,
    };
    Split::new(header, d.element, d.release).nth(index).map(<[u8]>::to_vec)
}

/// The bytes of a segment span without its terminator.
fn segment_bytes<'a>(input: &'a [u8], span: &Range<usize>, d: &Delimiters) -> &'a [u8] {
    let bytes = input.get(span.clone()).unwrap_or(&[]);
    bytes.strip_suffix(d.terminator()).unwrap_or(bytes)
}

/// A header segment without the line breaks a wrapped file put in it. A released line break
/// stays, and so does every line break when removing them would join the pieces of a
/// multi-byte terminator: either would read differently in the piece than in the source.
fn strip_line_breaks(bytes: &[u8], d: &Delimiters) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut released = false;
    for &b in bytes {
        if released || !matches!(b, b'\r' | b'\n') {
            out.push(b);
        }
        released = !released && Some(b) == d.release;
    }
    let t = d.terminator();
    if out.windows(t.len()).any(|w| w == t) { bytes.to_vec() } else { out }
}

/// The piece's header: the source's ISA / UNB (line breaks of wrapped files removed) with the
/// new control number in ISA13 / UNB 0020. A header cut short gets the elements it lacks, so
/// that the piece is read with the source's delimiters and its trailer's reference matches:
/// UNB up to 0020 (the ones between left empty, as they were); ISA up to all 16, with ISA11
/// the repetition separator (or `U`), ISA16 the component separator and the others empty, so
/// each element the source lacked is reported in the piece as it was in the source. ISA16 is
/// always the component separator the source was read with: an empty or misplaced one in the
/// source would make the piece's delimiters differ from its source's.
fn rebuild_header(bytes: &[u8], standard: Standard, d: &Delimiters, cn: &str) -> Vec<u8> {
    let clean = strip_line_breaks(bytes, d);
    let mut elements: Vec<Vec<u8>> =
        Split::new(&clean, d.element, d.release).map(<[u8]>::to_vec).collect();
    let (index, at_least) = match standard {
        Standard::X12 => (13, 17),
        Standard::Edifact => (5, 6),
    };
    for i in elements.len()..at_least {
        elements.push(match (standard, i) {
            (Standard::X12, 11) => vec![d.repetition.unwrap_or(b'U')],
            (Standard::X12, 16) => vec![d.component],
            _ => Vec::new(),
        });
    }
    elements[index] = d.escape(cn);
    if standard == Standard::X12 {
        elements[16] = vec![d.component];
    }
    elements.join(&d.element)
}

fn join(tag: &str, elements: &[&[u8]], d: &Delimiters) -> Vec<u8> {
    let mut out = tag.as_bytes().to_vec();
    for e in elements {
        out.push(d.element);
        out.extend_from_slice(e);
    }
    out
}

/// Appends a segment and its terminator; returns its span in `out` (terminator included).
fn push_segment(out: &mut Vec<u8>, seg: &[u8], d: &Delimiters) -> Range<usize> {
    let at = out.len();
    out.extend_from_slice(seg);
    out.extend_from_slice(d.terminator());
    let span = at..out.len();
    if !matches!(d.terminator(), b"\n" | b"\r") {
        out.push(b'\n');
    }
    span
}
