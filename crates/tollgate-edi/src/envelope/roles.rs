//! Which envelope segment a tag is, per standard: headers and trailers of interchanges
//! (ISA/IEA, UNA/UNB/UNZ), groups (GS/GE, UNG/UNE) and transactions (ST/SE, UNH/UNT), plus the
//! X12 interchange-level segments (TA1, ISB, ISE, ISX) that belong to no group.

use crate::interchange::Standard;
use crate::segment::SegmentTag;

const ISA: SegmentTag = SegmentTag::from_bytes(b"ISA");
const IEA: SegmentTag = SegmentTag::from_bytes(b"IEA");
const GS: SegmentTag = SegmentTag::from_bytes(b"GS");
const GE: SegmentTag = SegmentTag::from_bytes(b"GE");
const ST: SegmentTag = SegmentTag::from_bytes(b"ST");
const SE: SegmentTag = SegmentTag::from_bytes(b"SE");
pub(super) const TA1: SegmentTag = SegmentTag::from_bytes(b"TA1");
pub(super) const ISB: SegmentTag = SegmentTag::from_bytes(b"ISB");
pub(super) const ISE: SegmentTag = SegmentTag::from_bytes(b"ISE");
pub(super) const ISX: SegmentTag = SegmentTag::from_bytes(b"ISX");
const UNA: SegmentTag = SegmentTag::from_bytes(b"UNA");
const UNB: SegmentTag = SegmentTag::from_bytes(b"UNB");
const UNZ: SegmentTag = SegmentTag::from_bytes(b"UNZ");
const UNG: SegmentTag = SegmentTag::from_bytes(b"UNG");
const UNE: SegmentTag = SegmentTag::from_bytes(b"UNE");
const UNH: SegmentTag = SegmentTag::from_bytes(b"UNH");
const UNT: SegmentTag = SegmentTag::from_bytes(b"UNT");

/// What an envelope segment does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    InterchangeHeader,
    InterchangeTrailer,
    GroupHeader,
    GroupTrailer,
    TxHeader,
    TxTrailer,
    Other,
}

/// A cheap filter: `false` means the tag is certainly not an envelope segment.
#[inline]
pub(super) fn maybe_envelope(standard: Standard, tag: SegmentTag) -> bool {
    match standard {
        Standard::X12 => matches!(tag.first(), b'S' | b'G' | b'I'),
        Standard::Edifact => tag.first() == b'U' && tag.second() == b'N',
    }
}

#[inline]
pub(super) fn role(standard: Standard, tag: SegmentTag) -> Role {
    match standard {
        Standard::X12 => {
            if tag == SE {
                Role::TxTrailer
            } else if tag == ST {
                Role::TxHeader
            } else if tag == GS {
                Role::GroupHeader
            } else if tag == GE {
                Role::GroupTrailer
            } else if tag == IEA {
                Role::InterchangeTrailer
            } else if tag == ISA {
                Role::InterchangeHeader
            } else {
                Role::Other
            }
        }
        Standard::Edifact => {
            if tag == UNT {
                Role::TxTrailer
            } else if tag == UNH {
                Role::TxHeader
            } else if tag == UNG {
                Role::GroupHeader
            } else if tag == UNE {
                Role::GroupTrailer
            } else if tag == UNZ {
                Role::InterchangeTrailer
            } else if tag == UNB || tag == UNA {
                Role::InterchangeHeader
            } else {
                Role::Other
            }
        }
    }
}
