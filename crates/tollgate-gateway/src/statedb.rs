//! The spool's state database (`gateway.redb`) at start-up: opened only when it can be
//! trusted, and the spool files it does not account for kept, never deleted.
//!
//! Invariants, and the code that keeps them:
//! - **Unknown state deletes nothing.** An empty `gateway.redb`, a missing one next to spool
//!   files, a file redb cannot open, or one whose pages fail their checksums (checked on every open)
//!   is refused with [`SpoolError::StateDb`], which names the file and what to do. A panic
//!   inside redb while opening is caught and refused the same way.
//! - **A crash is not corruption.** redb's own recovery of a file left by a kill -9 runs as
//!   part of the open; only what it cannot repair is refused.
//! - **Moving aside is explicit.** With [`SpoolOptions::move_aside_corrupt`] a refused file is
//!   renamed `gateway.redb.corrupt-<unix ms>` and a new, empty one is created; the spool files
//!   it held the state of are then moved to `orphaned/` by [`Spool::open`](crate::spool::Spool::open)
//!   (kept for an operator, never delivered again by themselves).

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use redb::{Builder, Database, DatabaseError, StorageError};

use crate::spool::{SpoolError, sync_dir};

/// How the spool opens its state database, and how it writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpoolOptions {
    /// Move a corrupt, truncated or missing-while-needed `gateway.redb` aside and start with an
    /// empty one (spool files are then kept in `orphaned/`), instead of refusing to start.
    pub move_aside_corrupt: bool,
    /// A simulation's spool: its rows (in maps, holding the bytes the state database would)
    /// and its spool files live in memory, and no fsync is made (directories, `dir:`
    /// deliveries). Nothing survives the process; only for a data dir that is thrown away.
    pub ephemeral: bool,
}

/// The file name of the state database in the data dir.
pub(crate) const STATE_DB: &str = "gateway.redb";
/// Where spool files no state accounts for are kept, in the data dir.
pub(crate) const ORPHANED: &str = "orphaned";

/// Why an open failed: the file cannot be trusted, or something else (locked, permissions).
enum Failure {
    Untrusted(String),
    Other(SpoolError),
}

/// Opens `data_dir/gateway.redb` with `init` run on it, refusing (or moving aside) a file whose
/// state cannot be trusted. `spool_files` is the number of files in `spool/`.
pub(crate) fn open(
    data_dir: &Path,
    now_ms: i64,
    spool_files: usize,
    options: SpoolOptions,
    init: &dyn Fn(&Database) -> Result<(), String>,
) -> Result<Database, SpoolError> {
    let path = data_dir.join(STATE_DB);
    let len = match fs::metadata(&path) {
        Ok(m) => Some(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(SpoolError::Io { path: path.display().to_string(), source: e }),
    };
    // redb would take an empty file for a new database; it is a truncated one (redb writes
    // its header as soon as it creates a file), so its dedup keys and delivered history are
    // gone even when no spool file is left. A missing file is a first start, unless spool
    // files show that there was state.
    let problem = match len {
        Some(0) => Some(format!("is empty (0 bytes); spool/ holds {spool_files} file(s)")),
        None if spool_files > 0 => {
            Some(format!("is missing, but spool/ holds {spool_files} file(s)"))
        }
        _ => None,
    };
    if let Some(problem) = problem {
        refuse_or_move_aside(data_dir, &path, problem, options, now_ms)?;
    }
    match try_open(&path, init) {
        Ok(db) => Ok(db),
        Err(Failure::Other(e)) => Err(e),
        Err(Failure::Untrusted(problem)) => {
            refuse_or_move_aside(data_dir, &path, problem, options, now_ms)?;
            try_open(&path, init).map_err(|f| match f {
                Failure::Other(e) => e,
                Failure::Untrusted(p) => SpoolError::Db(format!("{}: {p}", path.display())),
            })
        }
    }
}

/// Opens with a full integrity check and runs `init`; a panic inside redb is caught.
fn try_open(
    path: &Path,
    init: &dyn Fn(&Database) -> Result<(), String>,
) -> Result<Database, Failure> {
    let run = catch_unwind(AssertUnwindSafe(|| {
        let db = Builder::new()
            .set_check_integrity_on_open(true)
            .create(path)
            .map_err(|e| classify(path, e))?;
        init(&db).map_err(|e| Failure::Untrusted(format!("cannot be read: {e}")))?;
        Ok(db)
    }));
    match run {
        Ok(r) => r,
        Err(panic) => {
            let what = tollgate_quota::store::corrupt::panic_message(&*panic);
            Err(Failure::Untrusted(format!("is corrupt (redb failed reading it: {what})")))
        }
    }
}

/// A file that is locked or cannot be read for lack of permission is not corrupt: that error
/// is returned as is. Everything else redb refuses (bad magic, short file, checksums) is.
fn classify(path: &Path, e: DatabaseError) -> Failure {
    use std::io::ErrorKind::{InvalidData, UnexpectedEof};
    let text = e.to_string();
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            Failure::Other(SpoolError::Db(format!("{}: {text}", path.display())))
        }
        DatabaseError::Storage(StorageError::Io(io))
            if !matches!(io.kind(), UnexpectedEof | InvalidData) =>
        {
            Failure::Other(SpoolError::Io { path: path.display().to_string(), source: io })
        }
        _ => Failure::Untrusted(format!("is corrupt or truncated ({text})")),
    }
}

/// Refuses with a clear error, or (opted in) renames the file aside so a new one is created.
fn refuse_or_move_aside(
    data_dir: &Path,
    path: &Path,
    problem: String,
    options: SpoolOptions,
    now_ms: i64,
) -> Result<(), SpoolError> {
    if !options.move_aside_corrupt {
        return Err(SpoolError::StateDb {
            path: path.display().to_string(),
            problem,
            orphaned: data_dir.join(ORPHANED).display().to_string(),
        });
    }
    if path.exists() {
        let aside: PathBuf = data_dir.join(format!("{STATE_DB}.corrupt-{now_ms}"));
        fs::rename(path, &aside)
            .map_err(|e| SpoolError::Io { path: path.display().to_string(), source: e })?;
        sync_dir(data_dir)?;
        tracing::error!(file = %path.display(), moved_to = %aside.display(), %problem,
            "state database moved aside (--move-aside-corrupt); starting with an empty one");
    } else {
        tracing::error!(file = %path.display(), %problem,
            "state database missing (--move-aside-corrupt); starting with an empty one");
    }
    Ok(())
}
