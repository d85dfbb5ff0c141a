//! A consistent copy of the counters file while the store runs: flush, then copy a read
//! transaction's snapshot (see [`crate::store::snapshot`]).

use std::path::Path;

use redb::ReadableDatabase;

use super::seen::SEEN;
use super::{COUNTERS, EmbeddedStore, lock};
use crate::store::snapshot::{copy_table, create_copy};
use crate::store::{Store, StoreError};

impl EmbeddedStore {
    /// Writes a copy of the counters file to `dest` (a new file), holding every increment
    /// answered before the call: the pending ones are committed first, then a snapshot of the
    /// file is copied. Checks go on meanwhile; the ones after the snapshot are not in the copy.
    pub async fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        self.flush().await?;
        let snapshot = {
            let db = lock(&self.shared.db);
            let Some(db) = db.as_ref() else {
                return Err(StoreError::Io(format!(
                    "{} is not open (the last write failed)",
                    self.shared.path.display()
                )));
            };
            db.begin_read().map_err(|e| StoreError::Io(format!("reading the counters: {e}")))?
        };
        let dest = dest.to_path_buf();
        let copied = tokio::task::spawn_blocking(move || -> Result<(), String> {
            let copy = create_copy(&dest)?;
            let shown = dest.display();
            copy_table(&snapshot, &copy, COUNTERS).map_err(|e| format!("writing {shown}: {e}"))?;
            copy_table(&snapshot, &copy, SEEN).map_err(|e| format!("writing {shown}: {e}"))?;
            Ok(())
        })
        .await;
        match copied {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Io(e)),
            Err(e) => Err(StoreError::Io(format!("backup task failed: {e}"))),
        }
    }
}
