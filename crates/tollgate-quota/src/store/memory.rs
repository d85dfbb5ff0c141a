//! Counters in this process's memory only.

use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::spec::{MeteringId, QuotaSpec};
use crate::store::{CounterInfo, Store, StoreError};

/// Counters in memory: for tests and throwaway use.
pub struct MemoryStore {
    #[allow(dead_code)]
    clock: Arc<dyn Clock>,
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
        Self { clock }
    }
}

impl Store for MemoryStore {
    async fn check(
        &self,
        _id: &MeteringId,
        _spec: &QuotaSpec,
        _weight: u64,
    ) -> Result<Decision, StoreError> {
        Err(StoreError::Unavailable("memory store not built yet".into()))
    }
    async fn counters(&self, _prefix: &str) -> Result<Vec<CounterInfo>, StoreError> {
        Ok(Vec::new())
    }
    async fn reset(&self, _id: &MeteringId) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
