//! The data directory's lock: one `tollgate serve` at a time owns the state files in it
//! (counters, usage history, the gateway's spool), so that a second one started on the same
//! directory (a standby on a shared volume) waits instead of failing, and takes over as soon
//! as the first one stops or dies.
//!
//! Invariants:
//! - The lock is an advisory `flock` on `<data>/tollgate.lock`, taken before any state file is
//!   opened and held (the file kept open) until the process exits; the kernel releases it when
//!   the holder dies, `kill -9` included, so no stale lock survives a crash.
//! - The holder writes `pid=<pid> host=<hostname>` into the file once it owns the lock; a
//!   waiting process only reads it, to name the holder in its log, and never truncates it.
//! - A waiting process says so once, tries again every [`RETRY`], and opens nothing else in the
//!   directory meanwhile (nor binds its listener), so it cannot corrupt what the holder writes.
//! - A file system that cannot lock (NFS without lockd) is an error naming the file, not a wait.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "tollgate.lock";
/// How often a waiting process tries the lock again.
pub const RETRY: Duration = Duration::from_millis(250);

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub struct DataLock {
    _file: File,
}

/// Takes the lock of the data directory `dir` (created when missing), waiting for as long as
/// another live process holds it.
pub async fn acquire(dir: &Path) -> anyhow::Result<DataLock> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    let mut waited = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                if !waited {
                    waiting(dir, &path);
                    waited = true;
                }
                tokio::time::sleep(RETRY).await;
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot lock {} (the data directory needs a file system with working \
                         locks: a local disk or a cluster file system, not NFS without lockd)",
                        path.display()
                    )
                });
            }
        }
    }
    if waited {
        tracing::warn!(dir = %dir.display(), "data directory released by the other tollgate; taking over");
        crate::notify::status("taking over the data directory");
    }
    let holder = format!("pid={} host={}\n", std::process::id(), hostname());
    file.set_len(0)
        .and_then(|()| file.write_all(holder.as_bytes()))
        .and_then(|()| file.sync_data())
        .with_context(|| format!("cannot write the lock file {}", path.display()))?;
    Ok(DataLock { _file: file })
}

/// Logs (once) who holds the lock, and tells the service manager this process is a standby.
fn waiting(dir: &Path, path: &Path) {
    let holder = std::fs::read_to_string(path).unwrap_or_default();
    let who = describe(&holder);
    tracing::warn!(
        dir = %dir.display(),
        retry_ms = RETRY.as_millis() as u64,
        "data directory {} is in use by another tollgate ({who}); waiting to take over",
        dir.display()
    );
    crate::notify::status(&format!("standby: data directory in use by another tollgate ({who})"));
}

/// `pid N on HOST` from the lock file's `pid=N host=HOST` (what is known of it).
fn describe(holder: &str) -> String {
    let field = |key: &str| {
        holder
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    match (field("pid"), field("host")) {
        (Some(pid), Some(host)) => format!("pid {pid} on {host}"),
        (Some(pid), None) => format!("pid {pid}"),
        _ => "pid unknown".into(),
    }
}

/// This host's name (the holder may be on another host of a shared volume).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_described_from_the_lock_file() {
        assert_eq!(describe("pid=12 host=a.example\n"), "pid 12 on a.example");
        assert_eq!(describe("pid=12\n"), "pid 12");
        assert_eq!(describe(""), "pid unknown");
        assert_eq!(describe("pid= host=x"), "pid unknown");
    }
}
