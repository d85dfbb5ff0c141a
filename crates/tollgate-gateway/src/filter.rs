//! A queue filter: which items `GET /v1/queue` lists and a bulk release or purge acts on —
//! by partner, route, state and receive time. Parsed once from the query, then trusted.

use std::fmt::Write as _;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::item::{Item, State};

/// Which items to list or act on; every field `None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueFilter {
    /// The partner name exactly (or the raw `QUAL:ID` of an unknown sender).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partner: Option<String>,
    /// The route name exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Received at or after this time, Unix ms.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_time")]
    pub from_ms: Option<i64>,
    /// Received before this time, Unix ms.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_time")]
    pub to_ms: Option<i64>,
}

fn as_time<S: serde::Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&ms.map(crate::item::rfc3339).unwrap_or_default())
}

/// The filter's query parameters as received (`?partner=&route=&state=&from=&to=`), and
/// their description in the OpenAPI document of every route that takes them.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FilterQuery {
    /// Only this partner's items (the name exactly, or the raw QUAL:ID of an unknown sender).
    pub(crate) partner: Option<String>,
    /// Only this route's items.
    pub(crate) route: Option<String>,
    /// Only items in this state (all when empty or absent).
    #[param(pattern = "^(received|admitted|held|delivered|rejected|duplicate|dead)?$")]
    pub(crate) state: Option<String>,
    /// Only items received at or after this RFC 3339 time.
    #[param(format = DateTime)]
    pub(crate) from: Option<String>,
    /// Only items received before this RFC 3339 time.
    #[param(format = DateTime)]
    pub(crate) to: Option<String>,
}

/// A query parameter that does not parse: its name, the value and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadParameter {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) why: String,
}

/// Ids start with their receive time in Unix ms, 13 digits; an item's `received_at` may be a
/// little earlier than its id's time, so range scans start this much before `from`.
const ID_SLACK_MS: i64 = 60_000;
/// The largest time an id's 13 digits can hold.
const MAX_ID_MS: i64 = 9_999_999_999_999;

/// An id above that of every item received before `ms` (exclusive bound of a range scan).
pub(crate) fn id_below(ms: i64) -> String {
    format!("{:013}", ms.saturating_add(ID_SLACK_MS).clamp(0, MAX_ID_MS))
}

impl QueueFilter {
    /// Parses the query; an empty partner, route or state counts as absent, an empty time is
    /// refused.
    pub(crate) fn parse(q: &FilterQuery) -> Result<Self, BadParameter> {
        let text = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
        let state = match text(&q.state) {
            None => None,
            Some(s) => Some(s.parse::<State>().map_err(|why| BadParameter {
                name: "state",
                value: s.clone(),
                why,
            })?),
        };
        // An empty time is refused, not taken as absent: the parameter is a date-time.
        let time = |name: &'static str, v: &Option<String>| -> Result<Option<i64>, BadParameter> {
            let Some(s) = v.clone() else { return Ok(None) };
            s.parse::<Timestamp>().map(|t| Some(t.as_millisecond())).map_err(|e| BadParameter {
                name,
                value: s.clone(),
                why: format!("{name} must be an RFC 3339 time such as 2026-12-02T05:00:00Z: {e}"),
            })
        };
        let filter = Self {
            partner: text(&q.partner),
            route: text(&q.route),
            state,
            from_ms: time("from", &q.from)?,
            to_ms: time("to", &q.to)?,
        };
        Ok(filter)
    }

    /// True when `item` passes.
    pub fn matches(&self, item: &Item) -> bool {
        self.partner.as_ref().is_none_or(|p| &item.partner == p)
            && self.route.as_ref().is_none_or(|r| item.route.as_ref() == Some(r))
            && self.state.is_none_or(|s| s == item.state)
            && self.from_ms.is_none_or(|f| item.received_at >= f)
            && self.to_ms.is_none_or(|t| item.received_at < t)
    }

    /// True when a time bound is set (the tally cannot count it; a scan must).
    pub fn has_time(&self) -> bool {
        self.from_ms.is_some() || self.to_ms.is_some()
    }

    /// The smallest and (exclusive) largest id the items may have, from the time bounds.
    pub(crate) fn id_bounds(&self) -> (Option<String>, Option<String>) {
        let id = |ms: i64| format!("{:013}", ms.clamp(0, MAX_ID_MS));
        (self.from_ms.map(|f| id(f.saturating_sub(ID_SLACK_MS))), self.to_ms.map(id_below))
    }

    /// The filter as query parameters (`partner=…&state=…&`), percent-encoded, each followed
    /// by `&`; empty for no filter.
    pub(crate) fn query(&self) -> String {
        let mut q = String::new();
        let mut add = |k: &str, v: &str| {
            let _ = write!(q, "{k}={}&", encode(v));
        };
        if let Some(p) = &self.partner {
            add("partner", p);
        }
        if let Some(r) = &self.route {
            add("route", r);
        }
        if let Some(s) = self.state {
            add("state", s.as_str());
        }
        if let Some(f) = self.from_ms {
            add("from", &crate::item::rfc3339(f));
        }
        if let Some(t) = self.to_ms {
            add("to", &crate::item::rfc3339(t));
        }
        q
    }
}

/// Percent-encodes a query value (keeps unreserved characters).
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> FilterQuery {
        let get = |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
        FilterQuery {
            partner: get("partner"),
            route: get("route"),
            state: get("state"),
            from: get("from"),
            to: get("to"),
        }
    }

    #[test]
    fn a_filter_parses_names_bad_values_and_round_trips_as_a_query() {
        let f = QueueFilter::parse(&q(&[
            ("partner", "Carrier XYZ&1"),
            ("state", "held"),
            ("from", "2026-12-02T05:00:00Z"),
        ]))
        .unwrap();
        assert_eq!(f.state, Some(State::Held));
        assert_eq!(f.from_ms, Some(1_796_187_600_000));
        assert_eq!(
            f.query(),
            "partner=Carrier%20XYZ%261&state=held&from=2026-12-02T05%3A00%3A00Z&"
        );
        let bad = QueueFilter::parse(&q(&[("state", "parked")])).unwrap_err();
        assert_eq!((bad.name, bad.value.as_str()), ("state", "parked"));
        let bad = QueueFilter::parse(&q(&[("from", "yesterday")])).unwrap_err();
        assert_eq!((bad.name, bad.value.as_str()), ("from", "yesterday"));
        assert!(bad.why.contains("RFC 3339"), "{}", bad.why);
        let bad = QueueFilter::parse(&q(&[("to", "")])).unwrap_err();
        assert_eq!((bad.name, bad.value.as_str()), ("to", ""));
        let none = QueueFilter::parse(&q(&[
            ("from", "2026-12-02T05:00:00Z"),
            ("to", "2026-12-01T00:00:00Z"),
        ]))
        .unwrap();
        assert!(none.from_ms > none.to_ms, "a range ending before it starts keeps nothing");
        assert_eq!(QueueFilter::parse(&q(&[("partner", "")])).unwrap(), QueueFilter::default());
    }

    #[test]
    fn time_bounds_widen_to_id_bounds() {
        let f =
            QueueFilter { from_ms: Some(1_000_000), to_ms: Some(2_000_000), ..Default::default() };
        assert_eq!(
            f.id_bounds(),
            (Some("0000000940000".to_owned()), Some("0000002060000".to_owned()))
        );
        let f = QueueFilter { from_ms: Some(-5), ..Default::default() };
        assert_eq!(f.id_bounds().0.as_deref(), Some("0000000000000"));
    }
}
