//! The cells' hash index: slot numbers in one open-addressed array of 4-byte entries, each
//! beside eight bits of its key's hash.
//!
//! A lookup reads entries from its key's home position on (linear probing); the home cache
//! line of 16 entries almost always holds the key, and eight bits of hash beside each slot
//! number spare most comparisons with a slot that is not the key's. Against hashbrown's table
//! of slot numbers it took a one-key check from 1.05 to 1.02 times governor's time, and an
//! entry costs 4 bytes instead of 5 (BENCHMARKS.md, engine).
//!
//! # Invariants
//!
//! * **`entries.len()` is 0 or a power of two, and at most 7/8 of the entries are used**, so
//!   a probe always meets an empty entry and ends.
//! * **An entry is [`EMPTY`] or `tag << 24 | (n + 1)`** for slot `n < MAX_SLOTS` and `tag` the
//!   top eight bits of the key's hash.
//! * **No gaps:** every entry sits where a probe from its hash's home position reaches it
//!   before any empty entry. A removal keeps this by shifting the entries after it back
//!   (no tombstones).

/// An unused entry.
const EMPTY: u32 = 0;
/// The bits of an entry holding its slot number plus one.
const SLOT_BITS: u32 = (1 << 24) - 1;
/// Slots an index can point to: numbers `0..MAX_SLOTS`.
pub(super) const MAX_SLOTS: u32 = SLOT_BITS;

/// Slot numbers under their keys' hashes (see the module docs).
#[derive(Default)]
pub(super) struct Index {
    entries: Box<[u32]>,
    len: usize,
}

fn tag(hash: u64) -> u32 {
    (hash >> 56) as u32
}

fn entry(hash: u64, n: u32) -> u32 {
    tag(hash) << 24 | (n + 1)
}

fn slot(e: u32) -> u32 {
    (e & SLOT_BITS).wrapping_sub(1)
}

/// Entries an index of `size` holds: 7/8 of them, so probes stay within a cache line or two.
fn holds(size: usize) -> usize {
    size / 8 * 7
}

/// Puts `e` in the first empty entry from `hash`'s home position on (there is one).
fn place(entries: &mut [u32], hash: u64, e: u32) {
    let mask = entries.len() - 1;
    let mut i = hash as usize & mask;
    while entries[i] != EMPTY {
        i = (i + 1) & mask;
    }
    entries[i] = e;
}

impl Index {
    /// The slot number under `hash` for which `eq` holds.
    // Inlined into every check (see `Counters::check_us`).
    #[inline(always)]
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.position(hash, |e| eq(slot(e))).map(|(_, e)| slot(e))
    }

    /// Where the entry under `hash` for which `eq` holds sits, and the entry.
    #[inline(always)]
    fn position(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<(usize, u32)> {
        let mask = self.entries.len().checked_sub(1)?;
        let tag = tag(hash);
        let mut i = hash as usize & mask;
        loop {
            let e = *self.entries.get(i)?;
            if e == EMPTY {
                return None;
            }
            if e >> 24 == tag && eq(e) {
                return Some((i, e));
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds slot `n` (below [`MAX_SLOTS`]) under `hash`, growing first when more than 7/8 would be used.
    /// `rehash` gives the hash of any slot already in.
    pub(super) fn insert(&mut self, hash: u64, n: u32, rehash: impl Fn(u32) -> u64) {
        debug_assert!(n < MAX_SLOTS);
        if self.len + 1 > holds(self.entries.len()) {
            self.resize((self.entries.len() * 2).max(16), rehash);
        }
        place(&mut self.entries, hash, entry(hash, n));
        self.len += 1;
    }

    /// Removes the entry of slot `n` under `hash`, if there is one.
    pub(super) fn remove(&mut self, hash: u64, n: u32, rehash: impl Fn(u32) -> u64) {
        let Some((mut hole, _)) = self.position(hash, |e| slot(e) == n) else { return };
        let mask = self.entries.len() - 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let e = self.entries[i];
            if e == EMPTY {
                break;
            }
            let home = rehash(slot(e)) as usize & mask;
            // It may move back into the hole unless its home lies cyclically in (hole, i].
            let stays = if hole <= i { hole < home && home <= i } else { hole < home || home <= i };
            if !stays {
                self.entries[hole] = e;
                hole = i;
            }
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
    }

    /// Points the entry of slot `from` under `hash` at slot `to` instead.
    pub(super) fn repoint(&mut self, hash: u64, from: u32, to: u32) {
        if let Some((i, _)) = self.position(hash, |e| slot(e) == from) {
            self.entries[i] = entry(hash, to);
        }
    }

    /// Shrinks to the smallest size holding `len` entries, when that is smaller.
    pub(super) fn shrink_to(&mut self, len: usize, rehash: impl Fn(u32) -> u64) {
        let size = Self::size_for(len.max(self.len));
        if size < self.entries.len() {
            self.resize(size, rehash);
        }
    }

    /// Entries the index holds without growing.
    pub(super) fn capacity(&self) -> usize {
        holds(self.entries.len())
    }

    fn size_for(len: usize) -> usize {
        if len == 0 { 0 } else { (len * 8).div_ceil(7).next_power_of_two().max(16) }
    }

    fn resize(&mut self, size: usize, rehash: impl Fn(u32) -> u64) {
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; size].into_boxed_slice());
        for e in old.iter().copied().filter(|&e| e != EMPTY) {
            place(&mut self.entries, rehash(slot(e)), e);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The index beside the slots' hashes, changed the way `Cells` changes it: a removal
    /// moves the last slot into the hole.
    #[derive(Default)]
    struct Model {
        index: Index,
        hashes: Vec<u64>,
    }

    impl Model {
        fn insert(&mut self, hash: u64) {
            let n = self.hashes.len() as u32;
            self.hashes.push(hash);
            let hashes = &self.hashes;
            self.index.insert(hash, n, |m| hashes[m as usize]);
        }

        fn remove(&mut self, n: usize) {
            let hashes = &self.hashes;
            self.index.remove(hashes[n], n as u32, |m| hashes[m as usize]);
            let last = self.hashes.len() - 1;
            if n != last {
                self.index.repoint(self.hashes[last], last as u32, n as u32);
            }
            self.hashes.swap_remove(n);
        }

        fn shrink(&mut self) {
            let hashes = &self.hashes;
            self.index.shrink_to(0, |m| hashes[m as usize]);
        }

        /// Every slot is found under its hash, and nothing else is there.
        fn check(&self) {
            assert_eq!(self.index.len, self.hashes.len());
            assert!(self.index.len <= holds(self.index.entries.len()));
            for (n, &h) in self.hashes.iter().enumerate() {
                assert_eq!(self.index.find(h, |m| m == n as u32), Some(n as u32), "slot {n}");
            }
            let used = self.index.entries.iter().filter(|&&e| e != EMPTY).count();
            assert_eq!(used, self.hashes.len());
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(usize),
        Shrink,
    }

    /// Hashes from few values with the same tag and neighbouring home positions, so probes
    /// collide, run long and wrap around the end of the array.
    fn op() -> impl Strategy<Value = Op> {
        let hash = (0u64..40, 0u64..2)
            .prop_map(|(low, tag)| (tag << 56) | (low.wrapping_sub(8) & 0xffff_ffff));
        prop_oneof![
            4 => hash.prop_map(Op::Insert),
            3 => any::<usize>().prop_map(Op::Remove),
            1 => Just(Op::Shrink),
        ]
    }

    proptest! {
        #[test]
        fn finds_every_slot_through_inserts_removals_and_resizes(ops in prop::collection::vec(op(), 1..300)) {
            let mut m = Model::default();
            for op in ops {
                match op {
                    Op::Insert(h) => m.insert(h),
                    Op::Remove(i) if !m.hashes.is_empty() => m.remove(i % m.hashes.len()),
                    Op::Remove(_) => {}
                    Op::Shrink => m.shrink(),
                }
                m.check();
            }
        }
    }

    #[test]
    fn a_key_not_in_is_not_found_and_an_empty_index_finds_nothing() {
        let mut m = Model::default();
        assert_eq!(m.index.find(7, |_| true), None);
        for h in 0..12 {
            m.insert(h);
        }
        // Same home and tag as slot 3, but no slot passes the comparison.
        assert_eq!(m.index.find(3, |_| false), None);
        m.check();
    }

    #[test]
    fn a_full_run_wraps_around_the_end() {
        let mut m = Model::default();
        // Twelve keys homed on the last entry of sixteen: the run wraps to the start.
        for _ in 0..12 {
            m.insert(15);
        }
        assert_eq!(m.index.entries.len(), 16);
        assert_ne!(m.index.entries[0], EMPTY);
        m.remove(0);
        m.remove(5);
        m.check();
    }
}
