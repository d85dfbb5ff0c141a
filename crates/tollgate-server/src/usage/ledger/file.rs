//! The ledger of an embedded store: the table `usage` in `<data>/usage.redb`, beside the
//! counters file. Key `(metering id, bucket index)`, value `(admitted, refused)`.
//!
//! Invariants:
//! - **One write transaction per flush**, committed off the runtime (`spawn_blocking`); a
//!   failed one (a full disk) changes nothing, and the caller retries its batch.
//! - **Bounded rows.** Each write drops the rows older than the retention of the ids it
//!   writes, and every row of the ids the aggregate stopped tracking; so the table holds at
//!   most `max_ids` ids × 2,016 buckets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tollgate_quota::MeteringId;
use tollgate_quota::store::OnCorrupt;
use tollgate_quota::store::corrupt;

use crate::usage::aggregate::Delta;

/// The usage table: `(id, bucket) → (admitted, refused)`.
const TABLE: TableDefinition<'static, (&str, i64), (u64, u64)> = TableDefinition::new("usage");

/// The file's name in the data directory.
pub const FILE_NAME: &str = "usage.redb";

/// See the module docs.
pub struct FileLedger {
    db: Arc<Database>,
}

impl FileLedger {
    /// Opens (or creates) `dir/usage.redb`; a file that cannot be read is refused, or moved
    /// aside with `OnCorrupt::MoveAside` (as the counters file). Returns the ids found with
    /// their newest bucket, so that the cap counts them.
    pub fn open(
        dir: &Path,
        on_corrupt: OnCorrupt,
    ) -> Result<(Self, Vec<(MeteringId, i64)>), String> {
        let path = dir.join(FILE_NAME);
        match open_and_list(&path) {
            Ok((db, ids)) => Ok((Self { db: Arc::new(db) }, ids)),
            Err(why) => match on_corrupt {
                OnCorrupt::Refuse => Err(corrupt::refusal(&path, &why, "--move-aside-corrupt")),
                OnCorrupt::MoveAside => {
                    let moved = corrupt::move_aside(&path).map_err(|e| {
                        format!("{} cannot be read ({why}) nor moved aside: {e}", path.display())
                    })?;
                    tracing::error!(file = %path.display(), moved_to = %moved.display(),
                        reason = %why, "the usage history file is unreadable: moved aside, starting an empty history");
                    let (db, ids) = open_and_list(&path)?;
                    Ok((Self { db: Arc::new(db) }, ids))
                }
            },
        }
    }

    /// Copies every row into a new `usage.redb` in `dir` (a backup), from one read
    /// transaction: a consistent snapshot while flushes go on.
    pub async fn backup_to(&self, dir: &Path) -> Result<(), String> {
        let db = Arc::clone(&self.db);
        let path = dir.join(FILE_NAME);
        tokio::task::spawn_blocking(move || {
            let shown = path.display().to_string();
            let copy = || -> Result<(), redb::Error> {
                let from = db.begin_read()?;
                let rows = from.open_table(TABLE)?;
                let to = Database::create(&path)?;
                let tx = to.begin_write()?;
                {
                    let mut table = tx.open_table(TABLE)?;
                    for row in rows.iter()? {
                        let (k, v) = row?;
                        table.insert(k.value(), v.value())?;
                    }
                }
                tx.commit()?;
                Ok(())
            };
            copy().map_err(|e| format!("{shown}: {e}"))
        })
        .await
        .map_err(|e| format!("usage backup task failed: {e}"))?
    }

    /// See [`super::Ledger::write`].
    pub async fn write(
        &self,
        batch: Vec<(MeteringId, Delta)>,
        cutoff: i64,
        gone: Vec<MeteringId>,
    ) -> Result<(), String> {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || write(&db, &batch, cutoff, &gone))
            .await
            .map_err(|e| format!("usage write task: {e}"))?
    }

    /// See [`super::Ledger::read`].
    pub async fn read(&self, id: MeteringId, from: i64, to: i64) -> Result<Vec<Delta>, String> {
        if from >= to {
            return Ok(Vec::new());
        }
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || read(&db, id.as_str(), from, to))
            .await
            .map_err(|e| format!("usage read task: {e}"))?
    }
}

/// redb's page cache for `usage.redb`.
const PAGE_CACHE_BYTES: usize = 16 << 20;

fn open_and_list(path: &PathBuf) -> Result<(Database, Vec<(MeteringId, i64)>), String> {
    let shown = path.display();
    // A bounded page cache: the ledger is written once a second and read per query, so
    // redb's default (up to 1 GiB) would only hold pages nobody reads again.
    let db = Database::builder()
        .set_cache_size(PAGE_CACHE_BYTES)
        .create(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    let tx = db.begin_write().map_err(|e| format!("{shown}: {e}"))?;
    tx.open_table(TABLE).map_err(|e| format!("{shown}: {e}"))?;
    tx.commit().map_err(|e| format!("{shown}: {e}"))?;
    let ids = list(&db).map_err(|e| format!("{shown}: {e}"))?;
    Ok((db, ids))
}

/// Every id in the table with its newest bucket: one seek per id, not a scan of every row.
fn list(db: &Database) -> Result<Vec<(MeteringId, i64)>, redb::Error> {
    let tx = db.begin_read()?;
    let table = tx.open_table(TABLE)?;
    let mut ids = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let first = match &next {
            None => table.iter()?.next(),
            Some(after) => table
                .range((after.as_str(), i64::MAX)..)?
                .find(|r| r.as_ref().map_or(true, |(k, _)| k.value().0 != after.as_str())),
        };
        let Some(row) = first else { break };
        let (key, _) = row?;
        let id = key.value().0.to_owned();
        let newest = table.range((id.as_str(), i64::MIN)..=(id.as_str(), i64::MAX))?.next_back();
        if let (Some(Ok((k, _))), Ok(mid)) = (newest, MeteringId::new(&id)) {
            ids.push((mid, k.value().1));
        }
        next = Some(id);
    }
    Ok(ids)
}

fn write(
    db: &Database,
    batch: &[(MeteringId, Delta)],
    cutoff: i64,
    gone: &[MeteringId],
) -> Result<(), String> {
    let run = || -> Result<(), redb::Error> {
        let tx = db.begin_write()?;
        {
            let mut table = tx.open_table(TABLE)?;
            let mut written: Vec<&str> = Vec::new();
            for (id, d) in batch {
                let key = (id.as_str(), d.bucket);
                let (a, r) = table.get(key)?.map_or((0, 0), |v| v.value());
                table.insert(key, (a.saturating_add(d.admitted), r.saturating_add(d.refused)))?;
                written.push(id.as_str());
            }
            written.sort_unstable();
            written.dedup();
            for id in written {
                table.retain_in((id, i64::MIN)..(id, cutoff), |_, _| false)?;
            }
            for id in gone {
                let id = id.as_str();
                table.retain_in((id, i64::MIN)..=(id, i64::MAX), |_, _| false)?;
            }
        }
        tx.commit()?;
        Ok(())
    };
    run().map_err(|e| format!("usage.redb: {e}"))
}

fn read(db: &Database, id: &str, from: i64, to: i64) -> Result<Vec<Delta>, String> {
    let run = || -> Result<Vec<Delta>, redb::Error> {
        let tx = db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let mut out = Vec::new();
        for row in table.range((id, from)..(id, to))? {
            let (k, v) = row?;
            let (admitted, refused) = v.value();
            out.push(Delta { bucket: k.value().1, admitted, refused });
        }
        Ok(out)
    };
    run().map_err(|e| format!("usage.redb: {e}"))
}
