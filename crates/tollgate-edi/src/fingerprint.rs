//! Transaction fingerprints: what a transaction says, apart from the envelope it came in.
//!
//! A sender with a bug resends the same updates under fresh control numbers, so the
//! interchange key (sender, receiver, ISA13) does not catch the copies. A [`Fingerprint`] is
//! computed over a transaction's segments (X12 ST..SE, EDIFACT UNH..UNT) leaving out only the
//! control references (ST02 and SE02; UNH and UNT 0062), so a copy has the fingerprint of its
//! original whatever its envelope, delimiters or line layout.
//!
//! Invariants:
//! - **Content, not layout.** Each segment is rewritten in one canonical form before hashing:
//!   the element, component and repetition separators become fixed control bytes, CR/LF of
//!   wrapped lines are dropped, released characters become plain data, and a data byte that
//!   equals a canonical control byte is escaped. So different delimiters or line breaks give
//!   the same fingerprint, and no two different element lists share an encoding.
//! - **Hard to forge.** The hash is BLAKE3 (cut to 128 bits): a partner cannot craft an update
//!   that collides with another one and so have a genuine transaction dropped as a copy.
//! - **Stable.** The encoding and the hash are fixed here, never taken from `std`'s hasher, so
//!   fingerprints kept on disk or in Redis stay valid across versions and machines.

use std::fmt;

use crate::delimiters::Delimiters;
use crate::interchange::{Interchange, Standard, Transaction};
use crate::segment::SegmentScanner;

/// 128 bits identifying a transaction's content (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 16]);

impl Fingerprint {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// From raw bytes (as stored).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

/// Lowercase hex, 32 characters.
impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// A segment tag and the element of it that holds the control reference.
type ControlReference = (&'static [u8], usize);
/// ST02.
const X12_HEADER: ControlReference = (b"ST", 2);
/// SE02.
const X12_TRAILER: ControlReference = (b"SE", 2);
/// UNH 0062, the first data element.
const UNH: ControlReference = (b"UNH", 1);
/// UNT 0062, the second data element (after the segment count).
const UNT: ControlReference = (b"UNT", 2);

/// The fingerprint of `tx`, a transaction of `ic` parsed from `input`.
///
/// ```
/// let copy = |isa13: &str, st02: &str| format!(
///     "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       \
///      *240101*1200*U*00401*{isa13}*0*P*>~GS*QM*S*R*20240101*1200*1*X*004010~\
///      ST*214*{st02}~B10*PRO1*SHIP1*SCAC~SE*3*{st02}~GE*1*1~IEA*1*{isa13}~");
/// let fp = |text: String| {
///     let parsed = tollgate_edi::parse(text.as_bytes());
///     let ic = &parsed.interchanges[0];
///     let tx = ic.transactions().next().unwrap();
///     tollgate_edi::fingerprint(text.as_bytes(), tx, ic)
/// };
/// assert_eq!(fp(copy("000000001", "0001")), fp(copy("000000002", "0419")));
/// ```
pub fn fingerprint(input: &[u8], tx: &Transaction, ic: &Interchange) -> Fingerprint {
    let d = ic.delimiters;
    let bytes = input.get(tx.span.clone()).unwrap_or(&[]);
    let (header, trailer) = match ic.standard {
        Standard::X12 => (X12_HEADER, X12_TRAILER),
        Standard::Edifact => (UNH, UNT),
    };
    // One pass per byte into one buffer, hashed once: many tiny hasher updates, or a split per
    // element and component, cost more than the copy.
    let mut encoded = Vec::with_capacity(bytes.len() + 64);
    let mut scanner = SegmentScanner::new(bytes, d);
    while let Some(seg) = scanner.next_segment() {
        let tag = seg.tag.as_bytes();
        let skip = if tag == header.0 {
            header.1
        } else if tag == trailer.0 {
            trailer.1
        } else {
            usize::MAX
        };
        encoded.push(SEGMENT);
        canonical(seg.bytes, &d, skip, &mut encoded);
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&blake3::hash(&encoded).as_bytes()[..16]);
    Fingerprint(out)
}

/// Starts a segment in the canonical form.
const SEGMENT: u8 = 0x1E;
/// Separates elements.
const ELEMENT: u8 = 0x1D;
/// Separates components.
const COMPONENT: u8 = 0x1F;
/// Separates repetitions.
const REPETITION: u8 = 0x1C;
/// Escapes a data byte equal to one of the above (or to itself).
const ESCAPE: u8 = 0x1B;

/// Appends `segment` (terminator excluded) in canonical form, leaving out the bytes of
/// element `skip` (but not its separator, so later elements keep their positions).
fn canonical(segment: &[u8], d: &Delimiters, skip: usize, out: &mut Vec<u8>) {
    let mut element = 0;
    let mut i = 0;
    while i < segment.len() {
        let b = segment[i];
        i += 1;
        let data = if Some(b) == d.release && i < segment.len() {
            i += 1;
            segment[i - 1]
        } else if b == d.element {
            element += 1;
            out.push(ELEMENT);
            continue;
        } else if b == b'\r' || b == b'\n' || element == skip {
            continue;
        } else if b == d.component {
            out.push(COMPONENT);
            continue;
        } else if Some(b) == d.repetition {
            out.push(REPETITION);
            continue;
        } else {
            b
        };
        if element == skip {
            continue;
        }
        if matches!(data, SEGMENT | ELEMENT | COMPONENT | REPETITION | ESCAPE) {
            out.push(ESCAPE);
        }
        out.push(data);
    }
}
