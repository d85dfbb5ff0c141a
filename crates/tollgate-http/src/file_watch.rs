//! Watching files that are reloaded live (the policy file, the TLS pair): a `notify` watch on
//! their directories (atomic renames replace a file's inode, so the directory is what must be
//! watched; opens and reads of the files, the reload's own included, are ignored), a fallback
//! poll for file systems that lose events, and a quiet period after the last event, so a burst
//! of events (truncate, write, chmod, rename; or the two files of a certificate rotation) gives
//! one reload of the finished files.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};

/// How long the files must see no event before they are read.
pub const SETTLE_QUIET: Duration = Duration::from_millis(150);
/// At most this many quiet periods are waited for (files written without pause for longer are
/// read anyway; the next event or poll reads them again).
pub const SETTLE_ROUNDS: usize = 20;

/// The directory holding `file` (`.` for a bare name).
pub fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// True for an event that can change what a file holds (created, written, renamed, removed,
/// its metadata changed). Opens, reads and closes after reading are not: reading the file
/// on a reload raises them, and counting them would read it again and again.
fn changes(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Events on some files, and a poll; [`FileWatch::changed`] waits for the next reason to
/// read them. Dropping it stops the watch.
pub struct FileWatch {
    rx: mpsc::UnboundedReceiver<()>,
    tick: Interval,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl FileWatch {
    /// Watches `files` (by name, in their directories) and polls every `poll`. When the watch
    /// cannot be set up, only the poll is left, with a warning naming `what`. Must be called
    /// inside a tokio runtime.
    pub fn new(files: &[&Path], poll: Duration, what: &str) -> Self {
        let names: Vec<OsString> =
            files.iter().filter_map(|p| p.file_name().map(|n| n.to_owned())).collect();
        let mut dirs: Vec<PathBuf> = files.iter().map(|f| dir_of(f)).collect();
        dirs.dedup();
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev
                && changes(&ev.kind)
                && ev
                    .paths
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| names.iter().any(|x| x == n)))
            {
                let _ = tx.send(());
            }
        })
        .and_then(|mut w| {
            for dir in &dirs {
                w.watch(dir, notify::RecursiveMode::NonRecursive)?;
            }
            Ok(w)
        });
        let watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch {what}; polling only");
                None
            }
        };
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { rx, tick, _watcher: watcher }
    }

    /// Returns at the next poll, or after an event once the files have had a quiet period.
    pub async fn changed(&mut self) {
        tokio::select! {
            ev = self.rx.recv() => {
                if ev.is_none() {
                    // The watcher is gone: keep polling.
                    self.tick.tick().await;
                } else {
                    for _ in 0..SETTLE_ROUNDS {
                        tokio::time::sleep(SETTLE_QUIET).await;
                        let mut more = false;
                        while self.rx.try_recv().is_ok() {
                            more = true;
                        }
                        if !more {
                            break;
                        }
                    }
                }
            }
            _ = self.tick.tick() => {}
        }
    }
}
