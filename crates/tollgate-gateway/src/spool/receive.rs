//! Receiving: new bytes made durable, the received files with their rows in one step and the
//! parts of a split interchange, so that no file is left on disk that no row names.

use std::sync::PoisonError;

use super::*;

impl Spool {
    /// Makes `files` durable and records them as received, in one database transaction (an
    /// ephemeral spool keeps only their bytes). Returns the records in input order. After this
    /// returns, the caller may remove the inbound files or answer 202.
    pub fn receive(&self, files: &[(&[u8], String)]) -> Result<Vec<FileRecord>, SpoolError> {
        let kept = self.receive_unchanged(files, |_| true)?;
        Ok(kept.into_iter().map(|(_, r)| r).collect())
    }

    /// [`Spool::receive`], keeping only the files for which `unchanged(i)` still holds once
    /// the bytes are durable (a landing file written to meanwhile is taken again later): the
    /// others get no row, and when none is kept the spool file goes too. Returns the records
    /// kept, each with its index in `files`.
    pub fn receive_unchanged(
        &self,
        files: &[(&[u8], String)],
        unchanged: impl Fn(usize) -> bool,
    ) -> Result<Vec<(usize, FileRecord)>, SpoolError> {
        let now = self.now_ms();
        // One spool file per batch: one fsync makes every file of the batch durable.
        let spool_id = self.new_file_id();
        let mut records = Vec::with_capacity(files.len());
        let mut offset = 0u64;
        for (bytes, origin) in files {
            let end = offset + bytes.len() as u64;
            records.push(FileRecord {
                id: self.new_file_id(),
                origin: origin.clone(),
                received_at: now,
                spool: spool_id.clone(),
                start: offset,
                end,
                sender: String::new(),
                parsed: None,
            });
            offset = end;
        }
        let mut kept = Vec::new();
        let written = self.write_file(&spool_id, files.iter().map(|(b, _)| *b)).and_then(|()| {
            kept = records.into_iter().enumerate().filter(|(i, _)| unchanged(*i)).collect();
            if !self.records_files() || kept.is_empty() {
                return Ok(());
            }
            let _order = self.commit_order.lock().unwrap_or_else(PoisonError::into_inner);
            self.rows.write(|rows| {
                for (_, r) in &kept {
                    rows.put_file(&r.id, &serde_json::to_vec(r).map_err(db_err)?)?;
                }
                Ok(())
            })
        });
        match written {
            Ok(()) => {
                self.usage.add(offset);
                self.health.succeeded();
                if kept.is_empty() {
                    // No row names it (as a backup running now expects of a removal).
                    self.remove_file(&spool_id);
                }
                Ok(kept)
            }
            Err(e) => Err(self.discard(&spool_id, e)),
        }
    }

    /// Writes the two parts of a split interchange durably, both or neither: when the second
    /// fails the first is taken away again, so no file is left that no row names.
    pub fn store_parts(&self, first: &[u8], second: &[u8]) -> Result<(String, String), SpoolError> {
        let a = self.store_part(first)?;
        match self.store_part(second) {
            Ok(b) => Ok((a, b)),
            Err(e) => {
                self.remove_file(&a);
                Err(e)
            }
        }
    }

    /// Writes a new spool file (a part of a split interchange) durably; returns its id.
    pub fn store_part(&self, bytes: &[u8]) -> Result<String, SpoolError> {
        let id = self.new_file_id();
        #[cfg(test)]
        if hooks::fails_part(&self.dir) {
            return Err(self.discard(&id, SpoolError::Db("a write made to fail by a test".into())));
        }
        match self.write_file(&id, [bytes]) {
            Ok(()) => {
                self.usage.add(bytes.len() as u64);
                self.health.succeeded();
                Ok(id)
            }
            Err(e) => Err(self.discard(&id, e)),
        }
    }
}
