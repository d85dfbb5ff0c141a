//! Reloading the certificate pair when its files change: a `notify` watch on the directories
//! of `tls_cert` and `tls_key` (atomic renames replace a file's inode, so the directory is
//! what must be watched), a fallback poll, and a quiet period after the last event so the
//! two files of a rotation are read together rather than one at a time.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::TlsAcceptor;
use crate::file_watch::FileWatch;

/// Keeps the certificate files watched; dropping it stops the reloads.
pub struct TlsWatcher {
    task: JoinHandle<()>,
}

impl Drop for TlsWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsAcceptor {
    /// Reloads the pair whenever `tls_cert` or `tls_key` changes (a `notify` watch on their
    /// directories, and a poll every `poll` in case events are lost). Must be called inside
    /// a tokio runtime.
    pub fn watch(&self, poll: Duration) -> TlsWatcher {
        let files = self.files();
        let mut watch = FileWatch::new(&[&files.cert, &files.key], poll, "the TLS files");
        let this = self.clone();
        let task = tokio::spawn(async move {
            loop {
                watch.changed().await;
                let _ = this.reload();
            }
        });
        TlsWatcher { task }
    }
}
