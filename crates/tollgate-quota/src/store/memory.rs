//! Counters in this process's memory only.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, StoreClock, SystemClock};
use crate::counter::Counters;
use crate::decision::{Counted, Decision, GivenBack};
use crate::metering_id::MeteringId;
use crate::spec::QuotaSpec;
use crate::store::observer::ObserverSlot;
use crate::store::seen::{Seen, SeenMap};
use crate::store::{CounterListing, CounterPage, Store, StoreError};

/// How often the background sweeper drops expired counters.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Counters in memory: for tests and throwaway use. Decides through the shared [`Counters`]
/// core. Expired counters are swept as their shards are touched, by a background thread once a
/// second (so memory returns even without traffic), and by [`MemoryStore::evict_expired`].
pub struct MemoryStore {
    clock: StoreClock,
    counters: Arc<Counters>,
    seen: SeenMap,
    observer: ObserverSlot,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading time from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let counters = Arc::new(Counters::new());
        let weak = Arc::downgrade(&counters);
        let clock = StoreClock::new(clock);
        let sweep_clock = clock.clone();
        // The sweeper ends within a second of the store being dropped. If the thread cannot be
        // started, the sweeps on access still bound memory while there is traffic.
        let _ = std::thread::Builder::new().name("tollgate-sweep".into()).spawn(move || {
            loop {
                std::thread::sleep(SWEEP_EVERY);
                let Some(counters) = weak.upgrade() else { return };
                counters.evict_expired(sweep_clock.now());
            }
        });
        Self { clock, counters, seen: SeenMap::default(), observer: ObserverSlot::default() }
    }

    /// Where this store's decision observer is kept.
    pub(crate) fn observer_slot(&self) -> &ObserverSlot {
        &self.observer
    }

    /// The decision core, for callers that decide synchronously (benchmarks, fallbacks).
    pub fn counters_core(&self) -> &Counters {
        &self.counters
    }

    /// Checks synchronously: the same answer as [`Store::check`], without a future.
    pub fn check_now(&self, id: &MeteringId, spec: &QuotaSpec, weight: u64) -> Decision {
        self.counters.check_when(id, spec, weight, || self.clock.now_us())
    }

    /// Drops every counter that holds nothing any more; returns how many were dropped.
    pub fn evict_expired(&self) -> usize {
        self.counters.evict_expired(self.clock.now())
    }

    /// How many counters are held in memory.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }
}

impl Seen for MemoryStore {
    async fn holders(&self, keys: &[&str], owner: &str) -> Result<Vec<Option<String>>, StoreError> {
        Ok(self.seen.holders(keys, owner, self.clock.now().as_millisecond()))
    }

    async fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        Ok(self.seen.claim(keys, owner, ttl, self.clock.now().as_millisecond()))
    }

    async fn release(&self, keys: &[&str], owner: &str) -> Result<(), StoreError> {
        self.seen.release(keys, owner);
        Ok(())
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.seen.hand_over(key, from, to, ttl, self.clock.now().as_millisecond()))
    }
}

impl Store for MemoryStore {
    async fn check(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> Result<Decision, StoreError> {
        Ok(self.check_now(id, spec, weight))
    }

    async fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> Result<GivenBack, StoreError> {
        let shape = spec.counter_shape();
        Ok(self.counters.give_back_us(id, &shape, counted, units, self.clock.now_us()))
    }

    async fn counters(&self, listing: &CounterListing<'_>) -> Result<CounterPage, StoreError> {
        Ok(self.counters.counters_at(listing, self.clock.now()))
    }

    async fn reset(&self, id: &MeteringId) -> Result<u64, StoreError> {
        Ok(self.counters.reset(id))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
