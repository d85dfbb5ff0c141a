//! One shard's counters: calendar counters as lock-free cells (see `cells`), every other
//! counter as a locked state.
//!
//! Checks find a counter under the shard's read lock and decide with the cell's
//! compare-and-swap, or under the counter's own lock; only a new key, a sweep or a reset takes
//! the write lock.
//!
//! # Invariants
//!
//! * **A key (id + shape) is in at most one table.** It goes to `locked` only when it cannot be
//!   a cell: a flexi or rolling window, a limit above [`MAX_COUNT`], figures read back that do
//!   not fit a cell, or a shard whose shape list, id arena or slot numbers are full. It moves
//!   from `cells` to `locked` (never back) under the write lock, when a check brings a limit
//!   above [`MAX_COUNT`], so no check can be deciding on the cell meanwhile.

use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::{DefaultHashBuilder, HashTable};

use super::cell::{CellState, MAX_COUNT};
use super::cells::Cells;
use super::state::{Counter, Tally};
use crate::decision::{Counted, GivenBack};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, TimeUnit, WindowKind};
use crate::store::CounterInfo;
use crate::store::listing::Selection;
use crate::window::CalendarFrame;

/// A cell whose window is this far from the clock's is kept locked instead (see `cell`).
const MAX_CELL_DRIFT: i64 = 1 << 14;

/// A [`CounterShape`] packed into 16 bytes (no `Option` tag).
#[derive(Debug, Clone, Copy, Eq)]
pub(super) struct ShapeKey {
    /// The calendar anchor in Unix seconds, or [`ShapeKey::NO_START`].
    start: i64,
    interval: u32,
    unit: TimeUnit,
    window: WindowKind,
}

impl ShapeKey {
    /// Far outside jiff's range, so it never collides with a real anchor.
    const NO_START: i64 = i64::MIN;

    pub(super) fn of(shape: &CounterShape) -> Self {
        Self {
            start: shape.start.unwrap_or(Self::NO_START),
            interval: shape.interval,
            unit: shape.unit,
            window: shape.window,
        }
    }

    pub(super) fn shape(&self) -> CounterShape {
        CounterShape {
            interval: self.interval,
            unit: self.unit,
            window: self.window,
            start: (self.start != Self::NO_START).then_some(self.start),
        }
    }
}

/// Field by field: the derived comparison read each key as one 16-byte word, which the CPU
/// cannot forward from the narrower stores that had just built it, and every check paid the
/// stall.
impl PartialEq for ShapeKey {
    fn eq(&self, other: &Self) -> bool {
        self.start == other.start
            && self.interval == other.interval
            && self.unit == other.unit
            && self.window == other.window
    }
}

/// The hash of a key (id and shape), the same for entries and lookups: the id's own hash
/// (see [`id_hash`]) with the shape mixed in.
pub(super) fn key_hash(hasher: &DefaultHashBuilder, id: &[u8], key: &ShapeKey) -> u64 {
    key_hash_of(id_hash(hasher, id), key)
}

/// The hash of an id alone, seeded per process; it also picks the id's lane.
///
/// The bytes go in with one `write` and no length prefix: the hasher mixes each write's
/// length in itself.
#[inline(always)]
pub(super) fn id_hash(hasher: &DefaultHashBuilder, id: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = hasher.build_hasher();
    h.write(id);
    h.finish()
}

/// A key's hash from its id's: the id's hash (with the calendar anchor) multiplied by the
/// shape's other fields, to 128 bits, and the halves folded, as foldhash folds.
///
/// The factor is never zero (the packed fields leave the top 20 bits to the constant), so no
/// shape maps every id to one hash; the id's hash is seeded, so no id can be chosen to collide.
#[inline(always)]
pub(super) fn key_hash_of(id_hash: u64, key: &ShapeKey) -> u64 {
    /// 2^64 divided by the golden ratio: bits spread over the whole word.
    const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;
    let packed = u64::from(key.interval) | (key.unit as u64) << 32 | (key.window as u64) << 40;
    let full = u128::from(id_hash ^ key.start as u64) * u128::from(packed ^ SPREAD);
    (full as u64) ^ ((full >> 64) as u64)
}

/// One shard's counters.
#[derive(Default)]
pub(super) struct Shard {
    cells: Cells,
    locked: HashTable<Locked>,
}

/// A counter kept under a lock.
struct Locked {
    id: MeteringId,
    shape: ShapeKey,
    counter: Mutex<Counter>,
}

fn lock(counter: &Mutex<Counter>) -> MutexGuard<'_, Counter> {
    // Every update is a set of plain assignments after the decision: a panic elsewhere cannot
    // leave one half made, so a poisoned lock is still sound.
    counter.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One check: the key, its hash, and what is asked of its counter.
#[derive(Clone, Copy)]
pub(super) struct Ask<'a> {
    pub(super) hash: u64,
    pub(super) id: &'a MeteringId,
    pub(super) key: ShapeKey,
    pub(super) limit: u64,
    pub(super) weight: u64,
    pub(super) now_us: i64,
}

impl Shard {
    /// Decides under the read lock; `None` when the key must first be added or moved, which
    /// takes the write lock ([`Shard::check_mut`]).
    // Inlined into every check (see `Counters::check_us`).
    #[inline(always)]
    pub(super) fn check(&self, ask: &Ask<'_>) -> Option<Tally> {
        let Ask { hash, id, key, limit, weight, now_us } = *ask;
        if key.window == WindowKind::Calendar
            && let Some(n) = self.cells.find(hash, id.as_bytes(), &key)
        {
            return if limit <= MAX_COUNT {
                self.cells.decide(n, limit, weight, now_us)
            } else {
                None
            };
        }
        let entry = self.find_locked(hash, id, &key)?;
        Some(lock(&entry.counter).decide(&key.shape(), limit, weight, now_us))
    }

    /// Decides under the write lock, adding the key (or moving it to the locked table) first.
    pub(super) fn check_mut(&mut self, hasher: &DefaultHashBuilder, ask: &Ask<'_>) -> Tally {
        let Ask { hash, id, key, limit, weight, now_us } = *ask;
        let key = &key;
        if key.window == WindowKind::Calendar {
            let found = self.cells.find(hash, id.as_bytes(), key);
            let tally = match found {
                Some(n) if limit <= MAX_COUNT => self.cells.decide(n, limit, weight, now_us),
                Some(n) => {
                    // A limit a cell cannot hold: the counter moves to the locked table.
                    if let Some((_, _, counter)) = self.cells.counter(n, now_us) {
                        self.cells.remove(hasher, n);
                        self.insert_locked(hasher, hash, id.clone(), *key, counter);
                    }
                    None
                }
                None if limit <= MAX_COUNT && self.find_locked(hash, id, key).is_none() => {
                    let frame = CalendarFrame::of(&key.shape());
                    let state =
                        CellState { window: frame.index(now_us), used: 0, exceed: 0, total: 0 };
                    self.cells
                        .insert(hasher, hash, id.as_bytes(), key, &state)
                        .and_then(|n| self.cells.decide(n, limit, weight, now_us))
                }
                None => None,
            };
            if let Some(tally) = tally {
                return tally;
            }
        }
        let entry = match self.locked.entry(
            hash,
            |e| e.shape == *key && e.id == *id,
            |e| key_hash(hasher, e.id.as_bytes(), &e.shape),
        ) {
            TableEntry::Occupied(o) => o.into_mut(),
            TableEntry::Vacant(v) => {
                let fresh = Counter { mark_us: i64::MIN, ..Counter::default() };
                v.insert(Locked { id: id.clone(), shape: *key, counter: Mutex::new(fresh) })
                    .into_mut()
            }
        };
        entry.counter.get_mut().unwrap_or_else(PoisonError::into_inner).decide(
            &key.shape(),
            limit,
            weight,
            now_us,
        )
    }

    /// Gives back up to `units` of `id`'s counter with shape `key`, counted at `counted`
    /// (see [`Counter::give_back`]); under the read lock, like a check.
    pub(super) fn give_back(
        &self,
        hash: u64,
        id: &MeteringId,
        key: &ShapeKey,
        counted: &Counted,
        units: u64,
        now_us: i64,
    ) -> GivenBack {
        if key.window == WindowKind::Calendar
            && let Some(n) = self.cells.find(hash, id.as_bytes(), key)
        {
            return match counted.window {
                Some((start, _)) => self.cells.give_back(n, start, units, now_us),
                None => GivenBack::WindowGone,
            };
        }
        match self.find_locked(hash, id, key) {
            Some(entry) => lock(&entry.counter).give_back(&key.shape(), counted, units, now_us),
            None => GivenBack::WindowGone,
        }
    }

    fn find_locked(&self, hash: u64, id: &MeteringId, key: &ShapeKey) -> Option<&Locked> {
        self.locked.find(hash, |e| e.shape == *key && e.id == *id)
    }

    /// Puts `counter` in the locked table, replacing the key's entry there.
    fn insert_locked(
        &mut self,
        hasher: &DefaultHashBuilder,
        hash: u64,
        id: MeteringId,
        key: ShapeKey,
        counter: Counter,
    ) {
        let entry = Locked { id, shape: key, counter: Mutex::new(counter) };
        match self.locked.entry(
            hash,
            |e| e.shape == key && e.id == entry.id,
            |e| key_hash(hasher, e.id.as_bytes(), &e.shape),
        ) {
            TableEntry::Occupied(mut o) => *o.get_mut() = entry,
            TableEntry::Vacant(v) => {
                v.insert(entry);
            }
        }
    }

    /// The state of one counter (for writing it behind), cells read against `now_us`.
    pub(super) fn snapshot(
        &self,
        hash: u64,
        id: &[u8],
        key: &ShapeKey,
        now_us: i64,
    ) -> Option<Counter> {
        if let Some(n) = self.cells.find(hash, id, key) {
            return self.cells.counter(n, now_us).map(|(_, _, c)| c);
        }
        let entry = self.locked.find(hash, |e| e.shape == *key && e.id.as_bytes() == id)?;
        Some(lock(&entry.counter).clone())
    }

    /// Puts back a counter read from disk (live at `now_us`), replacing the key's counter.
    pub(super) fn restore(
        &mut self,
        hasher: &DefaultHashBuilder,
        hash: u64,
        id: MeteringId,
        key: ShapeKey,
        counter: Counter,
        now_us: i64,
    ) {
        if let Some(n) = self.cells.find(hash, id.as_bytes(), &key) {
            self.cells.remove(hasher, n);
        }
        if let Ok(entry) = self.locked.find_entry(hash, |e| e.shape == key && e.id == id) {
            entry.remove();
        }
        if key.window == WindowKind::Calendar {
            let frame = CalendarFrame::of(&key.shape());
            let window = frame.index(counter.mark_us.saturating_sub(1));
            let fits = [counter.used, counter.exceed, counter.total_exceed]
                .iter()
                .all(|&c| c <= MAX_COUNT)
                && window.abs_diff(frame.index(now_us)) <= MAX_CELL_DRIFT as u64;
            let state = CellState {
                window,
                used: counter.used,
                exceed: counter.exceed,
                total: counter.total_exceed,
            };
            if fits && self.cells.insert(hasher, hash, id.as_bytes(), &key, &state).is_some() {
                return;
            }
        }
        self.insert_locked(hasher, hash, id, key, counter);
    }

    /// Drops the counters that hold nothing at `now_us`, gives memory back, and adds the
    /// dropped keys to `log` when there is one. Returns how many were dropped.
    pub(super) fn sweep(
        &mut self,
        hasher: &DefaultHashBuilder,
        now_us: i64,
        mut log: Option<&mut Vec<(String, CounterShape)>>,
    ) -> usize {
        let before = self.len();
        self.cells.sweep(hasher, now_us, log.as_deref_mut());
        self.locked.retain(|e| {
            let shape = e.shape.shape();
            let dead = lock(&e.counter).is_dead(&shape, now_us);
            if let (true, Some(log)) = (dead, log.as_deref_mut()) {
                log.push((e.id.as_str().to_owned(), shape));
            }
            !dead
        });
        let after = self.len();
        if self.locked.capacity() > 64 && self.locked.capacity() / 4 > self.locked.len() {
            let len = self.locked.len();
            self.locked.shrink_to(len, |e| key_hash(hasher, e.id.as_bytes(), &e.shape));
        }
        before - after
    }

    /// Offers the live counters at `now_us` to `out`.
    pub(super) fn list(&self, now_us: i64, out: &mut Selection<'_, CounterInfo>) {
        self.cells.list(now_us, out);
        for e in self.locked.iter() {
            let shape = e.shape.shape();
            if !out.wants(&e.id, &shape) {
                continue;
            }
            let counter = lock(&e.counter);
            if counter.end_us(&shape) > now_us
                && let Some(info) = counter.info(&e.id, &shape, now_us)
            {
                out.add(&e.id, &shape, info);
            }
        }
    }

    /// Drops every counter of `id`; returns how many.
    pub(super) fn reset(&mut self, hasher: &DefaultHashBuilder, id: &[u8]) -> u64 {
        let cells = self.cells.reset(hasher, id);
        let before = self.locked.len();
        self.locked.retain(|e| e.id.as_bytes() != id);
        cells + (before - self.locked.len()) as u64
    }

    /// How many counters the shard holds.
    pub(super) fn len(&self) -> usize {
        self.cells.len() + self.locked.len()
    }

    /// How many counters are kept locked.
    #[cfg(test)]
    pub(super) fn locked_len(&self) -> usize {
        self.locked.len()
    }

    /// Entries the shard's tables can hold without growing.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.cells.capacity() + self.locked.capacity()
    }
}
