//! The usage history: per metering id, the units admitted, refused, held and duplicate in
//! 5-minute buckets (aligned to UTC) over the last 7 days. The console's sparklines and charts
//! read it through [`UsageHistory::series`], scripts through `GET /v1/usage` ([`http`]).
//!
//! Every decision of the server's store is seen here, whoever asked for it — `/v1/quota`, the
//! gateway's in-process metering, gRPC — through the store's one decision observer
//! ([`tollgate_quota::store::observer`]). The weight of an admitted decision counts as
//! admitted; the weight of a refused one (over quota, heavier than the limit, and a shadow
//! policy's would-reject, which the engine refused although the caller went on) as refused.
//!
//! The same observer hears of units kept back without a decision, which the gateway reports
//! through [`AnyStore::withheld`]: an item's weight counts as held once, when the item first
//! becomes held (over quota, or waiting behind held items of its id; not at each re-check),
//! and as duplicate when the item is found to be a duplicate. These count events, not a
//! backlog: a held item admitted later counts as held and then as admitted.
//!
//! Invariants:
//! - **Never in a decision's way.** A decision adds to an in-memory [`aggregate`] (one shard
//!   lock, no allocation for a known id). A task writes the aggregate to the [`ledger`] every
//!   [`FLUSH_INTERVAL`]: one redb write transaction, or one Redis pipeline. A write that fails
//!   (a full disk, Redis down) is counted in `tollgate_usage_flush_errors_total`.
//! - **A batch is written once.** A batch is held from its drain until the ledger takes it,
//!   its deltas counted against the aggregate's bound all along; one the ledger refused is
//!   sent again, as it was, first at each flush, and nothing newer is written before it. A
//!   flush runs to its end in a task of its own, whoever stopped waiting for it. Batches are
//!   numbered in rising order, so a ledger whose write can fail part way (Redis) adds a batch
//!   sent again only where it did not the first time (see [`ledger::redis`]).
//! - **Bounded.** At most `max_ids` ids are tracked (default [`DEFAULT_MAX_IDS`]); decisions and
//!   withheld units of further ids are counted in `tollgate_usage_untracked_total` and not
//!   kept. Each id keeps at most [`RETENTION_BUCKETS`] buckets; older ones are dropped.
//!   Unflushed deltas are capped at [`PENDING_PER_ID`] × `max_ids` (beyond:
//!   `tollgate_usage_dropped_total`).
//! - **Durability follows the store.** memory: lost with the process; embedded:
//!   `<data>/usage.redb`; Redis: hashes expiring 7 days after their day. A graceful stop
//!   flushes; a crash loses at most the last flush interval.
//! - **Reads are consistent with flushes.** A read holds the flush lock, so a delta is counted
//!   once: pending in memory, held, or in the ledger. A held batch that Redis took in part
//!   adds only the days whose hash does not yet hold its number ([`ledger::Stored::holds`]).

pub mod aggregate;
pub mod http;
pub mod ledger;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tollgate_quota::store::OnCorrupt;
use tollgate_quota::store::observer::{DecisionObserver, Withheld};
use tollgate_quota::{AnyStore, Decision, MeteringId, Outcome};

use aggregate::{Aggregate, Batch, Delta, Recorded};
use ledger::Ledger;

/// The length of a bucket, in seconds.
pub const BUCKET_SECONDS: i64 = 300;
/// Buckets kept per id: 7 days.
pub const RETENTION_BUCKETS: i64 = 7 * 24 * 3600 / BUCKET_SECONDS;
/// The most metering ids tracked, unless `[server] usage_max_ids` says otherwise.
pub const DEFAULT_MAX_IDS: usize = 100_000;
/// Unflushed deltas allowed per tracked id, on average (a bound on memory while the ledger
/// cannot be written: 16 buckets, 80 minutes of every id at once).
pub const PENDING_PER_ID: usize = 16;
/// How often the aggregate is written to the ledger.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// How often ids idle for the whole retention are untracked.
const PRUNE_EVERY_SECS: i64 = 60;

/// Decisions and withheld reports for ids beyond the cap.
pub const UNTRACKED: &str = "tollgate_usage_untracked_total";
/// Deltas dropped because the unflushed aggregate was full.
pub const DROPPED: &str = "tollgate_usage_dropped_total";
/// Flushes the ledger refused.
pub const FLUSH_ERRORS: &str = "tollgate_usage_flush_errors_total";
/// Ids tracked (sampled at each flush).
pub const TRACKED_IDS: &str = "tollgate_usage_tracked_ids";

/// One 5-minute bucket of one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UsageBucket {
    /// The bucket's start (a multiple of 5 minutes since the Unix epoch, UTC).
    #[schema(value_type = String, format = DateTime)]
    pub start: Timestamp,
    /// Units admitted in it.
    pub admitted: u64,
    /// Units refused in it (shadow would-rejects included).
    pub refused: u64,
    /// Units that became held in it (over quota, or waiting behind held items of the id).
    pub held: u64,
    /// Units found to be duplicates in it.
    pub duplicate: u64,
}

/// The history could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// Opening the ledger failed (at start-up).
    #[error("usage history: {0}")]
    Open(String),
    /// The ledger did not answer.
    #[error("usage history unavailable: {0}")]
    Unavailable(String),
}

/// How the history is kept.
#[derive(Debug, Clone, Copy)]
pub struct UsageOptions {
    /// The most metering ids tracked.
    pub max_ids: usize,
    /// What to do with an unreadable `usage.redb`.
    pub on_corrupt: OnCorrupt,
}

impl Default for UsageOptions {
    fn default() -> Self {
        Self { max_ids: DEFAULT_MAX_IDS, on_corrupt: OnCorrupt::Refuse }
    }
}

/// The usage history; cheap to clone. See the module docs.
#[derive(Clone)]
pub struct UsageHistory {
    inner: Arc<Inner>,
}

struct Inner {
    recorder: Arc<Recorder>,
    ledger: Ledger,
    /// Held by a flush from drain to write, and by a read (see the module invariants).
    flush: tokio::sync::Mutex<Flushes>,
    /// Ids untracked whose rows the ledger has yet to drop.
    gone: Mutex<Vec<MeteringId>>,
    pruned_at: AtomicI64,
    failing: AtomicBool,
}

/// The flusher's own state, under the flush lock.
struct Flushes {
    /// The number the next batch gets; from 1, as a ledger takes 0 for "none yet".
    next: u64,
    /// A batch the ledger refused, to be sent again as it was.
    held: Option<Held>,
}

/// A batch the ledger refused, with what it was sent with.
struct Held {
    number: u64,
    batch: Batch,
    cutoff: i64,
    gone: Vec<MeteringId>,
}

impl std::fmt::Debug for UsageHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageHistory").field("tracked", &self.tracked_ids()).finish()
    }
}

/// The bucket index of `t`.
pub fn bucket_of(t: Timestamp) -> i64 {
    t.as_second().div_euclid(BUCKET_SECONDS)
}

/// The start of bucket `b`.
pub fn bucket_start(b: i64) -> Timestamp {
    Timestamp::from_second(b.saturating_mul(BUCKET_SECONDS)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// How far past now a read looks: a day, more than the clocks of instances sharing a Redis
/// differ by. Without a bound a `to` in the year 9999 was millions of days to read.
const READ_AHEAD_BUCKETS: i64 = 86_400 / BUCKET_SECONDS;

/// The oldest bucket kept at `now`.
pub fn retention_start(now: Timestamp) -> i64 {
    bucket_of(now) - (RETENTION_BUCKETS - 1)
}

impl UsageHistory {
    /// The history for `store`: in memory for a memory store, in `data_dir/usage.redb` for an
    /// embedded store, in Redis for a Redis store (needs a tokio runtime). Not attached yet:
    /// see [`UsageHistory::attach`].
    pub fn open(
        store: &AnyStore,
        data_dir: &Path,
        options: UsageOptions,
    ) -> Result<Self, UsageError> {
        let max_pending = options.max_ids.saturating_mul(PENDING_PER_ID);
        let aggregate = Aggregate::new(options.max_ids, max_pending);
        let mut gone = Vec::new();
        let ledger = match store {
            AnyStore::Memory(_) => Ledger::Memory(ledger::memory::MemoryLedger::default()),
            AnyStore::Embedded(_) => {
                let (l, ids) = ledger::file::FileLedger::open(data_dir, options.on_corrupt)
                    .map_err(UsageError::Open)?;
                let cutoff = retention_start(Timestamp::now());
                for (id, last) in ids {
                    // Ids beyond the cap (a lowered usage_max_ids) lose their history too.
                    if last < cutoff || !aggregate.preload(id.clone(), last) {
                        gone.push(id);
                    }
                }
                Ledger::File(l)
            }
            AnyStore::Redis(s) => {
                Ledger::Redis(ledger::redis::RedisLedger::new(s).map_err(UsageError::Open)?)
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                recorder: Arc::new(Recorder { aggregate, open: AtomicBool::new(true) }),
                ledger,
                flush: tokio::sync::Mutex::new(Flushes { next: 1, held: None }),
                gone: Mutex::new(gone),
                pruned_at: AtomicI64::new(Timestamp::now().as_second()),
                failing: AtomicBool::new(false),
            }),
        })
    }

    /// A history kept in memory only, tracking at most `max_ids` ids (tests, embedding).
    pub fn in_memory(max_ids: usize) -> Self {
        let store = AnyStore::Memory(tollgate_quota::store::MemoryStore::new());
        let options = UsageOptions { max_ids, ..UsageOptions::default() };
        // A memory ledger has nothing to open, so this cannot fail.
        match Self::open(&store, Path::new("."), options) {
            Ok(h) => h,
            Err(_) => unreachable!("a memory ledger opens without I/O"),
        }
    }

    /// Makes this history see every decision of `store`; `false` when the store already has
    /// an observer (then nothing is recorded from it).
    pub fn attach(&self, store: &AnyStore) -> bool {
        store.observe(Arc::new(Observer(Arc::clone(&self.inner.recorder))))
    }

    /// Starts the task that flushes every [`FLUSH_INTERVAL`]; it ends when the last handle to
    /// this history is dropped.
    pub fn spawn_flusher(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let _ = UsageHistory { inner }.flush().await;
            }
        })
    }

    /// How many ids are tracked.
    pub fn tracked_ids(&self) -> usize {
        self.inner.recorder.aggregate.tracked()
    }

    /// Records one decision's units at `now` (the observer does this for every decision).
    pub fn record(&self, id: &MeteringId, now: Timestamp, admitted: u64, refused: u64) {
        self.inner.recorder.record(id, Delta { admitted, refused, ..Delta::empty(bucket_of(now)) });
    }

    /// Records `weight` units withheld as `kind` at `now` (the observer does this for every
    /// report through [`AnyStore::withheld`]).
    pub fn record_withheld(&self, id: &MeteringId, now: Timestamp, kind: Withheld, weight: u64) {
        self.inner.recorder.record(id, withheld(bucket_of(now), kind, weight));
    }

    /// Writes what is pending to the ledger (see the module invariants): first a batch held
    /// since a failed flush, then what the aggregate holds, held until the ledger takes it.
    ///
    /// The work runs in a task of its own: a caller that stops waiting (a backup request
    /// whose client went away) does not stop a write half way, which the file ledger would
    /// otherwise commit and then be sent again.
    pub async fn flush(&self) -> Result<(), UsageError> {
        let this = self.clone();
        tokio::spawn(async move { this.flush_now().await })
            .await
            .map_err(|e| UsageError::Unavailable(format!("usage flush task: {e}")))?
    }

    async fn flush_now(&self) -> Result<(), UsageError> {
        let inner = &self.inner;
        let aggregate = &inner.recorder.aggregate;
        let mut flushes = inner.flush.lock().await;
        let now = Timestamp::now();
        let cutoff = retention_start(now);
        // Pruned even while writes fail, so ids idle for the retention give their slots back.
        let last_prune = inner.pruned_at.load(Ordering::Relaxed);
        if now.as_second() - last_prune >= PRUNE_EVERY_SECS {
            inner.pruned_at.store(now.as_second(), Ordering::Relaxed);
            let pruned = aggregate.prune(cutoff);
            inner.gone.lock().unwrap_or_else(PoisonError::into_inner).extend(pruned);
        }
        metrics::gauge!(TRACKED_IDS).set(aggregate.tracked() as f64);
        if let Some(held) = &flushes.held {
            let sent = inner.ledger.write(&held.batch, held.number, held.cutoff, &held.gone).await;
            if let Err(e) = sent {
                return Err(self.failed(e));
            }
            aggregate.release(held.batch.deltas.len());
            flushes.held = None;
        }
        let gone = std::mem::take(&mut *inner.gone.lock().unwrap_or_else(PoisonError::into_inner));
        // The drained deltas keep counting against the aggregate's bound until released.
        let batch = aggregate.drain(cutoff);
        if batch.is_empty() && gone.is_empty() {
            self.written();
            return Ok(());
        }
        let number = flushes.next;
        flushes.next += 1;
        let held = flushes.held.insert(Held { number, batch, cutoff, gone });
        match inner.ledger.write(&held.batch, number, cutoff, &held.gone).await {
            Ok(()) => {
                aggregate.release(held.batch.deltas.len());
                flushes.held = None;
                self.written();
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Notes a flush the ledger took.
    fn written(&self) {
        if self.inner.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("the usage history is written again");
        }
    }

    /// Notes a flush the ledger refused.
    fn failed(&self, e: String) -> UsageError {
        metrics::counter!(FLUSH_ERRORS).increment(1);
        if !self.inner.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "the usage history cannot be written; kept in memory (bounded) and retried every second");
        }
        UsageError::Unavailable(e)
    }

    /// Flushes, then writes a copy of the history into the backup directory `dir`: the file's
    /// name, or `None` when the history is not kept in the data directory (memory, Redis).
    pub async fn backup_to(
        &self,
        dir: &std::path::Path,
    ) -> Result<Option<&'static str>, UsageError> {
        if !matches!(self.inner.ledger, Ledger::File(_)) {
            return Ok(None);
        }
        self.flush().await?;
        self.inner.ledger.backup_to(dir).await.map_err(UsageError::Unavailable)
    }

    /// The buckets of `metering_id` that start in `[from, to)` (`from` rounded down to a
    /// bucket), ascending, only those with units; empty for an unknown id. Only the retention
    /// up to a day past now is read (`READ_AHEAD_BUCKETS`): a wider range costs no more.
    pub async fn series(
        &self,
        metering_id: &str,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<UsageBucket>, UsageError> {
        let Ok(id) = MeteringId::new(metering_id) else { return Ok(Vec::new()) };
        let now = Timestamp::now();
        let from = bucket_of(from).max(retention_start(now));
        // Buckets starting before `to`: the index of the last one is (to - 1 s) / 300.
        let to = bucket_of(to.checked_sub(jiff::SignedDuration::from_nanos(1)).unwrap_or(to)) + 1;
        let to = to.min(bucket_of(now) + READ_AHEAD_BUCKETS);
        if from >= to {
            return Ok(Vec::new());
        }
        let flushes = self.inner.flush.lock().await;
        let stored =
            self.inner.ledger.read(&id, from, to).await.map_err(UsageError::Unavailable)?;
        let mut rows: std::collections::BTreeMap<i64, Delta> =
            stored.buckets.iter().map(|d| (d.bucket, *d)).collect();
        let held = flushes.held.iter().flat_map(|h| h.batch.deltas.iter().map(|d| (h.number, d)));
        let held = held
            .filter(|(number, (i, d))| {
                *i == id && (from..to).contains(&d.bucket) && !stored.holds(d.bucket, *number)
            })
            .map(|(_, (_, d))| *d);
        for d in held.chain(self.inner.recorder.aggregate.pending(&id, from, to)) {
            rows.entry(d.bucket).or_insert_with(|| Delta::empty(d.bucket)).add(&d);
        }
        Ok(rows
            .into_values()
            .filter(|d| !d.is_empty())
            .map(|d| UsageBucket {
                start: bucket_start(d.bucket),
                admitted: d.admitted,
                refused: d.refused,
                held: d.held,
                duplicate: d.duplicate,
            })
            .collect())
    }
}

/// What records decisions: the aggregate, shared with the store's observer.
struct Recorder {
    aggregate: Aggregate,
    /// False once the history is dropped: its observer, still attached to the store, then
    /// records nothing.
    open: AtomicBool,
}

impl Recorder {
    fn record(&self, id: &MeteringId, d: Delta) {
        match self.aggregate.record(id, d) {
            Recorded::Kept => {}
            Recorded::Untracked => metrics::counter!(UNTRACKED).increment(1),
            Recorded::Dropped => metrics::counter!(DROPPED).increment(1),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.recorder.open.store(false, Ordering::Relaxed);
    }
}

/// The store's observer. It shares the recorder (the aggregate, not the ledger's file) and
/// checks that the history is still open: a `Weak` to the history, upgraded on every
/// decision, made every core write one reference count, a cache line bounced on each answer.
struct Observer(Arc<Recorder>);

impl DecisionObserver for Observer {
    fn decided(&self, id: &MeteringId, d: &Decision) {
        if !self.0.open.load(Ordering::Relaxed) {
            return;
        }
        let (admitted, refused) = match d.outcome {
            Outcome::Allowed => (d.weight, 0),
            Outcome::Exceeded | Outcome::WeightExceedsLimit => (0, d.weight),
        };
        // The decision's own time: the store read its clock already.
        let bucket = bucket_of(d.at());
        self.0.record(id, Delta { admitted, refused, ..Delta::empty(bucket) });
    }

    fn withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
        if !self.0.open.load(Ordering::Relaxed) {
            return;
        }
        self.0.record(id, withheld(bucket_of(Timestamp::now()), kind, weight));
    }
}

/// The delta of `weight` units withheld as `kind` in `bucket`.
fn withheld(bucket: i64, kind: Withheld, weight: u64) -> Delta {
    match kind {
        Withheld::Held => Delta { held: weight, ..Delta::empty(bucket) },
        Withheld::Duplicate => Delta { duplicate: weight, ..Delta::empty(bucket) },
    }
}

#[cfg(test)]
mod tests;
