//! The quota header contract: turns the request headers of `GET /v1/quota` into a
//! [`QuotaRequest`], or into a 400 problem that names the offending header and its value.
//!
//! Parsing is strict on purpose: a number is ASCII digits only (no sign, no fraction, no
//! exponent, no surrounding text), a header given twice is refused, and every refusal says
//! which header and what was received. Nothing is counted for a refused request, because the
//! store is only called with a fully parsed request.

use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName, StatusCode};
use jiff::Timestamp;
use jiff::civil::DateTime;
use serde_json::Value;
use tollgate_policy::{Asked, AskedPart, ResolveError};
use tollgate_quota::check_start;
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit, WindowKind};

use tollgate_http::problem::Problem;

/// `metering-id`: the counter identifier (required).
pub(crate) const METERING_ID: &str = "metering-id";
/// `quota-limit`: units allowed per window.
pub(crate) const QUOTA_LIMIT: &str = "quota-limit";
/// `quota-interval`: window length in units (default 1).
pub(crate) const QUOTA_INTERVAL: &str = "quota-interval";
/// `quota-timeunit`: second … month, singular or plural, any case.
pub(crate) const QUOTA_TIMEUNIT: &str = "quota-timeunit";
/// `message-weight`: units this message consumes (default 1).
pub(crate) const MESSAGE_WEIGHT: &str = "message-weight";
/// `quota-window`: calendar, flexi or rolling (default calendar).
pub(crate) const QUOTA_WINDOW: &str = "quota-window";
/// `quota-start`: RFC 3339 anchor for calendar windows.
pub(crate) const QUOTA_START: &str = "quota-start";
/// `quota-request-id`: the caller's id of one message, for idempotent checks and refunds.
pub(crate) const QUOTA_REQUEST_ID: &str = "quota-request-id";
/// The longest `quota-request-id`, in bytes.
pub(crate) const MAX_REQUEST_ID: usize = 128;

/// The quota headers of one request, parsed: the metering id, what it asks (each part `None`
/// when its header was absent, so policies may fill it in) and the weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuotaRequest {
    /// The counter identifier.
    pub id: MeteringId,
    /// `quota-limit`, `quota-interval`, `quota-timeunit`, `quota-window`, `quota-start`.
    pub asked: Asked,
    /// `message-weight`, 1 when absent.
    pub weight: u64,
}

/// A 400 `invalid-header` problem naming `header` and the `value` received (`null` when the
/// header was missing).
pub(crate) fn invalid_header(
    header: &str,
    value: Option<&str>,
    detail: impl Into<String>,
) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid-header", "Invalid request header")
        .detail(detail)
        .with("invalid_header", header)
        .with("value", value.map_or(Value::Null, |v| Value::String(v.to_owned())))
}

/// The 400 for what the headers asked that no spec can be made of: it names the header.
pub(crate) fn unresolved(e: &ResolveError) -> Problem {
    match e {
        ResolveError::MissingLimit(_) => invalid_header(QUOTA_LIMIT, None, e.to_string()),
        ResolveError::MissingUnit(_) => invalid_header(QUOTA_TIMEUNIT, None, e.to_string()),
        ResolveError::Spec { part, value, .. } => {
            let header = match part {
                AskedPart::Limit => QUOTA_LIMIT,
                AskedPart::Interval => QUOTA_INTERVAL,
                AskedPart::Unit => QUOTA_TIMEUNIT,
                AskedPart::Start => QUOTA_START,
            };
            invalid_header(header, value.as_deref(), e.to_string())
        }
    }
}

impl QuotaRequest {
    /// Parses the quota headers. Every failure is a 400 problem naming the header and value.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Self, Problem> {
        let id_text = single(headers, &H_METERING_ID)?.ok_or_else(|| {
            invalid_header(METERING_ID, None, "the metering-id header is required")
        })?;
        let id = MeteringId::new(id_text).map_err(|_| {
            invalid_header(
                METERING_ID,
                Some(id_text),
                format!(
                    "metering-id must be 1 to {} bytes of visible ASCII (got {} bytes)",
                    MeteringId::MAX_LEN,
                    id_text.len()
                ),
            )
        })?;

        let limit =
            single(headers, &H_QUOTA_LIMIT)?.map(|v| number::<u64>(QUOTA_LIMIT, v)).transpose()?;
        let interval = match single(headers, &H_QUOTA_INTERVAL)? {
            None => None,
            Some(v) => match number::<u32>(QUOTA_INTERVAL, v)? {
                0 => {
                    return Err(invalid_header(
                        QUOTA_INTERVAL,
                        Some(v),
                        "quota-interval must be at least 1",
                    ));
                }
                n => Some(n),
            },
        };
        let unit = single(headers, &H_QUOTA_TIMEUNIT)?
            .map(|v| {
                TimeUnit::from_str(v).map_err(|_| {
                    invalid_header(
                        QUOTA_TIMEUNIT,
                        Some(v),
                        format!(
                            "quota-timeunit {v:?} is not a time unit: expected second, minute, hour, day, week \
                             or month (singular or plural)"
                        ),
                    )
                })
            })
            .transpose()?;
        let window = single(headers, &H_QUOTA_WINDOW)?
            .map(|v| {
                WindowKind::from_str(v).map_err(|_| {
                    invalid_header(
                        QUOTA_WINDOW,
                        Some(v),
                        format!("quota-window {v:?} is not a window: expected calendar, flexi or rolling"),
                    )
                })
            })
            .transpose()?;
        let start = single(headers, &H_QUOTA_START)?
            .map(|v| parse_start(v).map_err(|why| invalid_header(QUOTA_START, Some(v), why)))
            .transpose()?;
        let weight = match single(headers, &H_MESSAGE_WEIGHT)? {
            None => 1,
            Some(v) => number::<u64>(MESSAGE_WEIGHT, v)?,
        };
        Ok(Self { id, asked: Asked { limit, interval, unit, window, start }, weight })
    }
}

/// `quota-request-id`, when sent: 1 to [`MAX_REQUEST_ID`] bytes of visible ASCII (no space),
/// sent once; anything else is a 400 naming the header and the value.
pub(crate) fn request_id(headers: &HeaderMap) -> Result<Option<&str>, Problem> {
    let Some(v) = single(headers, &H_QUOTA_REQUEST_ID)? else { return Ok(None) };
    if v.is_empty() || v.len() > MAX_REQUEST_ID || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid_header(
            QUOTA_REQUEST_ID,
            Some(v),
            format!(
                "quota-request-id must be 1 to {MAX_REQUEST_ID} bytes of visible ASCII without \
                 spaces (got {} bytes)",
                v.len()
            ),
        ));
    }
    Ok(Some(v))
}

/// True when `message-weight` was sent (a refund compares it with the recorded weight).
pub(crate) fn has_weight(headers: &HeaderMap) -> bool {
    headers.contains_key(&H_MESSAGE_WEIGHT)
}

// Pre-built names: looking a header up by `&str` would re-validate the name on every call.
static H_METERING_ID: HeaderName = HeaderName::from_static(METERING_ID);
static H_QUOTA_LIMIT: HeaderName = HeaderName::from_static(QUOTA_LIMIT);
static H_QUOTA_INTERVAL: HeaderName = HeaderName::from_static(QUOTA_INTERVAL);
static H_QUOTA_TIMEUNIT: HeaderName = HeaderName::from_static(QUOTA_TIMEUNIT);
static H_MESSAGE_WEIGHT: HeaderName = HeaderName::from_static(MESSAGE_WEIGHT);
static H_QUOTA_WINDOW: HeaderName = HeaderName::from_static(QUOTA_WINDOW);
static H_QUOTA_START: HeaderName = HeaderName::from_static(QUOTA_START);
static H_QUOTA_REQUEST_ID: HeaderName = HeaderName::from_static(QUOTA_REQUEST_ID);

/// The header's value as text: `None` when absent; refused when sent twice or not visible
/// ASCII (header values are trimmed of surrounding whitespace by the HTTP parser).
fn single<'h>(
    headers: &'h HeaderMap,
    key: &'static HeaderName,
) -> Result<Option<&'h str>, Problem> {
    let name = key.as_str();
    let mut values = headers.get_all(key).iter();
    let Some(first) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        let all: Vec<String> = headers
            .get_all(key)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        return Err(invalid_header(
            name,
            Some(&all.join(", ")),
            format!("{name} was sent more than once"),
        ));
    }
    match first.to_str() {
        Ok(s) => Ok(Some(s.trim())),
        Err(_) => {
            let lossy = String::from_utf8_lossy(first.as_bytes()).into_owned();
            Err(invalid_header(name, Some(&lossy), format!("{name} must be visible ASCII")))
        }
    }
}

/// A non-negative integer made of ASCII digits only; the refusal says why (negative,
/// fractional, not a number, too large).
fn number<T: FromStr>(header: &str, value: &str) -> Result<T, Problem> {
    let why = if value.is_empty() {
        "is empty; expected a non-negative integer"
    } else if value.bytes().all(|b| b.is_ascii_digit()) {
        match value.parse::<T>() {
            Ok(n) => return Ok(n),
            Err(_) => "is too large",
        }
    } else if value.starts_with('-') && value[1..].bytes().any(|b| b.is_ascii_digit()) {
        "must not be negative"
    } else if is_decimal_fraction(value) {
        "must be a whole number, not a fraction"
    } else {
        "is not a number; expected a non-negative integer"
    };
    Err(invalid_header(header, Some(value), format!("{header} {why} (got {value:?})")))
}

fn is_decimal_fraction(value: &str) -> bool {
    let v = value.strip_prefix('+').unwrap_or(value);
    match v.split_once('.') {
        Some((int, frac)) => {
            !(int.is_empty() && frac.is_empty())
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// A `quota-start` anchor: RFC 3339 only (a full date, `T` (or `t`/space), a time and an
/// explicit offset, `Z` or `±hh:mm` with hours 00–23), and inside the engine's anchor range.
/// The refusal says which of the three failed: shape, offset, or range.
fn parse_start(value: &str) -> Result<Timestamp, String> {
    const SHAPE: &str = "quota-start must be an RFC 3339 timestamp, e.g. 2026-01-01T00:00:00Z";
    let b = value.as_bytes();
    let shape_ok = b.len() >= 20
        && value.is_ascii()
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':';
    let zulu = value.ends_with(['Z', 'z']);
    let offset = &value[value.len().saturating_sub(6)..];
    let o = offset.as_bytes();
    let offset_shaped = o.len() == 6
        && matches!(o[0], b'+' | b'-')
        && o[3] == b':'
        && [o[1], o[2], o[4], o[5]].iter().all(u8::is_ascii_digit);
    if !shape_ok || !(zulu || offset_shaped) {
        return Err(SHAPE.into());
    }
    if !zulu {
        let hours = (o[1] - b'0') * 10 + (o[2] - b'0');
        let minutes = (o[4] - b'0') * 10 + (o[5] - b'0');
        if hours > 23 || minutes > 59 {
            return Err(format!(
                "quota-start offset {offset} is not a valid UTC offset: RFC 3339 allows hours \
                 00 to 23 and minutes 00 to 59"
            ));
        }
    }
    let out_of_range = || {
        format!(
            "quota-start {value} is out of range: it must lie between {} and {}",
            QuotaSpec::EARLIEST_START,
            QuotaSpec::LATEST_START
        )
    };
    match value.parse::<Timestamp>() {
        Ok(t) => check_start(t).map_err(|_| out_of_range()),
        // A well-formed date and time that jiff cannot place (e.g. 9999-12-31T23:59:59Z, past
        // its last instant) is out of range, not malformed.
        Err(_) if value[..19].replace(['t', ' '], "T").parse::<DateTime>().is_ok() => {
            Err(out_of_range())
        }
        Err(_) => Err(SHAPE.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn refused(pairs: &[(&'static str, &str)]) -> (String, Value) {
        let p = QuotaRequest::from_headers(&headers(pairs)).unwrap_err();
        assert_eq!(p.status(), StatusCode::BAD_REQUEST);
        let b = p.body();
        (b["invalid_header"].as_str().unwrap().to_owned(), b["value"].clone())
    }

    #[test]
    fn full_request_parses() {
        let r = QuotaRequest::from_headers(&headers(&[
            ("metering-id", "ShipmentStatus:CarrierXYZ"),
            ("quota-limit", "1000"),
            ("quota-interval", "24"),
            ("quota-timeunit", "Hours"),
            ("message-weight", "50"),
            ("quota-window", "ROLLING"),
        ]))
        .unwrap();
        assert_eq!(r.id.as_str(), "ShipmentStatus:CarrierXYZ");
        assert_eq!(r.asked.limit, Some(1000));
        assert_eq!(r.asked.interval, Some(24));
        assert_eq!(r.asked.unit, Some(TimeUnit::Hour));
        assert_eq!(r.weight, 50);
        assert_eq!(r.asked.window, Some(WindowKind::Rolling));
        assert_eq!(r.asked.start, None);
    }

    #[test]
    fn defaults_when_absent() {
        let r = QuotaRequest::from_headers(&headers(&[("metering-id", "a")])).unwrap();
        let a = &r.asked;
        assert_eq!((a.limit, a.interval, a.unit, a.window), (None, None, None, None));
        assert_eq!(r.weight, 1);
    }

    #[test]
    fn weight_zero_is_a_probe_not_an_error() {
        let r =
            QuotaRequest::from_headers(&headers(&[("metering-id", "a"), ("message-weight", "0")]))
                .unwrap();
        assert_eq!(r.weight, 0);
    }

    #[test]
    fn bad_numbers_name_header_and_value() {
        for (h, v) in [
            ("quota-limit", "ten"),
            ("quota-limit", "-5"),
            ("quota-limit", "1.5"),
            ("quota-limit", "1e3"),
            ("quota-limit", "+5"),
            ("quota-limit", "99999999999999999999999"),
            ("quota-limit", ""),
            ("message-weight", "-1"),
            ("message-weight", "0.5"),
            ("message-weight", "abc"),
            ("quota-interval", "0"),
            ("quota-interval", "4294967296"),
            ("quota-interval", "2.0"),
        ] {
            let (name, value) = refused(&[("metering-id", "a"), (h, v)]);
            assert_eq!(name, h, "{h}: {v}");
            assert_eq!(value, Value::String(v.to_owned()), "{h}: {v}");
        }
    }

    #[test]
    fn messages_say_why() {
        let p =
            QuotaRequest::from_headers(&headers(&[("metering-id", "a"), ("quota-limit", "-5")]))
                .unwrap_err();
        assert!(p.body()["detail"].as_str().unwrap().contains("negative"));
        let p =
            QuotaRequest::from_headers(&headers(&[("metering-id", "a"), ("quota-limit", "1.5")]))
                .unwrap_err();
        assert!(p.body()["detail"].as_str().unwrap().contains("fraction"));
    }

    #[test]
    fn unknown_unit_and_window() {
        assert_eq!(
            refused(&[("metering-id", "a"), ("quota-timeunit", "fortnight")]),
            ("quota-timeunit".into(), Value::String("fortnight".into()))
        );
        assert_eq!(
            refused(&[("metering-id", "a"), ("quota-window", "sliding")]),
            ("quota-window".into(), Value::String("sliding".into()))
        );
    }

    #[test]
    fn bad_start() {
        for v in ["yesterday", "2026-01-01", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z"] {
            assert_eq!(
                refused(&[("metering-id", "a"), ("quota-start", v)]),
                ("quota-start".into(), Value::String(v.into())),
                "{v}"
            );
        }
        let r = QuotaRequest::from_headers(&headers(&[
            ("metering-id", "a"),
            ("quota-start", "2026-01-01T06:00:00+02:00"),
        ]))
        .unwrap();
        assert_eq!(r.asked.start.unwrap().to_string(), "2026-01-01T04:00:00Z");
    }

    fn start_detail(v: &str) -> String {
        let p = QuotaRequest::from_headers(&headers(&[("metering-id", "a"), ("quota-start", v)]))
            .unwrap_err();
        assert_eq!(p.body()["invalid_header"], "quota-start", "{v}");
        assert_eq!(p.body()["value"], v, "{v}");
        p.body()["detail"].as_str().unwrap().to_owned()
    }

    #[test]
    fn start_offsets_beyond_23_59_are_refused() {
        for v in
            ["2026-01-01T00:00:00+25:00", "2026-01-01T00:00:00-24:00", "2026-01-01T00:00:00+05:60"]
        {
            let d = start_detail(v);
            assert!(d.contains("offset") && d.contains(&v[19..]), "{v}: {d}");
        }
        assert!(start_detail("2026-01-01T00:00:00+5:00").contains("RFC 3339"));
        let ok = headers(&[("metering-id", "a"), ("quota-start", "2026-01-01T00:00:00-23:59")]);
        assert!(QuotaRequest::from_headers(&ok).is_ok());
    }

    #[test]
    fn far_dates_are_out_of_range_not_malformed() {
        for v in [
            "9999-12-31T23:59:59Z",
            "9999-12-30T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "2200-01-01T00:00:01Z",
            "1899-12-31T23:59:59Z",
        ] {
            let d = start_detail(v);
            assert!(d.contains("out of range") && !d.contains("RFC 3339"), "{v}: {d}");
            assert!(
                d.contains("1900-01-01T00:00:00Z") && d.contains("2200-01-01T00:00:00Z"),
                "{d}"
            );
        }
        assert!(start_detail("2026-02-30T00:00:00Z").contains("RFC 3339"));
    }

    #[test]
    fn bad_ids() {
        assert_eq!(refused(&[]), ("metering-id".into(), Value::Null));
        assert_eq!(
            refused(&[("metering-id", "")]),
            ("metering-id".into(), Value::String("".into()))
        );
        let long = "x".repeat(257);
        assert_eq!(refused(&[("metering-id", &long)]).0, "metering-id");
        assert_eq!(refused(&[("metering-id", "a b")]).0, "metering-id");
        let mut h = HeaderMap::new();
        h.insert("metering-id", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let p = QuotaRequest::from_headers(&h).unwrap_err();
        assert_eq!(p.body()["invalid_header"], "metering-id");
    }

    #[test]
    fn request_ids_are_visible_ascii_up_to_128_bytes() {
        let ok = headers(&[("quota-request-id", "MSG-0001/a:b")]);
        assert_eq!(request_id(&ok).unwrap(), Some("MSG-0001/a:b"));
        assert_eq!(request_id(&headers(&[])).unwrap(), None);
        assert!(request_id(&headers(&[("quota-request-id", &"x".repeat(128))])).is_ok());
        for bad in ["", "a b", &"x".repeat(129)] {
            let p = request_id(&headers(&[("quota-request-id", bad)])).unwrap_err();
            assert_eq!(p.body()["invalid_header"], "quota-request-id", "{bad}");
            assert_eq!(p.body()["value"], bad);
        }
        let twice = headers(&[("quota-request-id", "a"), ("quota-request-id", "b")]);
        assert_eq!(request_id(&twice).unwrap_err().body()["invalid_header"], "quota-request-id");
    }

    #[test]
    fn duplicated_header_is_refused() {
        let (name, _) =
            refused(&[("metering-id", "a"), ("quota-limit", "1"), ("quota-limit", "2")]);
        assert_eq!(name, "quota-limit");
    }
}
