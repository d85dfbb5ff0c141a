//! One shard's counters: calendar counters as lock-free cells in a compact table, every other
//! counter as a locked state.
//!
//! A calendar counter costs a 32-byte slot, its id's bytes in the shard's id arena, and a 4-byte
//! entry in the hash index (with the index's control byte and spare capacity): about 64 bytes
//! plus the id at a million counters. Checks find it under the shard's read lock and decide with
//! the cell's compare-and-swap; only a new key, a sweep or a reset takes the write lock.
//!
//! # Invariants
//!
//! * **A key (id + shape) is in at most one table.** It goes to `locked` only when it cannot be
//!   a cell: a flexi or rolling window, a limit above [`MAX_COUNT`], figures read back that do
//!   not fit a cell, or a shard whose shape list or id arena is full. It moves from `cells` to
//!   `locked` (never back) under the write lock, when a check brings a limit above
//!   [`MAX_COUNT`], so no check can be deciding on the cell meanwhile.
//! * **`index` holds exactly the slot numbers `0..slots.len()`**, each under the hash of its
//!   slot's key; a removal moves the last slot into the hole and re-points its index entry.
//! * **Every slot's id is `ids[at..at + len]`.** Bytes of removed ids are counted in `garbage`
//!   until the sweep compacts the arena, which it does once they are half of it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::{DefaultHashBuilder, HashTable};

use super::cell::{CalendarCell, CellState, CellTally, MAX_COUNT};
use super::state::{Counter, Tally};
use crate::decision::Outcome;
use crate::spec::{CounterShape, MeteringId, TimeUnit, WindowKind};
use crate::store::CounterInfo;
use crate::window::CalendarFrame;

/// A cell whose window is this far from the clock's is kept locked instead (see `cell`).
const MAX_CELL_DRIFT: i64 = 1 << 14;

/// A [`CounterShape`] packed into 16 bytes (no `Option` tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// The hash of a key. Ids are hashed as bytes everywhere (entries and lookups alike).
pub(super) fn key_hash(hasher: &DefaultHashBuilder, id: &[u8], key: &ShapeKey) -> u64 {
    use std::hash::BuildHasher;
    hasher.hash_one((id, key))
}

/// One shard's counters.
#[derive(Default)]
pub(super) struct Shard {
    cells: Cells,
    locked: HashTable<Locked>,
}

/// Calendar counters as cells: an index of slot numbers over the slots.
#[derive(Default)]
struct Cells {
    index: HashTable<u32>,
    data: Slots,
}

/// The slots, the ids' bytes they point into, and their shapes.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    ids: Vec<u8>,
    /// Bytes of `ids` no slot points at any more.
    garbage: usize,
    /// The shapes the slots use; a slot holds a position in this list.
    shapes: Vec<Shape>,
}

struct Shape {
    key: ShapeKey,
    frame: CalendarFrame,
    /// The window last found for this shape: most checks fall in it, and testing that costs a
    /// multiplication where finding a window costs a division.
    recent: AtomicI64,
}

impl Shape {
    fn new(key: ShapeKey) -> Self {
        Self { key, frame: CalendarFrame::of(&key.shape()), recent: AtomicI64::new(i64::MIN) }
    }

    /// The number of the window holding `now_us`.
    fn window(&self, now_us: i64) -> i64 {
        let recent = self.recent.load(Ordering::Relaxed);
        if self.frame.holds(recent, now_us) {
            return recent;
        }
        let k = self.frame.index(now_us);
        self.recent.store(k, Ordering::Relaxed);
        k
    }
}

/// One calendar counter: where its id is, its shape, and its cell. 32 bytes.
struct Slot {
    at: u32,
    len: u16,
    shape: u16,
    cell: CalendarCell,
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

/// Grows `v` when full: doubling while small, then by an eighth, so spare capacity stays small
/// where it matters and the allocator is not asked for many small sizes it cannot give back.
fn reserve<T>(v: &mut Vec<T>, extra: usize) {
    const SMALL_BYTES: usize = 256 << 10;
    if v.capacity() - v.len() < extra {
        let cap = v.capacity();
        let step = if cap * std::mem::size_of::<T>() < SMALL_BYTES { cap } else { cap / 8 };
        v.reserve_exact(step.max(extra).max(16));
    }
}

/// `a == b`, eight bytes at a time: ids are short, and this stays inline where a slice
/// comparison calls `memcmp`.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |c: &[u8]| c.try_into().map(u64::from_ne_bytes).unwrap_or_default();
    a8.by_ref().zip(b8.by_ref()).all(|(x, y)| word(x) == word(y))
        && a8.remainder().iter().zip(b8.remainder()).all(|(x, y)| x == y)
}

/// A cell's figures as a [`Tally`], its window placed by `frame`.
fn tally(t: CellTally, frame: &CalendarFrame) -> Tally {
    let (start, end) = frame.bounds(t.state.window);
    Tally {
        outcome: t.outcome,
        used: t.state.used,
        exceed: t.state.exceed,
        total_exceed: t.state.total,
        window: Some((start, end)),
        retry_at: (t.outcome == Outcome::Exceeded).then_some(end),
        reset_at: end,
    }
}

impl Slots {
    fn id(&self, slot: &Slot) -> &[u8] {
        let at = slot.at as usize;
        self.ids.get(at..at + usize::from(slot.len)).unwrap_or_default()
    }

    fn shape(&self, slot: &Slot) -> Option<&Shape> {
        self.shapes.get(usize::from(slot.shape))
    }

    fn hash_of(&self, hasher: &DefaultHashBuilder, n: u32) -> u64 {
        let Some(slot) = self.slots.get(n as usize) else { return 0 };
        self.shape(slot).map_or(0, |s| key_hash(hasher, self.id(slot), &s.key))
    }

    /// The counter of slot `n` as a locked counter's state, its window read against `now_us`.
    fn counter(&self, n: usize, now_us: i64) -> Option<(MeteringId, ShapeKey, Counter)> {
        let slot = self.slots.get(n)?;
        let shape = self.shape(slot)?;
        let state = slot.cell.state(shape.frame.index(now_us));
        let id = MeteringId::new(std::str::from_utf8(self.id(slot)).ok()?).ok()?;
        let counter = Counter {
            used: state.used,
            exceed: state.exceed,
            total_exceed: state.total,
            mark_us: shape.frame.bounds(state.window).1,
            buckets: None,
        };
        Some((id, shape.key, counter))
    }
}

impl Cells {
    /// The slot holding `id` with shape `key`.
    fn find(&self, hash: u64, id: &[u8], key: &ShapeKey) -> Option<usize> {
        let data = &self.data;
        let shape = data.shapes.iter().position(|s| s.key == *key)?;
        let n = self.index.find(hash, |&n| {
            data.slots
                .get(n as usize)
                .is_some_and(|slot| usize::from(slot.shape) == shape && same(data.id(slot), id))
        })?;
        Some(*n as usize)
    }

    /// Decides on slot `n`.
    fn decide(&self, n: usize, limit: u64, weight: u64, now_us: i64) -> Option<Tally> {
        let slot = self.data.slots.get(n)?;
        let shape = self.data.shape(slot)?;
        Some(tally(slot.cell.decide(shape.window(now_us), limit, weight), &shape.frame))
    }

    /// Adds a cell holding `state`; `None` when the shape list or the id arena is full.
    fn insert(
        &mut self,
        hasher: &DefaultHashBuilder,
        hash: u64,
        id: &[u8],
        key: &ShapeKey,
        state: &CellState,
    ) -> Option<usize> {
        let data = &mut self.data;
        let shape = match data.shapes.iter().position(|s| s.key == *key) {
            Some(i) => u16::try_from(i).ok()?,
            None => {
                let i = u16::try_from(data.shapes.len()).ok().filter(|&i| i < u16::MAX)?;
                data.shapes.push(Shape::new(*key));
                i
            }
        };
        let at = u32::try_from(data.ids.len() + id.len()).ok().map(|end| end - id.len() as u32)?;
        let n = u32::try_from(data.slots.len()).ok()?;
        let len = u16::try_from(id.len()).ok()?;
        reserve(&mut data.ids, id.len());
        data.ids.extend_from_slice(id);
        reserve(&mut data.slots, 1);
        data.slots.push(Slot { at, len, shape, cell: CalendarCell::new(state) });
        let data = &self.data;
        self.index.insert_unique(hash, n, |&m| data.hash_of(hasher, m));
        Some(n as usize)
    }

    /// Removes slot `n`; the last slot takes its place.
    fn remove(&mut self, hasher: &DefaultHashBuilder, n: usize) {
        let Ok(n32) = u32::try_from(n) else { return };
        let hash = self.data.hash_of(hasher, n32);
        if let Ok(entry) = self.index.find_entry(hash, |&m| m == n32) {
            entry.remove();
        }
        let last = self.data.slots.len().saturating_sub(1);
        if n != last {
            let last32 = last as u32;
            let hash = self.data.hash_of(hasher, last32);
            if let Some(entry) = self.index.find_mut(hash, |&m| m == last32) {
                *entry = n32;
            }
        }
        if n < self.data.slots.len() {
            let slot = self.data.slots.swap_remove(n);
            self.data.garbage += usize::from(slot.len);
        }
    }

    /// Gives memory back once most of it is spare: compacts the id arena, drops unused shapes,
    /// shrinks the slots and the index.
    fn compact(&mut self, hasher: &DefaultHashBuilder) {
        let data = &mut self.data;
        if data.garbage > 0 && data.garbage >= data.ids.len() / 2 {
            let mut ids = Vec::with_capacity(data.ids.len() - data.garbage);
            for slot in &mut data.slots {
                let at = slot.at as usize;
                let bytes = data.ids.get(at..at + usize::from(slot.len)).unwrap_or_default();
                slot.at = ids.len() as u32;
                ids.extend_from_slice(bytes);
            }
            data.ids = ids;
            data.garbage = 0;
        }
        let mut used = vec![false; data.shapes.len()];
        for slot in &data.slots {
            if let Some(u) = used.get_mut(usize::from(slot.shape)) {
                *u = true;
            }
        }
        if used.iter().any(|u| !u) {
            // Renumber the shapes still in use; the hashes do not change (they hash the key).
            let mut renumber = vec![0u16; data.shapes.len()];
            let mut kept = Vec::new();
            for (i, shape) in std::mem::take(&mut data.shapes).into_iter().enumerate() {
                if used[i] {
                    renumber[i] = kept.len() as u16;
                    kept.push(shape);
                }
            }
            data.shapes = kept;
            for slot in &mut data.slots {
                slot.shape = renumber[usize::from(slot.shape)];
            }
        }
        let len = data.slots.len();
        if data.slots.capacity() > 64 && data.slots.capacity() / 2 > len {
            data.slots.shrink_to(len + len / 8);
        }
        if self.index.capacity() > 64 && self.index.capacity() / 4 > len {
            let data = &self.data;
            self.index.shrink_to(len, |&m| data.hash_of(hasher, m));
        }
    }
}

impl Shard {
    /// Decides under the read lock; `None` when the key must first be added or moved, which
    /// takes the write lock ([`Shard::check_mut`]).
    pub(super) fn check(
        &self,
        hash: u64,
        id: &MeteringId,
        key: &ShapeKey,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Option<Tally> {
        if key.window == WindowKind::Calendar
            && let Some(n) = self.cells.find(hash, id.as_bytes(), key)
        {
            return if limit <= MAX_COUNT {
                self.cells.decide(n, limit, weight, now_us)
            } else {
                None
            };
        }
        let entry = self.locked.find(hash, |e| e.shape == *key && e.id == *id)?;
        Some(lock(&entry.counter).decide(&key.shape(), limit, weight, now_us))
    }

    /// Decides under the write lock, adding the key (or moving it to the locked table) first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_mut(
        &mut self,
        hasher: &DefaultHashBuilder,
        hash: u64,
        id: &MeteringId,
        key: &ShapeKey,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        if key.window == WindowKind::Calendar {
            let found = self.cells.find(hash, id.as_bytes(), key);
            let tally = match found {
                Some(n) if limit <= MAX_COUNT => self.cells.decide(n, limit, weight, now_us),
                Some(n) => {
                    // A limit a cell cannot hold: the counter moves to the locked table.
                    if let Some((_, _, counter)) = self.cells.data.counter(n, now_us) {
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
            return self.cells.data.counter(n, now_us).map(|(_, _, c)| c);
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
        let clock: Vec<i64> =
            self.cells.data.shapes.iter().map(|s| s.frame.index(now_us)).collect();
        let mut n = 0;
        while n < self.cells.data.slots.len() {
            let data = &self.cells.data;
            let slot = &data.slots[n];
            let now = clock.get(usize::from(slot.shape)).copied().unwrap_or(i64::MAX);
            let state = slot.cell.state(now);
            // The same rule as a locked counter's `is_dead`, in window numbers.
            let dead = now > state.window && (state.total == 0 || now >= state.window + 2);
            if !dead {
                n += 1;
                continue;
            }
            if let (Some(log), Some(shape)) = (log.as_deref_mut(), data.shape(slot)) {
                log.push((String::from_utf8_lossy(data.id(slot)).into_owned(), shape.key.shape()));
            }
            self.cells.remove(hasher, n);
        }
        self.cells.compact(hasher);

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

    /// Adds the live counters at `now_us` whose id starts with `prefix` to `out`.
    pub(super) fn list(&self, prefix: &str, now_us: i64, out: &mut Vec<CounterInfo>) {
        let data = &self.cells.data;
        for n in 0..data.slots.len() {
            let Some((id, key, counter)) = data.counter(n, now_us) else { continue };
            if id.as_str().starts_with(prefix) && counter.mark_us > now_us {
                out.extend(counter.info(&id, &key.shape(), now_us));
            }
        }
        for e in self.locked.iter() {
            let shape = e.shape.shape();
            let counter = lock(&e.counter);
            if e.id.as_str().starts_with(prefix) && counter.end_us(&shape) > now_us {
                out.extend(counter.info(&e.id, &shape, now_us));
            }
        }
    }

    /// Drops every counter of `id`; returns how many.
    pub(super) fn reset(&mut self, hasher: &DefaultHashBuilder, id: &[u8]) -> u64 {
        let data = &self.cells.data;
        let mine: Vec<usize> =
            (0..data.slots.len()).filter(|&n| data.id(&data.slots[n]) == id).collect();
        // From the end, so a removal never moves a slot still to be removed.
        for &n in mine.iter().rev() {
            self.cells.remove(hasher, n);
        }
        let before = self.locked.len();
        self.locked.retain(|e| e.id.as_bytes() != id);
        (mine.len() + before - self.locked.len()) as u64
    }

    /// How many counters the shard holds.
    pub(super) fn len(&self) -> usize {
        self.cells.data.slots.len() + self.locked.len()
    }

    /// Entries the shard's tables can hold without growing.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.cells.index.capacity() + self.locked.capacity()
    }
}
