//! The compact table of calendar counters: lock-free cells in 64-byte slots that also hold
//! their id when it is short, longer ids in one byte arena, and a hash index of slot numbers
//! (see `index`).
//!
//! A calendar counter costs one slot, a 4-byte entry in the hash index (with the index's
//! spare capacity), and for an id longer than [`INLINE_ID`] bytes its bytes in the arena:
//! about 72 bytes at a million counters (BENCHMARKS.md, memory). A slot is one cache line, so
//! a check that reaches it reads the id and the cell there, without a further miss into the
//! arena.
//!
//! # Invariants
//!
//! * **`index` holds exactly the slot numbers `0..slots.len()`**, each under the hash of its
//!   slot's key; a removal moves the last slot into the hole and re-points its index entry.
//! * **A short id is in its slot:** `len <= INLINE_ID` means the id is `key[..len]`. Otherwise
//!   `key` starts with the id's position `at` (4 bytes, native order) and the id is
//!   `ids[at..at + len]`. Bytes of removed arena ids are counted in `garbage` until
//!   [`Cells::compact`] rebuilds the arena, which it does once they are half of it.
//! * Slots, arena and shape list change only through `&mut` (the shard's write lock); checks
//!   reach a cell through `&` and change only its atomic words.

use std::sync::atomic::{AtomicI64, Ordering};

use hashbrown::DefaultHashBuilder;

use super::cell::{CalendarCell, CellState, CellTally};
use super::index::{Index, MAX_SLOTS};
use super::state::{Counter, Tally};
use super::table::{ShapeKey, key_hash};
use crate::decision::{GivenBack, Outcome};
use crate::metering_id::MeteringId;
use crate::spec::CounterShape;
use crate::store::CounterInfo;
use crate::store::listing::Selection;
use crate::window::CalendarFrame;

/// Shapes a shard keeps cells for. Every check looks its shape up in this list, so it stays
/// short: counters of further shapes are kept locked (exact all the same), and a sweep forgets
/// the shapes no cell uses any more.
const MAX_SHAPES: u16 = 64;

/// Calendar counters as cells: an index of slot numbers over the slots.
#[derive(Default)]
pub(super) struct Cells {
    index: Index,
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

/// Bytes of an id kept in its slot; a longer id's bytes live in the arena.
const INLINE_ID: usize = 36;

/// One calendar counter: its cell, its shape, and its id (or where the id is). One cache line.
#[repr(align(64))]
struct Slot {
    cell: CalendarCell,
    shape: u16,
    len: u16,
    /// The id itself, or its position in the arena (see the invariants).
    key: [u8; INLINE_ID],
}

// A slot is one cache line: a larger one would cost a second miss per check.
const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl Slot {
    /// The arena position of an id too long for the slot.
    fn at(&self) -> Option<usize> {
        if usize::from(self.len) <= INLINE_ID {
            return None;
        }
        let at: [u8; 4] = self.key[..4].try_into().unwrap_or_default();
        Some(u32::from_ne_bytes(at) as usize)
    }

    fn set_at(&mut self, at: u32) {
        self.key[..4].copy_from_slice(&at.to_ne_bytes());
    }
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
/// comparison calls `memcmp`. The last word overlaps the one before it, so an id of eight
/// bytes or more needs no byte-by-byte tail.
fn same(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |c: &[u8], at: usize| {
        c.get(at..at + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_ne_bytes)
    };
    if len < 8 {
        return a == b;
    }
    (0..len - 8).step_by(8).all(|at| word(a, at) == word(b, at))
        && word(a, len - 8) == word(b, len - 8)
}

/// A cell's figures as a [`Tally`], its window placed by `frame`.
// Inlined into every check (see `Counters::check_us`).
#[inline(always)]
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
    fn id<'a>(&'a self, slot: &'a Slot) -> &'a [u8] {
        let len = usize::from(slot.len);
        match slot.at() {
            None => slot.key.get(..len).unwrap_or_default(),
            Some(at) => self.ids.get(at..at + len).unwrap_or_default(),
        }
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
    // Inlined into every check (see `Counters::check_us`).
    #[inline(always)]
    pub(super) fn find(&self, hash: u64, id: &[u8], key: &ShapeKey) -> Option<usize> {
        let data = &self.data;
        let shape = data.shapes.iter().position(|s| s.key == *key)?;
        let n = self.index.find(hash, |n| {
            data.slots
                .get(n as usize)
                .is_some_and(|slot| usize::from(slot.shape) == shape && same(data.id(slot), id))
        })?;
        Some(n as usize)
    }

    /// Decides on slot `n`.
    // Inlined into every check (see `Counters::check_us`).
    #[inline(always)]
    pub(super) fn decide(&self, n: usize, limit: u64, weight: u64, now_us: i64) -> Option<Tally> {
        let slot = self.data.slots.get(n)?;
        let shape = self.data.shape(slot)?;
        Some(tally(slot.cell.decide(shape.window(now_us), limit, weight), &shape.frame))
    }

    /// Gives back up to `units` on slot `n`, counted in the window starting at `start_us`.
    pub(super) fn give_back(&self, n: usize, start_us: i64, units: u64, now_us: i64) -> GivenBack {
        let Some(slot) = self.data.slots.get(n) else { return GivenBack::WindowGone };
        let Some(shape) = self.data.shape(slot) else { return GivenBack::WindowGone };
        let counted = shape.frame.index(start_us);
        match slot.cell.give_back(counted, shape.window(now_us), units) {
            Some(given) => GivenBack::Units(given),
            None => GivenBack::WindowGone,
        }
    }

    /// Adds a cell holding `state`; `None` when the shape list, the id arena or the slot
    /// numbers ([`MAX_SLOTS`]) are full.
    pub(super) fn insert(
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
                let i = u16::try_from(data.shapes.len()).ok().filter(|&i| i < MAX_SHAPES)?;
                data.shapes.push(Shape::new(*key));
                i
            }
        };
        let n = u32::try_from(data.slots.len()).ok().filter(|&n| n < MAX_SLOTS)?;
        let len = u16::try_from(id.len()).ok()?;
        let mut slot = Slot { cell: CalendarCell::new(state), shape, len, key: [0; INLINE_ID] };
        match slot.key.get_mut(..id.len()) {
            Some(key) => key.copy_from_slice(id),
            None => {
                let end = u32::try_from(data.ids.len() + id.len()).ok()?;
                slot.set_at(end - u32::from(len));
                reserve(&mut data.ids, id.len());
                data.ids.extend_from_slice(id);
            }
        }
        reserve(&mut data.slots, 1);
        data.slots.push(slot);
        let data = &self.data;
        self.index.insert(hash, n, |m| data.hash_of(hasher, m));
        Some(n as usize)
    }

    /// Removes slot `n`; the last slot takes its place. No slot `n`, nothing changes.
    pub(super) fn remove(&mut self, hasher: &DefaultHashBuilder, n: usize) {
        let Ok(n32) = u32::try_from(n) else { return };
        if n >= self.data.slots.len() {
            return;
        }
        let data = &self.data;
        self.index.remove(data.hash_of(hasher, n32), n32, |m| data.hash_of(hasher, m));
        let last = self.data.slots.len().saturating_sub(1);
        if n != last {
            let last32 = last as u32;
            self.index.repoint(self.data.hash_of(hasher, last32), last32, n32);
        }
        let slot = self.data.slots.swap_remove(n);
        if slot.at().is_some() {
            self.data.garbage += usize::from(slot.len);
        }
    }

    /// Gives memory back once most of it is spare: compacts the id arena, drops unused shapes,
    /// shrinks the slots and the index.
    pub(super) fn compact(&mut self, hasher: &DefaultHashBuilder) {
        let data = &mut self.data;
        if data.garbage > 0 && data.garbage >= data.ids.len() / 2 {
            let mut ids = Vec::with_capacity(data.ids.len() - data.garbage);
            for slot in &mut data.slots {
                let Some(at) = slot.at() else { continue };
                let bytes = data.ids.get(at..at + usize::from(slot.len)).unwrap_or_default();
                slot.set_at(ids.len() as u32);
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
            self.index.shrink_to(len, |m| data.hash_of(hasher, m));
        }
    }

    /// Drops the cells that hold nothing at `now_us` (adding their keys to `log` when there is
    /// one), then gives memory back.
    pub(super) fn sweep(
        &mut self,
        hasher: &DefaultHashBuilder,
        now_us: i64,
        mut log: Option<&mut Vec<(String, CounterShape)>>,
    ) {
        let clock: Vec<i64> = self.data.shapes.iter().map(|s| s.frame.index(now_us)).collect();
        let mut n = 0;
        while n < self.data.slots.len() {
            let data = &self.data;
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
            self.remove(hasher, n);
        }
        self.compact(hasher);
    }

    /// Offers the live counters at `now_us` to `out`.
    pub(super) fn list(&self, now_us: i64, out: &mut Selection<'_, CounterInfo>) {
        let data = &self.data;
        for (n, slot) in data.slots.iter().enumerate() {
            // Turned away on the id's bytes first: making the id and the counter costs more.
            let wanted =
                data.shape(slot).is_some_and(|s| out.wants_bytes(data.id(slot), &s.key.shape()));
            if !wanted {
                continue;
            }
            let Some((id, key, counter)) = data.counter(n, now_us) else { continue };
            let shape = key.shape();
            if counter.mark_us > now_us
                && out.wants(&id, &shape)
                && let Some(info) = counter.info(&id, &shape, now_us)
            {
                out.add(&id, &shape, info);
            }
        }
    }

    /// Drops every cell of `id`; returns how many.
    pub(super) fn reset(&mut self, hasher: &DefaultHashBuilder, id: &[u8]) -> u64 {
        let data = &self.data;
        let mine: Vec<usize> =
            (0..data.slots.len()).filter(|&n| same(data.id(&data.slots[n]), id)).collect();
        // From the end, so a removal never moves a slot still to be removed.
        for &n in mine.iter().rev() {
            self.remove(hasher, n);
        }
        mine.len() as u64
    }

    /// The counter of slot `n` as a locked counter's state, its window read against `now_us`.
    pub(super) fn counter(&self, n: usize, now_us: i64) -> Option<(MeteringId, ShapeKey, Counter)> {
        self.data.counter(n, now_us)
    }

    /// How many cells there are.
    pub(super) fn len(&self) -> usize {
        self.data.slots.len()
    }

    /// Cells the index can hold without growing.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.index.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn same_agrees_with_slice_equality_at_every_length_and_position() {
        let a: Vec<u8> = (0..40u8).map(|i| b'A' + i).collect();
        for len in 0..=a.len() {
            let x = &a[..len];
            assert!(same(x, &a[..len]), "len {len}");
            assert!(len == 0 || !same(x, &a[..len - 1]), "len {len} against one shorter");
            for at in 0..len {
                let mut y = x.to_vec();
                y[at] ^= 1;
                assert!(!same(x, &y), "len {len}, byte {at} differs");
            }
        }
    }
}
