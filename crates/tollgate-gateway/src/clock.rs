//! The gateway's clock: the one place it reads the time of day, and the one place it draws
//! the retry jitter. The server injects the system clock; the simulator injects a virtual one
//! (and a seed, so a run can be repeated exactly).
//!
//! Waits and deadlines use the async runtime's timer (`tokio::time`), which a simulation
//! pauses and advances; a virtual wall clock built on that timer therefore agrees with every
//! wait the gateway makes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tollgate_quota::{Clock, SystemClock};

/// The time of day and the jitter source the gateway uses; cheap to clone.
#[derive(Clone)]
pub struct GatewayClock {
    wall: Arc<dyn Clock>,
    /// `Some` for a seeded (repeatable) jitter; `None` draws from the thread's generator.
    seeded: Option<Arc<Mutex<StdRng>>>,
}

impl std::fmt::Debug for GatewayClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayClock").field("seeded", &self.seeded.is_some()).finish()
    }
}

impl Default for GatewayClock {
    fn default() -> Self {
        Self::system()
    }
}

impl GatewayClock {
    /// The system's wall clock and an unseeded jitter.
    pub fn system() -> Self {
        Self { wall: Arc::new(SystemClock), seeded: None }
    }

    /// `wall` for the time of day, and a jitter drawn from a generator seeded with `seed`.
    pub fn with_seed(wall: Arc<dyn Clock>, seed: u64) -> Self {
        Self { wall, seeded: Some(Arc::new(Mutex::new(StdRng::seed_from_u64(seed)))) }
    }

    /// Unix milliseconds now.
    pub fn now_ms(&self) -> i64 {
        self.wall.now().as_millisecond()
    }

    /// A uniform draw in `0..=max`.
    pub(crate) fn jitter_ms(&self, max: u64) -> u64 {
        match &self.seeded {
            Some(rng) => match rng.lock() {
                Ok(mut g) => g.random_range(0..=max),
                Err(poisoned) => poisoned.into_inner().random_range(0..=max),
            },
            None => rand::random_range(0..=max),
        }
    }

    /// `retry_after` plus a jitter of up to 10 % (at most 5 s, at least 1 ms), so that many
    /// groups do not wake in lockstep.
    pub fn jittered(&self, retry_after: Duration) -> Duration {
        let max_jitter = (retry_after / 10).min(Duration::from_secs(5));
        let jitter_ms = self.jitter_ms(max_jitter.as_millis().max(1) as u64);
        retry_after.saturating_add(Duration::from_millis(jitter_ms))
    }
}
