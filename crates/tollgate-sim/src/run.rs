//! One simulation run: the real gateway (intake, parse, dedup, meter, hold and release,
//! deliver) and the real engine, on a tokio runtime whose time is paused, so that waits take
//! no wall time and days pass in seconds.
//!
//! How time moves: the runtime's clock advances only when every task is idle and no blocking
//! task is running (tokio's paused-time rule), straight to the next timer. The offer loop
//! sleeps until each arrival; the gateway sleeps until a held item is due; nothing else
//! moves the clock. The gateway and the engine read the time of day from [`VirtualClock`],
//! which is that same runtime clock plus the scenario's start, so every timestamp, window
//! and retry is virtual and the same on every run with the same seed.
//!
//! Intake: arrivals within the same virtual second are offered together, as one landing
//! directory poll would take them (`Gateway::submit`: parse, spool, hand to the pipeline).
//! The simulation skips fsync (its spool is
//! `ephemeral`: its rows and spool files in memory) and nothing else.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tollgate_gateway::{
    Gateway, GatewayClock, GatewayConfig, Item, QueueFilter, SpoolOptions, State,
};
use tollgate_policy::{Decider, PolicyHandle, PolicySet};
use tollgate_quota::store::{MemoryStore, OnStoreUnavailable};
use tollgate_quota::{AnyStore, Clock};

use crate::scenario::Scenario;
use crate::traffic::{self, Arrival};

/// The time of day in a simulation: the runtime's (paused) clock plus the scenario's start.
/// Read off the runtime (the engine's sweeper thread), it answers the last time read on it.
#[derive(Debug)]
pub(crate) struct VirtualClock {
    start_ms: i64,
    base: tokio::time::Instant,
    last_us: AtomicI64,
}

impl VirtualClock {
    /// A clock that reads `start` now; call inside the paused runtime.
    pub(crate) fn new(start: Timestamp) -> Self {
        Self {
            start_ms: start.as_millisecond(),
            base: tokio::time::Instant::now(),
            last_us: AtomicI64::new(start.as_microsecond()),
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        let us = if tokio::runtime::Handle::try_current().is_ok() {
            let el = tokio::time::Instant::now().saturating_duration_since(self.base);
            let us = self.start_ms * 1000 + i64::try_from(el.as_micros()).unwrap_or(i64::MAX / 4);
            self.last_us.fetch_max(us, Ordering::Relaxed).max(us)
        } else {
            self.last_us.load(Ordering::Relaxed)
        };
        Timestamp::from_microsecond(us).unwrap_or_default()
    }
}

/// What became of one item (an interchange, or a part split off one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fate {
    /// Index of the arrival it came from.
    pub arrival: usize,
    /// True for the item that is the interchange itself (false for a split-off part).
    pub whole: bool,
    /// Its state at the end.
    pub state: State,
    /// Units (records) it weighs.
    pub weight: u64,
    /// Virtual receive time, ms after the start.
    pub received_ms: i64,
    /// When it was first held, ms after the start.
    pub held_ms: Option<i64>,
    /// When it was delivered, ms after the start.
    pub delivered_ms: Option<i64>,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The arrivals offered, in time order.
    pub arrivals: Vec<Arrival>,
    /// Every item, in arrival order (by id).
    pub fates: Vec<Fate>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The gateway did not start or its spool failed.
    #[error("gateway: {0}")]
    Gateway(#[from] tollgate_gateway::GatewayError),
    /// The work directory or the runtime could not be made.
    #[error("{0}")]
    Io(String),
}

/// A temporary directory for a run's data dir: in `/dev/shm` (memory) where it exists; else
/// the system's temp directory. Removed when dropped. (The backend's `dir:` target is named in
/// it, but a simulation's deliveries write no file.)
pub(crate) fn work_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new().prefix("tollgate-sim-").tempdir_in(shm)
    {
        return Ok(d);
    }
    tempfile::Builder::new().prefix("tollgate-sim-").tempdir()
}

/// `job(i)` for every `i` in `0..n`, on as many threads as the machine has cores (at most
/// `n`), started costliest first by `cost(i)` so that no long job starts last and runs alone;
/// the results in index order.
pub(crate) fn on_cores<T: Send>(
    n: usize,
    cost: impl Fn(usize) -> usize,
    job: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let order = costliest_first(n, cost);
    let threads = std::thread::available_parallelism().map_or(1, |c| c.get()).min(n);
    if threads <= 1 {
        let mut done: Vec<Option<T>> = (0..n).map(|_| None).collect();
        for &i in &order {
            done[i] = Some(job(i));
        }
        return done.into_iter().flatten().collect();
    }
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = job(i);
                    done.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(r);
                }
            });
        }
    });
    // A job that panicked has already panicked this scope; every slot is filled.
    done.into_inner().unwrap_or_else(PoisonError::into_inner).into_iter().flatten().collect()
}

/// `0..n` by `cost`, the costliest first (ties in index order).
fn costliest_first(n: usize, cost: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(i)));
    order
}

/// How often the spool is read when the gateway prunes within the run: it prunes delivered
/// items older than its dedup window once a day from its start, so they are read just before
/// each prune.
const READ_EVERY_MS: i64 = 86_400_000;

/// A read before a prune takes the items received up to this long after the prune's bound
/// (the prune may start a little after the read); later items are read by a later read.
const READ_MARGIN_MS: i64 = 3_600_000;

/// Runs `scenario` against a gateway started from `config` (see `setup::prepare`), offering
/// `arrivals`; `work` holds its data dir, `progress` is told how many arrivals are offered.
pub(crate) fn run(
    scenario: &Scenario,
    config: GatewayConfig,
    arrivals: Vec<Arrival>,
    seed: u64,
    work: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RunOutput, RunError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| RunError::Io(format!("runtime: {e}")))?;
    rt.block_on(drive(scenario, config, arrivals, seed, work, progress))
}

async fn drive(
    scenario: &Scenario,
    config: GatewayConfig,
    arrivals: Vec<Arrival>,
    seed: u64,
    work: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RunOutput, RunError> {
    // Delivered items are pruned only when they are older than the longest dedup window, and
    // rejected, duplicate and dead ones when older than `keep_days`: within a shorter run,
    // reading the spool once at the end sees every item.
    let horizon = config.plan().map(|p| p.longest_dedup().min(p.keep).as_millis()).unwrap_or(0);
    let horizon = i64::try_from(horizon).unwrap_or(i64::MAX);
    let prunes = horizon <= scenario.length_ms;
    let clock = Arc::new(VirtualClock::new(scenario.start));
    let store = Arc::new(AnyStore::Memory(MemoryStore::with_clock(clock.clone())));
    let options = SpoolOptions { ephemeral: true, ..Default::default() };
    // The scenario's policies decide as in `tollgate serve`; the store, in memory, never fails.
    let policies = PolicyHandle::new(PolicySet::new(scenario.policies.clone()));
    let decider = Decider::new(store, policies, OnStoreUnavailable::Deny);
    let gw = Gateway::builder(config, &work.join("data"), decider)
        .options(options)
        .clock(GatewayClock::with_seed(clock.clone(), seed))
        .start()
        .await?;
    let base = tokio::time::Instant::now();
    let start_ms = scenario.start.as_millisecond();
    // Before the prune at `at`: only the items it may drop. Every item is read once more at the
    // end, so each one's last read is after its last change.
    let before_prune = |at: i64| QueueFilter {
        to_ms: Some(
            start_ms.saturating_add(at).saturating_sub(horizon).saturating_add(READ_MARGIN_MS),
        ),
        ..Default::default()
    };
    let names: Vec<String> = scenario.partners.iter().map(|p| p.sender()).collect();
    let mut by_file: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut next_read = READ_EVERY_MS;
    let mut i = 0;
    while i < arrivals.len() {
        let second = arrivals[i].at_ms / 1000;
        let mut j = i;
        while j < arrivals.len() && arrivals[j].at_ms / 1000 == second {
            j += 1;
        }
        let at = second * 1000;
        while prunes && next_read <= at {
            sleep_until(base, next_read - 1).await;
            read_items(&gw, before_prune(next_read), &mut seen).await?;
            next_read += READ_EVERY_MS;
        }
        sleep_until(base, at).await;
        let files: Vec<(Vec<u8>, String)> = arrivals[i..j]
            .iter()
            .map(|a| {
                let p = &scenario.partners[a.partner];
                let doc = &p.documents.get_ref()[a.document];
                (traffic::build(a, &names[a.partner], doc), "simulation".to_owned())
            })
            .collect();
        let ids = gw.submit(files).await?;
        for (k, id) in ids.into_iter().enumerate() {
            by_file.insert(id, i + k);
        }
        progress((j - i) as u64);
        i = j;
    }
    // A prune due at the very end runs before the last read: it is read before, as the others.
    while prunes && next_read <= scenario.length_ms {
        sleep_until(base, next_read - 1).await;
        read_items(&gw, before_prune(next_read), &mut seen).await?;
        next_read += READ_EVERY_MS;
    }
    sleep_until(base, scenario.length_ms).await;
    // Work already due at the end (a delivery started at the last instant) finishes first.
    tokio::time::sleep(Duration::from_millis(1)).await;
    read_items(&gw, QueueFilter::default(), &mut seen).await?;
    gw.shutdown().await;

    let rel = |ms: i64| ms - start_ms;
    let mut fates = Vec::with_capacity(seen.len());
    for (id, item) in seen {
        let (file, whole) = match id.split_once("-s") {
            Some((f, _)) => (f.to_owned(), false),
            None => (id.clone(), true),
        };
        let Some(&arrival) = by_file.get(&file) else { continue };
        fates.push(Fate {
            arrival,
            whole,
            state: item.state,
            weight: item.weight,
            received_ms: rel(item.received_at),
            held_ms: item.held_at.map(rel),
            delivered_ms: item.delivered_at.map(rel),
        });
    }
    fates.sort_by_key(|f| (f.arrival, !f.whole, f.received_ms, f.delivered_ms));
    Ok(RunOutput { arrivals, fates })
}

async fn sleep_until(base: tokio::time::Instant, at_ms: i64) {
    let at = base + Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    tokio::time::sleep_until(at).await;
}

/// What a run keeps of an item it read: what its fate needs, not its strings.
#[derive(Debug)]
struct Seen {
    state: State,
    weight: u64,
    received_at: i64,
    held_at: Option<i64>,
    delivered_at: Option<i64>,
}

/// Reads the items the spool keeps that `filter` matches into `seen`.
async fn read_items(
    gw: &Gateway,
    filter: QueueFilter,
    seen: &mut BTreeMap<String, Seen>,
) -> Result<(), RunError> {
    let read = gw
        .items_as(filter, |item: Item| {
            let kept = Seen {
                state: item.state,
                weight: item.weight,
                received_at: item.received_at,
                held_at: item.held_at,
                delivered_at: item.delivered_at,
            };
            Some((item.id, kept))
        })
        .await?;
    seen.extend(read);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Results come back in index order even when later jobs finish first.
    #[test]
    fn on_cores_keeps_the_order_of_the_jobs() {
        let out = super::on_cores(
            6,
            |i| i % 3,
            |i| {
                std::thread::sleep(std::time::Duration::from_millis(5 * (6 - i as u64)));
                i * 10
            },
        );
        assert_eq!(out, vec![0, 10, 20, 30, 40, 50]);
    }

    /// The costliest jobs start first; equal costs keep their index order.
    #[test]
    fn jobs_start_costliest_first() {
        assert_eq!(super::costliest_first(6, |i| [3, 9, 1, 9, 0, 3][i]), [1, 3, 0, 5, 2, 4]);
    }
}
