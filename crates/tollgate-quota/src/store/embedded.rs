//! Counters in memory, written behind to one redb file.
//!
//! Decisions are made by the shared [`Counters`] core, exactly as in the memory store. Every
//! check that changed a counter queues its key: a buffered check on its thread's lane (see
//! `dirty`), a strict one on the shared queue, whose sequence numbers it waits on. One flusher
//! thread writes the current state of every queued counter in one redb transaction per flush
//! interval (group commit).
//!
//! # Invariants
//!
//! * **A commit holds at least every increment queued before it.** A check updates memory first
//!   and queues its key second; the flusher takes the shared queue (with its sequence number)
//!   and every lane, all under the queue's lock, and reads each counter's state after, under the
//!   shard lock. So the state written is never older than any increment whose key was taken, and
//!   publishing "committed up to sequence S" after the commit is truthful: whatever was queued
//!   before sequence S, on the queue or on a lane, was taken.
//! * **Strict durability** answers only once "committed" has reached the check's own sequence
//!   number; buffered checks answer at once and reach the disk within one flush interval.
//! * **Group commit, never a commit per check.** A strict check wakes the flusher; every check
//!   queued until it takes the queue, and every one queued while its commit is in flight (taken
//!   next, at once), shares one redb write transaction and one fsync. Strict decisions per
//!   second are about the checks in flight divided by one commit's time.
//! * **Disk never holds more than memory** for a key: the flusher writes memory's state (or
//!   deletes the row when memory has dropped the counter), never a sum.
//! * **Resets are ordered before later increments**: a reset drops the counters in memory and
//!   queues the id in one step, under the queue's lock; the flusher deletes the id's rows before
//!   writing the queued keys, whose state is read after the reset. So a check that counts after
//!   the drop queues its key after the reset, and since the flusher takes the queue and the
//!   lanes under that same lock, the key is never in an earlier batch than the reset (done in
//!   two steps, a batch taken between them wrote the check and the reset's batch deleted it).
//!   A check takes a lane's lock or the queue's, never both and never with a shard's held; the
//!   flusher takes lane locks, and a reset shard locks, only under the queue's: no lock order
//!   can deadlock.
//! * **What loads is live.** On open, rows whose counters hold nothing any more (expired windows
//!   past their carried totals) are deleted, not loaded; sweeps in memory queue the keys they drop
//!   so their rows are deleted too. The file is bounded by live counters, like memory.
//! * A crash loses at most the increments queued since the last commit: at most one flush
//!   interval of buffered checks, none of the strict ones that were answered.
//! * **No answer is given that cannot be saved.** While the last commit failed (a full disk,
//!   say), every check is refused with [`StoreError::Io`] before it counts anything, so the
//!   server answers per `store_unavailable` and `/readyz` reports the store; the failed batch
//!   is retried every flush interval on a freshly reopened file, and the first commit that
//!   succeeds clears the failure. No restart is needed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::watch;

use crate::clock::{Clock, StoreClock, SystemClock};
use crate::counter::Counters;
use crate::decision::{Counted, Decision, GivenBack, Outcome};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, QuotaSpec};
use crate::store::corrupt::{self, OnCorrupt};
use crate::store::observer::ObserverSlot;
use crate::store::{CounterListing, CounterPage, Store, StoreError};

mod backup;
mod dirty;
mod flusher;
mod row;
mod seen;
#[cfg(test)]
mod tests;
use row::{
    decode_counter, decode_key, encode_counter_into, encode_key, encode_key_into, id_prefix,
};

/// Counter rows: key = id, 0x00, shape; value = the counter state (see `row`).
const COUNTERS: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("counters");

/// redb's page cache for the counters file. The file is only read at start-up and written
/// behind, so a small cache bounds the store's memory to its counters plus this; pages outside
/// it are read again from the operating system's cache when a commit touches them.
const PAGE_CACHE_BYTES: usize = 16 << 20;

/// How a counters file is opened: with a bounded page cache.
fn builder() -> redb::Builder {
    let mut b = Database::builder();
    b.set_cache_size(PAGE_CACHE_BYTES);
    b
}

/// How often the flusher sweeps expired counters out of memory (and so out of the file).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// When a check's increment is on disk (`[store] durability` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Answer at once; the increment is on disk within one flush interval.
    #[default]
    Buffered,
    /// Answer only after the batch holding the increment is committed.
    Strict,
}

/// How to open an [`EmbeddedStore`].
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The redb file.
    pub path: PathBuf,
    /// Group-commit period (default 100 ms).
    pub flush_interval: Duration,
    /// When a check's increment must be on disk before it is answered.
    pub durability: Durability,
    /// What to do when the file exists but cannot be read (default: refuse to open).
    pub on_corrupt: OnCorrupt,
}

impl EmbeddedOptions {
    /// Options for `path` with the defaults: 100 ms flush interval, buffered.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            flush_interval: Duration::from_millis(100),
            durability: Durability::Buffered,
            on_corrupt: OnCorrupt::Refuse,
        }
    }
}

/// Decisions in memory, increments written behind to redb with group commit.
///
/// Dropping the store stops the flusher after a last commit, like [`Store::flush`].
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    committed: watch::Receiver<u64>,
    flusher: Option<JoinHandle<()>>,
    observer: ObserverSlot,
}

/// What the store and its flusher thread share.
struct Shared {
    clock: StoreClock,
    counters: Counters,
    /// The open file; `None` after a failed commit until the next commit reopens it (redb
    /// refuses every later write on a handle that met an I/O error, e.g. a full disk).
    db: Mutex<Option<Database>>,
    path: PathBuf,
    durability: Durability,
    flush_interval: Duration,
    queue: Mutex<Queue>,
    /// The keys buffered checks changed, by lane.
    dirty: dirty::Dirty,
    wake: Condvar,
    committed: watch::Sender<u64>,
    /// The last commit error, cleared by the next successful commit.
    failure: Mutex<Option<String>>,
    /// True while `failure` is set: every check reads this one flag, and locks `failure` only
    /// when it is up. Invariant: written under the `failure` lock, right after `failure`.
    failing: AtomicBool,
    stop: AtomicBool,
    /// When expired keys seen were last dropped (Unix ms; see `seen`).
    seen_pruned_at: AtomicI64,
}

/// Work for the flusher.
#[derive(Default)]
struct Queue {
    /// Keys whose counters strict checks changed, in order (duplicates allowed), and keys
    /// of a failed commit queued again.
    dirty: Vec<dirty::Key>,
    /// Ids reset since the last commit.
    resets: Vec<MeteringId>,
    /// The sequence number of the latest queued item.
    seq: u64,
    /// Somebody waits for the next commit: do not wait for the interval.
    urgent: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EmbeddedStore {
    /// Where this store's decision observer is kept.
    pub(crate) fn observer_slot(&self) -> &ObserverSlot {
        &self.observer
    }

    /// Opens (or creates) the store file and loads the live counters.
    pub fn open(opts: EmbeddedOptions) -> Result<Self, StoreError> {
        Self::open_with_clock(opts, Arc::new(SystemClock))
    }

    /// Like [`EmbeddedStore::open`], reading time from `clock`.
    pub fn open_with_clock(
        opts: EmbeddedOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        if let Some(dir) = opts.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Io(format!("creating {}: {e}", dir.display())))?;
        }
        let (db, counters) = match open_and_load(&opts.path, clock.now()) {
            Ok(opened) => opened,
            Err(Unreadable::Io(e)) => return Err(StoreError::Io(e)),
            Err(Unreadable::Corrupt(why)) => match opts.on_corrupt {
                OnCorrupt::Refuse => {
                    return Err(StoreError::Io(corrupt::refusal(
                        &opts.path,
                        &why,
                        "--move-aside-corrupt",
                    )));
                }
                OnCorrupt::MoveAside => {
                    let moved = corrupt::move_aside(&opts.path).map_err(|e| {
                        StoreError::Io(format!(
                            "{} is corrupt ({why}) and cannot be moved aside: {e}",
                            opts.path.display()
                        ))
                    })?;
                    tracing::error!(
                        file = %opts.path.display(),
                        moved_to = %moved.display(),
                        reason = %why,
                        "the counters file is corrupt: moved aside as asked, starting with EMPTY \
                         counters (what it had counted is not enforced)"
                    );
                    open_and_load(&opts.path, clock.now()).map_err(|e| match e {
                        Unreadable::Io(e) | Unreadable::Corrupt(e) => StoreError::Io(e),
                    })?
                }
            },
        };
        let (committed, receiver) = watch::channel(0);
        let shared = Arc::new(Shared {
            clock: StoreClock::new(clock),
            counters,
            db: Mutex::new(Some(db)),
            path: opts.path.clone(),
            durability: opts.durability,
            flush_interval: opts.flush_interval.max(Duration::from_millis(1)),
            queue: Mutex::new(Queue::default()),
            dirty: dirty::Dirty::new(),
            wake: Condvar::new(),
            committed,
            failure: Mutex::new(None),
            failing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            seen_pruned_at: AtomicI64::new(0),
        });
        let flusher = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("tollgate-flush".into())
                .spawn(move || shared.run_flusher())
                .map_err(|e| StoreError::Io(format!("starting the flusher: {e}")))?
        };
        Ok(Self {
            shared,
            committed: receiver,
            flusher: Some(flusher),
            observer: ObserverSlot::default(),
        })
    }

    /// How many counters are held in memory.
    pub fn len(&self) -> usize {
        self.shared.counters.len()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.shared.counters.is_empty()
    }

    /// The last write error, if the latest commit failed; checks are refused while it is set.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }

    /// Queues work that somebody waits for, wakes the flusher, and returns the work's
    /// sequence number.
    fn enqueue(&self, f: impl FnOnce(&mut Queue)) -> u64 {
        let mut q = lock(&self.shared.queue);
        f(&mut q);
        q.seq += 1;
        q.urgent = true;
        self.shared.wake.notify_one();
        q.seq
    }

    /// Queues a changed counter's key: on this thread's lane when buffered; on the shared
    /// queue when strict, returning the sequence number to wait for.
    fn queue_key(&self, key: dirty::Key) -> Option<u64> {
        match self.shared.durability {
            Durability::Buffered => {
                self.shared.dirty.push(key);
                None
            }
            Durability::Strict => Some(self.enqueue(|q| q.dirty.push(key))),
        }
    }

    /// Waits until the commit holding `seq` is done.
    async fn committed(&self, seq: u64) -> Result<(), StoreError> {
        let mut rx = self.committed.clone();
        let waited = rx.wait_for(|c| *c >= seq).await.map(|_| ());
        if waited.is_err() {
            return Err(StoreError::Io("the flusher has stopped".into()));
        }
        match lock(&self.shared.failure).clone() {
            Some(e) => Err(StoreError::Io(e)),
            None => Ok(()),
        }
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _q = lock(&self.shared.queue);
            self.shared.wake.notify_one();
        }
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
    }
}

impl Store for EmbeddedStore {
    async fn check(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> Result<Decision, StoreError> {
        // While writes fail, nothing admitted now could be saved: refuse before counting, so
        // the server answers per `store_unavailable` instead of a 200 that is never persisted.
        if self.shared.failing.load(Ordering::Acquire)
            && let Some(e) = lock(&self.shared.failure).clone()
        {
            return Err(StoreError::Io(format!("the counters file cannot be written: {e}")));
        }
        let decision =
            self.shared.counters.check_when(id, spec, weight, || self.shared.clock.now_us());
        if decision.outcome == Outcome::Allowed && weight == 0 {
            // A probe changed nothing worth writing.
            return Ok(decision);
        }
        if let Some(seq) = self.queue_key((id.clone(), spec.counter_shape())) {
            // Boxed: only strict checks wait, and the wait's future would otherwise make
            // every check's future (and every caller's) several times larger.
            Box::pin(self.committed(seq)).await?;
        }
        Ok(decision)
    }

    async fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> Result<GivenBack, StoreError> {
        if self.shared.failing.load(Ordering::Acquire)
            && let Some(e) = lock(&self.shared.failure).clone()
        {
            return Err(StoreError::Io(format!("the counters file cannot be written: {e}")));
        }
        let shape = spec.counter_shape();
        let now = self.shared.clock.now_us();
        let given = self.shared.counters.give_back_us(id, &shape, counted, units, now);
        if matches!(given, GivenBack::Units(n) if n > 0) {
            // Written behind like an admission, and as durable as one.
            if let Some(seq) = self.queue_key((id.clone(), shape)) {
                self.committed(seq).await?;
            }
        }
        Ok(given)
    }

    async fn counters(&self, listing: &CounterListing<'_>) -> Result<CounterPage, StoreError> {
        Ok(self.shared.counters.counters_at(listing, self.shared.clock.now()))
    }

    async fn reset(&self, id: &MeteringId) -> Result<u64, StoreError> {
        // Memory and queue in one step, under the queue's lock (see the invariants).
        let mut dropped = 0;
        let seq = self.enqueue(|q| {
            dropped = self.shared.counters.reset(id);
            q.resets.push(id.clone());
        });
        self.committed(seq).await?;
        Ok(dropped)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let seq = self.enqueue(|_| {});
        self.committed(seq).await
    }
}

/// Why a counters file could not be opened.
enum Unreadable {
    /// The file is damaged: empty, truncated, or failing redb's checks (message: what is wrong).
    Corrupt(String),
    /// Anything else (permissions, locks, a full disk): the message names the file.
    Io(String),
}

/// Opens `path` (creating it only when it does not exist) and loads its live counters.
///
/// An existing file is never re-initialised: a zero-length file, a truncated one or pages
/// that fail redb's checks (redb panics on some in debug builds; the panic is caught here) are
/// [`Unreadable::Corrupt`]. An unclean shutdown is not corruption: redb's own recovery runs
/// inside `Database::open` as before.
fn open_and_load(path: &Path, now: jiff::Timestamp) -> Result<(Database, Counters), Unreadable> {
    let shown = path.display();
    let exists = match std::fs::metadata(path) {
        Ok(m) if m.len() == 0 => {
            return Err(Unreadable::Corrupt(
                "the file is empty (0 bytes), though a counters file is never empty once created"
                    .into(),
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(Unreadable::Io(format!("{shown}: {e}"))),
    };
    let attempt = std::panic::catch_unwind(|| {
        let db = if exists { builder().open(path) } else { builder().create(path) }
            .map_err(|e| classify(path, "opening", e.into()))?;
        let counters = Counters::with_eviction_log();
        load(&db, &counters, now).map_err(|e| classify(path, "loading counters from", e))?;
        Ok((db, counters))
    });
    attempt.unwrap_or_else(|panic| {
        let msg = corrupt::panic_message(&*panic);
        Err(Unreadable::Corrupt(format!("redb failed while reading it: {msg}")))
    })
}

/// Sorts a redb error into corruption (damaged content) or any other failure.
fn classify(path: &Path, doing: &str, e: redb::Error) -> Unreadable {
    use std::io::ErrorKind;
    match e {
        redb::Error::Corrupted(why) => Unreadable::Corrupt(why),
        redb::Error::Io(io)
            if matches!(io.kind(), ErrorKind::UnexpectedEof | ErrorKind::InvalidData) =>
        {
            Unreadable::Corrupt(format!("it is truncated or malformed: {io}"))
        }
        other => Unreadable::Io(format!("{doing} {}: {other}", path.display())),
    }
}

/// Loads the live rows into `counters` and deletes the dead ones. A row that does not decode
/// (damaged, or written by a newer format) is damage: the file is refused (or moved aside),
/// never opened with that counter back at zero and its row deleted.
fn load(db: &Database, counters: &Counters, now: jiff::Timestamp) -> Result<(), redb::Error> {
    let mut dead: Vec<Vec<u8>> = Vec::new();
    {
        let txn = db.begin_read()?;
        let table = match txn.open_table(COUNTERS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for row in table.iter()? {
            let (k, v) = row?;
            let decoded =
                decode_key(k.value()).and_then(|key| Ok((key, decode_counter(v.value())?)));
            let live = match decoded {
                Ok(((id, shape), counter)) => counters.restore(id, &shape, counter, now),
                Err(reason) => {
                    let key = String::from_utf8_lossy(k.value()).into_owned();
                    return Err(redb::Error::Corrupted(format!(
                        "the counter row {key:?} cannot be read: {reason}"
                    )));
                }
            };
            if !live {
                dead.push(k.value().to_vec());
            }
        }
    }
    let txn = db.begin_write()?;
    {
        let mut table = txn.open_table(COUNTERS)?;
        for k in &dead {
            table.remove(k.as_slice())?;
        }
    }
    txn.commit()?;
    Ok(())
}
