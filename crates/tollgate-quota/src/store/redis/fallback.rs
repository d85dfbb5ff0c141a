//! What one instance decides on its own while Redis is unreachable (`store_unavailable =
//! "local"`), and what it owes Redis afterwards.
//!
//! # Invariants
//!
//! * **A local share is taken of what was left.** A local decision admits at most
//!   `(limit - used) / share_of` per window, `used` being the most Redis answered to this
//!   instance about the counter in its window (a check, a check answered after it timed out,
//!   or the forced add of owed units; 0 when unknown). So `share_of` instances that all lose
//!   Redis admit together at most what Redis had left, plus what others admitted since an
//!   instance last heard from Redis.
//! * **A counter whose check timed out is down until Redis has caught up with it**: until
//!   Redis has answered every check this instance sent for it and holds every unit owed for
//!   it, or for at most [`DOWN_FOR`]. Meanwhile its checks are decided locally, those sent
//!   before it went down included (their answers are kept as `used`), so that no check Redis
//!   runs when it wakes is admitted ahead of the units admitted locally while it slept.
//! * **Every unit admitted locally is owed to Redis** (`unsynced`) until Redis has answered
//!   its add ([`push_owed`], which sends it at once, beside adds still unanswered, and again
//!   when one fails) or its window ends: a calendar or flexi window's units end with it, a
//!   rolling window's one window length after the latest of them. A new local window of a
//!   counter drops what the old one owed.
//! * **Bounded**: `unsynced` holds one entry per counter admitted locally in a window not yet
//!   over; `views` at most [`MAX_LAST_SEEN`] counters (beyond, a counter's share is taken of
//!   the whole limit and it is never down); at most [`MAX_AWAITED`] late answers and as many
//!   adds are awaited at once.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::decision::{Decision, Outcome};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, QuotaSpec, WindowKind};
use crate::store::memory::MemoryStore;
use crate::window;

use super::script::{self, Caller, Reply};

mod view;

use view::View;

/// The most counters whose latest shared `used` is remembered for local decisions.
pub const MAX_LAST_SEEN: usize = 100_000;
/// The most late answers, and the most adds of owed units, awaited at once (beyond, a late
/// answer is not heard, and an add waits for one to finish).
const MAX_AWAITED: usize = 1024;
/// How long a counter stays down at most when Redis does not catch up with it.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// How long one add of owed units, or one late answer, is awaited (off the request path).
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before owed units Redis refused are sent again.
const PUSH_RETRY: Duration = Duration::from_millis(200);

/// One counter: its id and shape.
pub(super) type Counter = (MeteringId, CounterShape);

/// Units one counter admitted locally, owed to Redis.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unsynced {
    /// The spec of the latest local admission (its limit does not matter: the add is forced).
    pub(super) spec: QuotaSpec,
    /// Owed, those in adds not yet answered included.
    pub(super) units: u64,
    /// In adds not yet answered.
    sending: u64,
    /// When they stop counting (µs since the epoch).
    until: i64,
}

/// The local store and what it owes Redis; see the module docs.
pub(super) struct Fallback {
    store: MemoryStore,
    share_of: NonZeroU32,
    /// The store's timeout: the most of a counter's rise a local share is taken off for.
    timeout: Duration,
    clock: Option<Arc<dyn Clock>>,
    unsynced: Mutex<HashMap<Counter, Unsynced>>,
    /// Wakes [`push_owed`] when something is owed.
    owed: Notify,
    views: Mutex<HashMap<Counter, View>>,
    /// Late answers awaited now ([`hear_late`]).
    late: AtomicUsize,
    /// Adds awaited now ([`push_owed`]).
    adds: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fallback {
    /// A fallback sharing each limit among `share_of` instances, for a store whose checks
    /// time out after `timeout`, on `clock` (tests) or the system clock.
    pub(super) fn new(
        share_of: NonZeroU32,
        timeout: Duration,
        clock: Option<Arc<dyn Clock>>,
    ) -> Self {
        let store =
            clock.as_ref().map_or_else(MemoryStore::new, |c| MemoryStore::with_clock(c.clone()));
        Self {
            store,
            share_of,
            timeout,
            clock,
            unsynced: Mutex::default(),
            owed: Notify::new(),
            views: Mutex::default(),
            late: AtomicUsize::new(0),
            adds: AtomicUsize::new(0),
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
    fn until(&self, shape: &CounterShape, d: &Decision) -> i64 {
        d.window_us.map_or_else(|| window::add_len(shape, self.now_us()), |(_, end)| end)
    }

    /// `counter`'s entry in `views`, made if there is room.
    fn view_entry<'a>(
        &self,
        views: &'a mut HashMap<Counter, View>,
        counter: Counter,
    ) -> Option<&'a mut View> {
        let now = self.now_us();
        if views.len() >= MAX_LAST_SEEN && !views.contains_key(&counter) {
            views.retain(|_, s| s.until > now || s.down_until > now || s.in_flight > 0);
            if views.len() >= MAX_LAST_SEEN {
                return None;
            }
        }
        Some(views.entry(counter).or_insert_with(|| View::new(now)))
    }

    /// Before a shared check of `id`'s counter: false when the counter is down (decide
    /// locally instead); else the check is counted as sent.
    pub(super) fn send(&self, id: &MeteringId, spec: &QuotaSpec) -> bool {
        let now = self.now_us();
        let mut views = lock(&self.views);
        let Some(e) = self.view_entry(&mut views, (id.clone(), spec.counter_shape())) else {
            return true;
        };
        if e.down_until > now {
            return false;
        }
        e.in_flight = e.in_flight.saturating_add(1);
        true
    }

    /// Redis answered `d` to a check [`Fallback::send`] counted (`d` is `None` when it never
    /// will): keeps its `used`, and says whether the counter is up, so that `d` stands.
    pub(super) fn answered(&self, id: &MeteringId, spec: &QuotaSpec, d: Option<&Decision>) -> bool {
        let shape = spec.counter_shape();
        let until = d.map(|d| self.until(&shape, d));
        let counter = (id.clone(), shape);
        let now = self.now_us();
        let mut views = lock(&self.views);
        let Some(e) = views.get_mut(&counter) else { return true };
        e.in_flight = e.in_flight.saturating_sub(1);
        if let (Some(d), Some(until)) = (d, until) {
            e.heard(d.used, until, now, spec.window == WindowKind::Rolling);
        }
        let down = e.down_until > now;
        // Only a counter that is down looks at what it owes (lock order: `views`, then
        // `unsynced`; whoever holds `unsynced` releases it before taking `views`).
        if down && e.in_flight == 0 && !lock(&self.unsynced).contains_key(&counter) {
            e.down_until = 0;
        }
        !down
    }

    /// A shared check of `id`'s counter, sent `waited` ago, timed out: the counter is down.
    pub(super) fn went_down(&self, id: &MeteringId, spec: &QuotaSpec, waited: Duration) {
        let now = self.now_us();
        let waited = i64::try_from(waited.as_micros()).unwrap_or(i64::MAX);
        if let Some(e) = lock(&self.views).get_mut(&(id.clone(), spec.counter_shape())) {
            if e.down_until <= now {
                e.silent_since = now.saturating_sub(waited);
            }
            e.down_until = now.saturating_add(DOWN_FOR.as_micros() as i64);
        }
    }

    /// Redis holds every unit owed for `counter`: up again unless checks are in flight.
    fn caught_up(&self, counter: &Counter) {
        if let Some(e) = lock(&self.views).get_mut(counter)
            && e.in_flight == 0
        {
            e.down_until = 0;
        }
    }

    /// Keeps the `used` of the answer to a forced add.
    fn remember(&self, counter: &Counter, spec: &QuotaSpec, d: &Decision) {
        let until = self.until(&counter.1, d);
        let now = self.now_us();
        let mut views = lock(&self.views);
        let Some(e) = self.view_entry(&mut views, counter.clone()) else { return };
        e.heard(d.used, until, now, spec.window == WindowKind::Rolling);
    }

    /// A decision in memory, within this instance's share of what Redis had left; marked
    /// degraded. What it admits is owed to Redis.
    pub(super) fn check(&self, id: &MeteringId, spec: &QuotaSpec, weight: u64) -> Decision {
        let shape = spec.counter_shape();
        let key = (id.clone(), shape);
        let now = self.now_us();
        let horizon = i64::try_from(self.timeout.as_micros()).unwrap_or(i64::MAX);
        let used = lock(&self.views).get(&key).map_or(0, |s| s.estimate(now, horizon));
        let share = spec.limit.saturating_sub(used) / u64::from(self.share_of.get());
        let mut d = self.store.check_now(id, &QuotaSpec { limit: share, ..*spec }, weight);
        d.degraded = true;
        if d.outcome == Outcome::WeightExceedsLimit && weight <= spec.limit {
            // Over this instance's share, not over the limit: worth retrying once Redis is back.
            d.outcome = Outcome::Exceeded;
            d.retry_at_us = Some(d.reset_at_us);
        }
        if d.allowed() && weight > 0 {
            self.owe(key, spec, weight, self.until(&shape, &d));
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
        let new = Unsynced { spec: *spec, units: 0, sending: 0, until };
        let e = map.entry(counter).or_insert(new);
        if spec.window == WindowKind::Rolling {
            e.until = e.until.max(until);
        } else if e.until != until {
            // A new local window: what the last one held is over.
            *e = new;
        }
        e.spec = *spec;
        e.units = e.units.saturating_add(units);
        drop(map);
        self.owed.notify_one();
    }

    /// The units owed to Redis now, those in adds not yet answered included.
    pub(super) fn owed_units(&self) -> u64 {
        lock(&self.unsynced).values().fold(0, |n, u| n.saturating_add(u.units))
    }

    /// What is owed and not being sent, for counters whose window has not ended (what has
    /// ended is no longer owed), now counted as being sent; at most `room` adds.
    fn to_send(&self, room: usize) -> Vec<(Counter, Unsynced)> {
        let mut map = lock(&self.unsynced);
        let now = self.now_us();
        map.retain(|_, u| u.until > now);
        let mut batch = Vec::new();
        for (counter, u) in map.iter_mut().filter(|(_, u)| u.units > u.sending).take(room) {
            let add = Unsynced { units: u.units - u.sending, ..*u };
            u.sending = u.units;
            batch.push((counter.clone(), add));
        }
        batch
    }

    /// The add of `sent` is over, taken by Redis or not: what is owed for its counter drops
    /// by as much when taken (an entry made meanwhile for a newer calendar or flexi window
    /// stays whole), and a counter that owes nothing more has caught up.
    fn add_over(&self, counter: &Counter, sent: &Unsynced, taken: bool) {
        let mut map = lock(&self.unsynced);
        let Some(e) = map.get_mut(counter) else { return };
        if e.until != sent.until && sent.spec.window != WindowKind::Rolling {
            return;
        }
        e.sending = e.sending.saturating_sub(sent.units);
        if taken {
            e.units = e.units.saturating_sub(sent.units);
        }
        if e.units == 0 {
            map.remove(counter);
            drop(map);
            self.caught_up(counter);
        }
    }
}

/// Keeps awaiting a shared check that timed out, for at most [`PUSH_TIMEOUT`]: Redis may still
/// run it (a stalled Redis runs its backlog when it wakes). Its answer is the freshest `used`
/// this instance can know, and one check fewer that Redis has to catch up with.
pub(super) fn hear_late(
    f: &Arc<Fallback>,
    reply: Reply,
    id: &MeteringId,
    spec: &QuotaSpec,
    weight: u64,
) {
    if f.late.fetch_add(1, Ordering::Relaxed) >= MAX_AWAITED {
        f.late.fetch_sub(1, Ordering::Relaxed);
        f.answered(id, spec, None);
        return;
    }
    let (f, id, spec) = (f.clone(), id.clone(), *spec);
    tokio::spawn(async move {
        let d = match tokio::time::timeout(PUSH_TIMEOUT, reply).await {
            Ok(Ok(reply)) => script::decision(&reply, &spec, weight).ok(),
            _ => None,
        };
        f.answered(&id, &spec, d.as_ref());
        f.late.fetch_sub(1, Ordering::Relaxed);
    });
}

/// Adds what `f` owes to Redis through `caller`, each counter's units as one forced decision,
/// for as long as the store lives (it aborts this task). Sent at once, beside adds not yet
/// answered, so that a Redis that stalls runs them as soon as it wakes; what fails stays owed
/// and is sent again after [`PUSH_RETRY`].
///
/// An add that times out may still run later (a timeout is not a rollback), and its units are
/// then added twice: Redis may count more than was admitted, never less.
pub(super) async fn push_owed(f: Arc<Fallback>, caller: Caller) {
    loop {
        let owed = f.owed.notified();
        let room = MAX_AWAITED.saturating_sub(f.adds.load(Ordering::Relaxed));
        let batch = f.to_send(room);
        if batch.is_empty() {
            owed.await;
            continue;
        }
        for (counter, u) in batch {
            f.adds.fetch_add(1, Ordering::Relaxed);
            let (caller, f) = (caller.clone(), f.clone());
            tokio::spawn(async move {
                let add = caller.call(&counter.0, &u.spec, u.units, true);
                let reply = tokio::time::timeout(PUSH_TIMEOUT, add).await;
                let taken = matches!(reply, Ok(Ok(_)));
                if let Ok(Ok(reply)) = &reply {
                    // The add's answer is a shared decision too: what Redis holds now, owed
                    // units included, so the next local share is taken of what is really left.
                    if let Ok(d) = script::decision(reply, &u.spec, u.units) {
                        f.remember(&counter, &u.spec, &d);
                    }
                    tracing::info!(id = %counter.0, units = u.units, "locally admitted units added to redis");
                } else {
                    tokio::time::sleep(PUSH_RETRY).await;
                }
                f.add_over(&counter, &u, taken);
                f.adds.fetch_sub(1, Ordering::Relaxed);
                f.owed.notify_one();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::spec::TimeUnit;

    const WAITED: Duration = Duration::from_millis(50);

    /// A fallback shared by 3 instances on a manual clock, a Redis stand-in on the same clock
    /// (what it answers is what the fallback is told), and a counter of 300 a day.
    fn setup() -> (Arc<ManualClock>, Fallback, MemoryStore, MeteringId, QuotaSpec) {
        let at = Timestamp::from_second(1_800_000_000).expect("a valid time");
        let clock = Arc::new(ManualClock::new(at));
        let share_of = NonZeroU32::new(3).expect("not zero");
        let f = Fallback::new(share_of, WAITED, Some(clock.clone()));
        let redis = MemoryStore::with_clock(clock.clone());
        let id = MeteringId::new("Carrier:214").expect("a valid id");
        let spec = QuotaSpec::new(300, 1, TimeUnit::Day).expect("a valid spec");
        (clock, f, redis, id, spec)
    }

    #[test]
    fn a_counter_that_timed_out_is_down_until_redis_answered_its_checks_and_took_its_units() {
        let (_clock, f, redis, id, spec) = setup();
        assert!(f.send(&id, &spec) && f.send(&id, &spec));
        f.went_down(&id, &spec, WAITED);
        assert!(!f.send(&id, &spec), "down: decided locally, Redis not asked");
        assert!(f.check(&id, &spec, 1).allowed());
        assert_eq!(f.owed_units(), 1);
        let late = redis.check_now(&id, &spec, 1);
        assert!(!f.answered(&id, &spec, Some(&late)), "an answer while down does not stand");
        assert!(!f.answered(&id, &spec, None));
        assert!(!f.send(&id, &spec), "still down: a unit is owed");
        let batch = f.to_send(8);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].1.units, 1);
        assert!(f.to_send(8).is_empty(), "units being added are not sent twice");
        f.add_over(&batch[0].0, &batch[0].1, true);
        assert_eq!(f.owed_units(), 0);
        assert!(f.send(&id, &spec), "up once Redis answered every check and took every unit");
        assert!(f.answered(&id, &spec, Some(&redis.check_now(&id, &spec, 1))));
    }

    #[test]
    fn a_counter_is_up_again_after_down_for_whatever_redis_does() {
        let (clock, f, _redis, id, spec) = setup();
        assert!(f.send(&id, &spec));
        f.went_down(&id, &spec, WAITED);
        assert!(!f.send(&id, &spec));
        clock.advance(DOWN_FOR + Duration::from_millis(1));
        assert!(f.send(&id, &spec));
    }

    #[test]
    fn units_whose_add_failed_stay_owed_and_are_sent_again_with_those_owed_since() {
        let (_clock, f, _redis, id, spec) = setup();
        assert!(f.check(&id, &spec, 2).allowed());
        let first = f.to_send(8);
        assert!(f.check(&id, &spec, 3).allowed());
        let second = f.to_send(8);
        assert_eq!((first[0].1.units, second[0].1.units), (2, 3), "sent beside the first add");
        f.add_over(&first[0].0, &first[0].1, false);
        assert_eq!(f.owed_units(), 5);
        f.add_over(&second[0].0, &second[0].1, true);
        assert_eq!(f.owed_units(), 2);
        let again = f.to_send(8);
        assert_eq!(again[0].1.units, 2);
        f.add_over(&again[0].0, &again[0].1, true);
        assert_eq!(f.owed_units(), 0);
    }

    #[test]
    fn the_local_share_is_taken_of_what_redis_held_when_it_went_silent() {
        let (clock, f, redis, id, spec) = setup();
        // Redis admits 1 unit a millisecond for 40 ms, and this instance hears each one.
        for _ in 0..40 {
            clock.advance(Duration::from_millis(1));
            assert!(f.send(&id, &spec));
            assert!(f.answered(&id, &spec, Some(&redis.check_now(&id, &spec, 1))));
        }
        // Then it hears nothing for 20 ms (others are still being admitted), and the check it
        // sends next times out: Redis held about 60, so a third of 240 is left to this one.
        clock.advance(Duration::from_millis(20));
        assert!(f.send(&id, &spec));
        clock.advance(WAITED);
        f.went_down(&id, &spec, WAITED);
        assert!(!f.check(&id, &spec, 81).allowed(), "a third of 260: the rise was left out");
        assert!(f.check(&id, &spec, 80).allowed());
        assert!(!f.check(&id, &spec, 1).allowed());
    }
}
