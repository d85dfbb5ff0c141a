//! The identifier a counter meters, e.g. `ShipmentStatus:CarrierXYZ`.
//!
//! Parsed once at the edge (a header, a config file, a stored row); the engine then trusts it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::spec::SpecError;

/// The counter identifier, e.g. `ShipmentStatus:CarrierXYZ`: 1–256 bytes of visible ASCII.
///
/// Cheap to clone: identifiers up to [`MeteringId::INLINE_LEN`] bytes (most real ones) are
/// stored inline and copied, longer ones share one string. Every decision clones one, so
/// avoiding a reference count here keeps two atomic operations off each decision.
#[derive(Clone)]
pub struct MeteringId(Repr);

/// Invariant: the bytes are 1–256 bytes of visible ASCII (checked by [`MeteringId::new`]).
#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; MeteringId::INLINE_LEN] },
    Shared(Arc<str>),
}

impl MeteringId {
    /// The longest identifier accepted, in bytes.
    pub const MAX_LEN: usize = 256;

    /// Identifiers up to this many bytes are stored inline.
    pub const INLINE_LEN: usize = 30;

    /// Validates `s` as an identifier.
    pub fn new(s: &str) -> Result<Self, SpecError> {
        let ok =
            !s.is_empty() && s.len() <= Self::MAX_LEN && s.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            return Err(SpecError::InvalidId(s.to_owned()));
        }
        if s.len() <= Self::INLINE_LEN {
            let mut bytes = [0u8; Self::INLINE_LEN];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            // The length fits in a u8: it is at most INLINE_LEN.
            Ok(Self(Repr::Inline { len: s.len() as u8, bytes }))
        } else {
            Ok(Self(Repr::Shared(Arc::from(s))))
        }
    }

    /// The identifier as bytes (visible ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(s) => s.as_bytes(),
        }
    }

    /// The identifier as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // ASCII by construction, so this never falls back.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Shared(s) => s,
        }
    }
}

impl PartialEq for MeteringId {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for MeteringId {}

/// Hashes as its text would (`str`'s bytes then `0xff`), without re-checking that the bytes
/// are UTF-8: they are ASCII by construction, and the check cost more than the hash.
impl std::hash::Hash for MeteringId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

impl PartialOrd for MeteringId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MeteringId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for MeteringId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for MeteringId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MeteringId {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// Serialized as its text.
impl serde::Serialize for MeteringId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read through [`MeteringId::new`]: a stored or configured id is checked like a header.
impl<'de> serde::Deserialize<'de> for MeteringId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        MeteringId::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_visible_ascii_up_to_256_bytes() {
        assert!(MeteringId::new("ShipmentStatus:CarrierXYZ").is_ok());
        assert!(MeteringId::new("").is_err());
        assert!(MeteringId::new("has space").is_err());
        assert!(MeteringId::new("é").is_err());
        assert!(MeteringId::new(&"a".repeat(256)).is_ok());
        assert!(MeteringId::new(&"a".repeat(257)).is_err());
        // Inline and shared forms behave alike.
        let short = MeteringId::new("a:b").unwrap();
        let long = MeteringId::new(&"x".repeat(31)).unwrap();
        assert_eq!(short.as_str(), "a:b");
        assert_eq!(long.as_str(), "x".repeat(31));
        assert_eq!(short.clone(), short);
        assert!(short < long && long.clone() == long);
        assert_eq!(format!("{short:?} {long}"), format!("\"a:b\" {}", "x".repeat(31)));
    }

    #[test]
    fn ids_hash_as_their_text() {
        use std::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        for text in ["a:b", "ShipmentStatus:Carrier000001", &"x".repeat(200)] {
            let id = MeteringId::new(text).unwrap();
            assert_eq!(state.hash_one(&id), state.hash_one(text), "{text}");
        }
        let a = MeteringId::new("ab").unwrap();
        let b = MeteringId::new("a").unwrap();
        assert_ne!(state.hash_one(&a), state.hash_one(&b));
    }
}
