//! The spool: received bytes on disk and every item's state in a redb database.
//!
//! Layout in the data dir: `spool/<file-id>.edi` (the bytes exactly as received) and
//! `gateway.redb` (tables `files`, `items`, `dedup`, `meta`). An ephemeral spool (a
//! simulation) keeps both in memory instead, under the same contract (see `rows`, `files`).
//!
//! Invariants, and the code that keeps them:
//! - **A file is durable before it is acknowledged.** [`Spool::receive`] writes the batch of
//!   files into one spool file, fsyncs it, fsyncs the `spool/` directory, and only then commits its `files` row
//!   (durability `Immediate`). The caller removes the inbound file or answers 202 after
//!   `receive` returns, never before.
//! - **A `files` row means "received, not yet split into items".** [`Spool::commit`] removes the
//!   row in the same transaction that inserts the file's items, so a crash leaves either the
//!   row (the file is parsed again; item ids are derived from the file id, so the outcome is
//!   the same items) or the items, never neither. An ephemeral spool (a simulation) keeps no
//!   `files` rows: only a restart reads them, and it has none.
//! - **Every state change is one transaction.** An item's row is replaced whole; there is no
//!   moment at which an item is in two states or none.
//! - **The tally follows the rows.** A commit (and the prune) reads each row it replaces or
//!   removes in its transaction and applies the difference to [`QueueTally`] after the commit,
//!   in commit order (`commit_order`), so the tally counts exactly the stored rows.
//! - **Spool files outlive their items.** A spool file is deleted only after the commit that
//!   makes its last item `delivered` (or purges it). A spool file with no row at all (a crash
//!   between the write and the commit, or state moved aside) is not deleted: [`Spool::open`]
//!   moves it to `orphaned/` (its inbound file was not removed and its upload was not answered,
//!   so it is received again; the copy is kept rather than guessed about).
//! - **Untrusted state is refused**, never taken as empty: see [`crate::statedb`].
//! - **A failed write leaves nothing behind.** A spool file whose write, fsync or `files` row
//!   failed is removed before the error is returned (nothing refers to it, and the caller did
//!   not acknowledge it), so retries on a full disk do not eat the space freed later. Every
//!   write reports to [`SpoolHealth`]; a failed database operation drops the database handle,
//!   which the next operation reopens (see `handle`).
//!
//! This file keeps the writes (`receive`, `commit`) that the invariants above are about; the
//! reads (`read`), the rows (`rows`: in the database, or in memory for a simulation), spool
//! files' bytes (`files`: on disk, or in memory), the database handle (`handle`), the write
//! health (`health`) and backups (`backup`) are modules of their own.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::clock::GatewayClock;
use crate::item::{Item, State};
pub(crate) use crate::statedb::SpoolOptions;
use crate::statedb::{self, ORPHANED};
use crate::tally::{QueueTally, TallyChange, TallyRow};
use crate::telemetry::SpoolUsage;

mod backup;
mod change;
mod files;
mod handle;
mod health;
#[cfg(test)]
pub(crate) mod hooks;
mod read;
mod receive;
mod rows;
mod upkeep;
pub use backup::BackupReport;
pub use change::Change;
use handle::DbHandle;
pub(crate) use health::{SPOOL_ERRORS, SPOOL_FAILING, SpoolHealth, probe_while_failing};
pub(crate) use read::delivered_items;
use rows::Rows;

const FILES: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("files");
const ITEMS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("items");
const DEDUP: TableDefinition<'static, &str, i64> = TableDefinition::new("dedup");
const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");

/// The spool could not read or write.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed; the message names the path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// The state database failed.
    #[error("spool database: {0}")]
    Db(String),
    /// The state database cannot be trusted; nothing was changed (see [`crate::statedb`]).
    #[error(
        "{path} {problem}. The state of the spooled files is unknown, so nothing was changed: \
         restore {path} from a backup, or start with --move-aside-corrupt to move it aside \
         (the spooled files are then kept in {orphaned} for an operator, not delivered)"
    )]
    StateDb {
        /// The database file.
        path: String,
        /// What is wrong with it.
        problem: String,
        /// Where spool files would be kept if it is moved aside.
        orphaned: String,
    },
    /// A row could not be decoded (written by an incompatible version).
    #[error("spool database row {key}: {message}")]
    Corrupt {
        /// The row's key.
        key: String,
        /// The decoding error.
        message: String,
    },
}

fn db_err(e: impl std::fmt::Display) -> SpoolError {
    SpoolError::Db(e.to_string())
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.display().to_string(), source }
}

/// A received file not yet split into items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The file id (the base of its items' ids).
    pub id: String,
    /// Where it came from: the inbound path, or `upload`.
    pub origin: String,
    /// Receive time, Unix milliseconds.
    pub received_at: i64,
    /// The spool file holding its bytes (shared by the files received in one batch).
    pub spool: String,
    /// Start of its bytes in the spool file.
    pub start: u64,
    /// End of its bytes (exclusive).
    pub end: u64,
    /// The sender sniffed at intake, for fair scheduling only (not stored).
    #[serde(skip)]
    pub sender: String,
    /// The parse of its bytes when the receiver already made it (an upload checks its
    /// senders with it), so the pipeline does not parse them again (not stored).
    #[serde(skip)]
    pub parsed: Option<std::sync::Arc<crate::receipt::Parsed>>,
}

/// Received bytes on disk and item state in redb (both in memory for a simulation). Methods
/// block (file and database fsync): call them from `spawn_blocking` in async code.
pub struct Spool {
    dir: PathBuf,
    rows: Rows,
    /// Whether the last write succeeded (see `health`).
    health: SpoolHealth,
    seq: AtomicU64,
    instance: u64,
    /// Counted at open, then changed by every method that writes or deletes a spool file.
    usage: SpoolUsage,
    /// `Some` while a backup runs: spool files to delete wait in it (see `backup`).
    deferred: std::sync::Mutex<Option<Vec<String>>>,
    /// Where receive times and file ids come from.
    clock: GatewayClock,
    /// False only for a simulation ([`SpoolOptions::ephemeral`]).
    fsync: bool,
    /// Items per group and state, changed by every commit (see `tally`).
    tally: QueueTally,
    /// Held by a write from its transaction's start to its tally update (commit order).
    commit_order: std::sync::Mutex<()>,
    /// An ephemeral spool's files (`None`: they are in `dir`).
    memory: Option<files::MemoryFiles>,
}

/// File ids' sequence numbers wrap at this (six digits).
const SEQ: u64 = 1_000_000;

impl Spool {
    /// Opens (or creates) the spool in `data_dir`, refusing a state database that cannot be
    /// trusted (see [`crate::statedb`]) unless `options` say to move it aside, and sorts the
    /// spool files no live state refers to.
    pub fn open(data_dir: &Path, options: SpoolOptions) -> Result<Spool, SpoolError> {
        Self::open_with_clock(data_dir, options, GatewayClock::system())
    }

    /// [`Spool::open`] reading the time from `clock`.
    pub fn open_with_clock(
        data_dir: &Path,
        options: SpoolOptions,
        clock: GatewayClock,
    ) -> Result<Spool, SpoolError> {
        let dir = data_dir.join("spool");
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let rows = if options.ephemeral {
            Rows::memory()
        } else {
            let path = data_dir.join(statedb::STATE_DB);
            Rows::Db(DbHandle::new(Self::open_db(data_dir, &dir, &clock, options)?, path))
        };
        let _ = fs::remove_file(data_dir.join(health::PROBE_FILE));
        let instance = rows.instance()?;
        let mut spool = Spool {
            dir,
            rows,
            health: SpoolHealth::default(),
            // From a random point on disk: after a restart in the same millisecond as ids
            // already taken (a clock stepped back, a standby taking over with a slower clock),
            // a sequence from 0 would issue them again. An ephemeral spool (a simulation) stays
            // reproducible.
            seq: AtomicU64::new(if options.ephemeral { 0 } else { rand::random::<u64>() % SEQ }),
            instance,
            usage: SpoolUsage::default(),
            deferred: Default::default(),
            clock,
            fsync: !options.ephemeral,
            tally: QueueTally::default(),
            commit_order: std::sync::Mutex::new(()),
            memory: options.ephemeral.then(Default::default),
        };
        spool.tally = spool.sort_unreferenced(&data_dir.join(ORPHANED))?;
        spool.usage.count(&spool.dir);
        Ok(spool)
    }

    /// Opens `gateway.redb` with its tables, reading every row once.
    fn open_db(
        data_dir: &Path,
        dir: &Path,
        clock: &GatewayClock,
        options: SpoolOptions,
    ) -> Result<redb::Database, SpoolError> {
        let spool_files = fs::read_dir(dir).map_err(io_err(dir))?.flatten().count();
        statedb::open(data_dir, clock.now_ms(), spool_files, options, &|db| {
            let tx = db.begin_write().map_err(|e| e.to_string())?;
            for t in [FILES, ITEMS] {
                tx.open_table(t).map_err(|e| e.to_string())?;
            }
            tx.open_table(DEDUP).map_err(|e| e.to_string())?;
            tx.open_table(META).map_err(|e| e.to_string())?;
            tx.commit().map_err(|e| e.to_string())?;
            // Every row is read once here, so a damaged page is found now and not mid-run.
            let tx = db.begin_read().map_err(|e| e.to_string())?;
            for t in [FILES, ITEMS] {
                let t = tx.open_table(t).map_err(|e| e.to_string())?;
                for row in t.iter().map_err(|e| e.to_string())? {
                    row.map_err(|e| e.to_string())?;
                }
            }
            let t = tx.open_table(DEDUP).map_err(|e| e.to_string())?;
            for row in t.iter().map_err(|e| e.to_string())? {
                row.map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    }

    /// This data dir's instance id: random, made when the state database is created and kept
    /// in it, so two gateways never share one and a restart keeps it (it makes the owner of
    /// the transaction fingerprints this gateway claims in a shared store).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Spool files whose every item is delivered are deleted; files no row refers to at all
    /// (a receive or split cut short by a crash, or state that was moved aside) are moved to
    /// `orphaned`, with a log line: only a state that says "finished" deletes bytes. Returns
    /// the tally of the items it read.
    fn sort_unreferenced(&self, orphaned: &Path) -> Result<QueueTally, SpoolError> {
        let mut live: HashSet<String> =
            self.pending_files()?.into_iter().map(|f| f.spool).collect();
        let mut finished = HashSet::new();
        let items = self.items(None)?;
        let tally = QueueTally::of(&items);
        for item in items {
            if item.state == State::Delivered {
                finished.insert(item.spool_file);
            } else {
                live.insert(item.spool_file);
            }
        }
        let entries = fs::read_dir(&self.dir).map_err(io_err(&self.dir))?;
        let mut moved = 0usize;
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".edi").unwrap_or(&name);
            if live.contains(stem) {
                continue;
            }
            if finished.contains(stem) {
                tracing::info!(file = %name, "removing the spool file of delivered items");
                let _ = fs::remove_file(entry.path());
                continue;
            }
            fs::create_dir_all(orphaned).map_err(io_err(orphaned))?;
            let to = orphaned.join(&name);
            fs::rename(entry.path(), &to).map_err(io_err(&entry.path()))?;
            tracing::warn!(file = %name, moved_to = %to.display(),
                "spool file with no state kept in orphaned/: it is not delivered; review it, \
                 then drop it into a landing directory or delete it");
            moved += 1;
        }
        if moved > 0 {
            sync_dir(orphaned)?;
            sync_dir(&self.dir)?;
        }
        Ok(tally)
    }

    /// Items per group and state, as of the last commit.
    pub fn tally(&self) -> &QueueTally {
        &self.tally
    }

    /// A new file id: receive time in Unix ms, then a sequence number; ids sort by arrival.
    pub fn new_file_id(&self) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) % SEQ;
        format!("{:013}-{seq:06}", self.clock.now_ms())
    }

    /// The gateway's clock.
    pub fn clock(&self) -> &GatewayClock {
        &self.clock
    }

    /// Unix milliseconds now, by the gateway's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// True for a simulation's spool (in memory, no fsync): its work runs inline.
    pub fn is_ephemeral(&self) -> bool {
        !self.fsync
    }

    /// Whether received files get a `files` row: not in an ephemeral spool, which no restart
    /// reads (see the invariants above).
    fn records_files(&self) -> bool {
        !self.is_ephemeral()
    }

    /// The path of a spool file.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{file}.edi"))
    }

    /// Applies `change` in one durable transaction, then to the tally.
    pub fn commit(&self, change: &Change) -> Result<(), SpoolError> {
        if change.is_empty() {
            return Ok(());
        }
        #[cfg(test)]
        if hooks::fails(&self.dir, change) {
            let e = SpoolError::Db("a commit made to fail by a test".into());
            self.health.failed(&e);
            return Err(e);
        }
        let _order = self.commit_order.lock().unwrap_or_else(PoisonError::into_inner);
        let result = self.rows.write(|rows| {
            let mut counted = TallyChange::default();
            if self.records_files() {
                for f in &change.remove_files {
                    rows.remove_file(f)?;
                }
            }
            for item in change.last_puts() {
                let v = serde_json::to_vec(item).map_err(db_err)?;
                if let Some(old) = rows.put_item(&item.id, v)? {
                    counted.gone(old);
                }
                counted.came(TallyRow::of(item));
            }
            // Deletes come last: an item purged in a batch is gone, whatever the batch
            // wrote of it before the purge (a release, then a purge).
            for id in &change.delete {
                if let Some(old) = rows.remove_item(id)? {
                    counted.gone(old);
                }
            }
            for (k, at) in &change.dedup {
                rows.put_dedup(k, *at)?;
            }
            Ok(counted)
        });
        match result {
            Ok(counted) => {
                self.health.succeeded();
                self.tally.apply(&counted, self.now_ms());
                Ok(())
            }
            Err(e) => {
                self.health.failed(&e);
                Err(e)
            }
        }
    }
}

fn corrupt(key: &str) -> impl FnOnce(serde_json::Error) -> SpoolError + '_ {
    move |e| SpoolError::Corrupt { key: key.to_owned(), message: e.to_string() }
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, v: &[u8]) -> Result<T, SpoolError> {
    serde_json::from_slice(v).map_err(corrupt(key))
}

fn decode_item(key: &str, v: &[u8]) -> Result<Item, SpoolError> {
    Item::from_stored(v).map_err(corrupt(key))
}

fn decode_tally(key: &str, v: &[u8]) -> Result<TallyRow, SpoolError> {
    TallyRow::from_stored(v).map_err(corrupt(key))
}

/// Fsyncs a directory, so that the names created or renamed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

#[cfg(test)]
mod tests;
