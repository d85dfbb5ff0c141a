//! Spool files' bytes: in the data dir's `spool/` directory, or, for an ephemeral spool (a
//! simulation), in this process's memory, where a file costs no system call. Both keep the
//! same contract: a file is written whole before its row is committed, read by range, and
//! deleted once (see the module invariants in `spool`).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use super::{Spool, SpoolError, io_err, sync_dir};

/// An ephemeral spool's files, by file id.
#[derive(Default)]
pub(super) struct MemoryFiles(Mutex<HashMap<String, Arc<[u8]>>>);

impl MemoryFiles {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[u8]>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bytes of `file`, if it exists.
    pub(super) fn get(&self, file: &str) -> Option<Arc<[u8]>> {
        self.map().get(file).cloned()
    }
}

impl Spool {
    /// Writes `parts` one after the other into the new spool file `file`, synced (file and
    /// directory) unless fsync is off. On an error the caller removes it ([`Spool::discard`]).
    pub(super) fn write_file<'a>(
        &self,
        file: &str,
        parts: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), SpoolError> {
        if let Some(memory) = &self.memory {
            let bytes: Vec<u8> = parts.into_iter().flatten().copied().collect();
            memory.map().insert(file.to_owned(), bytes.into());
            return Ok(());
        }
        let path = self.path(file);
        // A new file only: an id issued twice fails this write (taken again later under a new
        // id) rather than overwrite bytes already accepted.
        let mut f = File::create_new(&path).map_err(io_err(&path))?;
        for bytes in parts {
            f.write_all(bytes).map_err(io_err(&path))?;
        }
        if self.fsync {
            f.sync_all().map_err(io_err(&path))?;
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Removes what a failed write of `file` left (nothing refers to it) and reports the
    /// failure; returns `error` for the caller.
    pub(super) fn discard(&self, file: &str, error: SpoolError) -> SpoolError {
        // A file found already there is another write's: this one made nothing to remove.
        let theirs = matches!(&error, SpoolError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::AlreadyExists);
        if theirs {
            self.health.failed(&error);
            return error;
        }
        if let Err(e) = self.delete_file(file) {
            tracing::error!(file, error = %e, "cannot remove the spool file of a failed write");
        }
        self.health.failed(&error);
        error
    }

    /// Deletes `file`; `Ok(Some(len))` when it existed.
    pub(super) fn delete_file(&self, file: &str) -> io::Result<Option<u64>> {
        if let Some(memory) = &self.memory {
            return Ok(memory.map().remove(file).map(|b| b.len() as u64));
        }
        let path = self.path(file);
        let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        match fs::remove_file(&path) {
            Ok(()) => Ok(Some(len)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `start..end` of a spool file.
    pub fn read(&self, file: &str, start: u64, end: u64) -> Result<Vec<u8>, SpoolError> {
        let path = self.path(file);
        let len = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        let range_err = |e: io::Error| SpoolError::Io {
            path: path.display().to_string(),
            source: io::Error::new(e.kind(), format!("range {start}..{end}: {e}")),
        };
        if let Some(memory) = &self.memory {
            let bytes = memory.get(file).ok_or_else(|| {
                range_err(io::Error::new(io::ErrorKind::NotFound, "no such spool file"))
            })?;
            let from = usize::try_from(start).unwrap_or(usize::MAX);
            return bytes.get(from..from.saturating_add(len)).map(<[u8]>::to_vec).ok_or_else(
                || range_err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end")),
            );
        }
        let mut buf = vec![0u8; len];
        let mut f = File::open(&path).map_err(io_err(&path))?;
        f.seek(SeekFrom::Start(start)).map_err(io_err(&path))?;
        f.read_exact(&mut buf).map_err(range_err)?;
        Ok(buf)
    }

    /// Copies `file` to `dest`, synced.
    pub(super) fn copy_file(&self, file: &str, dest: &Path) -> Result<(), SpoolError> {
        let from = self.path(file);
        if let Some(memory) = &self.memory {
            let gone = || io_err(&from)(io::Error::new(io::ErrorKind::NotFound, "no such file"));
            fs::write(dest, memory.get(file).ok_or_else(gone)?).map_err(io_err(dest))?;
        } else {
            fs::copy(&from, dest).map_err(io_err(&from))?;
        }
        File::open(dest).and_then(|f| f.sync_all()).map_err(io_err(dest))
    }
}
