//! The ledger of an embedded store: two tables in `<data>/usage.redb`, beside the counters
//! file, both keyed `(metering id, bucket index)`: `usage` holds `(admitted, refused)` and
//! `usage_withheld` holds `(held, duplicate)`. A bucket has a row in a table only when it has
//! units of that table's kinds.
//!
//! Invariants:
//! - **Files written before `usage_withheld` open as they are.** The old table keeps its
//!   value type; the new one is created, empty, when the file is opened.
//! - **One write transaction per flush**, committed off the runtime (`spawn_blocking`); a
//!   failed one (a full disk) changes nothing, and the caller retries its batch.
//! - **Bounded rows.** A write drops the rows older than the retention of the ids its batch
//!   lists for trimming (each id it writes, once per retention start: the aggregate keeps
//!   track), and every row of the ids the aggregate stopped tracking, in both tables; so each
//!   table holds at most `max_ids` ids × 2,016 buckets (the ids of both tables are listed at
//!   start-up, so the cap counts every id with rows).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tollgate_quota::MeteringId;
use tollgate_quota::store::OnCorrupt;
use tollgate_quota::store::corrupt;

use crate::usage::aggregate::{Batch, Delta};

/// A table of the file: `(id, bucket) → (units, units)`.
type Table = TableDefinition<'static, (&'static str, i64), (u64, u64)>;

/// The decided units: `(id, bucket) → (admitted, refused)`.
const TABLE: Table = TableDefinition::new("usage");

/// The withheld units: `(id, bucket) → (held, duplicate)`.
const WITHHELD: Table = TableDefinition::new("usage_withheld");

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

    /// Copies every row of both tables into a new `usage.redb` in `dir` (a backup), from one read
    /// transaction: a consistent snapshot while flushes go on.
    pub async fn backup_to(&self, dir: &Path) -> Result<(), String> {
        let db = Arc::clone(&self.db);
        let path = dir.join(FILE_NAME);
        tokio::task::spawn_blocking(move || {
            let shown = path.display().to_string();
            let copy = || -> Result<(), redb::Error> {
                let from = db.begin_read()?;
                let to = Database::create(&path)?;
                let tx = to.begin_write()?;
                for def in [TABLE, WITHHELD] {
                    let rows = from.open_table(def)?;
                    let mut table = tx.open_table(def)?;
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
        batch: Batch,
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

/// Opens `path` and lists its ids; a panic inside redb (some damaged pages cause one) is an
/// error naming the file, so a corrupt file is refused or moved aside like any other.
fn open_and_list(path: &PathBuf) -> Result<(Database, Vec<(MeteringId, i64)>), String> {
    std::panic::catch_unwind(|| open_and_list_unguarded(path)).unwrap_or_else(|panic| {
        let what = corrupt::panic_message(&*panic);
        Err(format!("{}: redb failed while reading it: {what}", path.display()))
    })
}

fn open_and_list_unguarded(path: &PathBuf) -> Result<(Database, Vec<(MeteringId, i64)>), String> {
    let shown = path.display();
    // A bounded page cache: the ledger is written once a second and read per query, so
    // redb's default (up to 1 GiB) would only hold pages nobody reads again.
    let db = Database::builder()
        .set_cache_size(PAGE_CACHE_BYTES)
        .create(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    // Creates the tables a file lacks: a new file, or `usage_withheld` in an older one.
    let tx = db.begin_write().map_err(|e| format!("{shown}: {e}"))?;
    tx.open_table(TABLE).map_err(|e| format!("{shown}: {e}"))?;
    tx.open_table(WITHHELD).map_err(|e| format!("{shown}: {e}"))?;
    tx.commit().map_err(|e| format!("{shown}: {e}"))?;
    let ids = list(&db).map_err(|e| format!("{shown}: {e}"))?;
    Ok((db, ids))
}

/// Every id with rows in either table, with its newest bucket.
fn list(db: &Database) -> Result<Vec<(MeteringId, i64)>, redb::Error> {
    let tx = db.begin_read()?;
    let mut newest = std::collections::BTreeMap::<String, i64>::new();
    for def in [TABLE, WITHHELD] {
        for (id, last) in newest_per_id(&tx.open_table(def)?)? {
            let entry = newest.entry(id).or_insert(last);
            *entry = (*entry).max(last);
        }
    }
    Ok(newest
        .into_iter()
        .filter_map(|(id, last)| Some((MeteringId::new(&id).ok()?, last)))
        .collect())
}

/// Every id in `table` with its newest bucket: one seek per id, not a scan of every row.
fn newest_per_id(
    table: &impl ReadableTable<(&'static str, i64), (u64, u64)>,
) -> Result<Vec<(String, i64)>, redb::Error> {
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
        if let Some(Ok((k, _))) = newest {
            ids.push((id.clone(), k.value().1));
        }
        next = Some(id);
    }
    Ok(ids)
}

fn write(db: &Database, batch: &Batch, cutoff: i64, gone: &[MeteringId]) -> Result<(), String> {
    let run = || -> Result<(), redb::Error> {
        let tx = db.begin_write()?;
        {
            let mut decided = tx.open_table(TABLE)?;
            let mut withheld = tx.open_table(WITHHELD)?;
            // The untracked ids' rows go first: an id tracked again since (a decision after it
            // was pruned, or after start-up listed only old rows of it) may have deltas in this
            // very batch, which must not go with them.
            for table in [&mut decided, &mut withheld] {
                for id in gone {
                    let id = id.as_str();
                    table.retain_in((id, i64::MIN)..=(id, i64::MAX), |_, _| false)?;
                }
            }
            for (id, d) in &batch.deltas {
                let key = (id.as_str(), d.bucket);
                if d.admitted > 0 || d.refused > 0 {
                    let (a, r) = decided.get(key)?.map_or((0, 0), |v| v.value());
                    let sum = (a.saturating_add(d.admitted), r.saturating_add(d.refused));
                    decided.insert(key, sum)?;
                }
                if d.held > 0 || d.duplicate > 0 {
                    let (h, u) = withheld.get(key)?.map_or((0, 0), |v| v.value());
                    let sum = (h.saturating_add(d.held), u.saturating_add(d.duplicate));
                    withheld.insert(key, sum)?;
                }
            }
            for table in [&mut decided, &mut withheld] {
                for id in &batch.trim {
                    let id = id.as_str();
                    table.retain_in((id, i64::MIN)..(id, cutoff), |_, _| false)?;
                }
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
        let mut rows = std::collections::BTreeMap::<i64, Delta>::new();
        for row in tx.open_table(TABLE)?.range((id, from)..(id, to))? {
            let (k, v) = row?;
            let bucket = k.value().1;
            let (admitted, refused) = v.value();
            rows.insert(bucket, Delta { admitted, refused, ..Delta::empty(bucket) });
        }
        for row in tx.open_table(WITHHELD)?.range((id, from)..(id, to))? {
            let (k, v) = row?;
            let bucket = k.value().1;
            let (held, duplicate) = v.value();
            rows.entry(bucket).or_insert_with(|| Delta::empty(bucket)).add(&Delta {
                held,
                duplicate,
                ..Delta::empty(bucket)
            });
        }
        Ok(rows.into_values().collect())
    };
    run().map_err(|e| format!("usage.redb: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MeteringId {
        MeteringId::new(s).unwrap()
    }

    fn units(bucket: i64, admitted: u64, refused: u64, held: u64, duplicate: u64) -> Delta {
        Delta { bucket, admitted, refused, held, duplicate }
    }

    /// A batch of `deltas` that trims the ids in `trim`.
    fn batch(deltas: Vec<(MeteringId, Delta)>, trim: &[&str]) -> Batch {
        Batch { deltas, trim: trim.iter().map(|s| id(s)).collect() }
    }

    #[tokio::test]
    async fn held_and_duplicate_units_survive_a_reopen_and_their_ids_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let (l, ids) = FileLedger::open(dir.path(), OnCorrupt::Refuse).unwrap();
        assert!(ids.is_empty());
        let first = vec![
            (id("S:A"), units(100, 5, 1, 0, 0)),
            (id("S:A"), units(101, 0, 0, 40, 2)),
            // An id with withheld units only.
            (id("S:B"), units(103, 0, 0, 0, 7)),
        ];
        l.write(batch(first, &["S:A", "S:B"]), 0, Vec::new()).await.unwrap();
        l.write(batch(vec![(id("S:A"), units(101, 3, 0, 9, 0))], &[]), 0, Vec::new())
            .await
            .unwrap();
        drop(l);

        let (l, mut ids) = FileLedger::open(dir.path(), OnCorrupt::Refuse).unwrap();
        ids.sort();
        assert_eq!(ids, [(id("S:A"), 101), (id("S:B"), 103)]);
        assert_eq!(
            l.read(id("S:A"), 0, 200).await.unwrap(),
            [units(100, 5, 1, 0, 0), units(101, 3, 0, 49, 2)]
        );
        assert_eq!(l.read(id("S:B"), 0, 200).await.unwrap(), [units(103, 0, 0, 0, 7)]);
        assert_eq!(l.read(id("S:A"), 101, 102).await.unwrap(), [units(101, 3, 0, 49, 2)]);

        // Rows past the retention stay until a batch lists their id for trimming.
        l.write(batch(vec![(id("S:A"), units(102, 1, 0, 0, 0))], &[]), 101, Vec::new())
            .await
            .unwrap();
        assert_eq!(l.read(id("S:A"), 0, 101).await.unwrap(), [units(100, 5, 1, 0, 0)]);
        // The retention and untracked ids drop the rows of both tables.
        l.write(batch(Vec::new(), &["S:A"]), 101, vec![id("S:B")]).await.unwrap();
        assert_eq!(
            l.read(id("S:A"), 0, 200).await.unwrap(),
            [units(101, 3, 0, 49, 2), units(102, 1, 0, 0, 0)]
        );
        assert!(l.read(id("S:B"), 0, 200).await.unwrap().is_empty());

        // A backup copies both tables.
        let copy = tempfile::tempdir().unwrap();
        l.backup_to(copy.path()).await.unwrap();
        let (b, _) = FileLedger::open(copy.path(), OnCorrupt::Refuse).unwrap();
        assert_eq!(
            b.read(id("S:A"), 0, 200).await.unwrap(),
            l.read(id("S:A"), 0, 200).await.unwrap()
        );
    }

    #[tokio::test]
    async fn an_id_tracked_again_keeps_the_deltas_of_the_batch_that_drops_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (l, _) = FileLedger::open(dir.path(), OnCorrupt::Refuse).unwrap();
        l.write(batch(vec![(id("S:A"), units(10, 4, 0, 1, 0))], &[]), 0, Vec::new()).await.unwrap();
        // Untracked (its rows are to go) and tracked again by a decision before the flush.
        let again = batch(vec![(id("S:A"), units(500, 7, 0, 2, 0))], &[]);
        l.write(again, 0, vec![id("S:A")]).await.unwrap();
        assert_eq!(l.read(id("S:A"), 0, 1000).await.unwrap(), [units(500, 7, 0, 2, 0)]);
    }

    /// A key that is not UTF-8 makes redb panic while listing the ids: the file is refused,
    /// or moved aside on request, and the process goes on.
    #[tokio::test]
    async fn a_key_that_is_not_utf8_is_refused_or_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (l, _) = FileLedger::open(dir.path(), OnCorrupt::Refuse).unwrap();
            let rows = vec![(id("S:Damaged"), units(10, 4, 0, 0, 0))];
            l.write(batch(rows, &[]), 0, Vec::new()).await.unwrap();
        }
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.windows(9).position(|w| w == b"S:Damaged").unwrap();
        bytes[at + 2] = 0xFF;
        std::fs::write(&path, bytes).unwrap();
        let refused = FileLedger::open(dir.path(), OnCorrupt::Refuse).err().unwrap();
        assert!(refused.contains("redb failed while reading it"), "{refused}");
        assert!(refused.contains("--move-aside-corrupt"), "{refused}");
        let (l, ids) = FileLedger::open(dir.path(), OnCorrupt::MoveAside).unwrap();
        assert!(ids.is_empty());
        assert!(l.read(id("S:Damaged"), 0, 100).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_file_written_before_the_withheld_table_opens_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        {
            // What an older server wrote: the `usage` table alone.
            let db = Database::create(dir.path().join(FILE_NAME)).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(TABLE).unwrap().insert(("S:Old", 100), (8, 2)).unwrap();
            tx.commit().unwrap();
        }
        let (l, ids) = FileLedger::open(dir.path(), OnCorrupt::Refuse).unwrap();
        assert_eq!(ids, [(id("S:Old"), 100)]);
        assert_eq!(l.read(id("S:Old"), 0, 200).await.unwrap(), [units(100, 8, 2, 0, 0)]);
        l.write(batch(vec![(id("S:Old"), units(100, 0, 0, 6, 1))], &["S:Old"]), 0, Vec::new())
            .await
            .unwrap();
        assert_eq!(l.read(id("S:Old"), 0, 200).await.unwrap(), [units(100, 8, 2, 6, 1)]);
    }
}
