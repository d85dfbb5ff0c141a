//! The zero-allocation core: walks the segments of one interchange over `&[u8]`, given its
//! delimiters. Finding a segment is a `memchr` for the terminator's first byte; a multi-byte
//! terminator is confirmed byte by byte and a released (escaped) terminator is skipped by
//! counting the release characters in front of it (odd count = escaped, so `??'` ends a
//! segment and `???'` does not). Line breaks, spaces and tabs between a terminator and the
//! next tag are layout, not data (pyx12 reads them the same way), unless one of them is itself
//! a delimiter.

use memchr::memchr;

use crate::delimiters::Delimiters;

/// A segment tag such as `ST`, `AT7` or `UNH` (up to 3 bytes).
///
/// Invariant: `len <= 4`; `len == 4` marks a tag longer than 3 bytes (e.g. `ISAAC`), which is
/// equal to no real tag. Unused bytes are zero, so equality is one 32-bit comparison.
#[derive(Clone, Copy, Eq)]
pub struct SegmentTag {
    bytes: [u8; 3],
    len: u8,
}

impl std::hash::Hash for SegmentTag {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for SegmentTag {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl SegmentTag {
    /// A tag from 2-3 ASCII letters or digits; `None` otherwise.
    pub fn new(tag: &str) -> Option<SegmentTag> {
        let b = tag.as_bytes();
        if !(2..=3).contains(&b.len()) || !b.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        Some(Self::from_bytes(b))
    }

    pub(crate) const fn from_bytes(b: &[u8]) -> SegmentTag {
        let mut bytes = [0u8; 3];
        let mut i = 0;
        while i < b.len() && i < 3 {
            bytes[i] = b[i];
            i += 1;
        }
        SegmentTag { bytes, len: if b.len() > 3 { 4 } else { b.len() as u8 } }
    }

    #[inline]
    fn key(&self) -> u32 {
        u32::from_le_bytes([self.bytes[0], self.bytes[1], self.bytes[2], self.len])
    }

    /// The first byte of the tag (0 for an empty tag).
    #[inline]
    pub fn first(&self) -> u8 {
        self.bytes[0]
    }

    /// The second byte of the tag (0 for a shorter tag).
    #[inline]
    pub fn second(&self) -> u8 {
        self.bytes[1]
    }

    /// The tag's bytes (at most 3; a longer tag shows its first 3).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..(self.len as usize).min(3)]
    }

    /// The tag as text (lossy for non-UTF-8 bytes).
    pub fn as_str(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl std::fmt::Debug for SegmentTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentTag({})", self.as_str())
    }
}

impl std::fmt::Display for SegmentTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl std::str::FromStr for SegmentTag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SegmentTag::new(s).ok_or_else(|| format!("`{s}` is not a segment tag (2-3 letters/digits)"))
    }
}

/// One segment: its bytes without terminator and without surrounding CR/LF, where it starts in
/// the input and where the next one may start.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// The segment's bytes, tag included, terminator excluded.
    pub bytes: &'a [u8],
    /// Absolute byte offset of the segment's first byte.
    pub offset: usize,
    /// Absolute byte offset just after the terminator (end of the segment's span).
    pub end: usize,
    /// The segment tag (CR/LF of wrapped lines skipped).
    pub tag: SegmentTag,
}

impl<'a> Segment<'a> {
    /// The raw elements (element 0 is the tag), split on the element separator outside releases.
    pub fn elements(&self, d: &Delimiters) -> Split<'a> {
        Split::new(self.bytes, d.element, d.release)
    }

    /// Element `i` (1-based as in `ST01`), decoded: release characters and CR/LF removed.
    pub fn text(&self, d: &Delimiters, i: usize) -> String {
        self.elements(d).nth(i).map(|raw| decode(raw, d)).unwrap_or_default()
    }

    /// Components of element `i`, decoded.
    pub fn components(&self, d: &Delimiters, i: usize) -> Vec<String> {
        match self.elements(d).nth(i) {
            Some(raw) => Split::new(raw, d.component, d.release).map(|c| decode(c, d)).collect(),
            None => Vec::new(),
        }
    }

    /// Number of elements after the tag.
    pub fn element_count(&self, d: &Delimiters) -> usize {
        self.elements(d).count().saturating_sub(1)
    }
}

/// Splits bytes on a separator, skipping separators preceded by the release character.
#[derive(Debug, Clone)]
pub struct Split<'a> {
    rest: Option<&'a [u8]>,
    sep: u8,
    release: Option<u8>,
}

impl<'a> Split<'a> {
    /// Splits `bytes` on `sep`; `release` escapes the byte after it.
    pub fn new(bytes: &'a [u8], sep: u8, release: Option<u8>) -> Self {
        Split { rest: Some(bytes), sep, release }
    }
}

impl<'a> Iterator for Split<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        let mut i = 0;
        while i < rest.len() {
            let b = rest[i];
            if Some(b) == self.release {
                i += 2;
                continue;
            }
            if b == self.sep {
                self.rest = Some(&rest[i + 1..]);
                return Some(&rest[..i]);
            }
            i += 1;
        }
        self.rest = None;
        Some(rest)
    }
}

/// Decodes a raw value: drops CR/LF (line wrapping) and release characters, lossy UTF-8.
pub(crate) fn decode(raw: &[u8], d: &Delimiters) -> String {
    decode_cow(raw, d).into_owned()
}

/// [`decode`], borrowing `raw` when it decodes as is (no line break, release character or
/// invalid UTF-8): what is read once and dropped need not be copied.
pub(crate) fn decode_cow<'a>(raw: &'a [u8], d: &Delimiters) -> std::borrow::Cow<'a, str> {
    if is_plain(raw, d) {
        return String::from_utf8_lossy(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if Some(b) == d.release && i + 1 < raw.len() {
            out.push(raw[i + 1]);
            i += 2;
            continue;
        }
        if b != b'\r' && b != b'\n' {
            out.push(b);
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned().into()
}

/// Whether a raw value holds neither line breaks nor release characters (decodes as is).
#[inline]
pub(crate) fn is_plain(raw: &[u8], d: &Delimiters) -> bool {
    !raw.iter().any(|&b| b == b'\r' || b == b'\n' || Some(b) == d.release)
}

/// Reads the tag: bytes up to the first separator, CR/LF skipped.
#[inline(always)]
fn read_tag(bytes: &[u8], d: &Delimiters) -> SegmentTag {
    let plain = |b: u8| b != b'\r' && b != b'\n' && b != d.component;
    if bytes.len() < 4 {
        return read_tag_slow(bytes, d);
    }
    // Fast path: a 2- or 3-byte tag followed by the element separator.
    if bytes[2] == d.element && plain(bytes[0]) && plain(bytes[1]) {
        return SegmentTag { bytes: [bytes[0], bytes[1], 0], len: 2 };
    }
    if bytes[3] == d.element && plain(bytes[0]) && plain(bytes[1]) && plain(bytes[2]) {
        return SegmentTag { bytes: [bytes[0], bytes[1], bytes[2]], len: 3 };
    }
    read_tag_slow(bytes, d)
}

#[inline(never)]
fn read_tag_slow(bytes: &[u8], d: &Delimiters) -> SegmentTag {
    let mut tag = [0u8; 3];
    let mut n = 0usize;
    for &b in bytes {
        if b == d.element || b == d.component {
            break;
        }
        if b == b'\r' || b == b'\n' {
            continue;
        }
        if n == 3 {
            return SegmentTag { bytes: tag, len: 4 };
        }
        tag[n] = b;
        n += 1;
    }
    SegmentTag { bytes: tag, len: n as u8 }
}

/// Walks the segments of `input` with fixed delimiters. Yields only terminated segments from
/// [`next_segment`](Self::next_segment); the unterminated rest is left in [`rest`](Self::rest)
/// so a streaming caller can refill. The `Iterator` impl also yields a non-empty unterminated
/// tail as a last segment.
#[derive(Debug, Clone)]
pub struct SegmentScanner<'a> {
    input: &'a [u8],
    pos: usize,
    base: usize,
    delimiters: Delimiters,
    /// Bytes skipped before a segment: CR, LF, and space and tab unless they are delimiters.
    layout: [bool; 4],
}

/// The layout bytes a scanner may skip before a segment, in the order of `layout`.
const LAYOUT: [u8; 4] = [b'\n', b'\r', b' ', b'\t'];

impl<'a> SegmentScanner<'a> {
    /// A scanner over `input` whose offsets start at 0.
    pub fn new(input: &'a [u8], delimiters: Delimiters) -> Self {
        Self::with_base(input, 0, delimiters)
    }

    /// A scanner over `input`, which starts at absolute offset `base` of a larger stream.
    pub fn with_base(input: &'a [u8], base: usize, delimiters: Delimiters) -> Self {
        let layout = LAYOUT.map(|b| b == b'\n' || b == b'\r' || !delimiters.is_service(b));
        SegmentScanner { input, pos: 0, base, delimiters, layout }
    }

    /// Whether `b` is layout before a segment (never part of a tag).
    #[inline(always)]
    fn is_layout(&self, b: u8) -> bool {
        match b {
            b'\n' | b'\r' => true,
            b' ' => self.layout[2],
            b'\t' => self.layout[3],
            _ => false,
        }
    }

    /// Position (relative to `input`) where the next segment search starts.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Moves the search position (relative to `input`).
    pub fn set_position(&mut self, pos: usize) {
        self.pos = pos.min(self.input.len());
    }

    /// The bytes not yet returned as a segment.
    pub fn rest(&self) -> &'a [u8] {
        &self.input[self.pos..]
    }

    /// Finds the terminator that ends the segment starting at `from`.
    #[inline]
    fn find_terminator(&self, from: usize) -> Option<usize> {
        let t = self.delimiters.terminator();
        let input = self.input;
        let mut search = from;
        loop {
            let i = search + memchr(t[0], &input[search..])?;
            if t.len() > 1 && input.get(i..i + t.len()) != Some(t) {
                if input.len() < i + t.len() {
                    return None;
                }
                search = i + 1;
                continue;
            }
            if let Some(r) = self.delimiters.release {
                let mut k = i;
                while k > from && input[k - 1] == r {
                    k -= 1;
                }
                if (i - k) % 2 == 1 {
                    search = i + 1;
                    continue;
                }
            }
            return Some(i);
        }
    }

    /// The next terminated segment, skipping empty ones and the layout (CR, LF, spaces, tabs)
    /// between segments.
    #[inline]
    pub fn next_segment(&mut self) -> Option<Segment<'a>> {
        let input = self.input;
        loop {
            let mut start = self.pos;
            while start < input.len() && self.is_layout(input[start]) {
                start += 1;
            }
            self.pos = start;
            let t = self.find_terminator(start)?;
            let mut end = t;
            while end > start && (input[end - 1] == b'\n' || input[end - 1] == b'\r') {
                end -= 1;
            }
            self.pos = t + self.delimiters.terminator().len();
            if end == start {
                continue;
            }
            let bytes = &input[start..end];
            return Some(Segment {
                bytes,
                offset: self.base + start,
                end: self.base + self.pos,
                tag: read_tag(bytes, &self.delimiters),
            });
        }
    }

    /// The unterminated rest as a segment, if it holds anything but whitespace; consumes it.
    pub fn take_tail(&mut self) -> Option<Segment<'a>> {
        let input = self.input;
        let start = self.pos + input[self.pos..].iter().position(|b| !b.is_ascii_whitespace())?;
        let mut end = input.len();
        while end > start && input[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        self.pos = input.len();
        let bytes = &input[start..end];
        Some(Segment {
            bytes,
            offset: self.base + start,
            end: self.base + end,
            tag: read_tag(bytes, &self.delimiters),
        })
    }
}

impl<'a> Iterator for SegmentScanner<'a> {
    type Item = Segment<'a>;
    fn next(&mut self) -> Option<Segment<'a>> {
        self.next_segment().or_else(|| self.take_tail())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(input: &[u8], d: Delimiters) -> Vec<String> {
        SegmentScanner::new(input, d).map(|s| s.tag.as_str()).collect()
    }

    #[test]
    fn release_parity_decides_the_terminator() {
        let d = Delimiters::EDIFACT_LEVEL_A;
        // `??'` is a literal `?` then the terminator; `???'` is `?` plus a literal `'`.
        let input = b"AAA+x??'BBB+y???'z'CCC'";
        let segs: Vec<_> = SegmentScanner::new(input, d).collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(segs[0].text(&d, 1), "x?");
        assert_eq!(segs[1].text(&d, 1), "y?'z");
        assert_eq!(segs[2].tag.as_str(), "CCC");
    }

    #[test]
    fn multi_byte_terminator_and_line_breaks() {
        let d = Delimiters::x12(b'*', b'>', None, "…".as_bytes()).unwrap();
        let input = "ST*214*1…\nB10*1…\r\nSE*3*1…\n".as_bytes();
        assert_eq!(tags(input, d), ["ST", "B10", "SE"]);
    }

    #[test]
    fn wrapped_tag_is_read_across_the_line_break() {
        let d = Delimiters::x12(b'*', b'>', None, b"~").unwrap();
        assert_eq!(tags(b"N\n4*X~AT\r\n7*Y~", d), ["N4", "AT7"]);
        let seg = SegmentScanner::new(b"ST*21\n0*1\n305~", d).next().unwrap();
        assert_eq!(seg.text(&d, 1), "210");
        assert_eq!(seg.text(&d, 2), "1305");
    }

    #[test]
    fn unterminated_tail_is_left_for_a_refill() {
        let d = Delimiters::x12(b'*', b'>', None, b"~").unwrap();
        let mut s = SegmentScanner::new(b"ST*1~SE*2", d);
        assert!(s.next_segment().is_some());
        assert!(s.next_segment().is_none());
        assert_eq!(s.rest(), b"SE*2");
        assert_eq!(s.take_tail().unwrap().tag.as_str(), "SE");
    }

    #[test]
    fn terminators_at_every_spacing_match_a_naive_split() {
        let d = Delimiters::x12(b'*', b'>', None, b"~").unwrap();
        for step in [1usize, 7, 31, 63, 64, 65, 130] {
            let mut input = vec![b'A'; 400];
            let mut at = step;
            while at < input.len() {
                input[at] = b'~';
                at += step + 1;
            }
            let expected: Vec<usize> =
                input.iter().enumerate().filter(|(_, b)| **b == b'~').map(|(i, _)| i + 1).collect();
            let mut scanner = SegmentScanner::new(&input, d);
            let mut ends = Vec::new();
            while let Some(seg) = scanner.next_segment() {
                ends.push(seg.end);
            }
            assert_eq!(ends, expected, "step {step}");
        }
    }

    #[test]
    fn spaces_and_tabs_after_a_terminator_are_layout() {
        let d = Delimiters::x12(b'*', b'>', None, b"~").unwrap();
        assert_eq!(tags(b"ST*1~ \nGS*2~ GE*1~\t\r\nIEA*1~", d), ["ST", "GS", "GE", "IEA"]);
        let seg = SegmentScanner::new(b"~  N1*SH*A B ~", d).next().unwrap();
        assert_eq!(seg.tag.as_str(), "N1");
        // Data keeps its spaces.
        assert_eq!(seg.text(&d, 2), "A B ");
    }

    #[test]
    fn a_space_that_is_a_delimiter_is_not_layout() {
        // A space as the element separator (legal if unusual) must still split elements.
        let d = Delimiters::x12(b' ', b'>', None, b"~").unwrap();
        let segs: Vec<_> = SegmentScanner::new(b"ST 214 1~ SE 2 1~", d).collect();
        assert_eq!(segs[0].tag.as_str(), "ST");
        assert_eq!(segs[1].bytes, b" SE 2 1");
    }

    #[test]
    fn long_tags_match_no_real_tag() {
        let d = Delimiters::x12(b'*', b'>', None, b"~").unwrap();
        let seg = SegmentScanner::new(b"ISAAC*1~", d).next().unwrap();
        assert_ne!(seg.tag, SegmentTag::from_bytes(b"ISA"));
    }
}
