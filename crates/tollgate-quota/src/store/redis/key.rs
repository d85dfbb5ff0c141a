//! The Redis key layout of a counter, and the SCAN patterns that find an identifier's keys.
//!
//! A counter's base key is `<prefix>{<id>}:<kind>:<interval>:<unit>:<start>`, where `<id>` is
//! the metering id with `%`, `{` and `}` percent-encoded (`%25`, `%7B`, `%7D`). Every other
//! visible ASCII byte is kept, so the keys of ids without those three bytes are the same as
//! before the encoding was introduced.
//!
//! Invariant: an encoded id holds no `}`. So the Redis Cluster hash tag (the text between the
//! first `{` and the next `}`) is exactly the whole encoded id, and the pattern
//! `<prefix>{<id>}:*` matches only keys of that id: `A` no longer matches the keys of `A}:x`.
//! Glob metacharacters (`*?[]\`) in an id or prefix are escaped in every pattern.

use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, WindowKind};

/// The metering id as it appears inside the hash tag.
pub(super) fn encode_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
}

/// The key of a remembered key seen (see `store::seen`): `<prefix>seen:{<key>}`, the key
/// encoded like an id so that it is its own hash tag.
pub(super) fn seen_key(prefix: &str, key: &str) -> String {
    format!("{prefix}seen:{{{}}}", encode_id(key))
}

/// The inverse of [`encode_id`]; `None` for text `encode_id` never produces.
pub(super) fn decode_id(encoded: &str) -> Option<MeteringId> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(at) = rest.find(['%', '{', '}']) {
        out.push_str(&rest[..at]);
        let (code, tail) = rest[at..].split_at_checked(3)?;
        out.push(match code {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = tail;
    }
    out.push_str(rest);
    MeteringId::new(&out).ok()
}

/// The key every key of `id` with `shape` starts with.
pub(super) fn base_key(prefix: &str, id: &MeteringId, shape: &CounterShape) -> String {
    let kind = match shape.window {
        WindowKind::Calendar => 'c',
        WindowKind::Flexi => 'f',
        WindowKind::Rolling => 'r',
    };
    let start = shape.start.map_or_else(|| "-".to_owned(), |s| s.to_string());
    format!(
        "{prefix}{{{}}}:{kind}:{}:{}:{start}",
        encode_id(id.as_str()),
        shape.interval,
        shape.unit.as_str()
    )
}

/// A key with the hash tag of `id`'s keys, so on the same cluster slot as all of them.
pub(super) fn tag_key(prefix: &str, id: &MeteringId) -> String {
    format!("{prefix}{{{}}}", encode_id(id.as_str()))
}

/// SCAN pattern for every key of exactly `id`.
pub(super) fn id_pattern(prefix: &str, id: &MeteringId) -> String {
    format!("{}{{{}}}:*", glob_escape(prefix), glob_escape(&encode_id(id.as_str())))
}

/// SCAN pattern for every key of the ids starting with `id_prefix` (encoding is per character,
/// so the encoded prefix is a prefix of every such encoded id).
pub(super) fn id_prefix_pattern(prefix: &str, id_prefix: &str) -> String {
    format!("{}{{{}*", glob_escape(prefix), glob_escape(&encode_id(id_prefix)))
}

/// Splits a key into id, shape and (calendar windows) the window start; `None` for total keys
/// and foreign keys.
pub(super) fn parse_key(
    prefix: &str,
    key: &str,
) -> Option<(MeteringId, CounterShape, Option<i64>)> {
    let (id, rest) = id_of(prefix, key)?;
    let mut parts = rest.strip_prefix(':')?.split(':');
    let window = match parts.next()? {
        "c" => WindowKind::Calendar,
        "f" => WindowKind::Flexi,
        "r" => WindowKind::Rolling,
        _ => return None,
    };
    let interval = parts.next()?.parse().ok()?;
    let unit = parts.next()?.parse().ok()?;
    let start = match parts.next()? {
        "-" => None,
        s => Some(s.parse().ok()?),
    };
    let window_start = match (window, parts.next(), parts.next()) {
        (WindowKind::Calendar, Some("w"), Some(s)) => Some(s.parse().ok()?),
        (WindowKind::Calendar, _, _) => return None,
        (_, None, None) => None,
        _ => return None,
    };
    Some((id, CounterShape { interval, unit, window, start }, window_start))
}

/// The id a key of this store belongs to, and the rest of the key after its hash tag.
pub(super) fn id_of<'k>(prefix: &str, key: &'k str) -> Option<(MeteringId, &'k str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    // The encoded id holds no `}`: the first one closes the tag.
    let (encoded, rest) = rest.split_once('}')?;
    Some((decode_id(encoded)?, rest))
}

/// Escapes the glob characters of SCAN's MATCH.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TimeUnit;

    fn id(s: &str) -> MeteringId {
        MeteringId::new(s).unwrap()
    }

    #[test]
    fn ids_round_trip_and_never_hold_a_closing_brace() {
        let shape = CounterShape {
            interval: 1,
            unit: TimeUnit::Day,
            window: WindowKind::Calendar,
            start: None,
        };
        for raw in ["A", "A}:x", "{A}", "%7D", "a%b", "*", "[a-z]?\\", "}}}{{{", "A:x"] {
            let key = format!("{}:w:0", base_key("t:", &id(raw), &shape));
            assert_eq!(key.matches('}').count(), 1, "{key}");
            let (back, s, w) = parse_key("t:", &key).unwrap();
            assert_eq!((back.as_str(), s, w), (raw, shape, Some(0)));
        }
        // Ids without the three encoded bytes keep their old keys.
        assert_eq!(base_key("t:", &id("A:x"), &shape), "t:{A:x}:c:1:day:-");
        assert_eq!(decode_id("A%7"), None);
        assert_eq!(decode_id("A%41"), None);
    }
}
