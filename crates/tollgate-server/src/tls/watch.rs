//! Reloading the certificate pair when its files change: a `notify` watch on the directories
//! of `tls_cert` and `tls_key` (atomic renames replace a file's inode, so the directory is
//! what must be watched), a fallback poll, and a quiet period after the last event so the
//! two files of a rotation are read together rather than one at a time.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::TlsAcceptor;

/// How long the files must see no event before the pair is read.
const SETTLE_QUIET: Duration = Duration::from_millis(150);
/// At most this many quiet periods are waited for.
const SETTLE_ROUNDS: usize = 20;

/// Keeps the certificate files watched; dropping it stops the reloads.
pub struct TlsWatcher {
    task: JoinHandle<()>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Drop for TlsWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

impl TlsAcceptor {
    /// Reloads the pair whenever `tls_cert` or `tls_key` changes (a `notify` watch on their
    /// directories, and a poll every `poll` in case events are lost). Must be called inside
    /// a tokio runtime.
    pub fn watch(&self, poll: Duration) -> TlsWatcher {
        let files = self.files();
        let names: Vec<OsString> = [&files.cert, &files.key]
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_owned()))
            .collect();
        let mut dirs = vec![dir_of(&files.cert), dir_of(&files.key)];
        dirs.dedup();
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev
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
                tracing::warn!(error = %e, "cannot watch the TLS files; polling only");
                None
            }
        };
        let this = self.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    ev = rx.recv() => {
                        if ev.is_none() {
                            tick.tick().await;
                        } else {
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
                let _ = this.reload();
            }
        });
        TlsWatcher { task, _watcher: watcher }
    }
}
