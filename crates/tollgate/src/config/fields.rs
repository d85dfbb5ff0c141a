//! Reading each key into its type; a refused value is named with its key.

use serde::Deserializer;

use super::*;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

fn millis<'de, D: Deserializer<'de>>(d: D, key: &str, max: u64) -> Result<Duration, D::Error> {
    let why = if max == DAY_MS {
        format!("must be between 1 and {DAY_MS} (one day)")
    } else {
        "must be at least 1".to_owned()
    };
    key::bounded::<D, u64>(d, key, 1, max, &why).map(Duration::from_millis)
}

pub fn header_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    millis(d, "header_timeout_ms", DAY_MS).map(Some)
}
pub fn body_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    millis(d, "body_timeout_ms", DAY_MS).map(Some)
}
pub fn body_min_rate<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::num::NonZeroU64>, D::Error> {
    let why = format!("must be between 1 and {} bytes per second", u32::MAX);
    key::bounded(d, "body_min_rate_bytes", 1, u64::from(u32::MAX), &why).map(Some)
}
pub fn max_connections<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NonZeroUsize>, D::Error> {
    key::at_least_one(d, "max_connections").map(Some)
}
pub fn grpc_max_connections<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<NonZeroUsize>, D::Error> {
    key::at_least_one(d, "grpc_max_connections").map(Some)
}
pub fn grpc_idle_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    millis(d, "grpc_idle_timeout_ms", DAY_MS).map(Some)
}
pub fn log_format<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LogFormat>, D::Error> {
    key::parsed(d, "log_format").map(Some)
}
pub fn kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<KindName>, D::Error> {
    key::parsed(d, "kind").map(Some)
}
pub fn redis_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RedisUrl>, D::Error> {
    key::parsed(d, "url").map(Some)
}
pub fn store_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    millis(d, "timeout_ms", u64::MAX).map(Some)
}
pub fn flush_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    millis(d, "flush_interval_ms", u64::MAX)
}
/// `true` or `false`; anything else is refused naming `key` and the value.
fn boolean<'de, D: Deserializer<'de>>(d: D, key: &str) -> Result<bool, D::Error> {
    use serde::Deserialize;
    use serde::de::Error as _;
    match toml::Value::deserialize(d)? {
        toml::Value::Boolean(b) => Ok(b),
        other => Err(D::Error::custom(format!("{key} = {other}: expected true or false"))),
    }
}
pub fn local_share_of<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU32, D::Error> {
    let why = "must be between 1 and 10000 (the instances sharing the limit)";
    key::bounded(d, "local_share_of", 1, 10_000, why)
}
pub fn cluster<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    boolean(d, "cluster")
}
pub fn usage_history<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    boolean(d, "usage_history").map(Some)
}
pub fn trusted_proxies<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<tollgate_http::proxy::Cidr>, D::Error> {
    use serde::Deserialize;
    use serde::de::Error as _;
    let blocks = Vec::<String>::deserialize(d)?;
    blocks
        .iter()
        .map(|b| b.parse().map_err(|e| D::Error::custom(format!("trusted_proxies = {b:?}: {e}"))))
        .collect()
}
pub fn console_max_counters<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let msg = "must be between 1 and 10000000";
    key::bounded(d, "console_max_counters", 1, 10_000_000, msg).map(Some)
}
pub fn usage_max_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    key::bounded(d, "usage_max_ids", 1, 10_000_000, "must be between 1 and 10000000").map(Some)
}
