//! Where counters live: the [`Store`] trait and its implementations.
//!
//! Every store gives the same answers for the same sequence of checks (see the conformance
//! suite in `tests/conformance.rs`); they differ in where the counters survive:
//! [`memory::MemoryStore`] in this process only, [`embedded::EmbeddedStore`] in a redb file
//! that outlives restarts and crashes, [`redis::RedisStore`] in Redis, shared by every instance.

pub mod corrupt;
pub mod embedded;
pub mod listing;
pub mod memory;
pub mod observer;
pub mod redis;
pub mod seen;
pub mod snapshot;

use std::future::Future;

use jiff::Timestamp;

use crate::decision::{Counted, Decision, GivenBack};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, QuotaSpec, TimeUnit, WindowKind};
use crate::window;

pub use corrupt::OnCorrupt;
pub use embedded::{Durability, EmbeddedOptions, EmbeddedStore};
pub use listing::{CounterListing, CounterPage, CounterPosition, PositionError};
pub use memory::MemoryStore;
pub use observer::{DecisionObserver, ObserverSlot, Withheld};
pub use redis::{OnStoreUnavailable, RedisOptions, RedisStore, StoreHealth};
pub use seen::Seen;

/// A store failed to answer. The caller cannot tell whether the check was counted: a Redis
/// script may have run after the timeout gave up on it, and a strict embedded check whose commit
/// failed stays counted in memory (its key is written with the next batch).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backing store cannot be reached or answered with an error.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time.
    #[error("store timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Reading or writing the store's files failed.
    #[error("store i/o: {0}")]
    Io(String),
}

/// One live counter, as listed by the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterInfo {
    /// Whose counter it is.
    pub identifier: MeteringId,
    /// How many `unit`s one window lasts.
    pub interval: u32,
    /// The unit of `interval`.
    pub unit: TimeUnit,
    /// How windows are placed in time.
    pub window: WindowKind,
    /// The calendar anchor, when the spec set one.
    pub start: Option<Timestamp>,
    /// Units consumed in the current window.
    pub used: u64,
    /// Rejections in the current window.
    pub exceed_count: u64,
    /// Rejections across this counter's windows (carried for one window after the last one).
    pub total_exceed_count: u64,
    /// `None` for rolling windows.
    pub window_start: Option<Timestamp>,
    /// `None` for rolling windows.
    pub window_end: Option<Timestamp>,
}

impl CounterInfo {
    /// Lists one counter of `shape`; `window` is `(start, end)` in Unix microseconds, `None` for
    /// rolling windows.
    pub(crate) fn new(
        identifier: MeteringId,
        shape: &CounterShape,
        used: u64,
        exceed_count: u64,
        total_exceed_count: u64,
        window: Option<(i64, i64)>,
    ) -> Self {
        Self {
            identifier,
            interval: shape.interval,
            unit: shape.unit,
            window: shape.window,
            start: shape.start.and_then(|s| Timestamp::from_second(s).ok()),
            used,
            exceed_count,
            total_exceed_count,
            window_start: window.map(|(s, _)| window::timestamp(s)),
            window_end: window.map(|(_, e)| window::timestamp(e)),
        }
    }
}

/// Keeps counters and decides. One trait, async, for every store: in-memory stores answer
/// without awaiting anything.
pub trait Store: Send + Sync + 'static {
    /// Checks `weight` units against `spec` for `id` and, when admitted, counts them.
    fn check(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Gives back up to `units` that a check of `id` against `spec` admitted at `counted`
    /// ([`Decision::counted`]): subtracted from that window's counter (rolling: from that
    /// sub-bucket) only while it still counts, never below zero. Giving back the same units
    /// twice is the caller's to prevent (the server does it with a [`Seen`] hand-over).
    fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> impl Future<Output = Result<GivenBack, StoreError>> + Send;

    /// The page of live counters `listing` asks for, in listing order (see [`listing`]).
    fn counters(
        &self,
        listing: &CounterListing<'_>,
    ) -> impl Future<Output = Result<CounterPage, StoreError>> + Send;

    /// Drops every counter of `id`; returns how many were dropped.
    fn reset(&self, id: &MeteringId) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Makes everything counted so far durable (a no-op where nothing is written behind).
    fn flush(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A store chosen at run time (by config or command line). Every decision through it is
/// reported to its observer, when one is attached ([`AnyStore::observe`]), and so are the
/// units its callers withhold ([`AnyStore::withheld`]).
pub enum AnyStore {
    /// Counters in this process only.
    Memory(MemoryStore),
    /// Counters in memory, written behind to a redb file.
    Embedded(EmbeddedStore),
    /// Counters in Redis, shared by every instance.
    Redis(RedisStore),
}

impl AnyStore {
    /// A short name for logs and `/readyz`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Embedded(_) => "embedded",
            Self::Redis(_) => "redis",
        }
    }

    /// How many counters this process holds (live, or expired and not yet swept: sweeps run
    /// every second); `None` for Redis, whose counters live in the shared server. Cheap: it
    /// lists nothing, so a metrics scrape costs the same at a million counters as at ten.
    pub fn held_counters(&self) -> Option<usize> {
        match self {
            Self::Memory(s) => Some(s.len()),
            Self::Embedded(s) => Some(s.len()),
            Self::Redis(_) => None,
        }
    }

    /// Attaches `observer`, which then sees every decision made through this store (see
    /// [`observer`]); `false` when one is already attached.
    pub fn observe(&self, observer: std::sync::Arc<dyn DecisionObserver>) -> bool {
        self.observer_slot().set(observer)
    }

    /// Reports `weight` units of `id` that the caller withheld as `kind` without a decision
    /// admitting them (an item held over quota, a duplicate) to the observer, if any. The
    /// caller reports each withholding once (see [`observer`]); nothing is counted.
    pub fn withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
        self.observer_slot().report_withheld(id, kind, weight);
    }

    fn observer_slot(&self) -> &ObserverSlot {
        match self {
            Self::Memory(s) => s.observer_slot(),
            Self::Embedded(s) => s.observer_slot(),
            Self::Redis(s) => s.observer_slot(),
        }
    }

    /// Whether the store answers from where it should: for `/readyz` and metrics.
    pub fn health(&self) -> StoreHealth {
        match self {
            Self::Memory(_) => StoreHealth::Ok,
            Self::Embedded(s) => s.last_error().map_or(StoreHealth::Ok, StoreHealth::Degraded),
            Self::Redis(s) => s.health(),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Memory($s) => $e,
            AnyStore::Embedded($s) => $e,
            AnyStore::Redis($s) => $e,
        }
    };
}

impl Seen for AnyStore {
    async fn holders(&self, keys: &[&str], owner: &str) -> Result<Vec<Option<String>>, StoreError> {
        dispatch!(self, s => s.holders(keys, owner).await)
    }

    async fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: std::time::Duration,
    ) -> Result<Vec<bool>, StoreError> {
        dispatch!(self, s => s.claim(keys, owner, ttl).await)
    }

    async fn release(&self, keys: &[&str], owner: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.release(keys, owner).await)
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.hand_over(key, from, to, ttl).await)
    }
}

impl Store for AnyStore {
    async fn check(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> Result<Decision, StoreError> {
        // The one place every transport's decision passes: reported here, once.
        let d = match self {
            AnyStore::Memory(s) => s.check(id, spec, weight).await?,
            AnyStore::Embedded(s) => s.check(id, spec, weight).await?,
            // Boxed: a Redis check's future is three times the others', and every caller's
            // future (an HTTP answer's among them) would carry its size, moved whole.
            AnyStore::Redis(s) => Box::pin(s.check(id, spec, weight)).await?,
        };
        self.observer_slot().report(id, &d);
        Ok(d)
    }

    async fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> Result<GivenBack, StoreError> {
        dispatch!(self, s => s.give_back(id, spec, counted, units).await)
    }

    async fn counters(&self, listing: &CounterListing<'_>) -> Result<CounterPage, StoreError> {
        dispatch!(self, s => s.counters(listing).await)
    }

    async fn reset(&self, id: &MeteringId) -> Result<u64, StoreError> {
        dispatch!(self, s => s.reset(id).await)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.flush().await)
    }
}
