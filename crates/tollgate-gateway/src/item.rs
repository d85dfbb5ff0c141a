//! A queue item: one interchange on its way through the gateway, and the states it moves through.
//!
//! ```text
//!  received ──▶ admitted ──▶ delivered
//!     │   ▲        ▲   └──▶ dead
//!     │   │        │
//!     │   └─ held ─┘ ──▶ dead
//!     └──▶ rejected | duplicate
//! ```
//! `received` waits to be metered; `admitted` was metered (or released) and waits for, or is
//! in, delivery. `delivered`, `rejected`, `duplicate` and `dead` are terminal; only an operator
//! (retry, release) moves an item out of them.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tollgate_quota::{Counted, MeteringId, QuotaSpec, TimeUnit, WindowKind};

use crate::envelope::Layout;

/// Where an item is in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Spooled and parsed; waiting to be metered.
    Received,
    /// Metered (or released by an operator); waiting for delivery, or being delivered.
    Admitted,
    /// Over quota (or quota service down with `on_unavailable = "hold"`): retried later.
    Held,
    /// Delivered to the route's target.
    Delivered,
    /// Malformed, or no route for its document.
    Rejected,
    /// The same (sender, receiver, control number) was already received within `dedup_days`,
    /// or (on a `dedup = "transaction"` route) its transactions were already admitted.
    Duplicate,
    /// Can never go through on its own: delivery refused (4xx), too many attempts, or a batch
    /// larger than the limit without `split`.
    Dead,
}

impl State {
    /// The lowercase name used in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Admitted => "admitted",
            Self::Held => "held",
            Self::Delivered => "delivered",
            Self::Rejected => "rejected",
            Self::Duplicate => "duplicate",
            Self::Dead => "dead",
        }
    }

    /// True for states the pipeline never leaves by itself.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Received | Self::Admitted | Self::Held)
    }

    /// Every state, for metrics.
    pub const ALL: [State; 7] = [
        Self::Received,
        Self::Admitted,
        Self::Held,
        Self::Delivered,
        Self::Rejected,
        Self::Duplicate,
        Self::Dead,
    ];
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            format!("unknown state {s:?}: expected received, admitted, held, delivered, rejected, duplicate or dead")
        })
    }
}

/// One interchange in the queue. Stored as JSON in the spool database; also the admin API's
/// row (with the private fields skipped there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Stable id: the `Tollgate-Interchange-Id` header and the delivered file's name.
    /// Ids sort by arrival (they start with the receive time).
    pub id: String,
    /// Current state.
    pub state: State,
    /// The spool file holding the bytes (`spool/<name>.edi`; one spool file can hold many
    /// received files). Stored as `file` before it had this name.
    #[serde(alias = "file")]
    pub spool_file: String,
    /// Byte range of the interchange in the spool file.
    pub start: u64,
    /// End of the byte range (exclusive).
    pub end: u64,
    /// Partner name, or raw `QUAL:ID` for an unknown sender.
    pub partner: String,
    /// Sender `QUAL:ID`.
    pub sender: String,
    /// Receiver `QUAL:ID`.
    pub receiver: String,
    /// Interchange control number.
    pub control_number: String,
    /// Document type (first transaction's ST01 / UNH message type).
    pub document: String,
    /// Route name, when one matched.
    pub route: Option<String>,
    /// The counter this item is metered against, when routed.
    pub metering_id: Option<MeteringId>,
    /// Units it consumes.
    pub weight: u64,
    /// Receive time, Unix milliseconds.
    pub received_at: i64,
    /// When the pipeline next looks at it (held: re-meter; received: delivery retry), Unix ms.
    pub next_attempt_at: Option<i64>,
    /// Metering (held) or delivery attempts so far.
    pub attempts: u32,
    /// Why it is where it is (rejected, dead, held, duplicate).
    pub reason: Option<String>,
    /// What splitting it needs, kept from the parse of its file (items of split routes only;
    /// items stored without one are parsed again if they are split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// When it was first held, Unix ms (kept once it is released: how long it waited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<i64>,
    /// When its target took it, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<i64>,
    /// For a duplicate of admitted transactions: the item that holds their claim (the one
    /// its partner sent first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
    /// What its metering counted, while it may still be given back (admitted by the embedded
    /// store, not yet delivered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charge: Option<Charge>,
    /// What the metering of a part split off an item over quota counted, one charge per
    /// transaction with its units, while it may still be given back (as `charge`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_charges: Vec<(Charge, u64)>,
}

/// What the embedded store counted for an admitted item: the spec it was checked against and
/// where its units went, so a route with `refund_unsent` can give them back if the item is
/// purged or dies before its target takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The limit in force.
    pub limit: u64,
    /// The window's length in `unit`s.
    pub interval: u32,
    /// The window's unit.
    pub unit: TimeUnit,
    /// Calendar, flexi or rolling.
    pub window: WindowKind,
    /// The calendar anchor, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<i64>,
    /// Where the units were counted.
    pub counted: Counted,
}

impl Charge {
    /// The charge of a decision admitted against `spec`.
    pub(crate) fn of(spec: &QuotaSpec, counted: Counted) -> Self {
        Self {
            limit: spec.limit,
            interval: spec.interval,
            unit: spec.unit,
            window: spec.window,
            start_s: spec.start.map(|s| s.as_second()),
            counted,
        }
    }

    /// The spec it was counted against (`None` if its anchor no longer reads as a time).
    pub(crate) fn spec(&self) -> Option<QuotaSpec> {
        let start = match self.start_s {
            Some(s) => Some(jiff::Timestamp::from_second(s).ok()?),
            None => None,
        };
        Some(QuotaSpec {
            limit: self.limit,
            interval: self.interval,
            unit: self.unit,
            window: self.window,
            start,
        })
    }
}

impl State {
    /// The state a stored row means: `received` with the `admitted` flag of rows written
    /// before `admitted` was a state is admitted.
    pub(crate) fn as_stored(self, admitted: bool) -> State {
        if admitted && self == State::Received { State::Admitted } else { self }
    }
}

impl Item {
    /// Reads an item as stored; items written before `admitted` was a state carry it as
    /// `"state": "received", "admitted": true`.
    pub fn from_stored(json: &[u8]) -> Result<Item, serde_json::Error> {
        // The item is read directly (an unknown field is skipped); only a received one is
        // read again for the old flag, which keeps the common case free of serde's
        // buffered `flatten`.
        let mut item: Item = serde_json::from_slice(json)?;
        if item.state == State::Received {
            #[derive(Deserialize)]
            struct Legacy {
                #[serde(default)]
                admitted: bool,
            }
            item.state = item.state.as_stored(serde_json::from_slice::<Legacy>(json)?.admitted);
        }
        Ok(item)
    }
}

/// An item id ordered by arrival: digit runs compare as numbers, so `F-2` comes before
/// `F-10` however many interchanges a file holds (ids are `FILE`, `FILE-N` and `ID-sNNN`,
/// where `FILE` starts with the receive time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArrivalOrder(pub String);

impl Ord for ArrivalOrder {
    fn cmp(&self, other: &Self) -> Ordering {
        // Ties (`F-01` against `F-1`) fall back to the text, so `Ord` agrees with `Eq`.
        natural(self.0.as_bytes(), other.0.as_bytes()).then_with(|| self.0.cmp(&other.0))
    }
}

/// Compares two ids with digit runs as numbers.
fn natural(mut a: &[u8], mut b: &[u8]) -> Ordering {
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (na, ra) = digit_run(a);
                let (nb, rb) = digit_run(b);
                // Without leading zeros, a longer run is a larger number.
                let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                (a, b) = (ra, rb);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

impl PartialOrd for ArrivalOrder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The leading digits of `s` without leading zeros, and what follows them.
fn digit_run(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let (run, rest) = s.split_at(n);
    let zeros = run.iter().take_while(|&&c| c == b'0').count();
    (&run[zeros..], rest)
}

/// Unix milliseconds as RFC 3339.
pub(crate) fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{ArrivalOrder, Item, State};
    use crate::tally::TallyRow;

    #[test]
    fn items_stored_before_the_admitted_state_read_as_admitted() {
        let old = br#"{"id":"F-1","state":"received","admitted":true,"file":"F","start":0,"end":9,
            "partner":"P","sender":"ZZ:A","receiver":"ZZ:B","control_number":"1","document":"214",
            "route":"R","metering_id":"R:P","weight":1,"received_at":0,"next_attempt_at":null,
            "attempts":0,"reason":null}"#;
        assert_eq!(Item::from_stored(old).unwrap().state, State::Admitted);
        let waiting = String::from_utf8(old.to_vec()).unwrap().replace("true", "false");
        assert_eq!(Item::from_stored(waiting.as_bytes()).unwrap().state, State::Received);
        let item = Item::from_stored(old).unwrap();
        let again = serde_json::to_vec(&item).unwrap();
        assert_eq!(Item::from_stored(&again).unwrap(), item, "a stored item reads back the same");
        assert!(
            !String::from_utf8(again.clone()).unwrap().contains("\"admitted\":"),
            "no flag any more"
        );
        // The tally reads the same of a stored row as of the item decoded in full.
        for json in [&old[..], waiting.as_bytes(), &again] {
            let whole = TallyRow::of(&Item::from_stored(json).unwrap());
            assert_eq!(TallyRow::from_stored(json).unwrap(), whole);
        }
    }

    #[test]
    fn arrival_order_compares_sequence_numbers_as_numbers() {
        let mut ids: Vec<ArrivalOrder> = ["F-10", "F-2", "F-10000", "F-1", "F-9999", "E-3", "F"]
            .into_iter()
            .map(|s| ArrivalOrder(s.into()))
            .collect();
        ids.sort();
        let got: Vec<&str> = ids.iter().map(|a| a.0.as_str()).collect();
        assert_eq!(got, ["E-3", "F", "F-1", "F-2", "F-10", "F-9999", "F-10000"]);
        let a = ArrivalOrder("0001764000000000-000007-2".into());
        let b = ArrivalOrder("0001764000000000-000007-2-s000000004".into());
        assert!(a < b, "a split part follows the item it was split from");
    }
}
