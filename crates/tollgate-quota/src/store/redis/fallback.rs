//! What one instance decides on its own while Redis is unreachable (`store_unavailable =
//! "local"`), and what it owes Redis afterwards.
//!
//! # Invariants
//!
//! * **A local share is taken of what was left.** A local decision admits at most
//!   `(limit - used) / share_of` per window, `used` being what Redis answered to this
//!   instance's latest shared decision on the counter (a check, or the forced add of owed
//!   units) while its window lasts (0 when unknown). So `share_of` instances that all lose Redis admit together at most what Redis
//!   had left, plus what each admitted since its latest shared decision.
//! * **Every unit admitted locally is owed to Redis** (`unsynced`) until it is added there
//!   ([`push_owed`], which sends it at once and retries) or its window ends: a calendar or
//!   flexi window's units end with it, a rolling window's one window length after the latest
//!   of them. A new local window of a counter drops what the old one owed.
//! * **Bounded**: `unsynced` holds one entry per counter admitted locally in a window not yet
//!   over; `last_seen` at most [`MAX_LAST_SEEN`] counters (beyond, a counter's share is taken
//!   of the whole limit).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::decision::{Decision, Outcome};
use crate::spec::{CounterShape, MeteringId, QuotaSpec, WindowKind};
use crate::store::memory::MemoryStore;
use crate::window;

use super::script::Caller;

/// The most counters whose latest shared `used` is remembered for local decisions.
pub const MAX_LAST_SEEN: usize = 100_000;

/// One counter: its id and shape.
pub(super) type Counter = (MeteringId, CounterShape);

/// Units one counter admitted locally, owed to Redis.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unsynced {
    /// The spec of the latest local admission (its limit does not matter: the add is forced).
    pub(super) spec: QuotaSpec,
    pub(super) units: u64,
    /// When they stop counting (µs since the epoch).
    until: i64,
}

/// The local store and what it owes Redis; see the module docs.
pub(super) struct Fallback {
    store: MemoryStore,
    share_of: NonZeroU32,
    clock: Option<Arc<dyn Clock>>,
    unsynced: Mutex<HashMap<Counter, Unsynced>>,
    /// Wakes [`push_owed`] when something is owed.
    owed: Notify,
    /// Each counter's `used` as of its latest shared decision, and until when it holds (µs).
    last_seen: Mutex<HashMap<Counter, (u64, i64)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fallback {
    /// A fallback sharing each limit among `share_of` instances, on `clock` (tests) or the
    /// system clock.
    pub(super) fn new(share_of: NonZeroU32, clock: Option<Arc<dyn Clock>>) -> Self {
        let store =
            clock.as_ref().map_or_else(MemoryStore::new, |c| MemoryStore::with_clock(c.clone()));
        Self {
            store,
            share_of,
            clock,
            unsynced: Mutex::default(),
            owed: Notify::new(),
            last_seen: Mutex::default(),
        }
    }

    /// The local counters.
    pub(super) fn store(&self) -> &MemoryStore {
        &self.store
    }

    fn now_us(&self) -> i64 {
        self.clock.as_ref().map_or_else(Timestamp::now, |c| c.now()).as_microsecond()
    }

    /// When units of `shape` counted now in a window ending at `end` stop counting.
    fn until(&self, shape: &CounterShape, end: Option<Timestamp>) -> i64 {
        end.map_or_else(|| window::add_len(shape, self.now_us()), |e| e.as_microsecond())
    }

    /// Keeps the `used` of shared decision `d` as what a local share is taken of.
    pub(super) fn remember(&self, id: &MeteringId, spec: &QuotaSpec, d: &Decision) {
        let shape = spec.counter_shape();
        let until = self.until(&shape, d.window_end);
        let mut seen = lock(&self.last_seen);
        let key = (id.clone(), shape);
        if seen.len() >= MAX_LAST_SEEN && !seen.contains_key(&key) {
            let now = self.now_us();
            seen.retain(|_, (_, u)| *u > now);
            if seen.len() >= MAX_LAST_SEEN {
                return;
            }
        }
        seen.insert(key, (d.used, until));
    }

    /// A decision in memory, within this instance's share of what Redis had left; marked
    /// degraded. What it admits is owed to Redis.
    pub(super) fn check(&self, id: &MeteringId, spec: &QuotaSpec, weight: u64) -> Decision {
        let shape = spec.counter_shape();
        let key = (id.clone(), shape);
        let now = self.now_us();
        let used = match lock(&self.last_seen).get(&key) {
            Some(&(used, until)) if until > now => used,
            _ => 0,
        };
        let share = spec.limit.saturating_sub(used) / u64::from(self.share_of.get());
        let mut d = self.store.check_now(id, &QuotaSpec { limit: share, ..*spec }, weight);
        d.degraded = true;
        if d.outcome == Outcome::WeightExceedsLimit && weight <= spec.limit {
            // Over this instance's share, not over the limit: worth retrying once Redis is back.
            d.outcome = Outcome::Exceeded;
            d.retry_after = Some(d.reset_after);
        }
        if d.allowed() && weight > 0 {
            self.owe(key, spec, weight, self.until(&shape, d.window_end));
        }
        d
    }

    /// Records `units` of `counter` admitted locally, counting until `until`.
    fn owe(&self, counter: Counter, spec: &QuotaSpec, units: u64, until: i64) {
        let mut map = lock(&self.unsynced);
        if map.len() >= 1024 && map.len().is_power_of_two() {
            let now = self.now_us();
            map.retain(|_, e| e.until > now);
        }
        let e = map.entry(counter).or_insert(Unsynced { spec: *spec, units: 0, until });
        if spec.window == WindowKind::Rolling {
            e.until = e.until.max(until);
        } else if e.until != until {
            // A new local window: what the last one held is over.
            e.units = 0;
            e.until = until;
        }
        e.spec = *spec;
        e.units = e.units.saturating_add(units);
        drop(map);
        self.owed.notify_one();
    }

    /// The units owed to Redis now.
    pub(super) fn owed_units(&self) -> u64 {
        lock(&self.unsynced).values().fold(0, |n, u| n.saturating_add(u.units))
    }

    /// Everything owed whose window has not ended, leaving nothing owed.
    fn take_unsynced(&self) -> Vec<(Counter, Unsynced)> {
        let mut map = lock(&self.unsynced);
        let now = self.now_us();
        map.drain().filter(|(_, u)| u.until > now).collect()
    }

    /// Owes again what Redis did not take.
    fn give_back(&self, left: Vec<(Counter, Unsynced)>) {
        if left.is_empty() {
            return;
        }
        let mut map = lock(&self.unsynced);
        for (counter, u) in left {
            let e = map.entry(counter).or_insert(Unsynced { units: 0, ..u });
            // An entry made meanwhile for a newer calendar or flexi window replaces this one.
            if e.until == u.until || u.spec.window == WindowKind::Rolling {
                e.units = e.units.saturating_add(u.units);
                e.until = e.until.max(u.until);
            }
        }
    }
}

/// How long one add of owed units may wait for Redis (it runs off the request path).
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before owed units Redis refused are sent again.
const PUSH_RETRY: Duration = Duration::from_millis(200);

/// Adds what `f` owes to Redis through `caller`, each counter's units as one forced decision,
/// for as long as the store lives (it aborts this task). Sent at once, so that a Redis that
/// stalls runs them as soon as it wakes; what fails is owed again and retried.
///
/// An add that times out may still run later (a timeout is not a rollback), and its units are
/// then added twice: Redis may count more than was admitted, never less.
pub(super) async fn push_owed(f: Arc<Fallback>, caller: Caller) {
    loop {
        let owed = f.owed.notified();
        let pending = f.take_unsynced();
        if pending.is_empty() {
            owed.await;
            continue;
        }
        let adds = pending.into_iter().map(|(counter, u)| {
            let (caller, f) = (caller.clone(), f.clone());
            async move {
                let add = caller.call(&counter.0, &u.spec, u.units, true);
                let reply = tokio::time::timeout(PUSH_TIMEOUT, add).await;
                let done = matches!(reply, Ok(Ok(_)));
                // The add's answer is a shared decision too: what Redis holds now, owed
                // units included, so the next local share is taken of what is really left.
                if let Ok(Ok(reply)) = &reply
                    && let Ok(d) = super::script::decision(reply, &counter.0, &u.spec, u.units)
                {
                    f.remember(&counter.0, &u.spec, &d);
                }
                if done {
                    tracing::info!(id = %counter.0, units = u.units, "locally admitted units added to redis");
                }
                (!done).then_some((counter, u))
            }
        });
        let left: Vec<_> =
            futures_util::future::join_all(adds).await.into_iter().flatten().collect();
        if !left.is_empty() {
            f.give_back(left);
            tokio::time::sleep(PUSH_RETRY).await;
        }
    }
}
