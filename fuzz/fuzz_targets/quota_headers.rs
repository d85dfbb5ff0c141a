//! Fuzz target: arbitrary request headers through the quota header contract,
//! `tollgate_server::headers::QuotaRequest::from_headers`, then through the merge with an empty
//! policy set (`PolicySet::resolve`) into a `QuotaSpec`.
//!
//! The input is a list of headers separated by `\n`: the first byte of each picks the name
//! from a small table (the five headers every caller sends, twice as often as the rest, the
//! other two quota headers, upper-case spellings and unrelated names), the remaining bytes are
//! the value, keeping only the bytes `http::HeaderValue::from_bytes` accepts.
//!
//! On success the request must hold exactly what the headers said: a metering id of 1–256
//! bytes of visible ASCII, numbers written as ASCII digits only, an interval of at least 1,
//! the weight 1 when absent, and no quota header sent twice. On refusal the problem is a 400
//! whose `invalid_header` is one of the quota headers, whose `detail` names it, and whose
//! header was sent (or, when `value` is null, was missing).
#![no_main]
#![forbid(unsafe_code)]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tollgate_server::headers::{
    MESSAGE_WEIGHT, METERING_ID, QUOTA_INTERVAL, QUOTA_LIMIT, QUOTA_START, QUOTA_TIMEUNIT,
    QUOTA_WINDOW, QuotaRequest,
};
use tollgate_server::policy::PolicySet;

/// Header names by the low four bits of a record's first byte.
const NAMES: [&str; 16] = [
    METERING_ID,
    QUOTA_LIMIT,
    QUOTA_INTERVAL,
    QUOTA_TIMEUNIT,
    MESSAGE_WEIGHT,
    METERING_ID,
    QUOTA_LIMIT,
    QUOTA_INTERVAL,
    QUOTA_TIMEUNIT,
    MESSAGE_WEIGHT,
    QUOTA_WINDOW,
    QUOTA_START,
    "Metering-ID",
    "QUOTA-LIMIT",
    "quota-limits",
    "x-request-id",
];

/// Every header the contract reads.
const QUOTA_HEADERS: [&str; 7] = [
    METERING_ID,
    QUOTA_LIMIT,
    QUOTA_INTERVAL,
    QUOTA_TIMEUNIT,
    MESSAGE_WEIGHT,
    QUOTA_WINDOW,
    QUOTA_START,
];

/// The bytes `HeaderValue::from_bytes` accepts: visible ASCII, space, tab, and obs-text.
fn value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

fn headers(data: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for record in data.split(|&b| b == b'\n') {
        let Some((&first, rest)) = record.split_first() else { continue };
        let name = HeaderName::from_bytes(NAMES[usize::from(first & 15)].as_bytes())
            .expect("the table holds valid header names");
        let value: Vec<u8> = rest.iter().copied().filter(|&b| value_byte(b)).collect();
        let value = HeaderValue::from_bytes(&value).expect("only accepted bytes are kept");
        map.append(name, value);
    }
    map
}

/// The one value of `name` as the contract reads it (visible ASCII, trimmed), if it was sent
/// exactly once.
fn sent_once<'h>(map: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut all = map.get_all(name).iter();
    let first = all.next()?;
    assert!(all.next().is_none(), "{name} was sent twice yet the request was accepted");
    let text = first.to_str().unwrap_or_else(|_| panic!("{name} is not visible ASCII"));
    Some(text.trim())
}

/// A number the contract accepted: ASCII digits only, and the value they spell.
fn check_number<T: std::str::FromStr + PartialEq + std::fmt::Debug>(
    name: &str,
    text: &str,
    parsed: T,
) {
    assert!(
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()),
        "{name} {text:?} accepted as {parsed:?} though it is not ASCII digits"
    );
    assert!(text.parse::<T>().ok() == Some(parsed), "{name} {text:?} read as another number");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let map = headers(data);
    match QuotaRequest::from_headers(&map) {
        Ok(r) => {
            let id = sent_once(&map, METERING_ID).expect("accepted without metering-id");
            assert_eq!(r.id.as_str(), id);
            assert!((1..=256).contains(&id.len()), "metering-id of {} bytes", id.len());
            assert!(id.bytes().all(|b| b.is_ascii_graphic()), "metering-id {id:?}");

            match (sent_once(&map, QUOTA_LIMIT), r.limit) {
                (None, None) => {}
                (Some(text), Some(limit)) => check_number(QUOTA_LIMIT, text, limit),
                other => panic!("quota-limit {other:?}"),
            }
            match (sent_once(&map, QUOTA_INTERVAL), r.interval) {
                (None, None) => {}
                (Some(text), Some(interval)) => {
                    assert!(interval >= 1, "quota-interval {text:?} accepted as 0");
                    check_number(QUOTA_INTERVAL, text, interval);
                }
                other => panic!("quota-interval {other:?}"),
            }
            match sent_once(&map, MESSAGE_WEIGHT) {
                None => assert_eq!(r.weight, 1, "the weight is 1 when absent"),
                Some(text) => check_number(MESSAGE_WEIGHT, text, r.weight),
            }
            match (sent_once(&map, QUOTA_TIMEUNIT), r.unit) {
                (None, None) => {}
                (Some(text), Some(unit)) => {
                    let word = text.to_ascii_lowercase();
                    let word = word.strip_suffix('s').unwrap_or(&word);
                    assert_eq!(word, unit.as_str(), "quota-timeunit {text:?}");
                }
                other => panic!("quota-timeunit {other:?}"),
            }
            assert_eq!(sent_once(&map, QUOTA_WINDOW).is_some(), r.window.is_some());
            assert_eq!(sent_once(&map, QUOTA_START).is_some(), r.start.is_some());

            // With no policy, the headers alone make the spec: it is valid, or the refusal
            // names the header at fault.
            match PolicySet::new(Vec::new()).resolve(&r) {
                Ok(resolved) => {
                    let spec = resolved.spec;
                    assert_eq!(Some(spec.limit), r.limit);
                    assert_eq!(Some(spec.unit), r.unit);
                    assert_eq!(spec.interval, r.interval.unwrap_or(1));
                    assert!(spec.interval >= 1 && spec.interval <= spec.unit.max_interval());
                    assert_eq!(spec.start, r.start);
                    assert!(spec.validated().is_ok(), "{spec:?}");
                }
                Err(p) => {
                    assert_eq!(p.status(), StatusCode::BAD_REQUEST);
                    let body = p.body();
                    let name = body["invalid_header"].as_str().expect("invalid_header");
                    let expected: &[&str] = match (r.limit, r.unit) {
                        (None, _) => &[QUOTA_LIMIT],
                        (_, None) => &[QUOTA_TIMEUNIT],
                        _ => &[QUOTA_INTERVAL, QUOTA_TIMEUNIT, QUOTA_START],
                    };
                    assert!(expected.contains(&name), "resolve blamed {name}: {body}");
                }
            }
        }
        Err(p) => {
            assert_eq!(p.status(), StatusCode::BAD_REQUEST);
            let body = p.body();
            let name = body["invalid_header"].as_str().expect("the problem names a header");
            assert!(QUOTA_HEADERS.contains(&name), "invalid_header {name:?}");
            let detail = body["detail"].as_str().expect("the problem has a detail");
            assert!(detail.contains(name), "detail {detail:?} does not name {name}");
            let sent = map.get_all(name).iter().count();
            if body["value"].is_null() {
                assert_eq!((name, sent), (METERING_ID, 0), "{body}");
            } else {
                assert!(sent >= 1, "{name} blamed but not sent: {body}");
            }
        }
    }
});
