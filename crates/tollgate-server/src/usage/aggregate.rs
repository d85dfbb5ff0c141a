//! The in-memory aggregate: what decisions (admitted, refused) and withheld units (held,
//! duplicate) added since the last flush, per metering id and bucket, and which ids are
//! tracked at all.
//!
//! Invariants:
//! - **No allocation per decision for a known id.** A decision (or a withheld report) hashes
//!   its id once (the hash picks the shard and finds the entry), locks one of [`SHARDS`]
//!   shards, finds its id and adds to the id's newest pending bucket, kept in the id's entry; a
//!   new bucket takes that place, and only a bucket still pending then (not flushed yet) moves
//!   into a vector beside it, which keeps its capacity across flushes.
//! - **At most `max_ids` ids tracked.** A new id takes a slot ([`Aggregate::tracked`]) or is
//!   refused (the caller counts it); a slot is given back only when the id is pruned, after it
//!   had no units (decided or withheld) for the whole retention.
//! - **At most `max_pending` pending deltas** (across ids), so a store that stays down keeps
//!   memory bounded: a delta that would need a new one beyond it is dropped (and counted).
//!   The deltas of a drained batch count too, until the store takes it (the history holds
//!   it meanwhile, to send again if refused: [`Aggregate::release`]).
//!   Deltas older than the retention are dropped when the aggregate is pruned.
//! - **An id is trimmed once per retention start.** Each id remembers the retention start its
//!   stored rows were last trimmed to; a drain lists the id for trimming only when the start
//!   has moved since (once per five-minute bucket), not on every flush.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crossbeam_utils::CachePadded;
use hashbrown::{DefaultHashBuilder, HashTable};
use tollgate_quota::MeteringId;

/// Shards of the id map: decisions on different ids rarely wait for each other.
pub const SHARDS: usize = 32;

/// Units added to one bucket of one id (40 bytes: one pending entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// The bucket's index: its start in Unix seconds divided by the bucket length.
    pub bucket: i64,
    /// Units admitted.
    pub admitted: u64,
    /// Units refused.
    pub refused: u64,
    /// Units held over quota (counted once per item, when it first becomes held).
    pub held: u64,
    /// Units found to be duplicates.
    pub duplicate: u64,
}

impl Delta {
    /// No units in `bucket`.
    pub const fn empty(bucket: i64) -> Self {
        Self { bucket, admitted: 0, refused: 0, held: 0, duplicate: 0 }
    }

    /// Adds `other`'s units (saturating), whatever its bucket.
    pub fn add(&mut self, other: &Delta) {
        self.admitted = self.admitted.saturating_add(other.admitted);
        self.refused = self.refused.saturating_add(other.refused);
        self.held = self.held.saturating_add(other.held);
        self.duplicate = self.duplicate.saturating_add(other.duplicate);
    }

    /// Whether it holds no units at all.
    pub fn is_empty(&self) -> bool {
        self.admitted == 0 && self.refused == 0 && self.held == 0 && self.duplicate == 0
    }
}

/// What one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Added.
    Kept,
    /// The id is beyond the cap: not tracked.
    Untracked,
    /// The pending aggregate is full (the store has not taken a flush for long): dropped.
    Dropped,
}

/// One tracked id, in 88 bytes (its bucket indexes kept as `i32`, see [`narrow`]).
struct Track {
    /// The id tracked.
    id: MeteringId,
    /// The newest bucket this id had units in.
    last: i32,
    /// The retention start (a bucket index) this id's stored rows were last trimmed to;
    /// `i32::MIN` until its first write, so rows a former process left are trimmed too.
    trimmed: i32,
    /// Deltas not yet written to the store.
    pending: Pending,
}

// A record reads the id and its newest delta from this entry alone: a delta on the heap was a
// second cache miss on a quarter of the record's time (BENCHMARKS.md, the usage history).
const _: () = assert!(std::mem::size_of::<Track>() == 88);

/// An id's deltas not yet written: the newest bucket's in place, older ones (a batch the store
/// refused, or a bucket that ended before a flush) beside it, in the order they came.
struct Pending {
    /// The newest bucket's delta; none while its bucket is [`NONE`].
    newest: Delta,
    /// Boxed: most ids never have one, and every byte of an entry is in the working set of
    /// each answer (BENCHMARKS.md, what the history costs over HTTP); 8 bytes where a vector
    /// takes 24.
    #[expect(clippy::box_collection, reason = "the entry's size, not the vector's, is the point")]
    older: Option<Box<Vec<Delta>>>,
}

/// The bucket of a [`Pending`] with no newest delta: no bucket index is this low.
const NONE: i64 = i64::MIN;

impl Pending {
    const fn new() -> Self {
        Self { newest: Delta::empty(NONE), older: None }
    }

    fn has_newest(&self) -> bool {
        self.newest.bucket != NONE
    }

    /// The pending delta of `bucket`, if there is one.
    fn get_mut(&mut self, bucket: i64) -> Option<&mut Delta> {
        if self.newest.bucket == bucket && bucket != NONE {
            return Some(&mut self.newest);
        }
        self.older.as_mut()?.iter_mut().rev().find(|p| p.bucket == bucket)
    }

    /// Adds a delta for a bucket not pending yet.
    fn push(&mut self, d: Delta) {
        if !self.has_newest() {
            self.newest = d;
            return;
        }
        let older = self.older.get_or_insert_with(Box::default);
        if d.bucket > self.newest.bucket {
            older.push(std::mem::replace(&mut self.newest, d));
        } else {
            older.push(d);
        }
    }

    fn is_empty(&self) -> bool {
        !self.has_newest() && self.older.as_ref().is_none_or(|o| o.is_empty())
    }

    fn iter(&self) -> impl Iterator<Item = &Delta> {
        self.older.iter().flat_map(|o| o.iter()).chain(self.has_newest().then_some(&self.newest))
    }

    /// Takes every delta out, older ones first. The vector goes too: most ids need one only
    /// when a bucket ends between two flushes, and one kept would hold its peak for good.
    fn take(&mut self, mut f: impl FnMut(Delta)) {
        if let Some(older) = self.older.take() {
            older.into_iter().for_each(&mut f);
        }
        if self.has_newest() {
            f(std::mem::replace(&mut self.newest, Delta::empty(NONE)));
        }
    }

    /// Drops the deltas older than `cutoff`; returns how many.
    fn drop_before(&mut self, cutoff: i64) -> usize {
        let mut dropped = 0;
        if let Some(older) = &mut self.older {
            let before = older.len();
            older.retain(|d| d.bucket >= cutoff);
            dropped = before - older.len();
        }
        if self.has_newest() && self.newest.bucket < cutoff {
            self.newest = Delta::empty(NONE);
            dropped += 1;
        }
        dropped
    }
}

/// A bucket index as a [`Track`] keeps it. Five-minute buckets since 1970 reach `i32::MAX` in
/// the year 22,000-odd; an index beyond that is kept as the bound, never wrapped.
fn narrow(bucket: i64) -> i32 {
    bucket.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// What a drain takes out for the store: the pending deltas, and the ids whose rows older than
/// the retention start are to go.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// Each id's pending deltas.
    pub deltas: Vec<(MeteringId, Delta)>,
    /// The ids written in this batch not yet trimmed to its retention start.
    pub trim: Vec<MeteringId>,
}

impl Batch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.deltas.is_empty() && self.trim.is_empty()
    }
}

/// See the module docs.
pub struct Aggregate {
    /// Each on its own cache lines: neighbouring shards' locks, taken by different cores,
    /// would otherwise bounce one line between them on every decision.
    shards: Box<[CachePadded<Mutex<HashTable<Track>>>]>,
    hasher: DefaultHashBuilder,
    tracked: AtomicUsize,
    pending: AtomicUsize,
    max_ids: usize,
    max_pending: usize,
}

impl Aggregate {
    /// An empty aggregate tracking at most `max_ids` ids and `max_pending` unflushed deltas.
    pub fn new(max_ids: usize, max_pending: usize) -> Self {
        let shards = (0..SHARDS).map(|_| CachePadded::new(Mutex::new(HashTable::new()))).collect();
        Self {
            shards,
            hasher: DefaultHashBuilder::default(),
            tracked: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            max_ids,
            max_pending,
        }
    }

    fn hash(&self, id: &MeteringId) -> u64 {
        self.hasher.hash_one(id.as_bytes())
    }

    /// The shard of an id of hash `hash`, locked. Bits 32.. pick it: the table inside uses the
    /// low bits for its buckets and the top seven as tags, so these add nothing to either.
    fn shard(&self, hash: u64) -> MutexGuard<'_, HashTable<Track>> {
        let i = (hash >> 32) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tracks `t` in `shard` (its id is not there yet).
    fn insert(&self, shard: &mut HashTable<Track>, hash: u64, t: Track) {
        shard.insert_unique(hash, t, |t| self.hash(&t.id));
    }

    /// How many ids are tracked.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// Takes a tracking slot; `false` at the cap.
    fn take_slot(&self) -> bool {
        self.tracked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_ids).then_some(n + 1)
            })
            .is_ok()
    }

    /// Adds `d` to `id` (see the module invariants).
    pub fn record(&self, id: &MeteringId, d: Delta) -> Recorded {
        let hash = self.hash(id);
        let mut shard = self.shard(hash);
        if let Some(t) = shard.find_mut(hash, |t| t.id == *id) {
            return self.add(t, d);
        }
        if !self.take_slot() {
            return Recorded::Untracked;
        }
        let mut t = Track {
            id: id.clone(),
            last: narrow(d.bucket),
            trimmed: i32::MIN,
            pending: Pending::new(),
        };
        let r = self.add(&mut t, d);
        self.insert(&mut shard, hash, t);
        r
    }

    fn add(&self, t: &mut Track, d: Delta) -> Recorded {
        t.last = t.last.max(narrow(d.bucket));
        if let Some(p) = t.pending.get_mut(d.bucket) {
            p.add(&d);
            return Recorded::Kept;
        }
        let taken = self.pending.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < self.max_pending).then_some(n + 1)
        });
        if taken.is_err() {
            return Recorded::Dropped;
        }
        t.pending.push(d);
        Recorded::Kept
    }

    /// An id found in the store at start-up, tracked (without pending units) while a slot is
    /// free; `false` at the cap.
    pub fn preload(&self, id: MeteringId, last: i64) -> bool {
        let hash = self.hash(&id);
        let mut shard = self.shard(hash);
        if let Some(t) = shard.find_mut(hash, |t| t.id == id) {
            t.last = t.last.max(narrow(last));
            return true;
        }
        if !self.take_slot() {
            return false;
        }
        self.insert(
            &mut shard,
            hash,
            Track { id, last: narrow(last), trimmed: i32::MIN, pending: Pending::new() },
        );
        true
    }

    /// Takes every pending delta out (capacity kept), to be written to the store, with the
    /// ids among them not yet trimmed to `cutoff` (the retention start), marked as trimmed.
    /// They still count against the pending cap until [`Aggregate::release`]: the history
    /// holds the batch until the store takes it (see [`crate::usage`]).
    pub fn drain(&self, cutoff: i64) -> Batch {
        let mut out = Batch::default();
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for t in shard.iter_mut() {
                if t.pending.is_empty() {
                    continue;
                }
                t.pending.take(|d| out.deltas.push((t.id.clone(), d)));
                if i64::from(t.trimmed) < cutoff {
                    t.trimmed = narrow(cutoff);
                    out.trim.push(t.id.clone());
                }
            }
        }
        out
    }

    /// Stops counting `n` drained deltas against the pending cap: the store took their batch.
    pub fn release(&self, n: usize) {
        let less = |p: usize| Some(p.saturating_sub(n));
        let _ = self.pending.fetch_update(Ordering::Relaxed, Ordering::Relaxed, less);
    }

    /// The pending deltas of `id` with a bucket in `from..to`.
    pub fn pending(&self, id: &MeteringId, from: i64, to: i64) -> Vec<Delta> {
        let hash = self.hash(id);
        let shard = self.shard(hash);
        shard.find(hash, |t| t.id == *id).map_or_else(Vec::new, |t| {
            t.pending.iter().filter(|d| (from..to).contains(&d.bucket)).copied().collect()
        })
    }

    /// Drops pending deltas older than `cutoff` (a bucket index) and untracks the ids whose
    /// newest units are older; returns the untracked ids (their rows may go from the store).
    pub fn prune(&self, cutoff: i64) -> Vec<MeteringId> {
        let mut gone = Vec::new();
        let mut dropped = 0;
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            shard.retain(|t| {
                dropped += t.pending.drop_before(cutoff);
                let keep = i64::from(t.last) >= cutoff;
                if !keep {
                    gone.push(t.id.clone());
                }
                keep
            });
        }
        self.pending
            .fetch_sub(dropped.min(self.pending.load(Ordering::Relaxed)), Ordering::Relaxed);
        self.tracked.fetch_sub(gone.len().min(self.tracked()), Ordering::Relaxed);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MeteringId {
        MeteringId::new(s).unwrap()
    }

    fn d(bucket: i64, admitted: u64, refused: u64) -> Delta {
        Delta { admitted, refused, ..Delta::empty(bucket) }
    }

    #[test]
    fn deltas_add_up_per_bucket_and_drain_empties() {
        let a = Aggregate::new(10, 100);
        assert_eq!(a.record(&id("A:1"), d(5, 3, 0)), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), d(5, 2, 4)), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), d(6, 1, 0)), Recorded::Kept);
        assert_eq!(a.pending(&id("A:1"), 0, 6), [d(5, 5, 4)]);
        let mut batch = a.drain(0);
        batch.deltas.sort_by_key(|(_, d)| d.bucket);
        assert_eq!(batch.deltas, [(id("A:1"), d(5, 5, 4)), (id("A:1"), d(6, 1, 0))]);
        assert_eq!(batch.trim, [id("A:1")]);
        assert!(a.drain(0).is_empty());
        assert!(a.pending(&id("A:1"), 0, 10).is_empty());
    }

    #[test]
    fn a_drained_batch_counts_against_the_cap_until_released() {
        let a = Aggregate::new(10, 2);
        a.record(&id("A:1"), d(5, 1, 0));
        a.record(&id("A:2"), d(5, 1, 0));
        assert_eq!(a.record(&id("A:3"), d(5, 1, 0)), Recorded::Dropped, "the cap is 2");
        assert_eq!(a.drain(0).deltas.len(), 2);
        assert_eq!(a.record(&id("A:1"), d(6, 1, 0)), Recorded::Dropped, "the drained two count");
        a.release(1);
        assert_eq!(a.record(&id("A:1"), d(6, 1, 0)), Recorded::Kept);
        assert_eq!(a.record(&id("A:2"), d(6, 1, 0)), Recorded::Dropped);
        a.release(5);
        assert_eq!(a.record(&id("A:2"), d(6, 1, 0)), Recorded::Kept, "never below zero");
    }

    #[test]
    fn an_id_is_listed_for_trimming_once_per_retention_start() {
        let a = Aggregate::new(10, 100);
        a.record(&id("A:1"), d(5, 1, 0));
        a.preload(id("A:2"), 4);
        assert_eq!(a.drain(3).trim, [id("A:1")], "an id without units is not written");
        a.record(&id("A:1"), d(5, 1, 0));
        a.record(&id("A:2"), d(5, 1, 0));
        assert_eq!(a.drain(3).trim, [id("A:2")], "A:1 was trimmed to 3 already");
        a.record(&id("A:1"), d(6, 1, 0));
        assert_eq!(a.drain(4).trim, [id("A:1")], "the retention start moved");
        a.record(&id("A:1"), d(6, 1, 0));
        assert!(a.drain(4).trim.is_empty());
    }

    #[test]
    fn pending_keeps_the_newest_bucket_in_place_and_older_ones_in_the_order_they_came() {
        let mut p = Pending::new();
        assert!(p.is_empty() && p.get_mut(5).is_none());
        p.push(d(5, 1, 0));
        p.push(d(7, 2, 0));
        p.push(d(6, 3, 0)); // restored after a refused write
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), [d(5, 1, 0), d(6, 3, 0), d(7, 2, 0)]);
        p.get_mut(6).unwrap().add(&d(6, 1, 1));
        p.get_mut(7).unwrap().add(&d(7, 1, 0));
        assert_eq!(p.drop_before(7), 2);
        let mut taken = Vec::new();
        p.take(|x| taken.push(x));
        assert_eq!(taken, [d(7, 3, 0)]);
        assert!(p.is_empty());
        assert!(p.older.is_none(), "a taken id gives its vector back, whatever its peak");
        p.push(d(8, 1, 0));
        assert_eq!(p.drop_before(9), 1, "the newest goes too when it is older than the cutoff");
        assert!(p.is_empty());
    }

    #[test]
    fn held_and_duplicate_units_add_up_beside_the_decisions() {
        let a = Aggregate::new(10, 100);
        let held = Delta { held: 7, ..Delta::empty(5) };
        let dup = Delta { duplicate: 2, ..Delta::empty(5) };
        assert_eq!(a.record(&id("A:1"), held), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), d(5, 3, 1)), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), dup), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), held), Recorded::Kept);
        let want = Delta { bucket: 5, admitted: 3, refused: 1, held: 14, duplicate: 2 };
        assert_eq!(a.pending(&id("A:1"), 0, 10), [want]);
        // A new id reported only through withheld units takes a slot like a decision does.
        assert_eq!(a.record(&id("A:2"), dup), Recorded::Kept);
        assert_eq!(a.tracked(), 2);
        assert!(Delta::empty(5).is_empty() && !held.is_empty() && !dup.is_empty());
    }

    #[test]
    fn ids_beyond_the_cap_are_not_tracked_until_one_is_pruned() {
        let a = Aggregate::new(2, 100);
        assert_eq!(a.record(&id("A:1"), d(5, 1, 0)), Recorded::Kept);
        assert!(a.preload(id("A:2"), 3));
        assert_eq!(a.record(&id("A:3"), d(5, 1, 0)), Recorded::Untracked);
        assert_eq!(a.record(&id("A:2"), d(5, 1, 0)), Recorded::Kept);
        assert_eq!(a.tracked(), 2);
        a.drain(0);
        // A:2's newest units are in bucket 5 now; nothing older than 6 survives.
        let mut gone = a.prune(6);
        gone.sort();
        assert_eq!(gone, [id("A:1"), id("A:2")]);
        assert_eq!(a.record(&id("A:3"), d(7, 1, 0)), Recorded::Kept);
    }

    #[test]
    fn the_pending_cap_drops_new_buckets_and_pruning_frees_it() {
        let a = Aggregate::new(10, 2);
        assert_eq!(a.record(&id("A:1"), d(1, 1, 0)), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), d(2, 1, 0)), Recorded::Kept);
        assert_eq!(a.record(&id("A:1"), d(3, 1, 0)), Recorded::Dropped);
        assert_eq!(
            a.record(&id("A:1"), d(2, 1, 0)),
            Recorded::Kept,
            "an existing bucket still adds"
        );
        a.prune(2);
        assert_eq!(a.record(&id("A:1"), d(3, 1, 0)), Recorded::Kept);
        assert_eq!(a.pending(&id("A:1"), 0, 10), [d(2, 2, 0), d(3, 1, 0)]);
    }
}
