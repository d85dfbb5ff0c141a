//! Serde helpers that read one key and, when its value is refused, say so as
//! `KEY = VALUE: why`; the parser adds the value's position.

use std::fmt::Display;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// A string parsed with `T`'s `FromStr`.
pub fn parsed<'de, D, T>(d: D, key: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(|e| D::Error::custom(format!("{key} = {s:?}: {e}")))
}

/// An integer in `min..=max`, converted to `T`.
pub fn bounded<'de, D, T>(d: D, key: &str, min: u64, max: u64, why: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromU64,
{
    let v = u64::deserialize(d)?;
    (min..=max)
        .contains(&v)
        .then_some(v)
        .and_then(|v| T::from_u64(v))
        .ok_or_else(|| D::Error::custom(format!("{key} = {v}: {why}")))
}

/// [`bounded`] keeping the value's position, for rules checked later with other keys.
pub fn bounded_spanned<'de, D, T>(
    d: D,
    key: &str,
    min: u64,
    max: u64,
    why: &str,
) -> Result<Spanned<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromU64,
{
    let v = Spanned::<u64>::deserialize(d)?;
    let span = v.span();
    let v = *v.get_ref();
    (min..=max)
        .contains(&v)
        .then_some(v)
        .and_then(|v| T::from_u64(v))
        .map(|t| Spanned::new(span, t))
        .ok_or_else(|| D::Error::custom(format!("{key} = {v}: {why}")))
}

/// The integer types a key can be read into.
pub trait FromU64: Sized {
    /// `v` as `Self`, if it fits.
    fn from_u64(v: u64) -> Option<Self>;
}

macro_rules! from_u64 {
    ($($t:ty => $conv:expr),* $(,)?) => {
        $(impl FromU64 for $t {
            fn from_u64(v: u64) -> Option<Self> {
                $conv(v)
            }
        })*
    };
}

from_u64! {
    u64 => Some,
    u32 => |v| u32::try_from(v).ok(),
    usize => |v| usize::try_from(v).ok(),
    std::num::NonZeroU64 => std::num::NonZeroU64::new,
    std::num::NonZeroU32 => |v| u32::try_from(v).ok().and_then(std::num::NonZeroU32::new),
    std::num::NonZeroUsize => |v| usize::try_from(v).ok().and_then(std::num::NonZeroUsize::new),
}

/// An integer of at least 1.
pub fn at_least_one<'de, D, T>(d: D, key: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromU64,
{
    bounded(d, key, 1, u64::MAX, "must be at least 1")
}
