//! The keys whose counters buffered checks changed since the flusher last took them: one
//! vector per lane, each behind its own lock on its own cache lines, and a thread always
//! queues on the same lane.
//!
//! Threads checking at once then seldom share a lock: on one queue for every check they waited
//! on each other, which cost 1.6 to 2 times the CPU per check in process (BENCHMARKS.md, *The
//! queue on lanes, kept*). Lanes are handed out in turn and kept for good, so once more threads
//! have checked than there are lanes (2 per core, 4 to 256), some share one: slower, never
//! wrong. Strict checks, resets and flushes still go through the shared queue,
//! whose sequence numbers they wait on.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crossbeam_utils::CachePadded;
use hashbrown::{DefaultHashBuilder, HashTable};

use crate::metering_id::MeteringId;
use crate::spec::CounterShape;

/// A counter's key: its id and shape.
pub(super) type Key = (MeteringId, CounterShape);

/// Lanes per core, and the bounds of their count: enough that threads seldom share one.
const LANES_PER_CORE: usize = 2;
const MIN_LANES: usize = 4;
const MAX_LANES: usize = 256;

/// A lane whose vector grew beyond this many keys and then held far fewer gives its memory
/// back when taken, so a burst does not keep its peak.
pub(super) const KEEP_KEYS: usize = 4096;

/// The changed keys, by lane (see the module docs). Invariant: the number of lanes is a power
/// of two.
pub(super) struct Dirty {
    lanes: Box<[CachePadded<Mutex<Vec<Key>>>]>,
}

impl Dirty {
    pub(super) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = (cores * LANES_PER_CORE).next_power_of_two().clamp(MIN_LANES, MAX_LANES);
        Self { lanes: (0..n).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect() }
    }

    /// Queues `key` on this thread's lane, unless it is the key the lane queued last: the
    /// flusher writes a counter's state as it is when taken, so once queued is enough, and a
    /// flood of checks on one counter then holds no more memory than one check.
    pub(super) fn push(&self, key: Key) {
        // The lane count is a power of two: a mask, not a division, on every check.
        let lane = &self.lanes[lane_index() & (self.lanes.len() - 1)];
        let mut keys = lane.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.last() != Some(&key) {
            keys.push(key);
        }
    }

    /// Moves every lane's keys to the end of `out`, lane by lane.
    pub(super) fn take_into(&self, out: &mut Vec<Key>) {
        for lane in self.lanes.iter() {
            let mut keys = lane.lock().unwrap_or_else(PoisonError::into_inner);
            let taken = keys.len();
            out.append(&mut keys);
            if keys.capacity() > KEEP_KEYS && keys.capacity() > 4 * taken {
                *keys = Vec::new();
            }
        }
    }
}

/// Keeps each key of `keys` once, in key order (ids compare as bytes: no UTF-8 check per
/// comparison), so a commit writes each counter once and neighbouring rows one after the other.
///
/// Repeats go first, through a hash table of positions: a busy counter is queued by every
/// check of it, and sorting a million repeats of ten thousand keys took more of the flusher's
/// time than writing them (BENCHMARKS.md, *Each key once before the sort*).
pub(super) fn distinct_in_key_order(keys: &mut Vec<Key>) {
    let hasher = DefaultHashBuilder::default();
    let mut seen: HashTable<usize> = HashTable::new();
    // `keys[..kept]` are the distinct keys found so far; `seen` holds their positions.
    let mut kept = 0;
    for i in 0..keys.len() {
        let hash = hasher.hash_one(&keys[i]);
        if seen.find(hash, |&j| keys[j] == keys[i]).is_some() {
            continue;
        }
        keys.swap(kept, i);
        seen.insert_unique(hash, kept, |&j| hasher.hash_one(&keys[j]));
        kept += 1;
    }
    keys.truncate(kept);
    keys.sort_unstable();
}

/// This thread's lane number (before the mask): threads take numbers in turn as they first
/// queue a key, so the first threads to check all have lanes of their own.
fn lane_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    LANE.with(|lane| *lane)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn key(i: usize) -> Key {
        let shape = crate::spec::QuotaSpec::new(10, 1, crate::spec::TimeUnit::Day)
            .map(|s| s.counter_shape())
            .unwrap_or_else(|e| panic!("spec: {e}"));
        (MeteringId::new(&format!("Order:P{i}")).unwrap_or_else(|e| panic!("id: {e}")), shape)
    }

    #[test]
    fn every_key_queued_on_any_thread_is_taken_once() {
        let dirty = Dirty::new();
        std::thread::scope(|s| {
            for t in 0..6 {
                let dirty = &dirty;
                s.spawn(move || (0..500).for_each(|i| dirty.push(key(t * 1000 + i))));
            }
        });
        let mut out = Vec::new();
        dirty.take_into(&mut out);
        let mut ids: Vec<String> = out.iter().map(|(id, _)| id.as_str().to_owned()).collect();
        ids.sort();
        let mut want: Vec<String> = (0..6)
            .flat_map(|t| (0..500).map(move |i| format!("Order:P{}", t * 1000 + i)))
            .collect();
        want.sort();
        assert_eq!(ids, want);
        let mut again = Vec::new();
        dirty.take_into(&mut again);
        assert!(again.is_empty(), "taken keys are gone from the lanes");
    }

    #[test]
    fn a_flood_on_one_counter_is_queued_once_per_run() {
        let dirty = Dirty::new();
        (0..10_000).for_each(|_| dirty.push(key(1)));
        dirty.push(key(2));
        dirty.push(key(1));
        let mut out = Vec::new();
        dirty.take_into(&mut out);
        assert_eq!(out, vec![key(1), key(2), key(1)]);
        dirty.push(key(1));
        dirty.take_into(&mut out);
        assert_eq!(out.len(), 4, "a key taken is queued again by its next check");
    }

    #[test]
    fn a_lane_gives_back_what_a_burst_left() {
        let dirty = Dirty::new();
        (0..3 * KEEP_KEYS).for_each(|i| dirty.push(key(i)));
        let mut out = Vec::new();
        dirty.take_into(&mut out);
        assert_eq!(out.len(), 3 * KEEP_KEYS);
        let held = |d: &Dirty| -> usize {
            d.lanes.iter().map(|l| l.lock().map_or(0, |v| v.capacity())).sum()
        };
        assert!(held(&dirty) >= 3 * KEEP_KEYS, "kept while batches are that large");
        dirty.push(key(0));
        dirty.take_into(&mut out);
        assert_eq!(held(&dirty), 0, "the next small batch gives the burst's capacity back");
    }

    proptest! {
        #[test]
        fn distinct_keys_come_once_each_in_key_order(picks in prop::collection::vec(0usize..40, 0..300)) {
            let mut keys: Vec<Key> = picks.iter().map(|&i| key(i)).collect();
            let mut want = keys.clone();
            want.sort_unstable();
            want.dedup();
            distinct_in_key_order(&mut keys);
            prop_assert_eq!(keys, want);
        }
    }
}
