//! Test hooks: a commit or a write made to fail, as on a full disk, in one test's data
//! directory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Change;

static FAIL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Data directories, each with the part writes to let through before one fails.
static FAIL_PART: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

/// Makes the next commit that splits a file (removes its `files` row) fail, for the spool
/// in `data_dir`.
pub(crate) fn fail_next_split(data_dir: &Path) {
    FAIL.lock().unwrap_or_else(|e| e.into_inner()).push(data_dir.to_path_buf());
}

/// Data directories whose every commit fails, as on a disk that stays full.
static FAIL_ALL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Makes every commit of the spool in `data_dir` fail until [`let_commits_through`].
pub(crate) fn fail_every_commit(data_dir: &Path) {
    FAIL_ALL.lock().unwrap_or_else(|e| e.into_inner()).push(data_dir.to_path_buf());
}

/// Ends [`fail_every_commit`] for `data_dir`.
pub(crate) fn let_commits_through(data_dir: &Path) {
    FAIL_ALL.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| d != data_dir);
}

/// Whether this commit of the spool in `dir` is made to fail (a one-off hook is then spent).
pub(super) fn fails(dir: &Path, change: &Change) -> bool {
    if FAIL_ALL.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|d| dir.starts_with(d)) {
        return true;
    }
    if change.remove_files.is_empty() {
        return false;
    }
    let mut fail = FAIL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = fail.iter().position(|d| dir.starts_with(d)) else { return false };
    fail.swap_remove(at);
    true
}

/// Makes a part write of the spool in `data_dir` fail after `skip` more succeed.
pub(crate) fn fail_part_after(data_dir: &Path, skip: usize) {
    FAIL_PART.lock().unwrap_or_else(|e| e.into_inner()).push((data_dir.to_path_buf(), skip));
}

/// Whether this part write of the spool in `dir` is made to fail (the hook is then spent).
pub(super) fn fails_part(dir: &Path) -> bool {
    let mut fail = FAIL_PART.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = fail.iter().position(|(d, _)| dir.starts_with(d)) else { return false };
    if fail[at].1 > 0 {
        fail[at].1 -= 1;
        return false;
    }
    fail.swap_remove(at);
    true
}
