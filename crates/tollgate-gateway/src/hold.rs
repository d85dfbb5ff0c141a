//! The hold queue: held items per metering id, oldest first, and when each group is next due.
//!
//! Invariants:
//! - A group holds the ids of the `held` items of one metering id in arrival order
//!   ([`ArrivalOrder`]: ids begin with the receive time, and sequence numbers compare as
//!   numbers, so `F-10` follows `F-9`). Only the head of a group is re-metered
//!   automatically; the others wait behind it, so a partner's documents keep their order.
//! - While a group is non-empty, a new item for that metering id is held behind it without
//!   being metered (see `pipeline`), so it cannot overtake.
//! - The retry time of a group is its head's `next_attempt_at`; Retry-After gets a jitter of
//!   up to 10 % (at most 5 s, at least 1 ms) so that many groups do not wake in lockstep.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tollgate_quota::MeteringId;

use crate::clock::GatewayClock;
use crate::item::ArrivalOrder;

/// Held item ids grouped by metering id.
#[derive(Debug, Default)]
pub(crate) struct HoldQueue {
    groups: BTreeMap<MeteringId, BTreeSet<ArrivalOrder>>,
}

impl HoldQueue {
    /// Adds a held item to its group.
    pub(crate) fn insert(&mut self, metering_id: &MeteringId, item: &str) {
        self.groups.entry(metering_id.clone()).or_default().insert(ArrivalOrder(item.to_owned()));
    }

    /// Removes an item (admitted, released, purged); drops the group when it empties.
    pub(crate) fn remove(&mut self, metering_id: &MeteringId, item: &str) {
        if let Some(g) = self.groups.get_mut(metering_id) {
            g.remove(&ArrivalOrder(item.to_owned()));
            if g.is_empty() {
                self.groups.remove(metering_id);
            }
        }
    }

    /// The oldest held item of a group.
    pub(crate) fn head(&self, metering_id: &MeteringId) -> Option<&str> {
        self.groups.get(metering_id).and_then(|g| g.first()).map(|a| a.0.as_str())
    }

    /// True when `item` is in the group of `metering_id`.
    pub(crate) fn contains(&self, metering_id: &MeteringId, item: &str) -> bool {
        self.groups.get(metering_id).is_some_and(|g| g.contains(&ArrivalOrder(item.to_owned())))
    }

    /// True when the metering id has held items (a new item must wait behind them).
    pub(crate) fn is_holding(&self, metering_id: &MeteringId) -> bool {
        self.groups.contains_key(metering_id)
    }

    /// Number of held items of one metering id.
    pub(crate) fn depth(&self, metering_id: &MeteringId) -> usize {
        self.groups.get(metering_id).map_or(0, BTreeSet::len)
    }

    /// True when nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Number of held items in all groups.
    pub(crate) fn len(&self) -> usize {
        self.groups.values().map(BTreeSet::len).sum()
    }

    /// `(metering id, head item id)` of every group.
    pub(crate) fn heads(&self) -> impl Iterator<Item = (&MeteringId, &str)> {
        self.groups.iter().filter_map(|(m, g)| g.first().map(|h| (m, h.0.as_str())))
    }
}

/// Retry-After plus jitter: up to 10 % more, capped at 5 s, and at least 1 ms, drawn from
/// the gateway's clock (seeded in a simulation).
pub(crate) fn jittered(clock: &GatewayClock, retry_after: Duration) -> Duration {
    clock.jittered(retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> MeteringId {
        MeteringId::new(s).unwrap()
    }

    #[test]
    fn groups_keep_arrival_order() {
        let mut q = HoldQueue::default();
        q.insert(&m("R:A"), "0002");
        q.insert(&m("R:A"), "0001");
        q.insert(&m("R:B"), "0003");
        assert_eq!(q.head(&m("R:A")), Some("0001"));
        assert_eq!(q.len(), 3);
        q.remove(&m("R:A"), "0001");
        assert_eq!(q.head(&m("R:A")), Some("0002"));
        q.remove(&m("R:A"), "0002");
        assert!(!q.is_holding(&m("R:A")));
        assert_eq!(q.heads().collect::<Vec<_>>(), vec![(&m("R:B"), "0003")]);
    }

    #[test]
    fn the_tenth_interchange_of_a_file_waits_behind_the_second() {
        let mut q = HoldQueue::default();
        for n in (1..=10_000).rev() {
            q.insert(&m("R:A"), &format!("0001764000000000-000001-{n}"));
        }
        for n in 1..=10_000 {
            let head = q.head(&m("R:A")).map(str::to_owned);
            assert_eq!(head.as_deref(), Some(format!("0001764000000000-000001-{n}").as_str()));
            q.remove(&m("R:A"), &format!("0001764000000000-000001-{n}"));
        }
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let seeded = GatewayClock::with_seed(std::sync::Arc::new(tollgate_quota::SystemClock), 7);
        for clock in [GatewayClock::system(), seeded] {
            let d = jittered(&clock, Duration::from_secs(10));
            assert!(d >= Duration::from_secs(10) && d <= Duration::from_secs(11));
        }
    }
}
