//! The decision core: every live counter of this process and the one function that applies the
//! admission rule to it.
//!
//! Every store decides through [`Counters`]: the memory and embedded stores directly, the Redis
//! store for its local fallback. It is synchronous and never blocks on I/O; a check takes one
//! shard lock for the time of a few additions.
//!
//! # Invariants
//!
//! * **Exactness.** A counter is read, decided and updated under its shard's lock, so for one
//!   key the checks are totally ordered and `used` never passes `limit` through an admission:
//!   a request of weight `w` is admitted iff `w <= limit - used` (no overflow possible since
//!   `w <= limit` is checked first), and only then `used += w`.
//! * **Rejections count nothing.** A rejected request (exceeded, weight over the limit, or a
//!   probe on a full counter) leaves `used` and the rolling sub-buckets' `used` unchanged and adds
//!   one to `exceed` and `total_exceed`.
//! * **`Counter::end_us` is when the entry stops holding anything counted**: the end of the
//!   calendar or flexi window, or the instant the newest rolling sub-bucket leaves the look-back.
//!   At or after it the window's `used`/`exceed` are dead and are zeroed on the next check.
//! * **A flexi window is open iff `used > 0`** and the clock is before its end: only an admission
//!   of weight ≥ 1 opens one, and `used` only grows inside it.
//! * **Totals outlive a window by one window.** `total_exceed` is carried into the next window
//!   while the next check comes before `end + nominal length`; after that it restarts at 0.
//!   The sweep drops exactly the entries that the next check would treat as fresh (see
//!   `Counter::is_dead`), so eviction never changes an answer.
//! * **Clocks that step back** never reopen a window: a check before the end uses the stored
//!   window, which is the conservative choice (it cannot admit more than `limit` in any window).

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::{DefaultHashBuilder, HashTable};
use jiff::Timestamp;

use crate::decision::{Decision, Outcome};
use crate::spec::{CounterShape, MeteringId, QuotaSpec, TimeUnit, WindowKind};
use crate::store::CounterInfo;
use crate::window::{self, RollingLayout};

/// Number of shards; a power of two.
const SHARDS: usize = 64;
/// A shard sweeps its expired entries on access at most this often (clock time).
const SWEEP_EVERY_US: i64 = 1_000_000;

/// All counters of one process, in `SHARDS` independently locked hash tables.
pub struct Counters {
    shards: Box<[Padded<Mutex<Shard>>]>,
    hasher: DefaultHashBuilder,
    /// Keys dropped by sweeps, kept for a store that must delete them from disk too.
    evicted: Option<Mutex<Vec<(String, CounterShape)>>>,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

/// One shard per cache line pair, so threads working on different shards do not share lines.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[derive(Default)]
struct Shard {
    table: HashTable<Entry>,
    next_sweep_us: i64,
}

/// One counter: the key (id + shape) and its state. 88 bytes; ids up to
/// [`MeteringId::INLINE_LEN`] bytes live inside it, so a lookup compares without a pointer chase.
struct Entry {
    id: MeteringId,
    shape: ShapeKey,
    counter: Counter,
}

/// A [`CounterShape`] packed into 16 bytes (no `Option` tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ShapeKey {
    /// The calendar anchor in Unix seconds, or [`ShapeKey::NO_START`].
    start: i64,
    interval: u32,
    unit: TimeUnit,
    window: WindowKind,
}

impl ShapeKey {
    /// Far outside jiff's range, so it never collides with a real anchor.
    const NO_START: i64 = i64::MIN;

    fn of(shape: &CounterShape) -> Self {
        Self {
            start: shape.start.unwrap_or(Self::NO_START),
            interval: shape.interval,
            unit: shape.unit,
            window: shape.window,
        }
    }

    fn shape(&self) -> CounterShape {
        CounterShape {
            interval: self.interval,
            unit: self.unit,
            window: self.window,
            start: (self.start != Self::NO_START).then_some(self.start),
        }
    }
}

/// The state of one counter. See the module invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Units admitted in the current calendar/flexi window (unused for rolling).
    pub(crate) used: u64,
    /// Rejections in the current window (flexi: or since the last window ended, while none is
    /// open; unused for rolling).
    pub(crate) exceed: u64,
    /// Rejections across the windows of this counter.
    pub(crate) total_exceed: u64,
    /// Calendar and rolling: the end (see [`Counter::end_us`]). Flexi: the start of the window
    /// while `used > 0`, else the time of the last rejection. `i64::MIN` when never checked.
    pub(crate) mark_us: i64,
    /// Rolling windows only: the non-empty sub-buckets, oldest first. Boxed so that calendar
    /// and flexi counters pay 8 bytes for it, not 24.
    #[allow(clippy::box_collection)]
    pub(crate) buckets: Option<Box<Vec<Bucket>>>,
}

/// One rolling sub-bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) index: i64,
    pub(crate) used: u64,
    pub(crate) exceed: u64,
}

/// What a check decided, before it is dressed as a [`Decision`]. Times in Unix microseconds.
/// The Redis store fills one from its script's reply, so both answer through one conversion.
pub(crate) struct Tally {
    pub(crate) outcome: Outcome,
    pub(crate) used: u64,
    pub(crate) exceed: u64,
    pub(crate) total_exceed: u64,
    /// `(start, end)` of the window; `None` for rolling windows.
    pub(crate) window: Option<(i64, i64)>,
    /// When a request of this weight could be admitted; `Some` only for [`Outcome::Exceeded`].
    pub(crate) retry_at: Option<i64>,
    /// When the counter next frees units.
    pub(crate) reset_at: i64,
}

impl Tally {
    /// A calendar or flexi tally: the counter's figures after the check, in `(start, end)`.
    fn windowed(outcome: Outcome, counter: &Counter, start: i64, end: i64) -> Self {
        Self {
            outcome,
            used: counter.used,
            exceed: counter.exceed,
            total_exceed: counter.total_exceed,
            window: Some((start, end)),
            retry_at: (outcome == Outcome::Exceeded).then_some(end),
            reset_at: end,
        }
    }

    /// The answer to a check of `weight` units of `id` against `spec`, decided at `now_us`.
    pub(crate) fn decision(
        self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        now_us: i64,
    ) -> Decision {
        Decision {
            outcome: self.outcome,
            identifier: id.clone(),
            limit: spec.limit,
            used: self.used,
            available: spec.limit.saturating_sub(self.used),
            weight,
            exceed_count: self.exceed,
            total_exceed_count: self.total_exceed,
            window_start: self.window.map(|(s, _)| window::timestamp(s)),
            window_end: self.window.map(|(_, e)| window::timestamp(e)),
            retry_after: self.retry_at.map(|t| window::micros_between(now_us, t)),
            reset_after: window::micros_between(now_us, self.reset_at),
            degraded: false,
        }
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding the lock cannot leave a counter half-updated in a way that breaks
    // exactness (all updates are single assignments after the decision), so carry on.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Counters {
    /// No counters yet.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Padded(Mutex::new(Shard::default()))).collect(),
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

    /// The hash of a key. Ids are hashed as bytes everywhere (entries and lookups alike).
    fn hash(&self, id: &[u8], shape: &ShapeKey) -> u64 {
        self.hasher.hash_one((id, shape))
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // Bits 32.. are not used by the table for its bucket index below 2^32 buckets.
        &self.shards[(hash >> 32) as usize & (SHARDS - 1)]
    }

    /// Checks `weight` units of `id` against `spec` at `now` and counts them when admitted.
    pub fn check_at(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        now: Timestamp,
    ) -> Decision {
        let now_us = now.as_microsecond();
        let key = ShapeKey::of(&spec.counter_shape());
        let hash = self.hash(id.as_bytes(), &key);
        let verdict = {
            let mut shard = lock(self.shard(hash));
            if now_us >= shard.next_sweep_us {
                shard.sweep(now_us, &self.hasher, self.evicted.as_ref());
            }
            let entry = match shard.table.entry(
                hash,
                |e| e.shape == key && e.id == *id,
                |e| self.hash(e.id.as_bytes(), &e.shape),
            ) {
                TableEntry::Occupied(o) => o.into_mut(),
                TableEntry::Vacant(v) => v
                    .insert(Entry {
                        id: id.clone(),
                        shape: key,
                        counter: Counter { mark_us: i64::MIN, ..Counter::default() },
                    })
                    .into_mut(),
            };
            entry.counter.decide(&key.shape(), spec.limit, weight, now_us)
        };
        verdict.decision(id, spec, weight, now_us)
    }

    /// Live counters at `now` whose identifier starts with `prefix`, sorted by identifier.
    pub fn counters_at(&self, prefix: &str, now: Timestamp) -> Vec<CounterInfo> {
        let now_us = now.as_microsecond();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            for e in shard.table.iter() {
                if !e.id.as_str().starts_with(prefix)
                    || e.counter.end_us(&e.shape.shape()) <= now_us
                {
                    continue;
                }
                if let Some(info) = e.counter.info(&e.id, &e.shape.shape(), now_us) {
                    out.push(info);
                }
            }
        }
        out.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        out
    }

    /// Drops every counter of `id` (all shapes); returns how many were dropped.
    pub fn reset(&self, id: &MeteringId) -> u64 {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let before = shard.table.len();
            shard.table.retain(|e| e.id.as_bytes() != id.as_bytes());
            dropped += (before - shard.table.len()) as u64;
        }
        dropped
    }

    /// Drops the counters that hold nothing at `now`; returns how many were dropped.
    pub fn evict_expired(&self, now: Timestamp) -> usize {
        let now_us = now.as_microsecond();
        self.shards.iter().map(|s| lock(s).sweep(now_us, &self.hasher, self.evicted.as_ref())).sum()
    }

    /// How many counters are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).table.len()).sum()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state of one counter, for writing it behind.
    pub(crate) fn snapshot(&self, id: &str, shape: &CounterShape) -> Option<Counter> {
        let key = ShapeKey::of(shape);
        let hash = self.hash(id.as_bytes(), &key);
        let shard = lock(self.shard(hash));
        shard
            .table
            .find(hash, |e| e.shape == key && e.id.as_bytes() == id.as_bytes())
            .map(|e| e.counter.clone())
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
        if counter.is_dead(shape, now.as_microsecond()) {
            return false;
        }
        let key = ShapeKey::of(shape);
        let hash = self.hash(id.as_bytes(), &key);
        let mut shard = lock(self.shard(hash));
        let entry = Entry { id, shape: key, counter };
        match shard.table.entry(
            hash,
            |e| e.shape == key && e.id == entry.id,
            |e| self.hash(e.id.as_bytes(), &e.shape),
        ) {
            TableEntry::Occupied(mut o) => *o.get_mut() = entry,
            TableEntry::Vacant(v) => {
                v.insert(entry);
            }
        }
        true
    }
}

impl Shard {
    /// Drops dead entries and gives memory back when the table is mostly empty.
    fn sweep(
        &mut self,
        now_us: i64,
        hasher: &DefaultHashBuilder,
        log: Option<&Mutex<Vec<(String, CounterShape)>>>,
    ) -> usize {
        self.next_sweep_us = now_us.saturating_add(SWEEP_EVERY_US);
        let before = self.table.len();
        let mut dropped = Vec::new();
        self.table.retain(|e| {
            let dead = e.counter.is_dead(&e.shape.shape(), now_us);
            if dead && log.is_some() {
                dropped.push((e.id.as_str().to_owned(), e.shape.shape()));
            }
            !dead
        });
        if let (Some(log), false) = (log, dropped.is_empty()) {
            log.lock().unwrap_or_else(PoisonError::into_inner).append(&mut dropped);
        }
        let after = self.table.len();
        if self.table.capacity() > 64 && self.table.capacity() / 4 > after {
            self.table.shrink_to(after, |e| hasher.hash_one((e.id.as_bytes(), &e.shape)));
        }
        before - after
    }
}

impl Counter {
    /// True when nothing counted is left and the carried total (if any) has lapsed.
    fn is_dead(&self, shape: &CounterShape, now_us: i64) -> bool {
        let end = self.end_us(shape);
        now_us >= end
            && (self.total_exceed == 0
                || now_us >= end.saturating_add(window::nominal_len_us(shape)))
    }

    /// The instant after which this counter holds nothing counted.
    pub(crate) fn end_us(&self, shape: &CounterShape) -> i64 {
        match shape.window {
            WindowKind::Flexi if self.used > 0 => window::add_len(shape, self.mark_us),
            _ => self.mark_us,
        }
    }

    /// Called at or after the end: zero what belonged to the dead window, and the carried total
    /// once it has lapsed.
    fn restart(&mut self, shape: &CounterShape, now_us: i64) {
        if now_us >= self.end_us(shape).saturating_add(window::nominal_len_us(shape)) {
            self.total_exceed = 0;
        }
        self.used = 0;
        self.exceed = 0;
    }

    fn decide(&mut self, shape: &CounterShape, limit: u64, weight: u64, now_us: i64) -> Tally {
        match shape.window {
            WindowKind::Calendar => self.decide_calendar(shape, limit, weight, now_us),
            WindowKind::Flexi => self.decide_flexi(shape, limit, weight, now_us),
            WindowKind::Rolling => self.decide_rolling(shape, limit, weight, now_us),
        }
    }

    fn decide_calendar(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let (start, end) = if now_us >= self.mark_us {
            self.restart(shape, now_us);
            let (start, end) = window::calendar_us(shape, now_us);
            self.mark_us = end;
            (start, end)
        } else {
            match window::fixed_len_us(shape) {
                Some(len) if self.mark_us < window::MAX_US => {
                    (self.mark_us.saturating_sub(len), self.mark_us)
                }
                _ => window::calendar_us(shape, now_us),
            }
        };
        let outcome = admit(self.used, limit, weight);
        match outcome {
            Outcome::Allowed => self.used += weight,
            _ => self.reject(),
        }
        Tally::windowed(outcome, self, start, end)
    }

    fn decide_flexi(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let open_end = self.end_us(shape);
        let open = self.used > 0 && now_us < open_end;
        if !open {
            let lapsed = now_us >= open_end.saturating_add(window::nominal_len_us(shape));
            if self.used > 0 || lapsed {
                // The window has ended, or the rejections counted while none was open lapsed.
                self.exceed = 0;
            }
            if lapsed {
                self.total_exceed = 0;
            }
            self.used = 0;
        }
        let outcome = admit(self.used, limit, weight);
        let (start, end) =
            if open { (self.mark_us, open_end) } else { (now_us, window::add_len(shape, now_us)) };
        match outcome {
            Outcome::Allowed if weight > 0 => {
                if !open {
                    // The first admitted request opens the window.
                    self.exceed = 0;
                    self.mark_us = now_us;
                }
                self.used += weight;
            }
            Outcome::Allowed => {}
            _ => {
                self.reject();
                if !open {
                    // No window: remember when, so the carried total lapses in time.
                    self.mark_us = now_us;
                }
            }
        }
        Tally::windowed(outcome, self, start, end)
    }

    fn decide_rolling(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let layout = RollingLayout::of(shape);
        if now_us >= self.mark_us {
            self.restart(shape, now_us);
        }
        let first = layout.first_counted(now_us);
        let buckets = self.buckets.get_or_insert_with(Default::default);
        let gone = buckets.iter().take_while(|b| b.index < first).count();
        buckets.drain(..gone);
        // One pass for both sums; the update below changes them by exactly its own amount.
        // Saturating, because a counter read back from disk may hold anything.
        let (mut used, mut exceed) = buckets
            .iter()
            .fold((0u64, 0u64), |(u, x), b| (u.saturating_add(b.used), x.saturating_add(b.exceed)));
        let outcome = admit(used, limit, weight);
        let current = layout.bucket_of(now_us);
        let bucket = match buckets.iter().rposition(|b| b.index <= current) {
            Some(i) if buckets[i].index == current => i,
            found => {
                let at = found.map_or(0, |i| i + 1);
                buckets.insert(at, Bucket { index: current, used: 0, exceed: 0 });
                at
            }
        };
        match outcome {
            // No overflow: admitted means `used + weight <= limit`, and the bucket is in `used`.
            Outcome::Allowed => {
                buckets[bucket].used += weight;
                used += weight;
            }
            _ => {
                buckets[bucket].exceed = buckets[bucket].exceed.saturating_add(1);
                exceed = exceed.saturating_add(1);
                self.total_exceed = self.total_exceed.saturating_add(1);
            }
        }
        if buckets[bucket].used == 0 && buckets[bucket].exceed == 0 {
            // Only a probe's new bucket: removing it changes neither sum.
            buckets.remove(bucket);
        }
        let retry_at = (outcome == Outcome::Exceeded).then(|| {
            // The first instant at which enough sub-buckets have left for this weight.
            let need = weight.max(1);
            let mut left = used;
            let mut at = now_us;
            for b in buckets.iter() {
                if left.saturating_add(need) <= limit {
                    break;
                }
                left = left.saturating_sub(b.used);
                at = layout.leaves_at(b.index);
            }
            at
        });
        let reset_at = buckets.first().map_or(now_us, |b| layout.leaves_at(b.index));
        self.mark_us = buckets.last().map_or(now_us, |b| layout.leaves_at(b.index));
        if buckets.is_empty() {
            self.buckets = None;
        }
        Tally {
            outcome,
            used,
            exceed,
            total_exceed: self.total_exceed,
            window: None,
            retry_at,
            reset_at,
        }
    }

    fn reject(&mut self) {
        self.exceed = self.exceed.saturating_add(1);
        self.total_exceed = self.total_exceed.saturating_add(1);
    }

    /// The counter as the admin API lists it, or `None` when it holds nothing at `now_us`.
    fn info(&self, id: &MeteringId, shape: &CounterShape, now_us: i64) -> Option<CounterInfo> {
        let (used, exceed, window) = match shape.window {
            WindowKind::Rolling => {
                let layout = RollingLayout::of(shape);
                let first = layout.first_counted(now_us);
                let live = self.buckets.iter().flat_map(|b| b.iter()).filter(|b| b.index >= first);
                let (used, exceed) = live.fold((0u64, 0u64), |(u, x), b| {
                    (u.saturating_add(b.used), x.saturating_add(b.exceed))
                });
                (used, exceed, None)
            }
            WindowKind::Calendar => {
                let w = window::calendar_us(shape, self.mark_us.saturating_sub(1));
                (self.used, self.exceed, Some(w))
            }
            WindowKind::Flexi => {
                if self.used == 0 {
                    return None;
                }
                (self.used, self.exceed, Some((self.mark_us, window::add_len(shape, self.mark_us))))
            }
        };
        Some(CounterInfo::new(id.clone(), shape, used, exceed, self.total_exceed, window))
    }
}

/// The admission rule: `used + weight <= limit`; weight 0 probes; weight over the limit never.
fn admit(used: u64, limit: u64, weight: u64) -> Outcome {
    if weight > limit {
        Outcome::WeightExceedsLimit
    } else if weight == 0 {
        if used < limit { Outcome::Allowed } else { Outcome::Exceeded }
    } else if weight <= limit - used.min(limit) {
        Outcome::Allowed
    } else {
        Outcome::Exceeded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::QuotaSpec;
    use std::time::Duration;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn id(s: &str) -> MeteringId {
        MeteringId::new(s).unwrap()
    }

    #[test]
    fn admits_up_to_the_limit_and_counts_rejections() {
        let c = Counters::new();
        let spec = QuotaSpec::new(1000, 24, TimeUnit::Hour).unwrap();
        let k = id("ShipmentStatus:CarrierXYZ");
        let now = at("2026-11-30T10:00:00Z");
        for i in 1..=20 {
            let d = c.check_at(&k, &spec, 50, now);
            assert_eq!(d.outcome, Outcome::Allowed, "check {i}");
            assert_eq!(d.used, 50 * i);
        }
        let d = c.check_at(&k, &spec, 50, now);
        assert_eq!(d.outcome, Outcome::Exceeded);
        assert_eq!((d.used, d.available, d.exceed_count, d.total_exceed_count), (1000, 0, 1, 1));
        assert_eq!(d.retry_after, Some(Duration::from_secs(14 * 3600)));
        assert_eq!(d.reset_after, Duration::from_secs(14 * 3600));
        assert_eq!(d.window_start, Some(at("2026-11-30T00:00:00Z")));
        assert_eq!(d.window_end, Some(at("2026-12-01T00:00:00Z")));
        // Next window: used restarts, the total is carried.
        let d = c.check_at(&k, &spec, 50, at("2026-12-01T00:00:00Z"));
        assert_eq!(
            (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
            (Outcome::Allowed, 50, 0, 1)
        );
    }

    #[test]
    fn weight_zero_probes_and_weight_over_limit_is_never_admissible() {
        let c = Counters::new();
        let spec = QuotaSpec::new(2, 1, TimeUnit::Minute).unwrap();
        let k = id("probe");
        let now = at("2026-11-30T10:00:30Z");
        let d = c.check_at(&k, &spec, 0, now);
        assert_eq!((d.outcome, d.used), (Outcome::Allowed, 0));
        let d = c.check_at(&k, &spec, 3, now);
        assert_eq!((d.outcome, d.used, d.retry_after), (Outcome::WeightExceedsLimit, 0, None));
        assert_eq!(c.check_at(&k, &spec, 2, now).outcome, Outcome::Allowed);
        let d = c.check_at(&k, &spec, 0, now);
        assert_eq!((d.outcome, d.retry_after), (Outcome::Exceeded, Some(Duration::from_secs(30))));
    }

    #[test]
    fn an_unvalidated_zero_interval_never_panics() {
        let c = Counters::new();
        let now = at("2026-11-30T10:00:30Z");
        for unit in [TimeUnit::Second, TimeUnit::Month] {
            for window in [WindowKind::Calendar, WindowKind::Flexi, WindowKind::Rolling] {
                let spec = QuotaSpec { limit: 1, interval: 0, unit, window, start: None };
                assert!(c.check_at(&id("zero"), &spec, 1, now).allowed());
            }
        }
    }

    #[test]
    fn counters_read_back_with_extreme_values_never_overflow() {
        let c = Counters::new();
        let now = at("2026-11-30T10:00:30Z");
        let rolling =
            QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Rolling);
        let shape = rolling.counter_shape();
        let b = RollingLayout::of(&shape).bucket_of(now.as_microsecond());
        let full = |index| Bucket { index, used: u64::MAX, exceed: u64::MAX };
        let hostile = Counter {
            used: u64::MAX,
            exceed: u64::MAX,
            total_exceed: u64::MAX,
            mark_us: i64::MAX,
            buckets: Some(Box::new(vec![full(b - 1), full(b)])),
        };
        assert!(c.restore(id("r"), &shape, hostile.clone(), now));
        let d = c.check_at(&id("r"), &rolling, 1, now);
        assert_eq!(
            (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
            (Outcome::Exceeded, u64::MAX, u64::MAX, u64::MAX)
        );
        assert_eq!(c.counters_at("r", now)[0].used, u64::MAX);
        let calendar = QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap();
        let hostile = Counter { buckets: None, ..hostile };
        assert!(c.restore(id("c"), &calendar.counter_shape(), hostile, now));
        let d = c.check_at(&id("c"), &calendar, 1, now);
        assert_eq!((d.outcome, d.total_exceed_count), (Outcome::Exceeded, u64::MAX));
    }

    #[test]
    fn limit_is_not_part_of_the_key() {
        let c = Counters::new();
        let k = id("k");
        let now = at("2026-11-30T10:00:00Z");
        let s10 = QuotaSpec::new(10, 1, TimeUnit::Hour).unwrap();
        let s5 = QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap();
        assert_eq!(c.check_at(&k, &s10, 6, now).used, 6);
        let d = c.check_at(&k, &s5, 1, now);
        assert_eq!((d.outcome, d.used, d.available), (Outcome::Exceeded, 6, 0));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn flexi_opens_at_the_first_admitted_request() {
        let c = Counters::new();
        let spec = QuotaSpec::new(2, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Flexi);
        let k = id("f");
        let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:00:10Z"));
        assert_eq!(d.window_end, Some(at("2026-11-30T10:01:10Z")));
        c.check_at(&k, &spec, 1, at("2026-11-30T10:00:20Z"));
        let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:01:09Z"));
        assert_eq!((d.outcome, d.retry_after), (Outcome::Exceeded, Some(Duration::from_secs(1))));
        let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:05:00Z"));
        assert_eq!((d.outcome, d.used), (Outcome::Allowed, 1));
        assert_eq!(d.window_start, Some(at("2026-11-30T10:05:00Z")));
    }

    #[test]
    fn rolling_frees_units_as_sub_buckets_leave() {
        let c = Counters::new();
        let spec = QuotaSpec::new(3, 1, TimeUnit::Minute).unwrap().with_window(WindowKind::Rolling);
        let k = id("r");
        c.check_at(&k, &spec, 1, at("2026-11-30T10:00:00Z"));
        c.check_at(&k, &spec, 2, at("2026-11-30T10:00:30Z"));
        let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:00:40Z"));
        assert_eq!(d.outcome, Outcome::Exceeded);
        assert_eq!(d.window_start, None);
        // The first unit leaves one minute after its sub-bucket started (10:00:00 is a bucket
        // boundary: 64 buckets of 0.9375 s tile a minute).
        assert_eq!(d.retry_after, Some(Duration::from_secs(20)));
        let d = c.check_at(&k, &spec, 1, at("2026-11-30T10:01:00Z"));
        assert_eq!((d.outcome, d.used), (Outcome::Allowed, 3));
        let d = c.check_at(&k, &spec, 3, at("2026-11-30T10:02:00Z"));
        assert_eq!((d.outcome, d.used), (Outcome::Allowed, 3));
    }

    #[test]
    fn expired_counters_are_evicted_and_memory_returns() {
        let c = Counters::new();
        let spec = QuotaSpec::new(5, 1, TimeUnit::Second).unwrap();
        let now = at("2026-11-30T10:00:00Z");
        for i in 0..10_000 {
            c.check_at(&id(&format!("id-{i}")), &spec, 1, now);
        }
        assert_eq!(c.len(), 10_000);
        assert_eq!(c.evict_expired(at("2026-11-30T10:00:00.5Z")), 0);
        assert_eq!(c.evict_expired(at("2026-11-30T10:00:01Z")), 10_000);
        assert!(c.is_empty());
        let cap: usize = c.shards.iter().map(|s| lock(s).table.capacity()).sum();
        assert!(cap <= 64 * 64, "tables shrank: {cap}");
    }

    #[test]
    fn counters_lists_live_ones_and_reset_drops_every_shape() {
        let c = Counters::new();
        let now = at("2026-11-30T10:00:00Z");
        let k = id("Invoice:ACME");
        c.check_at(&k, &QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap(), 2, now);
        c.check_at(&k, &QuotaSpec::new(5, 1, TimeUnit::Day).unwrap(), 1, now);
        c.check_at(&id("Other"), &QuotaSpec::new(5, 1, TimeUnit::Day).unwrap(), 1, now);
        let list = c.counters_at("Invoice:", now);
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|i| i.identifier == k));
        assert_eq!(c.reset(&k), 2);
        assert!(c.counters_at("Invoice:", now).is_empty());
        assert_eq!(c.counters_at("", now).len(), 1);
    }
}
