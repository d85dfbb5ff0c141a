//! Taken landing files: kept for a while after they are spooled, so that bytes a sender
//! appends to a file it still holds open are not lost.
//!
//! An SFTP client may write one interchange, pause longer than `settle_ms` with the file
//! open, then append another. The file looked finished and was taken; had it been deleted,
//! the appended bytes would go to an unlinked inode. Instead a taken file is renamed into
//! `.tollgate-taken/` of its landing directory (same file system, so the sender's open handle
//! follows it), and watched:
//! - Invariant: the retained file's name records how many of its bytes were spooled
//!   (`<unix-ms>-<taken-len>-<name>`), so the watch survives a restart.
//! - Bytes beyond that length, once settled and ending in a complete interchange (or
//!   unchanged for the grace period), are written to a new landing file `<name>.tail-<ms>`
//!   (under a dot name first, then renamed), which is taken like any other.
//! - A retained file unchanged for `retention` is deleted.
//! - The poller sweeps at most once a second, and less often when a sweep is long (many
//!   retained files; see `inbound`), so appended bytes are noticed within about a second
//!   (plus `settle_ms`), while a backlog taken batch by batch does not re-read the folder each
//!   time.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::landing::{self, Stamp};

/// The folder of a landing directory that holds taken files.
pub(crate) const TAKEN_DIR: &str = ".tollgate-taken";

/// How long a taken file is kept after its last change.
pub(crate) const RETENTION: Duration = Duration::from_secs(600);

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// Moves a spooled landing file of `len` bytes into its directory's [`TAKEN_DIR`].
pub(crate) fn retire(path: &Path, len: u64) -> std::io::Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let taken = dir.join(TAKEN_DIR);
    std::fs::create_dir_all(&taken)?;
    let to = taken.join(format!("{}-{len}-{name}", unix_ms()));
    std::fs::rename(path, &to)?;
    Ok(to)
}

/// Moves landing files the poller has spooled (with the length spooled) into [`TAKEN_DIR`],
/// and makes the moves durable (a file whose move is lost in a crash is received again and
/// quarantined as a duplicate).
pub(crate) fn retire_all(taken: &[(PathBuf, u64)]) {
    let mut dirs = std::collections::BTreeSet::new();
    for (p, len) in taken {
        if let Err(e) = retire(p, *len) {
            tracing::error!(path = %p.display(), error = %e, "cannot move a spooled inbound file aside");
        }
        if let Some(d) = p.parent() {
            dirs.insert(d.to_path_buf());
            dirs.insert(d.join(TAKEN_DIR));
        }
    }
    for d in dirs {
        let _ = crate::spool::sync_dir(&d);
    }
}

/// The spooled length and original name recorded in a retained file's name.
fn parse_name(file_name: &str) -> Option<(u64, &str)> {
    let (_, rest) = file_name.split_once('-')?;
    let (len, name) = rest.split_once('-')?;
    Some((len.parse().ok()?, name))
}

/// Checks every retained file of `dir`: growth that has settled becomes a new landing file;
/// a file unchanged for [`RETENTION`] is deleted. Errors are logged and retried next time.
pub(crate) fn sweep(dir: &Path, settle: Duration, grace: Duration, max_bytes: u64) {
    let taken = dir.join(TAKEN_DIR);
    let Ok(entries) = std::fs::read_dir(&taken) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some((len, name)) = parse_name(&file_name) else { continue };
        // Relative to the open directory (no path walk per file); symlinks are not followed.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let path = entry.path();
        let age = meta.modified().ok().and_then(|m| m.elapsed().ok()).unwrap_or_default();
        if meta.len() > len {
            if age < settle {
                continue;
            }
            if meta.len() - len > max_bytes {
                // Never deleted while it differs from what was taken: set aside once, as a
                // landing file over the limit is, instead of logged at every sweep.
                let reason = format!(
                    "{} bytes were appended after its first {len} were taken, more than \
                     max_file_bytes ({max_bytes}); the first {len} were spooled",
                    meta.len() - len
                );
                match landing::move_aside_in(dir, &path, &reason) {
                    Ok(to) => {
                        tracing::error!(path = %to.display(), bytes = meta.len() - len, "bytes appended to a taken landing file exceed max_file_bytes; moved to too-large/")
                    }
                    Err(e) => {
                        tracing::error!(path = %path.display(), error = %e, "bytes appended to a taken landing file exceed max_file_bytes, and it cannot be moved to too-large/; retrying")
                    }
                }
                continue;
            }
            if let Err(e) = take_growth(dir, &path, len, name, age >= grace) {
                tracing::error!(path = %path.display(), error = %e, "cannot take bytes appended to a taken landing file; retrying");
            }
        } else if age >= RETENTION
            && let Err(e) = std::fs::remove_file(&path)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a taken landing file");
        }
    }
}

/// Writes the bytes of `path` beyond `len` to a new landing file in `dir`, then renames the
/// retained file to record its new length. Unfinished growth waits unless `grace_passed`.
fn take_growth(
    dir: &Path,
    path: &Path,
    len: u64,
    name: &str,
    grace_passed: bool,
) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let before = Stamp::at(path)?;
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(len))?;
    let mut growth = Vec::new();
    file.read_to_end(&mut growth)?;
    if Stamp::at(path)? != before || (!grace_passed && !landing::looks_complete(&growth)) {
        return Ok(());
    }
    let ms = unix_ms();
    let tmp = dir.join(format!(".{name}.tail-{ms}"));
    let out = dir.join(format!("{name}.tail-{ms}"));
    let written = (|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&growth)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &out)
    })();
    if let Err(e) = written {
        // Nothing of a failed attempt stays (a full disk would keep it across retries).
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    crate::spool::sync_dir(dir).map_err(|e| std::io::Error::other(e.to_string()))?;
    // Record the new spooled length; a crash before this takes the same growth again, and
    // the gateway's dedup quarantines the second copy.
    let total = len + growth.len() as u64;
    let renamed = dir.join(TAKEN_DIR).join(format!("{ms}-{total}-{name}"));
    std::fs::rename(path, &renamed)?;
    tracing::info!(
        file = name,
        bytes = growth.len(),
        landing = %out.display(),
        "bytes appended to a taken landing file are taken as a new file"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_record_the_taken_length() {
        assert_eq!(parse_name("1700000000000-412-f01.edi"), Some((412, "f01.edi")));
        assert_eq!(parse_name("1-0-a-b-c"), Some((0, "a-b-c")));
        assert_eq!(parse_name("junk"), None);
        assert_eq!(parse_name("1-x-name"), None);
    }

    /// Growth past `max_file_bytes` goes to `too-large/` with its reason, once, where it was
    /// left in place and logged at every sweep.
    #[test]
    fn growth_past_the_limit_is_set_aside_once() {
        let landing = tempfile::tempdir().unwrap();
        let taken = landing.path().join(TAKEN_DIR);
        std::fs::create_dir_all(&taken).unwrap();
        std::fs::write(taken.join("1700000000000-10-f.edi"), [b'x'; 60]).unwrap();
        sweep(landing.path(), Duration::ZERO, Duration::ZERO, 20);
        assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 0);
        let aside: Vec<String> = std::fs::read_dir(landing.path().join(landing::TOO_LARGE_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(aside.len(), 2, "{aside:?}");
        let note = aside.iter().find(|n| n.ends_with(".reason")).unwrap();
        let reason = std::fs::read_to_string(landing.path().join("too-large").join(note)).unwrap();
        assert!(reason.contains("50 bytes were appended after its first 10"), "{reason}");
        // Nothing left to sweep, nothing landed as a tail.
        sweep(landing.path(), Duration::ZERO, Duration::ZERO, 20);
        let landed = std::fs::read_dir(landing.path()).unwrap().count();
        assert_eq!(landed, 2, "the taken and too-large folders only");
    }
}
