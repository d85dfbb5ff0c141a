//! The queue tally: how many items, and how many units, each (partner, route, metering id)
//! has in each state, kept in memory beside the spool so the console's overview and the
//! queue's totals never read the whole queue.
//!
//! Invariants:
//! - **One writer, the spool's commit.** [`Spool::commit`](crate::spool::Spool::commit) and
//!   the prune are the only places item rows change; each reads the row it replaces or removes
//!   inside its write transaction and hands the tally the difference, which is applied only
//!   once the transaction has committed. So the tally equals a count of the stored rows after
//!   every commit (the spool's tests compare the two).
//! - **Built from the rows at open.** A restart counts the stored rows again; nothing of the
//!   tally is stored.
//! - **Bounded by the queue.** A group exists while at least one stored item belongs to it; a
//!   group whose counts fall to zero is removed.
//! - **`held_since`** is when the group's held count last rose from zero (at open, the oldest
//!   `held_at` of its held items), and is cleared when it falls back to zero.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::item::{Item, State};

/// Which items a group holds: one partner's items of one route, metered against one id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TallyKey {
    /// The partner name, or the raw `QUAL:ID` of an unknown sender.
    pub partner: String,
    /// The route, when one matched.
    pub route: Option<String>,
    /// The counter the items are metered against, when routed.
    pub metering_id: Option<String>,
}

/// Items and units per state of one group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// Items per state, indexed as [`State::ALL`].
    pub items: [u64; 7],
    /// Units (the items' weights) per state, indexed as [`State::ALL`].
    pub units: [u64; 7],
    /// When the held count last rose from zero, Unix ms (`None` while nothing is held).
    pub held_since: Option<i64>,
}

impl StateCounts {
    /// Items in `state`.
    pub fn items_in(&self, state: State) -> u64 {
        self.items[index(state)]
    }

    /// Units in `state`.
    pub fn units_in(&self, state: State) -> u64 {
        self.units[index(state)]
    }

    /// Every item, in any state.
    pub fn total(&self) -> u64 {
        self.items.iter().sum()
    }

    fn add(&mut self, item: &TallyRow, at_ms: i64) {
        let i = index(item.state);
        if item.state == State::Held && self.items[i] == 0 {
            self.held_since = Some(item.held_at.unwrap_or(at_ms));
        }
        self.items[i] += 1;
        self.units[i] = self.units[i].saturating_add(item.weight);
    }

    fn remove(&mut self, item: &TallyRow) {
        let i = index(item.state);
        self.items[i] = self.items[i].saturating_sub(1);
        self.units[i] = self.units[i].saturating_sub(item.weight);
        if item.state == State::Held && self.items[i] == 0 {
            self.held_since = None;
        }
    }
}

fn index(state: State) -> usize {
    State::ALL.iter().position(|s| *s == state).unwrap_or(0)
}

/// What the tally reads of an item row: its group, state, weight and when it was held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TallyRow {
    key: TallyKey,
    state: State,
    weight: u64,
    held_at: Option<i64>,
}

impl TallyRow {
    /// The tally's part of `item`.
    pub(crate) fn of(item: &Item) -> Self {
        Self {
            key: TallyKey {
                partner: item.partner.clone(),
                route: item.route.clone(),
                metering_id: item.metering_id.as_ref().map(|m| m.as_str().to_owned()),
            },
            state: item.state,
            weight: item.weight,
            held_at: item.held_at,
        }
    }

    /// The tally's part of a stored row, read without decoding the rest of the item (as
    /// [`Item::from_stored`] reads it: `"received"` with `"admitted": true` is admitted).
    pub(crate) fn from_stored(json: &[u8]) -> Result<Self, serde_json::Error> {
        Ok(serde_json::from_slice::<Stored<'_>>(json)?.into_row())
    }

    /// The tally's part of a stored row when the item was delivered and received before
    /// `before_ms` (what the prune drops), read in one pass; `None` for any other row, and for
    /// one that does not decode (the prune keeps it).
    pub(crate) fn delivered_before(json: &[u8], before_ms: i64) -> Option<Self> {
        let s = serde_json::from_slice::<Stored<'_>>(json).ok()?;
        let dropped =
            s.state.as_stored(s.admitted) == State::Delivered && s.received_at < before_ms;
        dropped.then(|| s.into_row())
    }
}

/// What the tally and the prune read of a stored row; its strings are borrowed from the row
/// where they need no unescaping, so a row the prune keeps costs no allocation.
#[derive(Deserialize)]
struct Stored<'a> {
    #[serde(borrow)]
    partner: Cow<'a, str>,
    #[serde(borrow)]
    route: Option<Cow<'a, str>>,
    #[serde(borrow)]
    metering_id: Option<Cow<'a, str>>,
    state: State,
    weight: u64,
    #[serde(default)]
    held_at: Option<i64>,
    #[serde(default)]
    admitted: bool,
    #[serde(default)]
    received_at: i64,
}

impl Stored<'_> {
    fn into_row(self) -> TallyRow {
        TallyRow {
            key: TallyKey {
                partner: self.partner.into_owned(),
                route: self.route.map(Cow::into_owned),
                metering_id: self.metering_id.map(Cow::into_owned),
            },
            state: self.state.as_stored(self.admitted),
            weight: self.weight,
            held_at: self.held_at,
        }
    }
}

/// The rows one commit wrote (`true`) and replaced or removed (`false`), in the order it
/// did so: applied to the tally once the commit is durable.
#[derive(Debug, Default)]
pub(crate) struct TallyChange(Vec<(bool, TallyRow)>);

impl TallyChange {
    /// A row written.
    pub(crate) fn came(&mut self, row: TallyRow) {
        self.0.push((true, row));
    }

    /// A row replaced or removed.
    pub(crate) fn gone(&mut self, row: TallyRow) {
        self.0.push((false, row));
    }
}

/// The tally; cheap to clone (one shared map behind a lock held only to copy or apply).
#[derive(Debug, Clone, Default)]
pub struct QueueTally {
    groups: Arc<Mutex<HashMap<TallyKey, StateCounts>>>,
}

impl QueueTally {
    /// A tally of `items` (the spool's rows at open).
    pub(crate) fn of<'a>(items: impl IntoIterator<Item = &'a Item>) -> Self {
        let mut groups: HashMap<TallyKey, StateCounts> = HashMap::new();
        for item in items {
            let row = TallyRow::of(item);
            let g = groups.entry(row.key.clone()).or_default();
            g.add(&row, item.received_at);
            if item.state == State::Held
                && let Some(at) = item.held_at
            {
                g.held_since = Some(g.held_since.map_or(at, |s| s.min(at)));
            }
        }
        Self { groups: Arc::new(Mutex::new(groups)) }
    }

    /// Applies what one committed change did; `at_ms` is the commit's time.
    pub(crate) fn apply(&self, change: &TallyChange, at_ms: i64) {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        for (came, row) in &change.0 {
            if *came {
                match groups.get_mut(&row.key) {
                    Some(g) => g.add(row, at_ms),
                    None => groups.entry(row.key.clone()).or_default().add(row, at_ms),
                }
            } else if let Some(g) = groups.get_mut(&row.key) {
                g.remove(row);
                if g.total() == 0 {
                    groups.remove(&row.key);
                }
            }
        }
    }

    /// Every group and its counts, in key order.
    pub fn snapshot(&self) -> Vec<(TallyKey, StateCounts)> {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(TallyKey, StateCounts)> =
            groups.iter().map(|(k, v)| (k.clone(), *v)).collect();
        drop(groups);
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Items matching `partner`, `route` and `state` (each `None` matches all).
    pub fn count(&self, partner: Option<&str>, route: Option<&str>, state: Option<State>) -> u64 {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups
            .iter()
            .filter(|(k, _)| partner.is_none_or(|p| k.partner == p))
            .filter(|(k, _)| route.is_none_or(|r| k.route.as_deref() == Some(r)))
            .map(|(_, c)| state.map_or_else(|| c.total(), |s| c.items_in(s)))
            .sum()
    }
}
