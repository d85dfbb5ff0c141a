//! The on-disk row format of the embedded store: a key per counter (id, 0x00, shape) and a
//! versioned value holding the counter's window state. Decoding never trusts the bytes: each
//! error says which part of a row is unreadable, and the store drops such rows with the reason.

use crate::counter::{Bucket, Counter};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, TimeUnit, WindowKind};

/// The bytes every key of `id` starts with (`end = 0`), or the first byte string after all of
/// them (`end = 1`). Ids are visible ASCII, so 0x00 never occurs inside one.
pub(super) fn id_prefix(id: &str, end: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(id.len() + 1);
    k.extend_from_slice(id.as_bytes());
    k.push(end);
    k
}

/// Key: id, 0x00, interval (u32 BE), unit, window, has-start, start (i64 BE).
pub(super) fn encode_key(id: &str, shape: &CounterShape) -> Vec<u8> {
    let mut k = Vec::with_capacity(id.len() + 16);
    encode_key_into(&mut k, id.as_bytes(), shape);
    k
}

/// [`encode_key`] into `k` (cleared first), so a batch reuses one buffer for all its keys.
pub(super) fn encode_key_into(k: &mut Vec<u8>, id: &[u8], shape: &CounterShape) {
    k.clear();
    k.extend_from_slice(id);
    k.push(0);
    k.extend_from_slice(&shape.interval.to_be_bytes());
    k.push(unit_code(shape.unit));
    k.push(window_code(shape.window));
    k.push(u8::from(shape.start.is_some()));
    k.extend_from_slice(&shape.start.unwrap_or(0).to_be_bytes());
}

/// Reads a key written by [`encode_key`]; the error says which part is unreadable.
pub(super) fn decode_key(k: &[u8]) -> Result<(MeteringId, CounterShape), String> {
    let nul = k.iter().position(|&b| b == 0).ok_or("key has no 0x00 after the identifier")?;
    let (id, rest) = (&k[..nul], &k[nul + 1..]);
    let id = std::str::from_utf8(id).map_err(|e| format!("identifier is not UTF-8: {e}"))?;
    let id = MeteringId::new(id).map_err(|e| format!("identifier {id:?}: {e}"))?;
    let &[i0, i1, i2, i3, unit, window, has_start, ref start @ ..] = rest else {
        return Err(format!("key shape is {} bytes, expected 15", rest.len()));
    };
    let start: [u8; 8] =
        start.try_into().map_err(|_| format!("key shape is {} bytes, expected 15", rest.len()))?;
    let interval = u32::from_be_bytes([i0, i1, i2, i3]);
    let unit = unit_from(unit).ok_or_else(|| format!("unknown time unit code {unit}"))?;
    let window = window_from(window).ok_or_else(|| format!("unknown window kind code {window}"))?;
    let start = (has_start == 1).then_some(i64::from_be_bytes(start));
    Ok((id, CounterShape { interval, unit, window, start }))
}

/// Format version of counter rows.
const ROW_V1: u8 = 1;

/// Value: version, used, exceed, total_exceed, mark (all 8 bytes LE), then per rolling
/// sub-bucket: index, used, exceed.
#[cfg(test)]
pub(super) fn encode_counter(c: &Counter) -> Vec<u8> {
    let mut v = Vec::new();
    encode_counter_into(&mut v, c);
    v
}

/// [`encode_counter`] into `v` (cleared first), so a batch reuses one buffer for its values.
pub(super) fn encode_counter_into(v: &mut Vec<u8>, c: &Counter) {
    let buckets = c.buckets.as_deref().map_or(&[][..], |b| b.as_slice());
    v.clear();
    v.reserve(33 + 24 * buckets.len());
    v.push(ROW_V1);
    v.extend_from_slice(&c.used.to_le_bytes());
    v.extend_from_slice(&c.exceed.to_le_bytes());
    v.extend_from_slice(&c.total_exceed.to_le_bytes());
    v.extend_from_slice(&c.mark_us.to_le_bytes());
    for b in buckets {
        v.extend_from_slice(&b.index.to_le_bytes());
        v.extend_from_slice(&b.used.to_le_bytes());
        v.extend_from_slice(&b.exceed.to_le_bytes());
    }
}

/// Reads a value written by [`encode_counter`]; the error says which part is unreadable.
/// Rolling sub-buckets must come oldest first, as the core keeps them.
pub(super) fn decode_counter(v: &[u8]) -> Result<Counter, String> {
    let (&version, rest) = v.split_first().ok_or("value is empty")?;
    if version != ROW_V1 {
        return Err(format!("unknown row version {version}"));
    }
    let bad_len = || format!("value is {} bytes, expected 33 + 24 per sub-bucket", v.len());
    if rest.len() < 32 || (rest.len() - 32) % 24 != 0 {
        return Err(bad_len());
    }
    let word = |i: usize| {
        rest.get(i * 8..).and_then(<[u8]>::first_chunk::<8>).copied().ok_or_else(bad_len)
    };
    let buckets = (0..(rest.len() - 32) / 24)
        .map(|b| {
            let at = 4 + b * 3;
            Ok(Bucket {
                index: i64::from_le_bytes(word(at)?),
                used: u64::from_le_bytes(word(at + 1)?),
                exceed: u64::from_le_bytes(word(at + 2)?),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(w) = buckets.windows(2).find(|w| w[0].index >= w[1].index) {
        return Err(format!("sub-buckets out of order: {} before {}", w[0].index, w[1].index));
    }
    Ok(Counter {
        used: u64::from_le_bytes(word(0)?),
        exceed: u64::from_le_bytes(word(1)?),
        total_exceed: u64::from_le_bytes(word(2)?),
        mark_us: i64::from_le_bytes(word(3)?),
        buckets: (!buckets.is_empty()).then(|| Box::new(buckets)),
    })
}

pub(super) fn unit_code(u: TimeUnit) -> u8 {
    match u {
        TimeUnit::Second => 0,
        TimeUnit::Minute => 1,
        TimeUnit::Hour => 2,
        TimeUnit::Day => 3,
        TimeUnit::Week => 4,
        TimeUnit::Month => 5,
    }
}

pub(super) fn unit_from(b: u8) -> Option<TimeUnit> {
    Some(match b {
        0 => TimeUnit::Second,
        1 => TimeUnit::Minute,
        2 => TimeUnit::Hour,
        3 => TimeUnit::Day,
        4 => TimeUnit::Week,
        5 => TimeUnit::Month,
        _ => return None,
    })
}

pub(super) fn window_code(w: WindowKind) -> u8 {
    match w {
        WindowKind::Calendar => 0,
        WindowKind::Flexi => 1,
        WindowKind::Rolling => 2,
    }
}

pub(super) fn window_from(b: u8) -> Option<WindowKind> {
    Some(match b {
        0 => WindowKind::Calendar,
        1 => WindowKind::Flexi,
        2 => WindowKind::Rolling,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let shape = CounterShape {
            interval: 7,
            unit: TimeUnit::Day,
            window: WindowKind::Rolling,
            start: Some(-5),
        };
        let k = encode_key("ShipmentStatus:CarrierXYZ", &shape);
        let id = MeteringId::new("ShipmentStatus:CarrierXYZ").unwrap();
        assert_eq!(decode_key(&k), Ok((id, shape)));
        let c = Counter {
            used: 3,
            exceed: 4,
            total_exceed: 5,
            mark_us: -6,
            buckets: Some(Box::new(vec![Bucket { index: 9, used: 1, exceed: 2 }])),
        };
        assert_eq!(decode_counter(&encode_counter(&c)), Ok(c));
        assert!(decode_counter(&[2, 0, 0]).is_err());
        assert!(decode_key(b"no-separator").is_err());
        // Another id's keys never fall inside an id's range.
        let (lo, hi) = (id_prefix("ab", 0), id_prefix("ab", 1));
        let other = encode_key("ab!", &shape);
        assert!(!(lo.as_slice() <= other.as_slice() && other.as_slice() < hi.as_slice()));
        assert!(lo.as_slice() <= k.as_slice() || !k.starts_with(b"ab\0"));
    }

    #[test]
    fn unreadable_rows_say_what_is_wrong() {
        assert_eq!(decode_counter(&[2, 0, 0]), Err("unknown row version 2".to_owned()));
        assert_eq!(
            decode_counter(&[1; 40]),
            Err("value is 40 bytes, expected 33 + 24 per sub-bucket".to_owned())
        );
        let mut row = encode_counter(&Counter {
            buckets: Some(Box::new(vec![
                Bucket { index: 9, used: 1, exceed: 0 },
                Bucket { index: 4, used: 1, exceed: 0 },
            ])),
            ..Counter::default()
        });
        assert_eq!(decode_counter(&row), Err("sub-buckets out of order: 9 before 4".to_owned()));
        row.truncate(33);
        assert!(decode_counter(&row).is_ok());
        let mut key = encode_key(
            "Invoice:ACME",
            &CounterShape {
                interval: 1,
                unit: TimeUnit::Day,
                window: WindowKind::Calendar,
                start: None,
            },
        );
        let unit_at = key.len() - 11;
        key[unit_at] = 99;
        assert_eq!(decode_key(&key), Err("unknown time unit code 99".to_owned()));
        key.pop();
        assert_eq!(decode_key(&key), Err("key shape is 14 bytes, expected 15".to_owned()));
    }
}
