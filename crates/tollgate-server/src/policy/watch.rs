//! Reloading the policy file when it changes: a `notify` watch on the file's directory
//! (atomic renames replace the file's inode, so the directory is what must be watched), a
//! fallback poll for file systems that lose events, and a quiet period before each read so a
//! file caught between an in-place truncate and its write is never applied.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Policies;

impl Policies {
    /// Starts watching the file: a `notify` watch on its directory (atomic renames replace
    /// the file's inode, so the directory is what must be watched) and a poll every `poll`
    /// in case events are lost (network file systems, some container mounts). Reloading stops
    /// when the returned [`PolicyWatcher`] is dropped. Without a file, nothing is watched.
    pub fn watch(self: &Arc<Self>, poll: Duration) -> PolicyWatcher {
        let Some(file) = self.file.clone() else {
            return PolicyWatcher { task: None, _watcher: None };
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let name = file.file_name().map(|n| n.to_owned());
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev
                && ev.paths.iter().any(|p| p.file_name() == name.as_deref())
            {
                let _ = tx.send(());
            }
        })
        .and_then(|mut w| {
            let dir = match file.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
                _ => PathBuf::from("."),
            };
            w.watch(&dir, notify::RecursiveMode::NonRecursive).map(|()| w)
        });
        let watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the policy file; polling only");
                None
            }
        };
        let this = Arc::clone(self);
        let file = file.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    ev = rx.recv() => {
                        if ev.is_none() {
                            // The watcher is gone: keep polling.
                            tick.tick().await;
                        } else {
                            // Let a burst of events (truncate, write, chmod, rename) settle:
                            // wait for a quiet period, so a file caught between an in-place
                            // truncate and its write (empty, and valid) is not applied.
                            for _ in 0..SETTLE_ROUNDS {
                                tokio::time::sleep(SETTLE_QUIET).await;
                                let mut more = false;
                                while rx.try_recv().is_ok() {
                                    more = true;
                                }
                                if !more {
                                    break;
                                }
                            }
                        }
                    }
                    _ = tick.tick() => {}
                }
                // Whatever woke us (an event or the poll), a file modified less than a quiet
                // period ago may be between an in-place truncate and its write: wait it out.
                for _ in 0..SETTLE_ROUNDS {
                    match modified_ago(&file) {
                        Some(age) if age < SETTLE_QUIET => {
                            tokio::time::sleep(SETTLE_QUIET - age).await;
                        }
                        _ => break,
                    }
                }
                let _ = this.reload();
            }
        });
        PolicyWatcher { task: Some(task), _watcher: watcher }
    }
}

/// How long ago `file` was last modified (`None` when that cannot be told).
fn modified_ago(file: &std::path::Path) -> Option<Duration> {
    std::fs::metadata(file).ok()?.modified().ok()?.elapsed().ok()
}

/// How long the config file must see no event, and be unmodified, before a reload reads it.
const SETTLE_QUIET: Duration = Duration::from_millis(150);
/// At most this many quiet periods are waited for (a file written without pause for longer
/// is read anyway; the next event or poll reloads it again).
const SETTLE_ROUNDS: usize = 20;

/// Keeps the policy file watched; dropping it stops the reloads.
pub struct PolicyWatcher {
    task: Option<JoinHandle<()>>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}
