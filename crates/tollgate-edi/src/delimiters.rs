//! Delimiters of an interchange and how they are found: the X12 ISA (byte 3, ISA11, ISA16 and
//! the terminator after it) and the EDIFACT UNA or the level A / level B sets sniffed from UNB.

use std::ops::Range;

use crate::interchange::Standard;

/// The service characters of one interchange.
///
/// Invariant (kept by the constructors): the terminator is 1 to 4 bytes, and the element
/// separator, component separator, release character and first terminator byte all differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delimiters {
    /// Data element separator (`*` in X12, `+` in EDIFACT level A).
    pub element: u8,
    /// Component (sub-element) separator (ISA16, UNA1).
    pub component: u8,
    /// Repetition separator (ISA11 from 00402, UNA5), if the interchange uses one.
    pub repetition: Option<u8>,
    /// Release (escape) character (UNA4, `?` in level A); X12 has none.
    pub release: Option<u8>,
    /// Decimal mark (UNA3), EDIFACT only.
    pub decimal: Option<u8>,
    terminator: [u8; 4],
    terminator_len: u8,
}

impl Delimiters {
    /// The EDIFACT level A set (`: + . ? '`), the default without UNA.
    pub const EDIFACT_LEVEL_A: Delimiters = Delimiters {
        element: b'+',
        component: b':',
        repetition: None,
        release: Some(b'?'),
        decimal: Some(b'.'),
        terminator: [b'\'', 0, 0, 0],
        terminator_len: 1,
    };

    /// The EDIFACT level B set (IS3 0x1D element, IS1 0x1F component, IS4 0x1C terminator).
    pub const EDIFACT_LEVEL_B: Delimiters = Delimiters {
        element: 0x1D,
        component: 0x1F,
        repetition: None,
        release: None,
        decimal: Some(b'.'),
        terminator: [0x1C, 0, 0, 0],
        terminator_len: 1,
    };

    /// X12 delimiters; `None` when they collide or the terminator is not 1-4 bytes.
    pub fn x12(
        element: u8,
        component: u8,
        repetition: Option<u8>,
        terminator: &[u8],
    ) -> Option<Delimiters> {
        Self::build(element, component, repetition, None, None, terminator)
    }

    /// EDIFACT delimiters as a UNA would give them; `None` when they collide.
    pub fn edifact(
        component: u8,
        element: u8,
        decimal: u8,
        release: Option<u8>,
        repetition: Option<u8>,
        terminator: u8,
    ) -> Option<Delimiters> {
        Self::build(element, component, repetition, release, Some(decimal), &[terminator])
    }

    fn build(
        element: u8,
        component: u8,
        repetition: Option<u8>,
        release: Option<u8>,
        decimal: Option<u8>,
        terminator: &[u8],
    ) -> Option<Delimiters> {
        if terminator.is_empty() || terminator.len() > 4 {
            return None;
        }
        let t0 = terminator[0];
        let mut set = vec![element, component, t0];
        set.extend(release);
        set.extend(repetition);
        let mut sorted = set.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != set.len() {
            return None;
        }
        let mut t = [0u8; 4];
        t[..terminator.len()].copy_from_slice(terminator);
        Some(Delimiters {
            element,
            component,
            repetition,
            release,
            decimal,
            terminator: t,
            terminator_len: terminator.len() as u8,
        })
    }

    /// The segment terminator (1 to 4 bytes, e.g. `~`, `'` or the UTF-8 of `…`).
    pub fn terminator(&self) -> &[u8] {
        &self.terminator[..self.terminator_len as usize]
    }

    /// `value` as it is written in a segment: each service character behind the release
    /// character (EDIFACT). Without one (X12, EDIFACT level B) a character that is, or whose
    /// UTF-8 holds, a service byte is written as one [`substitute`](Self::substitute): the whole
    /// character, never one byte of it (U+FFFD, which a byte that is not UTF-8 reads as, is
    /// EF BF BD, and any of those may be a delimiter), and never a space, which reads as
    /// padding. So the value reads back with exactly as many characters, none of them blank:
    /// an ISA06 that fills its 15 characters still fits the acknowledgement's ISA08.
    pub(crate) fn escape(&self, value: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(value.len());
        if let Some(r) = self.release {
            for &b in value.as_bytes() {
                if self.is_service(b) {
                    out.push(r);
                }
                out.push(b);
            }
            return out;
        }
        let substitute = self.substitute();
        let mut utf8 = [0u8; 4];
        for c in value.chars() {
            let bytes = c.encode_utf8(&mut utf8).as_bytes();
            if bytes.iter().any(|&b| self.is_service(b)) {
                out.push(substitute);
            } else {
                out.extend_from_slice(bytes);
            }
        }
        out
    }

    /// What [`escape`](Self::escape) writes for a character it cannot write without a release
    /// character: the first of `?`, `.`, `-`, `/`, `(` (all in the X12 basic and the UNOA
    /// character sets) that is not a service character. Without a release there are at most
    /// four service characters, so one of the five is always free.
    fn substitute(&self) -> u8 {
        b"?.-/(".iter().copied().find(|&b| !self.is_service(b)).unwrap_or(b'?')
    }

    /// Whether `b` is a service character (may need a release character in front of it).
    pub fn is_service(&self, b: u8) -> bool {
        b == self.element
            || b == self.component
            || b == self.terminator[0]
            || Some(b) == self.release
            || Some(b) == self.repetition
    }
}

/// Where an interchange starts and how to read it, as found by [`sniff`].
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub standard: Standard,
    pub delimiters: Delimiters,
    /// The UNA service string advice, relative to the sniffed buffer.
    pub una: Option<Range<usize>>,
    /// Where the ISA / UNB segment starts, relative to the sniffed buffer.
    pub first_segment: usize,
}

/// The result of looking at bytes that should start an interchange.
#[derive(Debug)]
pub(crate) enum Sniff {
    Found(Header),
    /// More bytes are needed to decide (only when not at end of input).
    NeedMore,
    /// Not an interchange start; the message says why.
    Invalid(String),
}

/// An ISA is at most this long, CR/LF from line wrapping included.
const MAX_ISA_BYTES: usize = 512;

/// Looks at `buf`, which starts with `ISA`, `UNA` or `UNB`, and finds the delimiters.
pub(crate) fn sniff(buf: &[u8], eof: bool) -> Sniff {
    if buf.starts_with(b"ISA") {
        sniff_x12(buf, eof)
    } else if buf.starts_with(b"UNA") || buf.starts_with(b"UNB") {
        sniff_edifact(buf, eof)
    } else if buf.len() < 3 && !eof {
        Sniff::NeedMore
    } else {
        Sniff::Invalid(format!(
            "expected ISA, UNA or UNB, found `{}`",
            show(&buf[..buf.len().min(20)])
        ))
    }
}

fn need(eof: bool, what: &str) -> Sniff {
    if eof { Sniff::Invalid(what.to_string()) } else { Sniff::NeedMore }
}

fn is_line_break(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// X12: element separator at byte 3, then 16 elements (CR/LF from wrapping skipped, fields
/// need not be padded), ISA16 is the component separator and the terminator follows it.
fn sniff_x12(buf: &[u8], eof: bool) -> Sniff {
    let Some(&element) = buf.get(3) else {
        return need(eof, "file ends inside the ISA segment");
    };
    if element.is_ascii_alphanumeric() || element == b' ' || is_line_break(element) {
        return Sniff::Invalid(format!(
            "`ISA` is followed by `{}`, which cannot be an element separator",
            show(&[element])
        ));
    }
    let mut elements: Vec<Vec<u8>> = Vec::with_capacity(16);
    let mut current = Vec::new();
    let mut i = 4;
    while elements.len() < 15 {
        let Some(&b) = buf.get(i) else {
            return need(eof, "file ends inside the ISA segment");
        };
        if i > MAX_ISA_BYTES {
            return Sniff::Invalid(format!(
                "ISA has only {} of 16 elements in its first {MAX_ISA_BYTES} bytes",
                elements.len()
            ));
        }
        if b == element {
            elements.push(std::mem::take(&mut current));
        } else if !is_line_break(b) {
            current.push(b);
        }
        i += 1;
    }
    while buf.get(i).is_some_and(|&b| is_line_break(b)) {
        i += 1;
    }
    let Some(&component) = buf.get(i) else {
        return need(eof, "file ends before ISA16 (component separator)");
    };
    i += 1;
    let Some(&(mut t0)) = buf.get(i) else {
        return need(eof, "file ends before the segment terminator after ISA16");
    };
    if is_line_break(t0) {
        // A line break right after ISA16 is the terminator, unless the file is wrapped there:
        // then the line break is followed by the real terminator and the next segment's tag.
        let mut j = i;
        while buf.get(j).is_some_and(|&b| is_line_break(b)) {
            j += 1;
        }
        match (buf.get(j), buf.get(j + 1)) {
            (Some(&t), Some(&next))
                if !t.is_ascii_alphanumeric()
                    && !t.is_ascii_whitespace()
                    && (next.is_ascii_alphanumeric() || next >= 0x80 || is_line_break(next)) =>
            {
                i = j;
                t0 = t;
            }
            (Some(_), Some(_)) => {}
            _ if !eof => return Sniff::NeedMore,
            _ => {}
        }
    }
    let len = match t0 {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    };
    if buf.len() < i + len {
        return need(eof, "file ends inside the segment terminator");
    }
    let mut terminator = &buf[i..i + len];
    if !terminator[1..].iter().all(|b| (0x80..=0xBF).contains(b)) {
        terminator = &buf[i..i + 1];
    }
    if component.is_ascii_alphanumeric() || component == b' ' {
        return Sniff::Invalid(format!(
            "ISA16 (component separator) is `{}`, which cannot be a delimiter",
            show(&[component])
        ));
    }
    if t0.is_ascii_alphanumeric() || t0 == b' ' {
        return Sniff::Invalid(format!(
            "the segment terminator after ISA16 is `{}`, which cannot be a delimiter",
            show(&[t0])
        ));
    }
    let version = elements.get(11).map(|v| trim(v)).unwrap_or(b"");
    let isa11 = elements.get(10).map(|v| v.as_slice()).unwrap_or(b"");
    let repetition = match isa11 {
        [r] if version >= b"00402".as_slice()
            && !r.is_ascii_alphanumeric()
            && *r != b' '
            && *r != element
            && *r != component
            && *r != t0 =>
        {
            Some(*r)
        }
        _ => None,
    };
    match Delimiters::x12(element, component, repetition, terminator) {
        Some(delimiters) => Sniff::Found(Header {
            standard: Standard::X12,
            delimiters,
            una: None,
            first_segment: 0,
        }),
        None => Sniff::Invalid(format!(
            "ISA delimiters collide: element `{}`, component `{}`, terminator `{}`",
            show(&[element]),
            show(&[component]),
            show(terminator)
        )),
    }
}

/// EDIFACT: UNA when present, else level A (`+` after UNB) or level B (0x1D after UNB).
fn sniff_edifact(buf: &[u8], eof: bool) -> Sniff {
    let mut delimiters = None;
    let mut una = None;
    let mut i = 0;
    if buf.starts_with(b"UNA") {
        if buf.len() < 9 {
            return need(eof, "file ends inside the UNA service string advice");
        }
        let u = &buf[3..9];
        // A letter or digit as a service character would split tags and values (a release
        // `E` would release the separator after `UNE`), as would a blank separator.
        for (at, what) in [(0, "UNA1 (component separator)"), (1, "UNA2 (element separator)")]
            .into_iter()
            .chain([(3, "UNA4 (release character)"), (5, "UNA6 (segment terminator)")])
        {
            let b = u[at];
            if b.is_ascii_alphanumeric() || (b == b' ' && at != 3) {
                return Sniff::Invalid(format!(
                    "UNA `{}`: {what} is `{}`, which cannot be a delimiter",
                    show(u),
                    show(&[b])
                ));
            }
        }
        let opt = |b: u8| if b == b' ' { None } else { Some(b) };
        // A UNA5 that collides with another service character, or is a letter or digit, is
        // not a repetition separator (syntax versions before 4 reserve the position; some
        // partners put data there).
        let repetition = opt(u[4]).filter(|b| !b.is_ascii_alphanumeric());
        let with_repetition = Delimiters::edifact(u[0], u[1], u[2], opt(u[3]), repetition, u[5]);
        match with_repetition
            .or_else(|| Delimiters::edifact(u[0], u[1], u[2], opt(u[3]), None, u[5]))
        {
            Some(d) => delimiters = Some(d),
            None => {
                return Sniff::Invalid(format!(
                    "UNA `{}` declares colliding service characters",
                    show(u)
                ));
            }
        }
        una = Some(0..9);
        i = 9;
        while buf.get(i).is_some_and(|&b| is_line_break(b) || b == b' ' || b == b'\t') {
            i += 1;
        }
    }
    if buf.len() < i + 4 {
        return need(eof, "file ends before the UNB segment");
    }
    if &buf[i..i + 3] != b"UNB" {
        // The message quotes 10 bytes: wait for them, so it reads the same however the input
        // is chunked (the streaming reader and `parse` must agree byte for byte).
        if !eof && buf.len() < i + 10 {
            return Sniff::NeedMore;
        }
        return Sniff::Invalid(format!(
            "UNA is followed by `{}`, not by UNB",
            show(&buf[i..buf.len().min(i + 10)])
        ));
    }
    let sep = buf[i + 3];
    let delimiters = match delimiters {
        Some(d) if d.element == sep => d,
        Some(d) => {
            return Sniff::Invalid(format!(
                "UNB uses `{}` as element separator but UNA declares `{}`",
                show(&[sep]),
                show(&[d.element])
            ));
        }
        None if sep == b'+' => Delimiters::EDIFACT_LEVEL_A,
        None if sep == 0x1D => Delimiters::EDIFACT_LEVEL_B,
        None => {
            return Sniff::Invalid(format!(
                "UNB uses the non-standard separator `{}` without a UNA segment",
                show(&[sep])
            ));
        }
    };
    Sniff::Found(Header { standard: Standard::Edifact, delimiters, una, first_segment: i })
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| *b != b' ').unwrap_or(v.len());
    let end = v.iter().rposition(|b| *b != b' ').map_or(start, |e| e + 1);
    &v[start..end]
}

/// Renders bytes for an error message: printable ASCII as is, the rest as `\xNN`.
pub(crate) fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\x{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_delimiters_are_refused() {
        assert!(Delimiters::x12(b'*', b'*', None, b"~").is_none());
        assert!(Delimiters::x12(b'*', b':', Some(b'~'), b"~").is_none());
        assert!(Delimiters::x12(b'*', b':', None, b"").is_none());
        assert!(Delimiters::x12(b'*', b':', Some(b'^'), b"~").is_some());
    }

    #[test]
    fn level_b_is_sniffed_from_unb() {
        let Sniff::Found(h) = sniff(b"UNB\x1dUNOB\x1f3\x1dX\x1c", true) else {
            panic!("not found")
        };
        assert_eq!(h.delimiters, Delimiters::EDIFACT_LEVEL_B);
    }

    #[test]
    fn una_with_a_letter_or_blank_delimiter_is_refused() {
        for (una, named) in [
            (&b"UNA=*.E ~UNB*UNOC=3~"[..], "UNA4 (release character) is `E`"),
            (b"UNA:+.? XUNB+UNOC:3X", "UNA6 (segment terminator) is `X`"),
            (b"UNA: .? 'UNB UNOC:3'", "UNA2 (element separator) is ` `"),
            (b"UNA1+.? 'UNB+UNOC13'", "UNA1 (component separator) is `1`"),
        ] {
            match sniff(una, true) {
                Sniff::Invalid(m) => assert!(m.contains(named), "{m}"),
                other => panic!("{} is read: {other:?}", show(una)),
            }
        }
        let Sniff::Found(h) = sniff(b"UNA:+.?R'UNB+UNOC:3'", true) else { panic!() };
        assert_eq!((h.delimiters.release, h.delimiters.repetition), (Some(b'?'), None));
    }

    #[test]
    fn una5_colliding_with_a_delimiter_is_ignored() {
        let Sniff::Found(h) = sniff(b"UNA:+.?:'UNB+UNOA:3+S+R+240101:1200+1'", true) else {
            panic!("not found")
        };
        assert_eq!(h.delimiters.repetition, None);
        assert_eq!(h.delimiters.component, b':');
        assert!(matches!(sniff(b"UNA::.? 'UNB:UNOA", true), Sniff::Invalid(_)));
    }

    #[test]
    fn escaping_without_a_release_replaces_whole_characters() {
        // 0xBD ends the UTF-8 of U+FFFD and of `½` (C2 BD).
        let d = Delimiters::x12(0xBD, b'>', Some(b'^'), b"~").unwrap();
        assert_eq!(d.escape("A\u{FFFD}½>^~é"), b"A?????\xC3\xA9".to_vec());
        // `?` itself a delimiter: the next free substitute.
        let d = Delimiters::x12(b'?', b'.', None, b"~").unwrap();
        assert_eq!(d.escape("A?B.C~"), b"A-B-C-".to_vec());
        // With a release character every byte is kept, released.
        assert_eq!(Delimiters::EDIFACT_LEVEL_A.escape("a+b?"), b"a?+b??".to_vec());
    }

    #[test]
    fn isaac_is_not_an_interchange() {
        assert!(matches!(sniff(b"ISAAC NEWTON~", true), Sniff::Invalid(_)));
    }
}
