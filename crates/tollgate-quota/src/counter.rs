//! The decision core: every live counter of this process and the one function that applies the
//! admission rule to it.
//!
//! Every store decides through [`Counters`]: the memory and embedded stores directly, the Redis
//! store for its local fallback. It is synchronous and never blocks on I/O. Counters live in
//! shards (see [`shard_count`]) behind read-write locks sharded by thread (see `Lane`); a
//! check on a known key takes its shard's read lock only, then decides on the counter itself:
//! a calendar counter with one compare-and-swap (see `cell`), any other under the counter's own
//! lock (see `state`). New keys, sweeps and resets take the write lock.
//!
//! # Invariants
//!
//! * **Exactness.** For one key the admissions are totally ordered (by the cell's swap, or by
//!   the counter's lock), and `used` never passes `limit` through an admission: a request of
//!   weight `w` is admitted iff `w <= limit - used` (no overflow possible since `w <= limit` is
//!   checked first), and only then `used += w`.
//! * **Rejections count nothing.** A rejected request (exceeded, weight over the limit, or a
//!   probe on a full counter) leaves `used` and the rolling sub-buckets' `used` unchanged and adds
//!   one to `exceed` and `total_exceed`.
//! * **`Counter::end_us` is when the entry stops holding anything counted**: the end of the
//!   calendar or flexi window, or the instant the newest rolling sub-bucket leaves the look-back.
//!   At or after it the window's `used`/`exceed` are dead and are zeroed on the next check.
//! * **A flexi window is open iff `used > 0`** and the clock is before its end: only an admission
//!   of weight ≥ 1 opens one, and `used` only grows inside it.
//! * **Totals outlive a window by one window.** `total_exceed` is carried into the next window
//!   while the next check comes in it; after that it restarts at 0. The sweep drops exactly the
//!   entries that the next check would treat as fresh (see `Counter::is_dead`), so eviction never
//!   changes an answer.
//! * **Clocks that step back** never reopen a window: a check before the end uses the stored
//!   window, which is the conservative choice (it cannot admit more than `limit` in any window).
//! * **A shard is swept at least once a second while it is used**: the first check after its
//!   sweep falls due sweeps it before deciding. The owners' background sweeps add to that.
//! * **All of an id's counters share one shard**, the one its id's hash picks (see
//!   `Counters::lane_of`), whatever their shapes; a reset locks that shard only.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

use crossbeam_utils::CachePadded;
use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use hashbrown::DefaultHashBuilder;
use jiff::Timestamp;

use crate::decision::{Counted, Decision, GivenBack};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, QuotaSpec};
use crate::store::listing::{CounterListing, CounterPage, Selection};

mod cell;
mod cells;
mod index;
mod state;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use state::{Bucket, Counter, Tally};
use table::{Ask, ShapeKey, Shard, id_hash, key_hash_of};

/// Shards per core the process may use, and the bounds of their count.
const SHARDS_PER_CORE: usize = 4;
const MIN_SHARDS: usize = 16;
const MAX_SHARDS: usize = 1024;
/// A shard sweeps its expired entries on access at most this often (clock time).
const SWEEP_EVERY_US: i64 = 1_000_000;

/// How many shards a process's counters are kept in: four per core, as a power of two
/// between [`MIN_SHARDS`] and [`MAX_SHARDS`] (as many as governor's map uses, with a floor).
///
/// Enough that threads seldom meet on one shard's lock, and few enough that the shards' own
/// lines stay cached and a shard's slots are read in long runs: on two cores, 16 shards against
/// 64 took 100,000 keys in insertion order from 1.35 to 0.90 times governor's time, scattered
/// from 1.39 to 1.12 (BENCHMARKS.md, engine). A sweep holds one shard's write lock while it
/// walks that shard, so fewer shards make each sweep longer.
fn shard_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores * SHARDS_PER_CORE).next_power_of_two().clamp(MIN_SHARDS, MAX_SHARDS)
}

/// All counters of one process, in independently locked shards.
pub struct Counters {
    shards: Box<[CachePadded<Lane>]>,
    /// `shards.len() - 1`; the count is a power of two.
    mask: usize,
    hasher: DefaultHashBuilder,
    /// Keys dropped by sweeps, kept for a store that must delete them from disk too.
    evicted: Option<Mutex<Vec<(String, CounterShape)>>>,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

/// A shard behind its lock, with the time its next sweep falls due.
///
/// The lock is sharded by thread: a check read-locks only its own thread's part of it, a word
/// on a cache line of its own, so checks on different cores never write one line to take the
/// lock; a writer (a new key, a sweep) takes every part. A plain read-write lock made both
/// cores write its word on every check: two threads together were barely faster than one on
/// 100,000 keys, and slower on one key. With this lock they are two to three times as fast,
/// and one thread pays about 2 ns more per check (BENCHMARKS.md, engine). Each lock holds
/// eight parts of 128 bytes: 1 KiB per shard.
#[derive(Default)]
struct Lane {
    shard: ShardedLock<Shard>,
    next_sweep_us: AtomicI64,
}

impl Lane {
    // A panic while holding the lock cannot leave a counter half-updated in a way that breaks
    // exactness (all updates are single assignments or swaps after the decision), so carry on.
    fn read(&self) -> ShardedLockReadGuard<'_, Shard> {
        self.shard.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> ShardedLockWriteGuard<'_, Shard> {
        self.shard.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Counters {
    /// No counters yet.
    pub fn new() -> Self {
        let shards = shard_count();
        Self {
            shards: (0..shards).map(|_| CachePadded::new(Lane::default())).collect(),
            mask: shards - 1,
            hasher: DefaultHashBuilder::default(),
            evicted: None,
        }
    }

    /// No counters yet; sweeps remember the keys they drop (see [`Counters::take_evicted`]).
    pub(crate) fn with_eviction_log() -> Self {
        Self { evicted: Some(Mutex::new(Vec::new())), ..Self::new() }
    }

    /// The keys dropped by sweeps since the last call (always empty without the log).
    pub(crate) fn take_evicted(&self) -> Vec<(String, CounterShape)> {
        match &self.evicted {
            Some(log) => std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner)),
            None => Vec::new(),
        }
    }

    /// Puts keys taken with [`Counters::take_evicted`] back, for the next call: their rows are
    /// still to be deleted (the batch that held them failed to commit).
    pub(crate) fn requeue_evicted(&self, mut keys: Vec<(String, CounterShape)>) {
        if let Some(log) = &self.evicted
            && !keys.is_empty()
        {
            log.lock().unwrap_or_else(PoisonError::into_inner).append(&mut keys);
        }
    }

    /// The lane holding every counter of the id whose hash is `id_hash` (see [`id_hash`]), all
    /// its shapes alike.
    ///
    /// Chosen by the id's hash, not the key's, so a check takes the lane's lock while the
    /// shape is still being mixed in: the lock's atomic write holds back every read after it,
    /// and it used to wait for the whole hash (BENCHMARKS.md, engine: *The lane chosen by the
    /// id's hash*).
    #[inline(always)]
    fn lane_of(&self, id_hash: u64) -> &Lane {
        // Bits 32..42: the key's hash is the id's multiplied further, so the tables' positions
        // and tags within the lane do not follow these bits.
        &self.shards[(id_hash >> 32) as usize & self.mask]
    }

    /// The hash of the key (`id`, `key`) and the lane that holds it, the lane from the id's
    /// hash before the shape is mixed in (see `lane_of`).
    // Inlined into every check (see `Counters::check_when`).
    #[inline(always)]
    fn locate(&self, id: &[u8], key: &ShapeKey) -> (u64, &Lane) {
        let of_id = id_hash(&self.hasher, id);
        (key_hash_of(of_id, key), self.lane_of(of_id))
    }

    /// Checks `weight` units of `id` against `spec` at `now` and counts them when admitted.
    pub fn check_at(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        now: Timestamp,
    ) -> Decision {
        self.check_us(id, spec, weight, now.as_microsecond())
    }

    /// [`Counters::check_at`] with the time in microseconds since the Unix epoch (within
    /// jiff's range, as [`crate::Clock::now_us`] gives it).
    pub fn check_us(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        now_us: i64,
    ) -> Decision {
        self.check_when(id, spec, weight, || now_us)
    }

    /// [`Counters::check_us`] at the time `now` gives, read once the key is hashed: the
    /// clock's counter read then overlaps the hashing instead of holding back what follows
    /// it (1.17 to 1.11 times governor's time with one key; BENCHMARKS.md, engine).
    #[inline(always)]
    pub(crate) fn check_when(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        now: impl FnOnce() -> i64,
    ) -> Decision {
        // The key is built in its place in the `Ask`: built apart and moved in, it was copied
        // as one 16-byte word from the narrower stores that built it, which stalls.
        let mut ask = Ask {
            hash: 0,
            id,
            key: ShapeKey::of(&spec.counter_shape()),
            limit: spec.limit,
            weight,
            now_us: 0,
        };
        let (hash, lane) = self.locate(id.as_bytes(), &ask.key);
        ask.hash = hash;
        let now_us = now();
        ask.now_us = now_us;
        let due = lane.next_sweep_us.load(Ordering::Relaxed);
        if now_us >= due
            && lane
                .next_sweep_us
                .compare_exchange(
                    due,
                    now_us.saturating_add(SWEEP_EVERY_US),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.sweep(lane, now_us);
        }
        // The read path (`Shard::check`, `Cells::find`, `Cells::decide`, the cell's `decide`)
        // is inlined here, and each path builds its own `Decision`, so the tally stays in
        // registers: passed through the stack, it was read back in 16-byte words from the
        // narrower stores that wrote it, which the CPU cannot forward (about 14 % of a
        // one-key check; BENCHMARKS.md, engine).
        let found = lane.read().check(&ask);
        if let Some(tally) = found {
            return tally.decision(spec, weight, now_us);
        }
        lane.write().check_mut(&self.hasher, &ask).decision(spec, weight, now_us)
    }

    /// Gives back up to `units` of `id`'s counter of `shape` that were counted at `counted`,
    /// when that window (rolling: that sub-bucket) still counts at `now_us`; never below zero.
    pub fn give_back_us(
        &self,
        id: &MeteringId,
        shape: &CounterShape,
        counted: &Counted,
        units: u64,
        now_us: i64,
    ) -> GivenBack {
        let key = ShapeKey::of(shape);
        let (hash, lane) = self.locate(id.as_bytes(), &key);
        lane.read().give_back(hash, id, &key, counted, units, now_us)
    }

    fn sweep(&self, lane: &Lane, now_us: i64) -> usize {
        let mut dropped = Vec::new();
        let log = self.evicted.is_some().then_some(&mut dropped);
        let n = lane.write().sweep(&self.hasher, now_us, log);
        if let (Some(log), false) = (&self.evicted, dropped.is_empty()) {
            log.lock().unwrap_or_else(PoisonError::into_inner).append(&mut dropped);
        }
        n
    }

    /// The page of live counters at `now` that `listing` asks for, in listing order.
    pub fn counters_at(&self, listing: &CounterListing<'_>, now: Timestamp) -> CounterPage {
        let now_us = now.as_microsecond();
        let mut out = Selection::new(listing);
        for lane in self.shards.iter() {
            lane.read().list(now_us, &mut out);
        }
        out.page()
    }

    /// Drops every counter of `id` (all shapes, all in its lane); returns how many were dropped.
    pub fn reset(&self, id: &MeteringId) -> u64 {
        let lane = self.lane_of(id_hash(&self.hasher, id.as_bytes()));
        lane.write().reset(&self.hasher, id.as_bytes())
    }

    /// Drops the counters that hold nothing at `now`; returns how many were dropped.
    pub fn evict_expired(&self, now: Timestamp) -> usize {
        let now_us = now.as_microsecond();
        self.shards.iter().map(|lane| self.sweep(lane, now_us)).sum()
    }

    /// How many counters are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|lane| lane.read().len()).sum()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state of one counter at `now`, for writing it behind; the id as bytes, as the
    /// flusher holds it (no UTF-8 check per row).
    pub(crate) fn snapshot(
        &self,
        id: &[u8],
        shape: &CounterShape,
        now: Timestamp,
    ) -> Option<Counter> {
        let key = ShapeKey::of(shape);
        let (hash, lane) = self.locate(id, &key);
        lane.read().snapshot(hash, id, &key, now.as_microsecond())
    }

    /// Puts back a counter read from disk, replacing any in memory; returns false (and keeps
    /// nothing) when the counter holds nothing any more at `now`.
    pub(crate) fn restore(
        &self,
        id: MeteringId,
        shape: &CounterShape,
        counter: Counter,
        now: Timestamp,
    ) -> bool {
        let now_us = now.as_microsecond();
        if counter.is_dead(shape, now_us) {
            return false;
        }
        let key = ShapeKey::of(shape);
        let (hash, lane) = self.locate(id.as_bytes(), &key);
        lane.write().restore(&self.hasher, hash, id, key, counter, now_us);
        true
    }
}
