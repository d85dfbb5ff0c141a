//! Delivery lanes: admitted items wait here, one lane per metering id, and leave in arrival
//! order, a *run* at a time, so a partner's documents reach the target in the order they came.
//!
//! Invariants:
//! - An item is in at most one lane, either in the lane's current *run* (handed to one
//!   delivery task, which delivers its items one after another, or sleeping until the head's
//!   delivery retry) or among its *waiting* items.
//! - A lane has at most one run. The next run is taken only when every item of the current
//!   one is [`Lanes::finish`]ed: delivered, dead, or purged. A retry keeps its item, and the
//!   rest of its run, current, so a later document never overtakes an earlier one that the
//!   target refused for the moment.
//! - Waiting items are ordered by [`ArrivalOrder`], not by admission, so an operator's
//!   release of an old item puts it ahead of newer ones not yet taken into a run.
//!
//! Lanes trade a partner's delivery parallelism for order; different metering ids still
//! deliver in parallel, up to each target's `max_concurrency`. A run lets the next item start
//! as soon as the target has the previous one, without waiting for the pipeline to record it.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::item::ArrivalOrder;

/// Admitted items by lane (metering id), delivered in runs, one run at a time per lane.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    waiting: HashMap<String, BTreeSet<ArrivalOrder>>,
    runs: HashMap<String, VecDeque<String>>,
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

    /// The lane's current run, oldest first; when it has none, the `max` oldest waiting items
    /// become it.
    pub(crate) fn take_run(&mut self, lane: &str, max: usize) -> Option<&VecDeque<String>> {
        if !self.runs.contains_key(lane) {
            let waiting = self.waiting.get_mut(lane)?;
            let mut run = VecDeque::new();
            while run.len() < max.max(1)
                && let Some(next) = waiting.pop_first()
            {
                run.push_back(next.0);
            }
            if waiting.is_empty() {
                self.waiting.remove(lane);
            }
            self.runs.insert(lane.to_owned(), run);
        }
        self.runs.get(lane)
    }

    /// The current run of the lane `id` is in, if it has one.
    pub(crate) fn run_of(&self, id: &str) -> Option<&VecDeque<String>> {
        self.runs.get(self.lane_of.get(id)?)
    }

    /// The number of items in all lanes (in runs and waiting).
    pub(crate) fn len(&self) -> usize {
        self.lane_of.len()
    }

    /// Takes an item out of its lane; returns the lane, whose next item may now start.
    pub(crate) fn finish(&mut self, id: &str) -> Option<String> {
        let lane = self.lane_of.remove(id)?;
        if let Some(run) = self.runs.get_mut(&lane)
            && let Some(at) = run.iter().position(|c| c == id)
        {
            run.remove(at);
            if run.is_empty() {
                self.runs.remove(&lane);
            }
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

    fn run(l: &mut Lanes, lane: &str, max: usize) -> Vec<String> {
        l.take_run(lane, max).map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }

    #[test]
    fn one_run_per_lane_in_arrival_order() {
        let mut l = Lanes::default();
        l.push("A", "F-10");
        l.push("A", "F-2");
        l.push("A", "F-3");
        l.push("B", "G-1");
        assert_eq!(run(&mut l, "A", 2), ["F-2", "F-3"]);
        l.push("A", "F-1"); // released by an operator: next, but after the current run
        assert_eq!(run(&mut l, "A", 9), ["F-2", "F-3"], "a run is kept until it is finished");
        assert_eq!(l.run_of("F-1"), l.run_of("F-3"), "the run of an item's lane");
        assert_eq!(run(&mut l, "B", 2), ["G-1"], "lanes are independent");
        assert_eq!(l.finish("F-3").as_deref(), Some("A"), "a run's later item can be purged");
        assert_eq!(run(&mut l, "A", 9), ["F-2"]);
        assert_eq!(l.finish("F-2").as_deref(), Some("A"));
        assert_eq!(run(&mut l, "A", 1), ["F-1"]);
        assert_eq!(l.finish("F-10").as_deref(), Some("A"), "a waiting item can be purged");
        assert_eq!(l.len(), 2);
        assert_eq!(l.finish("F-1").as_deref(), Some("A"));
        assert!(run(&mut l, "A", 9).is_empty());
        assert_eq!(l.finish("nope"), None);
        l.push("A", "F-4");
        assert_eq!(run(&mut l, "A", 0), ["F-4"], "a run has at least one item");
    }
}
