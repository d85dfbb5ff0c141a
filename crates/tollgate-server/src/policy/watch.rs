//! Reloading the policy file when it changes: a `notify` watch on the file's directory
//! (atomic renames replace the file's inode, so the directory is what must be watched), a
//! fallback poll for file systems that lose events, and a quiet period before each read so a
//! file caught between an in-place truncate and its write is never applied.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use serde_json::json;
use tollgate_http::AccessGuard;
use tollgate_http::audit::Filter;
use tollgate_http::user::{Actor, Role};
use tollgate_policy::PolicySet;

use super::Policies;
use tollgate_http::file_watch::{FileWatch, SETTLE_QUIET, SETTLE_ROUNDS};

impl Policies {
    /// Starts watching the file: a `notify` watch on its directory (atomic renames replace
    /// the file's inode, so the directory is what must be watched) and a poll every `poll`
    /// in case events are lost (network file systems, some container mounts). Each set that
    /// comes into force is recorded in `audit`'s log as `policies.reload` by `config-file`, and
    /// so, first, is the set in force when it is not the one the log last recorded.
    /// Reloading stops when the returned [`PolicyWatcher`] is dropped. Without a file,
    /// nothing is watched.
    pub fn watch(self: &Arc<Self>, poll: Duration, audit: AccessGuard) -> PolicyWatcher {
        let Some(file) = self.file.clone() else {
            return PolicyWatcher { task: None };
        };
        let mut watch = FileWatch::new(&[&file], poll, "the policy file");
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            let (first, audit_first) = (Arc::clone(&this), audit.clone());
            let _ =
                tokio::task::spawn_blocking(move || first.record_if_changed(&audit_first)).await;
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

impl Policies {
    /// Records the set in force as a reload when it is not the one the audit log last
    /// recorded: an edit made while the server was stopped, or a change whose record a crash
    /// cut off. Nothing when no policy change was ever recorded (the file is the baseline).
    fn record_if_changed(&self, audit: &AccessGuard) {
        let Some(log) = audit.audit() else { return };
        let _writer = super::lock(&self.writer);
        let filter = Filter::new(Some("policies."), None, Some("policies"));
        let last = match log.page(None, &filter, 1) {
            Ok(page) => page.records.into_iter().next(),
            Err(e) => {
                tracing::error!(error = %e, "the audit log could not be read at start");
                return;
            }
        };
        let Some(last) = last else { return };
        let now = json!(self.current().rules());
        if tollgate_http::audit::records(&last["after"], &now) {
            return;
        }
        let who = Actor { name: "config-file".into(), role: Role::Limits };
        let before = last["after"].clone();
        if let Err(e) = audit.record(&who, "policies.reload", "policies", before, now) {
            tracing::error!(error = %e, "a policy change made while stopped is missing from the audit log");
        }
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
