//! Reloading the policy file when it changes: a `notify` watch on the file's directory
//! (atomic renames replace the file's inode, so the directory is what must be watched), a
//! fallback poll for file systems that lose events, and a quiet period before each read so a
//! file caught between an in-place truncate and its write is never applied.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use serde_json::json;
use tollgate_http::AccessGuard;
use tollgate_http::user::{Actor, Role};
use tollgate_policy::PolicySet;

use super::Policies;
use tollgate_http::file_watch::{FileWatch, SETTLE_QUIET, SETTLE_ROUNDS};

impl Policies {
    /// Starts watching the file: a `notify` watch on its directory (atomic renames replace
    /// the file's inode, so the directory is what must be watched) and a poll every `poll`
    /// in case events are lost (network file systems, some container mounts). Each set that
    /// comes into force is recorded in `audit`'s log as `policies.reload` by `config-file`.
    /// Reloading stops when the returned [`PolicyWatcher`] is dropped. Without a file,
    /// nothing is watched.
    pub fn watch(self: &Arc<Self>, poll: Duration, audit: AccessGuard) -> PolicyWatcher {
        let Some(file) = self.file.clone() else {
            return PolicyWatcher { task: None };
        };
        let mut watch = FileWatch::new(&[&file], poll, "the policy file");
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            loop {
                watch.changed().await;
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
                // Blocking (a file read; waits for a write through the API to finish).
                let (this, audit) = (Arc::clone(&this), audit.clone());
                let reload =
                    move || this.reload_then(|before, after| record(&audit, before, after));
                let _ = tokio::task::spawn_blocking(reload).await;
            }
        });
        PolicyWatcher { task: Some(task) }
    }
}

/// Records a reload in the audit log; a record that cannot be written is logged (the edit is
/// on disk already: there is nothing to refuse).
fn record(audit: &AccessGuard, before: &PolicySet, after: &PolicySet) {
    let who = Actor { name: "config-file".into(), role: Role::Limits };
    let (before, after) = (json!(before.rules()), json!(after.rules()));
    if let Err(e) = audit.record(&who, "policies.reload", "policies", before, after) {
        tracing::error!(error = %e, "a policy reload is missing from the audit log");
    }
}

/// How long ago `file` was last modified (`None` when that cannot be told).
fn modified_ago(file: &std::path::Path) -> Option<Duration> {
    std::fs::metadata(file).ok()?.modified().ok()?.elapsed().ok()
}

/// Keeps the policy file watched; dropping it stops the reloads.
pub struct PolicyWatcher {
    task: Option<JoinHandle<()>>,
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}
