//! Delivery lanes: admitted items wait here, one lane per metering id, and leave one at a
//! time in arrival order, so a partner's documents reach the target in the order they came.
//!
//! Invariants:
//! - An item is in at most one lane, either as the lane's *current* item (being delivered,
//!   or sleeping until its delivery retry) or among its *waiting* items.
//! - A lane has at most one current item. The next one starts only when the current one is
//!   [`Lanes::finish`]ed: delivered, dead, or purged. A retry keeps it current, so a later
//!   document never overtakes an earlier one that the target refused for the moment.
//! - Waiting items are ordered by [`ArrivalOrder`], not by admission, so an operator's
//!   release of an old item puts it ahead of newer ones that have not started yet.
//!
//! Lanes trade a partner's delivery parallelism for order; different metering ids still
//! deliver in parallel, up to each target's `max_concurrency`.

use std::collections::{BTreeSet, HashMap};

use crate::item::ArrivalOrder;

/// Admitted items by lane (metering id), delivered one at a time per lane.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    waiting: HashMap<String, BTreeSet<ArrivalOrder>>,
    current: HashMap<String, String>,
    lane_of: HashMap<String, String>,
}

impl Lanes {
    /// Puts an item in its lane (no-op if it is already in one).
    pub(crate) fn push(&mut self, lane: &str, id: &str) {
        if self.lane_of.contains_key(id) {
            return;
        }
        self.lane_of.insert(id.to_owned(), lane.to_owned());
        self.waiting.entry(lane.to_owned()).or_default().insert(ArrivalOrder(id.to_owned()));
    }

    /// The lane's current item, promoting the oldest waiting one when there is none.
    pub(crate) fn current(&mut self, lane: &str) -> Option<&str> {
        if !self.current.contains_key(lane) {
            let waiting = self.waiting.get_mut(lane)?;
            let next = waiting.pop_first()?;
            if waiting.is_empty() {
                self.waiting.remove(lane);
            }
            self.current.insert(lane.to_owned(), next.0);
        }
        self.current.get(lane).map(String::as_str)
    }

    /// The number of items in all lanes (current and waiting).
    pub(crate) fn len(&self) -> usize {
        self.lane_of.len()
    }

    /// Takes an item out of its lane; returns the lane, whose next item may now start.
    pub(crate) fn finish(&mut self, id: &str) -> Option<String> {
        let lane = self.lane_of.remove(id)?;
        if self.current.get(&lane).is_some_and(|c| c == id) {
            self.current.remove(&lane);
        } else if let Some(w) = self.waiting.get_mut(&lane) {
            w.remove(&ArrivalOrder(id.to_owned()));
            if w.is_empty() {
                self.waiting.remove(&lane);
            }
        }
        Some(lane)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_current_item_per_lane_in_arrival_order() {
        let mut l = Lanes::default();
        l.push("A", "F-10");
        l.push("A", "F-2");
        l.push("B", "G-1");
        assert_eq!(l.current("A"), Some("F-2"));
        l.push("A", "F-1"); // released by an operator: next, but after the current one
        assert_eq!(l.current("A"), Some("F-2"), "a retry keeps the current item");
        assert_eq!(l.current("B"), Some("G-1"), "lanes are independent");
        assert_eq!(l.finish("F-2").as_deref(), Some("A"));
        assert_eq!(l.current("A"), Some("F-1"));
        assert_eq!(l.finish("F-10").as_deref(), Some("A"), "a waiting item can be purged");
        assert_eq!(l.finish("F-1").as_deref(), Some("A"));
        assert_eq!(l.current("A"), None);
        assert_eq!(l.finish("nope"), None);
    }
}
