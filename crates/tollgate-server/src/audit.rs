//! The audit log: every change made through the admin API (policy edits, counter resets, queue
//! retries, releases and purges), with who, when, what, and the state before and after. It is
//! durable and listed newest first at `GET /v1/audit`.
//!
//! Invariants:
//! - **Written before the answer.** A record is appended and fsynced before the change's
//!   answer is sent; a record that cannot be written is logged as an error (the change itself
//!   is already made and is not undone).
//! - **Bounded.** The file `audit.jsonl` (one JSON object per line) is renamed to
//!   `audit.1.jsonl` when it passes [`MAX_FILE_BYTES`], replacing the previous one: at most
//!   twice that is kept on disk, and listed.
//! - **One writer.** Appends are serialised by a lock; a record is one `write` of one line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::problem::Problem;
use crate::state::AppState;
use crate::user::{Actor, Permission};

/// The size past which the log starts a new file.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Records listed when `limit` is absent, and the most one call lists.
pub const DEFAULT_LIST: usize = 100;
/// See [`DEFAULT_LIST`].
pub const MAX_LIST: usize = 1000;

/// The durable log of admin changes; cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    path: PathBuf,
    /// Opened at the first record, so a server that changes nothing writes no file.
    file: Option<File>,
    len: u64,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditLog")
    }
}

impl AuditLog {
    /// The log kept in `dir/audit.jsonl` (the directory and the file are made at the first
    /// record).
    pub fn new(dir: &Path) -> Self {
        let inner = Inner { path: dir.join("audit.jsonl"), file: None, len: 0 };
        Self { inner: Arc::new(Mutex::new(inner)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends one record (blocking: a write and an fsync); see the module invariants.
    pub fn record(&self, who: &Actor, action: &str, target: &str, before: Value, after: Value) {
        let at = jiff::Timestamp::now().to_string();
        let line = json!({
            "at": at,
            "who": who.name,
            "role": who.role.as_str(),
            "action": action,
            "target": target,
            "before": before,
            "after": after,
        });
        let mut text = line.to_string();
        text.push('\n');
        let mut inner = self.lock();
        if let Err(e) = inner.append(text.as_bytes()) {
            tracing::error!(error = %e, action, target, "the audit record could not be written");
        }
    }

    /// Copies the log's files into `dir` (for a backup); no record is half-written in the
    /// copy, since appends wait meanwhile. Returns the names copied.
    pub fn copy_to(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let inner = self.lock();
        let mut copied = Vec::new();
        for name in ["audit.jsonl", "audit.1.jsonl"] {
            let from = inner.path.with_file_name(name);
            match std::fs::copy(&from, dir.join(name)) {
                Ok(_) => copied.push(name.to_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(copied)
    }

    /// The newest `limit` records, newest first, from this file and the one before it.
    pub fn newest(&self, limit: usize) -> std::io::Result<Vec<Value>> {
        let path = self.lock().path.clone();
        let mut out = Vec::new();
        for file in [path.clone(), path.with_file_name("audit.1.jsonl")] {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in text.lines().rev() {
                if out.len() == limit {
                    return Ok(out);
                }
                // A line cut by a crash mid-write is skipped, not fatal.
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }
}

impl Inner {
    fn open(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = OpenOptions::new().create(true).append(true).open(&self.path)?;
            self.len = file.metadata()?.len();
            self.file = Some(file);
        }
        self.file.as_mut().ok_or_else(|| std::io::Error::other("audit log not open"))
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.open()?;
        if self.len > 0 && self.len + bytes.len() as u64 > MAX_FILE_BYTES {
            std::fs::rename(&self.path, self.path.with_file_name("audit.1.jsonl"))?;
            self.file = None;
            self.open()?;
            self.len = 0;
        }
        let file = self.open()?;
        file.write_all(bytes)?;
        file.sync_data()?;
        self.len += bytes.len() as u64;
        Ok(())
    }
}

/// `?limit=`.
#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    limit: Option<String>,
}

/// One audit record.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct AuditRecord {
    /// When the change was made.
    #[schema(format = DateTime)]
    at: String,
    /// Who made it (`admin`, a user's name, or `loopback`).
    who: String,
    /// Their role.
    role: String,
    /// `policies.replace`, `counter.reset`, `queue.retry`, `queue.release` or `queue.purge`.
    action: String,
    /// What was changed.
    target: String,
    /// The state before.
    before: serde_json::Value,
    /// The state after.
    after: serde_json::Value,
}

/// `GET /v1/audit?limit=N`: the newest records first (readers and up).
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "admin",
    operation_id = "listAudit",
    summary = "The audit log of admin changes, newest first",
    params(("limit" = Option<u32>, Query, description = "Records to list, 1 to 1,000 (default 100).", minimum = 1, maximum = 1000)),
    responses(
        (status = 200, description = "The records, newest first.", body = Vec<AuditRecord>),
        (status = 400, description = "limit is not a whole number from 1 to 1,000 (problem invalid-query).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        crate::openapi::AdminAccessRefused,
        (status = 503, description = "The log could not be read (problem audit-unreadable).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    let limit = match q.limit.as_deref() {
        None => DEFAULT_LIST,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_LIST).contains(&n) => n,
            _ => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-query",
                    "Invalid query",
                )
                .detail(format!("limit must be a whole number from 1 to {MAX_LIST}"))
                .with("invalid_parameter", "limit")
                .with("value", text));
            }
        },
    };
    let Some(log) = state.admin().audit().cloned() else {
        return Ok(Json(Vec::<Value>::new()).into_response());
    };
    let records = tokio::task::spawn_blocking(move || log.newest(limit)).await;
    match records {
        Ok(Ok(records)) => Ok(Json(records).into_response()),
        Ok(Err(e)) => Err(unreadable(e.to_string())),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

fn unreadable(detail: String) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "audit-unreadable", "Audit log unreadable")
        .detail(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::Role;

    #[test]
    fn records_are_listed_newest_first_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let who = Actor { name: "lena".into(), role: Role::Limits };
        let log = AuditLog::new(dir.path());
        log.record(&who, "counter.reset", "A:1", json!([]), json!({"removed": 1}));
        log.record(&who, "policies.replace", "policies", json!([]), json!([{"match": "*"}]));
        drop(log);
        let log = AuditLog::new(dir.path());
        let all = log.newest(10).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0]["action"], "policies.replace");
        assert_eq!(
            (all[1]["who"].as_str(), all[1]["role"].as_str()),
            (Some("lena"), Some("limits"))
        );
        assert_eq!(log.newest(1).unwrap().len(), 1);
        let copy = tempfile::tempdir().unwrap();
        assert_eq!(log.copy_to(copy.path()).unwrap(), ["audit.jsonl"]);
        assert_eq!(AuditLog::new(copy.path()).newest(10).unwrap(), all);
    }

    #[test]
    fn a_full_file_is_rotated_and_still_listed() {
        let dir = tempfile::tempdir().unwrap();
        let who = Actor { name: "x".into(), role: Role::Admin };
        let log = AuditLog::new(dir.path());
        log.record(&who, "first", "0", Value::Null, Value::Null);
        log.lock().len = MAX_FILE_BYTES;
        log.record(&who, "a", "1", Value::Null, Value::Null);
        log.lock().len = MAX_FILE_BYTES;
        log.record(&who, "b", "2", Value::Null, Value::Null);
        assert!(dir.path().join("audit.1.jsonl").exists());
        let all = log.newest(10).unwrap();
        let actions: Vec<&str> = all.iter().filter_map(|r| r["action"].as_str()).collect();
        assert_eq!(actions, ["b", "a"]);
    }
}
