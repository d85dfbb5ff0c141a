//! The spool's handle on its state database, reopened after a failed write.
//!
//! redb refuses every operation on a handle that met an I/O error (a full disk, say) until it
//! is closed. So a failed operation drops the handle, and the next one reopens the file
//! (redb's recovery runs on that open), which is how the gateway recovers from a full disk
//! without a restart.
//!
//! Invariant: every operation runs under the read lock, so the handle is dropped and reopened
//! (under the write lock) only while no transaction is open on it; a failure drops only the
//! handle it happened on (`generation`), never one reopened since.

use std::path::PathBuf;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use redb::Database;

use super::SpoolError;

/// The open state database, or none after a failed operation (reopened on the next use).
pub(super) struct DbHandle {
    slot: RwLock<Slot>,
    /// The file to reopen.
    path: PathBuf,
}

struct Slot {
    db: Option<Database>,
    /// Bumped by each reopen.
    generation: u64,
}

impl DbHandle {
    /// A handle on `db`, opened from `path`.
    pub(super) fn new(db: Database, path: PathBuf) -> Self {
        Self { slot: RwLock::new(Slot { db: Some(db), generation: 0 }), path }
    }

    fn read(&self) -> RwLockReadGuard<'_, Slot> {
        self.slot.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Slot> {
        self.slot.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the database, reopening it first when an earlier operation failed. A
    /// database error from `f` drops the handle (see the module docs).
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, SpoolError>,
    ) -> Result<T, SpoolError> {
        if self.read().db.is_none() {
            self.reopen()?;
        }
        let slot = self.read();
        let Some(db) = slot.db.as_ref() else {
            return Err(SpoolError::Db("the state database is being reopened; retry".into()));
        };
        let generation = slot.generation;
        let result = f(db);
        drop(slot);
        if matches!(result, Err(SpoolError::Db(_))) {
            let mut slot = self.write();
            if slot.generation == generation && slot.db.is_some() {
                slot.db = None;
                tracing::debug!("state database handle dropped after a failed operation");
            }
        }
        result
    }

    /// Opens the file again unless another caller already did.
    fn reopen(&self) -> Result<(), SpoolError> {
        let path = &self.path;
        let mut slot = self.write();
        if slot.db.is_some() {
            return Ok(());
        }
        // `open`, not `create`: a file that vanished is not replaced by an empty one.
        let db = redb::Builder::new()
            .open(path)
            .map_err(|e| SpoolError::Db(format!("reopening {}: {e}", path.display())))?;
        slot.db = Some(db);
        slot.generation += 1;
        tracing::info!(file = %path.display(), "state database reopened after a failed write");
        Ok(())
    }
}
