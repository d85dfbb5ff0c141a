//! What to do with a state file that cannot be read: refuse to start (the default), or, when
//! the operator asks explicitly, move it aside and start empty.
//!
//! Starting empty on a damaged file would silently forget what was admitted (a whole extra
//! limit could be admitted again), so it is never the default. Moving aside keeps the damaged
//! file, renamed `<name>.corrupt-<unix-seconds>`, for inspection or recovery.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The choice for a state file found corrupt at start-up (`tollgate serve --move-aside-corrupt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCorrupt {
    /// Refuse to start, naming the file and what to do.
    #[default]
    Refuse,
    /// Rename the file to `<name>.corrupt-<unix-seconds>`, log it, and start with an empty one.
    MoveAside,
}

/// Renames `path` to `<name>.corrupt-<unix-seconds>` in the same directory (a suffix `-2`,
/// `-3` … is added if that name is taken) and returns the new path. Never deletes anything.
pub fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut target = path.with_file_name(format!("{name}.corrupt-{secs}"));
    let mut n = 1;
    while target.exists() {
        n += 1;
        target = path.with_file_name(format!("{name}.corrupt-{secs}-{n}"));
    }
    std::fs::rename(path, &target)?;
    Ok(target)
}

/// The refusal message for a corrupt `path`: what is wrong, and the two ways out.
pub fn refusal(path: &Path, why: &str, flag: &str) -> String {
    let shown = path.display();
    format!(
        "{shown} is corrupt ({why}); refusing to start on it, because starting empty would \
         forget what was already counted. Restore {shown} from a backup, or move it aside: \
         start once with {flag}, which renames it to {shown}.corrupt-<unix-seconds> and starts \
         with an empty file"
    )
}

/// What a panic caught while reading a state file said: redb panics on some damaged pages
/// (a key that is not UTF-8, say), and a file's content must never take the process down.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
