//! A consistent copy of the spool while the gateway runs: the state database as one read
//! transaction sees it, and the spool files that state still needs.
//!
//! Invariant: **every spool file the copied state refers to is in the copy.** Spool files are
//! written before the rows that refer to them and never change afterwards; they are deleted
//! only after the commit that stops referring to them (see the module invariants of `spool`).
//! While a backup runs, deletions wait in `deferred` ([`Spool::remove_file`]), so no file the
//! snapshot refers to can disappear before it is copied; they are done when the copy ends.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use redb::ReadableDatabase;
use tollgate_quota::store::snapshot::{copy_table, create_copy};

use super::{DEDUP, FILES, ITEMS, META, Spool, SpoolError, db_err, io_err};
use crate::item::State;

/// What a backup of the spool wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackupReport {
    /// Items in the copied state.
    pub items: u64,
    /// Spool files copied.
    pub spool_files: u64,
}

impl Spool {
    /// Deletes a spool file whose items are all delivered or purged (see the module
    /// invariants); while a backup runs, the deletion waits until it ends.
    pub fn remove_file(&self, file: &str) {
        {
            let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(list) = deferred.as_mut() {
                list.push(file.to_owned());
                return;
            }
        }
        if let Ok(Some(len)) = self.delete_file(file) {
            self.usage.remove(len);
        }
    }

    /// Writes `dir/gateway.redb` and `dir/spool/` (`dir` exists; neither of them may). Blocks:
    /// call it from `spawn_blocking`. One backup at a time.
    pub fn backup_to(&self, dir: &Path) -> Result<BackupReport, SpoolError> {
        {
            let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            if deferred.is_some() {
                return Err(SpoolError::Db("a backup of the spool is already running".into()));
            }
            *deferred = Some(Vec::new());
        }
        let result = self.copy_to(dir);
        let waiting = self.deferred.lock().unwrap_or_else(|p| p.into_inner()).take();
        for file in waiting.unwrap_or_default() {
            self.remove_file(&file);
        }
        result
    }

    fn copy_to(&self, dir: &Path) -> Result<BackupReport, SpoolError> {
        self.rows.database(|db| self.copy_snapshot(db, dir))
    }

    /// [`Spool::copy_to`] from one read transaction of `db`.
    fn copy_snapshot(&self, db: &redb::Database, dir: &Path) -> Result<BackupReport, SpoolError> {
        let snapshot = db.begin_read().map_err(db_err)?;
        let dest = dir.join(crate::statedb::STATE_DB);
        let copy = create_copy(&dest).map_err(SpoolError::Db)?;
        copy_table(&snapshot, &copy, FILES).map_err(db_err)?;
        let items = copy_table(&snapshot, &copy, ITEMS).map_err(db_err)?;
        copy_table(&snapshot, &copy, DEDUP).map_err(db_err)?;
        copy_table(&snapshot, &copy, META).map_err(db_err)?;
        drop(copy);

        // The files the snapshot still needs, as `sort_unreferenced` counts them at open.
        let mut needed = BTreeSet::new();
        let files = snapshot.open_table(FILES).map_err(db_err)?;
        for row in redb::ReadableTable::iter(&files).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            needed.insert(super::decode::<super::FileRecord>(k.value(), v.value())?.spool);
        }
        let table = snapshot.open_table(ITEMS).map_err(db_err)?;
        for row in redb::ReadableTable::iter(&table).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let item = super::decode_item(k.value(), v.value())?;
            if item.state != State::Delivered {
                needed.insert(item.spool_file);
            }
        }
        let to = dir.join("spool");
        fs::create_dir(&to).map_err(io_err(&to))?;
        for file in &needed {
            self.copy_file(file, &to.join(format!("{file}.edi")))?;
        }
        super::sync_dir(&to)?;
        super::sync_dir(dir)?;
        Ok(BackupReport { items, spool_files: needed.len() as u64 })
    }
}
