//! Reading each key into its type; a refused value is named with its key.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use tollgate_http::config::key;

use super::*;

pub(super) fn poll_ms<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU64, D::Error> {
    key::at_least_one(d, "poll_ms")
}
pub(super) fn dedup_days<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU32, D::Error> {
    key::bounded(d, "dedup_days", 1, u64::from(u32::MAX), "must be at least 1")
}
pub(super) fn keep_days<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU32, D::Error> {
    key::bounded(d, "keep_days", 1, 36_500, "must be between 1 and 36500 (100 years)")
}
pub(super) fn dedup<'de, D: Deserializer<'de>>(d: D) -> Result<Dedup, D::Error> {
    key::parsed(d, "dedup")
}
pub(super) fn route_dedup_days<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<NonZeroU32>, D::Error> {
    dedup_days(d).map(Some)
}
pub(super) fn max_upload_bytes<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Spanned<NonZeroU32>, D::Error> {
    let why = format!("must be between 1 and {} (4 GiB - 1)", u32::MAX);
    key::bounded_spanned(d, "max_upload_bytes", 1, u64::from(u32::MAX), &why)
}
pub(super) fn upload_min_rate_bytes<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<NonZeroU64, D::Error> {
    let why = format!("must be between 1 and {} bytes per second", u32::MAX);
    key::bounded(d, "upload_min_rate_bytes", 1, u64::from(u32::MAX), &why)
}
pub(super) fn upload_rate_grace_ms<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<NonZeroU64, D::Error> {
    key::bounded(
        d,
        "upload_rate_grace_ms",
        1,
        86_400_000,
        "must be between 1 and 86400000 (one day)",
    )
}
pub(super) fn max_file_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU64, D::Error> {
    key::at_least_one(d, "max_file_bytes")
}
pub(super) fn timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU64, D::Error> {
    key::at_least_one(d, "timeout_ms")
}
pub(super) fn quota_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HttpUrl>, D::Error> {
    key::parsed(d, "url").map(Some)
}
pub(super) fn name<'de, D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
    key::parsed(d, "name")
}
pub(super) fn route_name<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<Name>, D::Error> {
    spanned(d, "name")
}
pub(super) fn ids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Spanned<PartyId>>, D::Error> {
    Vec::<Spanned<String>>::deserialize(d)?
        .into_iter()
        .map(|id| {
            let span = id.span();
            id.get_ref()
                .parse()
                .map(|p| Spanned::new(span, p))
                .map_err(|e| D::Error::custom(format!("ids: {:?}: {e}", id.get_ref())))
        })
        .collect()
}
pub(super) fn documents<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Spanned<String>>, D::Error> {
    let documents = Vec::<Spanned<String>>::deserialize(d)?;
    if documents.is_empty() {
        return Err(D::Error::custom("documents = []: list at least one document"));
    }
    if let Some(empty) = documents.iter().find(|d| d.get_ref().trim().is_empty()) {
        return Err(D::Error::custom(format!(
            "documents: {:?}: a document type must not be empty",
            empty.get_ref()
        )));
    }
    Ok(documents)
}
pub(super) fn metering_id<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Spanned<MeteringTemplate>, D::Error> {
    spanned(d, "metering_id")
}
pub(super) fn interval<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<NonZeroU32>, D::Error> {
    key::bounded_spanned(d, "interval", 1, u64::from(u32::MAX), "must be at least 1")
}
pub(super) fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<TimeUnit, D::Error> {
    key::parsed(d, "unit")
}
pub(super) fn weight<'de, D: Deserializer<'de>>(d: D) -> Result<RecordRule, D::Error> {
    key::parsed(d, "weight")
}
/// Like [`key::parsed`], the password of a refused URL hidden.
pub(super) fn deliver<'de, D: Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
    let s = String::deserialize(d)?;
    s.parse()
        .map_err(|e| D::Error::custom(format!("deliver = {:?}: {e}", value::without_password(&s))))
}
pub(super) fn max_concurrency<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroUsize, D::Error> {
    key::at_least_one(d, "max_concurrency")
}

/// A string parsed into `T`, keeping its position (for rules checked with other keys).
fn spanned<'de, D, T>(d: D, key: &str) -> Result<Spanned<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let s = Spanned::<String>::deserialize(d)?;
    let span = s.span();
    let text = s.into_inner();
    text.parse()
        .map(|v| Spanned::new(span, v))
        .map_err(|e| D::Error::custom(format!("{key} = {text:?}: {e}")))
}
