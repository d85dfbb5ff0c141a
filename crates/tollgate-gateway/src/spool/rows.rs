//! The spool's rows (tables `files`, `items`, `dedup`, `meta`): in the state database, or
//! in memory for a simulation, under one contract.
//!
//! Reads and writes go through [`Rows`], so what a commit or a prune does to the rows (and
//! the tally it counts) is written once, in the spool, against [`RowsWrite`].
//!
//! Invariants:
//! - **A write is all or nothing, in both.** redb drops a transaction that is not committed;
//!   a [`MemoryWrite`] keeps every row it replaced or removed and puts them back when it is
//!   dropped without [`MemoryWrite::commit`], so a failed commit changes no row there either.
//! - **Memory rows hold the bytes the database would,** encoded and decoded by the same code
//!   (`serde_json`, [`crate::item::Item::from_stored`], [`TallyRow::from_stored`]).
//! - **Memory rows keep no `files` rows:** they belong to an ephemeral spool, which records no
//!   received file (see `Spool::records_files`); a write of one is refused.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};

use redb::{Database, ReadableDatabase, ReadableTable, Table, WriteTransaction};

use super::handle::DbHandle;
use super::{DEDUP, FILES, ITEMS, META, SpoolError, db_err, decode_tally};
use crate::tally::TallyRow;

/// Where the rows are.
pub(super) enum Rows {
    /// `gateway.redb` (or its reopened handle).
    Db(DbHandle),
    /// A simulation's rows; they die with the process.
    Memory(RwLock<MemoryRows>),
}

/// The tables of an ephemeral spool.
#[derive(Debug, Default)]
pub(super) struct MemoryRows {
    items: BTreeMap<Box<str>, Box<[u8]>>,
    dedup: HashMap<Box<str>, i64>,
    control: u64,
    instance: u64,
}

/// An id range of the `items` table.
pub(super) type IdRange<'a> = (Bound<&'a str>, Bound<&'a str>);

/// Reads one row's bytes; `Ok(false)` stops the scan.
pub(super) type Visit<'v> = dyn FnMut(&str, &[u8]) -> Result<bool, SpoolError> + 'v;

impl Rows {
    /// Empty memory rows with a random instance id.
    pub(super) fn memory() -> Self {
        let rows = MemoryRows { instance: rand::random(), ..Default::default() };
        Rows::Memory(RwLock::new(rows))
    }

    fn memory_write(rows: &RwLock<MemoryRows>) -> MemoryWrite<'_> {
        let rows = rows.write().unwrap_or_else(PoisonError::into_inner);
        MemoryWrite { rows, undo: Vec::new() }
    }

    /// Runs `write` in one write transaction (durable, in the database) and commits it when it
    /// returns `Ok`; an `Err` changes no row.
    pub(super) fn write<T>(
        &self,
        write: impl FnOnce(&mut dyn RowsWrite) -> Result<T, SpoolError>,
    ) -> Result<T, SpoolError> {
        match self {
            Rows::Db(db) => db.with(|db| {
                let tx = db.begin_write().map_err(db_err)?;
                let out = write(&mut DbWrite::new(&tx))?;
                tx.commit().map_err(db_err)?;
                Ok(out)
            }),
            Rows::Memory(rows) => {
                let mut tx = Self::memory_write(rows);
                let out = write(&mut tx)?;
                tx.commit();
                Ok(out)
            }
        }
    }

    /// Hands each `items` row in `range` to `visit`, in id order, until it answers false.
    pub(super) fn items_in(
        &self,
        range: IdRange<'_>,
        visit: &mut Visit<'_>,
    ) -> Result<(), SpoolError> {
        match self {
            Rows::Db(db) => db.with(|db| {
                let tx = db.begin_read().map_err(db_err)?;
                let t = tx.open_table(ITEMS).map_err(db_err)?;
                for row in t.range::<&str>(range).map_err(db_err)? {
                    let (k, v) = row.map_err(db_err)?;
                    if !visit(k.value(), v.value())? {
                        break;
                    }
                }
                Ok(())
            }),
            Rows::Memory(rows) => {
                let rows = rows.read().unwrap_or_else(PoisonError::into_inner);
                for (k, v) in rows.items.range::<str, _>(range) {
                    if !visit(k, v)? {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// Hands each `files` row to `visit`, in id order, until it answers false.
    pub(super) fn files(&self, visit: &mut Visit<'_>) -> Result<(), SpoolError> {
        let Rows::Db(db) = self else { return Ok(()) };
        db.with(|db| {
            let tx = db.begin_read().map_err(db_err)?;
            let t = tx.open_table(FILES).map_err(db_err)?;
            for row in t.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                if !visit(k.value(), v.value())? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The `items` row `id`, read by `read`.
    pub(super) fn item<T>(
        &self,
        id: &str,
        read: impl FnOnce(&[u8]) -> Result<T, SpoolError>,
    ) -> Result<Option<T>, SpoolError> {
        match self {
            Rows::Db(db) => db.with(|db| {
                let tx = db.begin_read().map_err(db_err)?;
                let t = tx.open_table(ITEMS).map_err(db_err)?;
                t.get(id).map_err(db_err)?.map(|v| read(v.value())).transpose()
            }),
            Rows::Memory(rows) => {
                let rows = rows.read().unwrap_or_else(PoisonError::into_inner);
                rows.items.get(id).map(|v| read(v)).transpose()
            }
        }
    }

    /// When the dedup key was first seen.
    pub(super) fn dedup(&self, key: &str) -> Result<Option<i64>, SpoolError> {
        match self {
            Rows::Db(db) => db.with(|db| {
                let tx = db.begin_read().map_err(db_err)?;
                let t = tx.open_table(DEDUP).map_err(db_err)?;
                Ok(t.get(key).map_err(db_err)?.map(|v| v.value()))
            }),
            Rows::Memory(rows) => {
                Ok(rows.read().unwrap_or_else(PoisonError::into_inner).dedup.get(key).copied())
            }
        }
    }

    /// The next control number (1..=999999999), kept in `meta`.
    pub(super) fn next_control_number(&self) -> Result<u64, SpoolError> {
        let next = |cur: u64| cur % 999_999_999 + 1;
        match self {
            Rows::Db(db) => db.with(|db| {
                let tx = db.begin_write().map_err(db_err)?;
                let n;
                {
                    let mut meta = tx.open_table(META).map_err(db_err)?;
                    let cur = meta.get("control").map_err(db_err)?.map(|v| v.value());
                    n = next(cur.unwrap_or(0));
                    meta.insert("control", n).map_err(db_err)?;
                }
                tx.commit().map_err(db_err)?;
                Ok(n)
            }),
            Rows::Memory(rows) => {
                let mut rows = rows.write().unwrap_or_else(PoisonError::into_inner);
                rows.control = next(rows.control);
                Ok(rows.control)
            }
        }
    }

    /// This data dir's instance id, kept in `meta` and made (random) on first use.
    pub(super) fn instance(&self) -> Result<u64, SpoolError> {
        match self {
            Rows::Db(db) => db.with(instance_of),
            Rows::Memory(rows) => Ok(rows.read().unwrap_or_else(PoisonError::into_inner).instance),
        }
    }

    /// Whether the database takes a write again (memory rows always do).
    pub(super) fn probe(&self) -> Result<(), SpoolError> {
        let Rows::Db(db) = self else { return Ok(()) };
        db.with(|db| db.begin_write().map_err(db_err)?.commit().map_err(db_err))
    }

    /// Runs `f` on the state database; memory rows have none to copy.
    pub(super) fn database<T>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, SpoolError>,
    ) -> Result<T, SpoolError> {
        match self {
            Rows::Db(db) => db.with(f),
            Rows::Memory(_) => {
                Err(SpoolError::Db("a simulation's spool is in memory: it has no database".into()))
            }
        }
    }
}

fn instance_of(db: &Database) -> Result<u64, SpoolError> {
    let tx = db.begin_write().map_err(db_err)?;
    let id = {
        let mut meta = tx.open_table(META).map_err(db_err)?;
        let stored = meta.get("instance").map_err(db_err)?.map(|v| v.value());
        match stored {
            Some(id) => id,
            None => {
                let id = rand::random::<u64>();
                meta.insert("instance", id).map_err(db_err)?;
                id
            }
        }
    };
    tx.commit().map_err(db_err)?;
    Ok(id)
}

/// The row changes of one write transaction.
pub(super) trait RowsWrite {
    /// Puts a `files` row.
    fn put_file(&mut self, id: &str, json: &[u8]) -> Result<(), SpoolError>;
    /// Removes a `files` row.
    fn remove_file(&mut self, id: &str) -> Result<(), SpoolError>;
    /// Puts an `items` row; returns the tally of the row it replaced.
    fn put_item(&mut self, id: &str, json: Vec<u8>) -> Result<Option<TallyRow>, SpoolError>;
    /// Removes an `items` row; returns its tally.
    fn remove_item(&mut self, id: &str) -> Result<Option<TallyRow>, SpoolError>;
    /// Puts a dedup key.
    fn put_dedup(&mut self, key: &str, at_ms: i64) -> Result<(), SpoolError>;
    /// Removes the dedup keys first seen before `before_ms`; returns how many.
    fn prune_dedup(&mut self, before_ms: i64) -> Result<usize, SpoolError>;
    /// Removes the `items` rows with ids below `end` that `pick` gives a tally for; returns
    /// those tallies.
    fn prune_items(
        &mut self,
        end: &str,
        pick: &dyn Fn(&[u8]) -> Option<TallyRow>,
    ) -> Result<Vec<TallyRow>, SpoolError>;
}

type DbTable<'t, V> = Table<'t, &'static str, V>;

/// A redb write transaction's tables, opened on first use.
struct DbWrite<'t> {
    tx: &'t WriteTransaction,
    files: Option<DbTable<'t, &'static [u8]>>,
    items: Option<DbTable<'t, &'static [u8]>>,
    dedup: Option<DbTable<'t, i64>>,
}

/// The table in `slot`, opened from `tx` if it is not yet.
fn opened<'s, 't, V: redb::Value + 'static>(
    slot: &'s mut Option<DbTable<'t, V>>,
    tx: &'t WriteTransaction,
    def: redb::TableDefinition<'static, &'static str, V>,
) -> Result<&'s mut DbTable<'t, V>, SpoolError> {
    if slot.is_none() {
        *slot = Some(tx.open_table(def).map_err(db_err)?);
    }
    slot.as_mut().ok_or_else(|| SpoolError::Db("table not open".into()))
}

impl<'t> DbWrite<'t> {
    fn new(tx: &'t WriteTransaction) -> Self {
        Self { tx, files: None, items: None, dedup: None }
    }
}

impl RowsWrite for DbWrite<'_> {
    fn put_file(&mut self, id: &str, json: &[u8]) -> Result<(), SpoolError> {
        opened(&mut self.files, self.tx, FILES)?.insert(id, json).map_err(db_err)?;
        Ok(())
    }

    fn remove_file(&mut self, id: &str) -> Result<(), SpoolError> {
        opened(&mut self.files, self.tx, FILES)?.remove(id).map_err(db_err)?;
        Ok(())
    }

    fn put_item(&mut self, id: &str, json: Vec<u8>) -> Result<Option<TallyRow>, SpoolError> {
        let items = opened(&mut self.items, self.tx, ITEMS)?;
        let old = items.insert(id, json.as_slice()).map_err(db_err)?;
        old.map(|old| decode_tally(id, old.value())).transpose()
    }

    fn remove_item(&mut self, id: &str) -> Result<Option<TallyRow>, SpoolError> {
        let items = opened(&mut self.items, self.tx, ITEMS)?;
        let old = items.remove(id).map_err(db_err)?;
        old.map(|old| decode_tally(id, old.value())).transpose()
    }

    fn put_dedup(&mut self, key: &str, at_ms: i64) -> Result<(), SpoolError> {
        opened(&mut self.dedup, self.tx, DEDUP)?.insert(key, at_ms).map_err(db_err)?;
        Ok(())
    }

    fn prune_dedup(&mut self, before_ms: i64) -> Result<usize, SpoolError> {
        let dedup = opened(&mut self.dedup, self.tx, DEDUP)?;
        Ok(dedup.extract_if(|_, at| at < before_ms).map_err(db_err)?.count())
    }

    fn prune_items(
        &mut self,
        end: &str,
        pick: &dyn Fn(&[u8]) -> Option<TallyRow>,
    ) -> Result<Vec<TallyRow>, SpoolError> {
        let items = opened(&mut self.items, self.tx, ITEMS)?;
        let mut gone = Vec::new();
        let picked = |_: &str, v: &[u8]| match pick(v) {
            Some(tally) => {
                gone.push(tally);
                true
            }
            None => false,
        };
        // A row is removed as it is iterated: every one is.
        for row in items.extract_from_if(..end, picked).map_err(db_err)? {
            row.map_err(db_err)?;
        }
        Ok(gone)
    }
}

/// A write to memory rows, held under their lock; undone when dropped without `commit`.
pub(super) struct MemoryWrite<'a> {
    rows: RwLockWriteGuard<'a, MemoryRows>,
    /// What each change replaced, newest last.
    undo: Vec<Undo>,
}

/// A row as it was before a change in a [`MemoryWrite`].
enum Undo {
    Item(Box<str>, Option<Box<[u8]>>),
    Dedup(Box<str>, Option<i64>),
}

impl MemoryWrite<'_> {
    /// Keeps the changes.
    pub(super) fn commit(mut self) {
        self.undo.clear();
    }

    /// Records what `id` held before a change, and decodes its tally.
    fn replaced(
        &mut self,
        id: &str,
        old: Option<Box<[u8]>>,
    ) -> Result<Option<TallyRow>, SpoolError> {
        let tally = old.as_deref().map(|v| decode_tally(id, v)).transpose();
        self.undo.push(Undo::Item(id.into(), old));
        tally
    }
}

impl Drop for MemoryWrite<'_> {
    fn drop(&mut self) {
        while let Some(undo) = self.undo.pop() {
            match undo {
                Undo::Item(id, Some(v)) => drop(self.rows.items.insert(id, v)),
                Undo::Item(id, None) => drop(self.rows.items.remove(&id)),
                Undo::Dedup(key, Some(at)) => drop(self.rows.dedup.insert(key, at)),
                Undo::Dedup(key, None) => drop(self.rows.dedup.remove(&key)),
            }
        }
    }
}

impl RowsWrite for MemoryWrite<'_> {
    fn put_file(&mut self, id: &str, _: &[u8]) -> Result<(), SpoolError> {
        self.remove_file(id)
    }

    fn remove_file(&mut self, id: &str) -> Result<(), SpoolError> {
        Err(SpoolError::Db(format!("files row {id}: an in-memory spool keeps no files rows")))
    }

    fn put_item(&mut self, id: &str, json: Vec<u8>) -> Result<Option<TallyRow>, SpoolError> {
        let old = self.rows.items.insert(id.into(), json.into_boxed_slice());
        self.replaced(id, old)
    }

    fn remove_item(&mut self, id: &str) -> Result<Option<TallyRow>, SpoolError> {
        let old = self.rows.items.remove(id);
        self.replaced(id, old)
    }

    fn put_dedup(&mut self, key: &str, at_ms: i64) -> Result<(), SpoolError> {
        let old = self.rows.dedup.insert(key.into(), at_ms);
        self.undo.push(Undo::Dedup(key.into(), old));
        Ok(())
    }

    fn prune_dedup(&mut self, before_ms: i64) -> Result<usize, SpoolError> {
        let before = self.undo.len();
        let undo = &mut self.undo;
        self.rows.dedup.retain(|key, at| {
            let keep = *at >= before_ms;
            if !keep {
                undo.push(Undo::Dedup(key.clone(), Some(*at)));
            }
            keep
        });
        Ok(self.undo.len() - before)
    }

    fn prune_items(
        &mut self,
        end: &str,
        pick: &dyn Fn(&[u8]) -> Option<TallyRow>,
    ) -> Result<Vec<TallyRow>, SpoolError> {
        let below = (Bound::Unbounded, Bound::Excluded(end));
        let picked: Vec<(Box<str>, TallyRow)> = (self.rows.items.range::<str, _>(below))
            .filter_map(|(k, v)| pick(v).map(|t| (k.clone(), t)))
            .collect();
        let mut gone = Vec::with_capacity(picked.len());
        for (id, tally) in picked {
            let old = self.rows.items.remove(&id);
            self.undo.push(Undo::Item(id, old));
            gone.push(tally);
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory write dropped without `commit` (a commit that failed half way) puts back
    /// every row it put, replaced, removed or pruned (dedup keys and items).
    #[test]
    fn an_uncommitted_memory_write_changes_no_row() {
        let rows = Rows::memory();
        let Rows::Memory(lock) = &rows else { unreachable!() };
        let row = |state: &str| {
            format!(
                r#"{{"partner":"P","route":null,"metering_id":null,"state":"{state}","weight":1}}"#
            )
            .into_bytes()
        };
        rows.write(|w| {
            w.put_item("a", row("held"))?;
            w.put_item("b", row("delivered"))?;
            w.put_dedup("k", 5)
        })
        .unwrap();
        let snapshot = || {
            let rows = lock.read().unwrap();
            let dedup: BTreeMap<_, _> = rows.dedup.clone().into_iter().collect();
            (rows.items.clone(), dedup, rows.control)
        };
        let before = snapshot();
        let failed: Result<(), SpoolError> = rows.write(|w| {
            assert!(w.put_item("a", row("delivered"))?.is_some());
            assert!(w.put_item("c", row("held"))?.is_none());
            assert!(w.remove_item("b")?.is_some());
            assert_eq!(w.prune_dedup(10)?, 1);
            let pruned = w.prune_items("b", &|v| TallyRow::from_stored(v).ok())?;
            assert_eq!(pruned.len(), 1, "the rows below b: a");
            w.put_dedup("j", 7)?;
            // A row that does not decode fails the write after all of the above.
            w.put_item("a", b"not json".to_vec())?;
            w.put_item("a", row("held")).map(drop)
        });
        assert!(matches!(failed, Err(SpoolError::Corrupt { .. })), "{failed:?}");
        assert_eq!(snapshot(), before);
    }
}
