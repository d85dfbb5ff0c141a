//! A calendar counter without a lock: the window it counts and the units used in it share one
//! atomic word, so an admission is one compare-and-swap.
//!
//! # Invariants
//!
//! * **One word decides.** `usage` packs the low 16 bits of the window number with the units used
//!   in that window (48 bits). An admission swaps the word it read for that word plus its weight,
//!   and only when `used + weight <= limit`; a new window swaps it for `(window, weight or 0)`.
//!   A swap succeeds only on the word it read, so the admissions of one counter are totally
//!   ordered and no window's `used` ever passes its limit. The loom model at the end of this file
//!   checks it for every interleaving of two threads, across a window change.
//! * **Windows only move forward.** A check whose clock lies in an earlier window than the word's
//!   (a clock stepped back, or a thread that read the time a moment before another) counts in the
//!   word's window, as the locked counters do.
//! * **Window numbers are compared within ±32,767.** The sweep drops a counter once it holds
//!   nothing, at most a second or two after its window ends (see `Counters`), so a live counter's
//!   window is at most two windows behind the clock. Only a clock stepped back by more than
//!   32,767 windows of a shape would be misread.
//! * **Rejections never touch `usage`.** `exceed` (the rejections of the word's window) and
//!   `total` (rejections across windows) are words of their own, tagged with a window the same
//!   way. `total` is carried while the counter is checked in consecutive windows and restarts
//!   after a window without a check, like the locked counters' carried total.
//! * **Counts fit 48 bits.** `used` never passes the limit, and limits above [`MAX_COUNT`] are
//!   kept under a lock instead (see `table`); rejection counts saturate at [`MAX_COUNT`].

use std::sync::atomic::{AtomicU64, Ordering};

use super::state::admit;
use crate::decision::Outcome;

/// The largest count a cell holds (2^48 - 1).
pub(crate) const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
/// Bits of a word that hold the count; the rest hold the window's tag.
const COUNT_BITS: u32 = 48;

/// An atomic 64-bit word: std's in the engine, loom's in the model test.
pub(super) trait Word {
    /// A word holding `v`.
    fn new(v: u64) -> Self;
    /// The current value.
    fn get(&self) -> u64;
    /// Replaces `current` by `new`; on failure returns the value found instead.
    fn swap_if(&self, current: u64, new: u64) -> Result<(), u64>;
}

impl Word for AtomicU64 {
    fn new(v: u64) -> Self {
        AtomicU64::new(v)
    }
    fn get(&self) -> u64 {
        self.load(Ordering::Acquire)
    }
    fn swap_if(&self, current: u64, new: u64) -> Result<(), u64> {
        self.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire).map(|_| ())
    }
}

/// The tag of window `k`: its low 16 bits.
fn tag_of(k: i64) -> u16 {
    k.rem_euclid(1 << 16) as u16
}

fn pack(tag: u16, count: u64) -> u64 {
    (u64::from(tag) << COUNT_BITS) | count.min(MAX_COUNT)
}

fn count(word: u64) -> u64 {
    word & MAX_COUNT
}

/// How many windows after window `k` the word's window lies (negative: before it).
fn offset(word: u64, k: i64) -> i64 {
    let tag = (word >> COUNT_BITS) as u16;
    i64::from(tag.wrapping_sub(tag_of(k)) as i16)
}

/// The rejections an `exceed` word holds for `window`.
fn exceed_in(word: u64, window: i64) -> u64 {
    if offset(word, window) == 0 { count(word) } else { 0 }
}

/// The carried total a `total` word holds for `window`.
fn total_in(word: u64, window: i64) -> u64 {
    // One window behind: a carry about to happen (see `carry_total`).
    if offset(word, window) >= -1 { count(word) } else { 0 }
}

/// A calendar counter's three words. 24 bytes.
pub(super) struct CalendarCell<W = AtomicU64> {
    usage: W,
    exceed: W,
    total: W,
}

/// A cell's figures in its own window: what is listed, written to disk and read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CellState {
    /// The window's number (see `window::CalendarFrame`).
    pub(super) window: i64,
    pub(super) used: u64,
    pub(super) exceed: u64,
    pub(super) total: u64,
}

/// What one check decided, with the figures after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CellTally {
    pub(super) outcome: Outcome,
    pub(super) state: CellState,
}

impl<W: Word> CalendarCell<W> {
    /// A cell holding `state`; counts above [`MAX_COUNT`] are cut to it.
    pub(super) fn new(state: &CellState) -> Self {
        let tag = tag_of(state.window);
        Self {
            usage: W::new(pack(tag, state.used)),
            exceed: W::new(pack(tag, state.exceed)),
            total: W::new(pack(tag, state.total)),
        }
    }

    /// Checks `weight` units against `limit` (at most [`MAX_COUNT`]) when the clock is in window
    /// `now`, and counts them when admitted.
    // Inlined into every check (see `Counters::check_us`).
    #[inline(always)]
    pub(super) fn decide(&self, now: i64, limit: u64, weight: u64) -> CellTally {
        // Read with the usage word (they share a cache line): an admission reports them as they
        // were just before it, which is as current as any read after it could be.
        let (exceed_word, total_word) = (self.exceed.get(), self.total.get());
        let mut word = self.usage.get();
        let (outcome, window, used, gap) = loop {
            let ahead = offset(word, now);
            // A word behind the clock belongs to a finished window: this check starts a new one.
            let (window, used, gap) =
                if ahead < 0 { (now, 0, -ahead) } else { (now + ahead, count(word), 0) };
            let outcome = admit(used, limit, weight);
            let used = if outcome == Outcome::Allowed { used + weight } else { used };
            let next = pack(tag_of(window), used);
            if next == word {
                break (outcome, window, used, gap);
            }
            match self.usage.swap_if(word, next) {
                Ok(()) => break (outcome, window, used, gap),
                Err(found) => word = found,
            }
        };
        if gap > 0 {
            self.carry_total(window, gap);
        }
        let (exceed, total) = if outcome == Outcome::Allowed {
            (exceed_in(exceed_word, window), total_in(total_word, window))
        } else {
            (self.count_exceed(window), self.count_total(window))
        };
        CellTally { outcome, state: CellState { window, used, exceed, total } }
    }

    /// Gives back up to `units` counted in window `counted` while the clock is in window
    /// `now`: one compare-and-swap, like an admission; never below zero. `None` when the cell
    /// has moved on from that window or the clock has left it (nothing is given back then).
    pub(super) fn give_back(&self, counted: i64, now: i64, units: u64) -> Option<u64> {
        if now > counted {
            return None;
        }
        let mut word = self.usage.get();
        loop {
            if offset(word, counted) != 0 {
                return None;
            }
            let given = count(word).min(units);
            if given == 0 {
                return Some(0);
            }
            match self.usage.swap_if(word, pack(tag_of(counted), count(word) - given)) {
                Ok(()) => return Some(given),
                Err(found) => word = found,
            }
        }
    }

    /// The figures in the cell's own window, reading window numbers against the clock's window
    /// `now`.
    pub(super) fn state(&self, now: i64) -> CellState {
        let word = self.usage.get();
        let window = now + offset(word, now);
        CellState {
            window,
            used: count(word),
            exceed: self.exceed_in(window),
            total: self.total_in(window),
        }
    }

    /// After the usage word moved `gap` windows on to `window`: the total is carried into it when
    /// the previous check was in the window just before, else it restarts.
    fn carry_total(&self, window: i64, gap: i64) {
        let mut word = self.total.get();
        while offset(word, window) < 0 {
            let carried = if gap == 1 { count(word) } else { 0 };
            match self.total.swap_if(word, pack(tag_of(window), carried)) {
                Ok(()) => return,
                Err(found) => word = found,
            }
        }
    }

    fn exceed_in(&self, window: i64) -> u64 {
        exceed_in(self.exceed.get(), window)
    }

    fn total_in(&self, window: i64) -> u64 {
        total_in(self.total.get(), window)
    }

    /// Counts one rejection in `window`; returns the window's rejections.
    fn count_exceed(&self, window: i64) -> u64 {
        let mut word = self.exceed.get();
        loop {
            let next = match offset(word, window) {
                0 => pack(tag_of(window), count(word).saturating_add(1)),
                o if o < 0 => pack(tag_of(window), 1),
                // Another check already counts a later window: this one belongs to a window gone.
                _ => return 1,
            };
            match self.exceed.swap_if(word, next) {
                Ok(()) => return count(next),
                Err(found) => word = found,
            }
        }
    }

    /// Counts one rejection in `window` into the carried total; returns the total.
    fn count_total(&self, window: i64) -> u64 {
        let mut word = self.total.get();
        loop {
            let next = match offset(word, window) {
                o if o >= 0 => pack((word >> COUNT_BITS) as u16, count(word).saturating_add(1)),
                -1 => pack(tag_of(window), count(word).saturating_add(1)),
                _ => pack(tag_of(window), 1),
            };
            match self.total.swap_if(word, next) {
                Ok(()) => return count(next),
                Err(found) => word = found,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cell = CalendarCell<AtomicU64>;

    fn fresh(window: i64) -> Cell {
        Cell::new(&CellState { window, used: 0, exceed: 0, total: 0 })
    }

    #[test]
    fn admits_to_the_limit_then_counts_rejections() {
        let cell = fresh(7);
        for i in 1..=3 {
            let t = cell.decide(7, 3, 1);
            assert_eq!((t.outcome, t.state.used), (Outcome::Allowed, i));
        }
        let t = cell.decide(7, 3, 1);
        assert_eq!(t.outcome, Outcome::Exceeded);
        assert_eq!((t.state.used, t.state.exceed, t.state.total), (3, 1, 1));
        assert_eq!(cell.decide(7, 3, 4).outcome, Outcome::WeightExceedsLimit);
        assert_eq!(cell.state(7), CellState { window: 7, used: 3, exceed: 2, total: 2 });
    }

    #[test]
    fn a_new_window_restarts_usage_and_carries_the_total_only_from_the_window_before() {
        let cell = fresh(-1);
        assert_eq!(cell.decide(-1, 1, 1).outcome, Outcome::Allowed);
        assert_eq!(cell.decide(-1, 1, 1).outcome, Outcome::Exceeded);
        let t = cell.decide(0, 1, 1);
        assert_eq!(
            (t.outcome, t.state.used, t.state.exceed, t.state.total),
            (Outcome::Allowed, 1, 0, 1)
        );
        // Window 1 had no check: the total restarts in window 2.
        let t = cell.decide(2, 1, 1);
        assert_eq!((t.state.window, t.state.total), (2, 0));
    }

    #[test]
    fn a_clock_behind_the_cell_counts_in_the_cell_window() {
        let cell = fresh(65_535);
        cell.decide(65_536, 10, 4);
        let t = cell.decide(65_535, 10, 4);
        assert_eq!((t.state.window, t.state.used), (65_536, 8));
        assert_eq!(cell.state(65_540).window, 65_536);
    }

    #[test]
    fn a_give_back_saturates_and_only_in_its_own_window() {
        let cell = fresh(7);
        cell.decide(7, 5, 3);
        assert_eq!(cell.give_back(7, 7, 2), Some(2));
        assert_eq!(cell.give_back(7, 7, 5), Some(1), "never below zero");
        assert_eq!(cell.give_back(7, 7, 1), Some(0));
        assert_eq!(cell.give_back(6, 7, 1), None, "an earlier window is gone");
        cell.decide(7, 5, 2);
        assert_eq!(cell.give_back(7, 8, 1), None, "the clock has left the window");
        cell.decide(8, 5, 1);
        assert_eq!(cell.give_back(7, 8, 1), None);
        assert_eq!(cell.state(8).used, 1);
    }

    #[test]
    fn counts_are_cut_to_48_bits() {
        let cell = Cell::new(&CellState { window: 3, used: u64::MAX, exceed: u64::MAX, total: 5 });
        assert_eq!(
            cell.state(3),
            CellState { window: 3, used: MAX_COUNT, exceed: MAX_COUNT, total: 5 }
        );
        let t = cell.decide(3, MAX_COUNT, 1);
        assert_eq!((t.outcome, t.state.exceed), (Outcome::Exceeded, MAX_COUNT));
    }
}

/// Exactness under every interleaving, checked with loom.
#[cfg(test)]
mod model {
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    impl Word for AtomicU64 {
        fn new(v: u64) -> Self {
            AtomicU64::new(v)
        }
        fn get(&self) -> u64 {
            self.load(Ordering::Acquire)
        }
        fn swap_if(&self, current: u64, new: u64) -> Result<(), u64> {
            self.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
                .map(|_| ())
        }
    }

    type Cell = CalendarCell<AtomicU64>;

    /// Runs `checks[t]` (clock window, weight) on thread `t`, all against `limit`, and returns
    /// every tally with the cell's state afterwards, read in window `last`.
    fn run(
        start: CellState,
        limit: u64,
        checks: [Vec<(i64, u64)>; 2],
        last: i64,
    ) -> (Vec<CellTally>, CellState) {
        let cell = Arc::new(Cell::new(&start));
        let handles: Vec<_> = checks
            .into_iter()
            .map(|list| {
                let cell = Arc::clone(&cell);
                loom::thread::spawn(move || {
                    list.into_iter().map(|(now, w)| cell.decide(now, limit, w)).collect::<Vec<_>>()
                })
            })
            .collect();
        let tallies = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        (tallies, cell.state(last))
    }

    fn admitted_in(tallies: &[CellTally], window: i64) -> u64 {
        tallies.iter().filter(|t| t.outcome == Outcome::Allowed && t.state.window == window).count()
            as u64
    }

    #[test]
    fn two_threads_never_admit_past_the_limit() {
        loom::model(|| {
            let start = CellState { window: 5, used: 1, exceed: 0, total: 0 };
            let (tallies, end) = run(start, 2, [vec![(5, 1), (5, 1)], vec![(5, 1)]], 5);
            // One unit was free: exactly one of the three is admitted, two rejected and counted.
            assert_eq!(admitted_in(&tallies, 5), 1);
            assert_eq!(end, CellState { window: 5, used: 2, exceed: 2, total: 2 });
            assert!(tallies.iter().all(|t| t.state.used <= 2));
        });
    }

    #[test]
    fn a_window_change_racing_admissions_loses_nothing_and_admits_nothing_extra() {
        loom::model(|| {
            // The cell is full in window 5. One thread's clock is still in window 5 for its first
            // check; both then check in window 6, where the limit is 2.
            let start = CellState { window: 5, used: 2, exceed: 1, total: 1 };
            let (tallies, end) = run(start, 2, [vec![(5, 1), (6, 1)], vec![(6, 1), (6, 1)]], 6);
            let in_6 = admitted_in(&tallies, 6);
            assert_eq!(admitted_in(&tallies, 5), 0, "window 5 was full");
            assert_eq!(in_6, 2, "window 6 admits exactly its limit");
            assert_eq!((end.window, end.used), (6, in_6));
            // Every rejection is in the carried total (windows 5 and 6 are consecutive).
            let rejected = tallies.iter().filter(|t| t.outcome != Outcome::Allowed).count() as u64;
            assert_eq!(end.total, 1 + rejected);
            let rejected_in_6 = tallies
                .iter()
                .filter(|t| t.outcome != Outcome::Allowed && t.state.window == 6)
                .count() as u64;
            assert_eq!(end.exceed, rejected_in_6);
        });
    }
}
