//! Server policies: limits that functional teams own in the config file, so the middleware
//! does not have to change when a limit does.
//!
//! A `PolicySet` (of `tollgate-policy`) is an ordered list of `PolicyRule`s; the first whose
//! glob matches the `metering-id` applies. [`Policies`] keeps the set in force (in a
//! `PolicyHandle` that every face decides with) and swaps it as a whole: from the config file when it changes (a `notify` watch on the file's
//! directory, so atomic renames are seen, plus a fallback poll), or from `PUT /v1/policies`.
//!
//! Invariant: the set in force was always valid as a whole. A file that fails to parse or
//! validate is refused entirely and the previous set stays; the refusal is logged, counted in
//! `tollgate_policy_reload_errors_total` and shown by `/readyz` until a valid file arrives.
//!
//! Invariant: one writer at a time. A replacement through the API (version check, file
//! rewrite, swap, audit record) and a reload from the file each run under one lock, so the
//! version a `PUT` was checked against is the one it replaces, and the file is never written
//! by two at once ([`version`] has the `ETag` / `If-Match` side).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tollgate_policy::{PolicyHandle, PolicyRule, PolicySet};

use crate::metrics;
use crate::reload::{FileCheck, FileValidator};
use tollgate_http::config::located;

pub(crate) mod version;
mod watch;
pub(crate) use version::IfMatch;
pub use watch::PolicyWatcher;

/// The policies part of the config file; every other section is ignored here (the binary
/// validates those at start-up).
#[derive(Debug, Deserialize)]
struct PolicyFile {
    #[serde(default)]
    policy: Vec<PolicyRule>,
}

/// Parses the `[[policy]]` tables of a config file; errors read `FILE:LINE:COL: message`.
pub fn parse_policies(file: &Path, source: &str) -> Result<PolicySet, String> {
    toml::from_str::<PolicyFile>(source)
        .map(|f| PolicySet::new(f.policy))
        .map_err(|e| located(file, source, &e))
}

/// How the last reload from the file went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Bumped each time a new set comes into force.
    pub generation: u64,
    /// Why the file was last refused; `None` once a valid file is in force.
    pub last_error: Option<String>,
    /// What the file in force changed that only a restart applies (empty: nothing).
    pub restart_needed: Vec<String>,
}

/// The policy set in force, and where it comes from. Shared by every request.
pub struct Policies {
    current: PolicyHandle,
    status: Mutex<ReloadStatus>,
    /// Hash of the file content last looked at, so an unchanged file is not re-applied.
    seen: Mutex<Option<u64>>,
    file: Option<PathBuf>,
    /// Validates the whole file on reload (without one, only `[[policy]]` is read).
    validator: Option<FileValidator>,
    /// Held by whoever changes the set in force or the file (see the module invariants).
    writer: Mutex<()>,
}

/// Why [`Policies::replace_if`] did not (fully) apply a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    /// `If-Match` does not name the version in force (`current`); nothing changed.
    Stale {
        /// The version in force.
        current: String,
    },
    /// The config file could not be rewritten; the old set stays in force.
    Write(String),
    /// The config file holds what this process has not loaded (an edit on disk not yet
    /// reloaded, or being written), or would fail the start-up checks once rewritten; nothing
    /// changed.
    Conflict(String),
    /// The new set is in force, but what had to follow it (the audit record) failed.
    After(String),
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("current", &self.current)
            .field("file", &self.file)
            .field("validated", &self.validator.is_some())
            .finish()
    }
}

impl Policies {
    /// Policies fixed at `set`, with no file behind them.
    pub fn fixed(set: PolicySet) -> Arc<Self> {
        Arc::new(Self::build(set, None))
    }

    /// Policies read from `file` now (failing if it is invalid) and reloaded from it later.
    pub fn from_file(file: &Path) -> Result<Arc<Self>, String> {
        let source = std::fs::read_to_string(file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let set = parse_policies(file, &source)?;
        let p = Self::build(set, Some(file.to_owned()));
        *lock(&p.seen) = Some(hash(&source));
        Ok(Arc::new(p))
    }

    /// Policies starting at `set` (already read from `file` by the caller), reloaded from
    /// `file` later.
    pub fn with_file(set: PolicySet, file: &Path) -> Arc<Self> {
        let p = Self::build(set, Some(file.to_owned()));
        if let Ok(source) = std::fs::read_to_string(file) {
            *lock(&p.seen) = Some(hash(&source));
        }
        Arc::new(p)
    }

    /// Like [`Policies::with_file`], but each reload validates the whole file with
    /// `validator` (the same checks as start-up) and refuses it as a whole if that fails.
    pub fn with_checked_file(set: PolicySet, file: &Path, validator: FileValidator) -> Arc<Self> {
        let mut p = Self::build(set, Some(file.to_owned()));
        p.validator = Some(validator);
        if let Ok(source) = std::fs::read_to_string(file) {
            *lock(&p.seen) = Some(hash(&source));
        }
        Arc::new(p)
    }

    fn build(set: PolicySet, file: Option<PathBuf>) -> Self {
        Self {
            current: PolicyHandle::new(set),
            status: Mutex::new(ReloadStatus { generation: 1, ..ReloadStatus::default() }),
            seen: Mutex::new(None),
            file,
            validator: None,
            writer: Mutex::new(()),
        }
    }

    /// The file's policies, after the whole-file check when there is one.
    fn check(&self, file: &Path, source: &str) -> Result<FileCheck, String> {
        match &self.validator {
            Some(validate) => validate(file, source),
            None => parse_policies(file, source)
                .map(|policies| FileCheck { policies, restart_needed: Vec::new() }),
        }
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<PolicySet> {
        self.current.current()
    }

    /// The shared handle every face decides with: it sees each set put in force here.
    pub fn handle(&self) -> &PolicyHandle {
        &self.current
    }

    /// The config file the policies are reloaded from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// How the last reload went.
    pub fn status(&self) -> ReloadStatus {
        lock(&self.status).clone()
    }

    fn install(&self, set: PolicySet) {
        self.current.install(set);
        let mut status = lock(&self.status);
        status.generation += 1;
        status.last_error = None;
        metrics::policy_error(false);
    }

    /// The version of the set in force (its `ETag`, see module `version`).
    pub fn version(&self) -> String {
        version::etag(&self.current())
    }

    /// Replaces the set in force (see [`Policies::replace_if`], without a version check and
    /// with nothing to follow).
    pub fn replace(&self, set: PolicySet) -> Result<(), String> {
        self.replace_if(set, None, |_, _| Ok(())).map(drop).map_err(|e| match e {
            ReplaceError::Stale { current } => format!("the policies changed: now {current}"),
            ReplaceError::Write(e) | ReplaceError::Conflict(e) | ReplaceError::After(e) => e,
        })
    }

    /// Replaces the set in force (e.g. from `PUT /v1/policies`) when `if_match` (if any)
    /// names the version in force, then runs `then(before, after)` (the audit record), all
    /// under the writer lock (blocking: a file write and fsyncs). When a file is configured,
    /// its `[[policy]]` tables are rewritten first (see module `config_file`: mode, owner,
    /// symlink and comments outside `[[policy]]` are kept), so the next reload keeps the new
    /// set. Returns the set this call put in force (a later call may already have replaced
    /// it: answer with this one, so its version is the one the caller's change made).
    pub fn replace_if(
        &self,
        set: PolicySet,
        if_match: Option<&IfMatch>,
        then: impl FnOnce(&PolicySet, &PolicySet) -> Result<(), String>,
    ) -> Result<Arc<PolicySet>, ReplaceError> {
        let _writer = lock(&self.writer);
        let before = self.current();
        let current = version::etag(&before);
        if if_match.is_some_and(|m| !m.matches(&current)) {
            return Err(ReplaceError::Stale { current });
        }
        let mut restart_needed = None;
        if let Some(file) = &self.file {
            // Only over the file this process last read or wrote, and only into a file that
            // passes the start-up checks as a whole: an edit on disk not reloaded yet (or a
            // save half done) is never overwritten, and a file refused stays refused.
            let seen = *lock(&self.seen);
            let vet = |found: &str, new: &str| {
                if seen != Some(hash(found)) {
                    return Err(format!(
                        "{} was changed on disk and the change is not loaded yet (or is being \
                         written); it is reloaded within 2 s: load the policies again and retry",
                        file.display()
                    ));
                }
                restart_needed = Some(self.check(file, new)?.restart_needed);
                Ok(())
            };
            let written = crate::config_file::rewrite_policies(file, set.rules(), vet).map_err(
                |e| match e {
                    crate::config_file::RewriteError::Refused(m) => ReplaceError::Conflict(m),
                    crate::config_file::RewriteError::Failed(m) => ReplaceError::Write(m),
                },
            )?;
            *lock(&self.seen) = Some(hash(&written));
        }
        self.install(set);
        if let Some(restart_needed) = restart_needed {
            lock(&self.status).restart_needed = restart_needed;
        }
        let installed = self.current();
        tracing::info!(policies = installed.rules().len(), "policies replaced via the API");
        then(&before, &installed).map_err(ReplaceError::After)?;
        Ok(installed)
    }

    /// Re-reads the file if its content changed. Returns `Ok(true)` when a new set came into
    /// force, `Ok(false)` when nothing changed, `Err` when the file was refused (the old set
    /// stays in force).
    pub fn reload(&self) -> Result<bool, String> {
        self.reload_then(|_, _| {})
    }

    /// [`Policies::reload`], then `then(before, after)` when a new set came into force, still
    /// under the writer's lock (so records of changes are in the order the changes were made).
    pub fn reload_then(&self, then: impl FnOnce(&PolicySet, &PolicySet)) -> Result<bool, String> {
        let Some(file) = &self.file else { return Ok(false) };
        let _writer = lock(&self.writer);
        let source = match std::fs::read_to_string(file) {
            Ok(s) => s,
            Err(e) => {
                // A missing file during an editor's save dance is normal: keep the old set
                // and retry on the next event or poll.
                tracing::debug!(file = %file.display(), error = %e, "policy file not readable");
                return Ok(false);
            }
        };
        let h = hash(&source);
        {
            let mut seen = lock(&self.seen);
            if *seen == Some(h) {
                return Ok(false);
            }
            *seen = Some(h);
        }
        match self.check(file, &source) {
            Ok(FileCheck { policies: set, restart_needed }) => {
                let n = set.rules().len();
                for change in &restart_needed {
                    tracing::warn!(file = %file.display(), "{change}");
                }
                let before = self.current();
                self.install(set);
                lock(&self.status).restart_needed = restart_needed;
                metrics::policy_reloaded();
                tracing::info!(file = %file.display(), policies = n, "policies reloaded");
                then(&before, &self.current());
                Ok(true)
            }
            Err(msg) => {
                tracing::error!(error = %msg, "policy file refused; the previous policies stay in force");
                lock(&self.status).last_error = Some(msg.clone());
                metrics::policy_reload_failed();
                Err(msg)
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests;
