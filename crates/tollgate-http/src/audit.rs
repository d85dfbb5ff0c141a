//! The audit log: every change made through the admin API (policy edits, counter resets, queue
//! retries, releases and purges), with who, when, what, and the state before and after. It is
//! durable and listed newest first at `GET /v1/audit` (the quota service's handler), a page at
//! a time from a record's position and through a filter (`listing`).
//!
//! Invariants:
//! - **Durable before the answer.** A change is acknowledged only once its record is appended
//!   and fsynced. The handlers run the change and its record in a task of their own that they
//!   await, so a client that hangs up cannot leave a change without its record. A record that
//!   cannot be written turns the answer into a 500 `audit-write-failed` saying the change was
//!   made (it is not undone).
//! - **One writer.** Appends are serialised by a lock; a record is one `write` of one line.
//! - **Complete lines only.** A torn tail (a crash or a full disk mid-record) is cut off at
//!   start and before the next append, so it never swallows the next record (`files`).
//! - **Bounded records.** Large before/after states are stored as their size, hash and a
//!   bounded diff (`bounded`): a record takes at most about 24 KiB plus its target.
//! - **Retention by count and age.** `audit.jsonl` becomes the segment `audit.N.jsonl` past
//!   [`MAX_FILE_BYTES`]; a segment is removed only when the newer files hold at least
//!   [`KEEP_RECORDS`] records and its newest record is older than [`KEEP_DAYS`] days, or past
//!   [`MAX_TOTAL_BYTES`] on disk. So no role can flush others' records quickly: at 24 KiB a
//!   record, that takes over 40,000 changes.

mod bounded;
mod files;
mod listing;

pub use bounded::{DIFF_BYTES, INLINE_BYTES, records};
pub use files::{KEEP_DAYS, KEEP_RECORDS, MAX_FILE_BYTES, MAX_TOTAL_BYTES};
pub use listing::{Filter, Page, Position};

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::problem::Problem;
use crate::user::Actor;

/// Records listed when `limit` is absent, and the most one call lists.
pub const DEFAULT_LIST: usize = 100;
/// See [`DEFAULT_LIST`].
pub const MAX_LIST: usize = 1000;

/// The durable log of admin changes; cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Mutex<files::Files>>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditLog")
    }
}

/// The 500 answered when a change was made but its record could not be written.
pub fn write_failed(error: String) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "audit-write-failed",
        "Change made, audit record not written",
    )
    .detail(format!(
        "the change was made, but its audit record could not be written: {error}; the server \
         log has it"
    ))
}

impl AuditLog {
    /// The log kept in `dir/audit.jsonl` and its segments (the directory and the file are
    /// made at the first record, which also repairs a torn tail and applies retention).
    pub fn new(dir: &Path) -> Self {
        Self { inner: Arc::new(Mutex::new(files::Files::new(dir))) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, files::Files> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends one record and fsyncs it (blocking); see the module invariants. An error says
    /// why the record is missing (it is logged too).
    pub fn record(
        &self,
        who: &Actor,
        action: &str,
        target: &str,
        before: Value,
        after: Value,
    ) -> Result<(), String> {
        let at = jiff::Timestamp::now().to_string();
        let (before, after, diff) = bounded::bounded(before, after);
        let mut line = json!({
            "at": at,
            "who": who.name,
            "role": who.role.as_str(),
            "action": action,
            "target": target,
            "before": before,
            "after": after,
        });
        if let (Some(diff), Some(fields)) = (diff, line.as_object_mut()) {
            fields.insert("diff".into(), diff);
        }
        let mut text = line.to_string();
        text.push('\n');
        let mut files = self.lock();
        files.append(text.as_bytes()).map_err(|e| {
            tracing::error!(error = %e, action, target, "the audit record could not be written");
            e.to_string()
        })
    }

    /// Copies the log's files into `dir` (for a backup); no record is half-written in the
    /// copy, since appends wait meanwhile. Returns the names copied.
    pub fn copy_to(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let files = self.lock();
        let mut copied = Vec::new();
        for from in files.all()? {
            let Some(name) = from.file_name() else { continue };
            match std::fs::copy(&from, dir.join(name)) {
                Ok(_) => copied.push(name.to_string_lossy().into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(copied)
    }

    /// The newest `limit` records, newest first, from the active file and the segments.
    pub fn newest(&self, limit: usize) -> std::io::Result<Vec<Value>> {
        Ok(self.page(None, &Filter::default(), limit)?.records)
    }

    /// Up to `limit` records older than `before` (from the newest when `None`) that `filter`
    /// keeps, newest first, with the position to go on from when there are more (blocking:
    /// reads the files).
    pub fn page(
        &self,
        before: Option<Position>,
        filter: &Filter,
        limit: usize,
    ) -> std::io::Result<Page> {
        let snapshot = {
            let files = self.lock();
            let mut list = Vec::new();
            for (i, (number, path)) in files.numbered()?.into_iter().enumerate() {
                // The active file (the first) is read under the lock; segments never change.
                let wanted = i == 0 && before.is_none_or(|b| b.file >= number);
                let bytes = match wanted.then(|| std::fs::read(&path)) {
                    None => None,
                    Some(Ok(b)) => Some(b),
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
                    Some(Err(e)) => return Err(e),
                };
                list.push((number, path, bytes));
            }
            listing::Snapshot { files: list }
        };
        listing::walk(snapshot, before, filter, limit)
    }
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
        log.record(&who, "counter.reset", "A:1", json!([]), json!({"removed": 1})).unwrap();
        log.record(&who, "policies.replace", "policies", json!([]), json!([{"match": "*"}]))
            .unwrap();
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
    fn a_large_change_is_stored_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let who = Actor { name: "x".into(), role: Role::Admin };
        let log = AuditLog::new(dir.path());
        let many: Vec<Value> = (0..20_000).map(|i| json!({"match": format!("P{i}:*")})).collect();
        log.record(&who, "policies.replace", "policies", json!([]), Value::Array(many)).unwrap();
        let size = std::fs::metadata(dir.path().join("audit.jsonl")).unwrap().len();
        assert!(size < (INLINE_BYTES + DIFF_BYTES) as u64 + 1024, "{size}");
        let record = &log.newest(1).unwrap()[0];
        assert_eq!(record["after"]["omitted"], true);
        assert!(record["diff"]["added"].as_array().is_some_and(|a| !a.is_empty()));
    }

    /// Every `(action, target)` listed by pages of `size` through `filter`, and the cursors.
    fn pages(log: &AuditLog, filter: &Filter, size: usize) -> (Vec<String>, Vec<Position>) {
        let (mut seen, mut cursors, mut before) = (Vec::new(), Vec::new(), None);
        loop {
            let page = log.page(before, filter, size).unwrap();
            assert!(page.records.len() <= size);
            seen.extend(page.records.iter().map(|r| r["target"].as_str().unwrap().to_owned()));
            match page.next {
                Some(p) => {
                    cursors.push(p);
                    before = Some(p);
                }
                None => return (seen, cursors),
            }
        }
    }

    #[test]
    fn pages_walk_back_through_segments_and_cursors_survive_appends_and_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let old = |i: u32, action: &str| {
            json!({"at": "2026-01-01T00:00:00Z", "who": "otto", "role": "operator",
                   "action": action, "target": format!("T{i}"), "before": null, "after": null})
            .to_string()
        };
        let seg: String = (0..5).map(|i| old(i, "queue.purge") + "\n").collect();
        std::fs::write(dir.path().join("audit.1.jsonl"), seg).unwrap();
        let log = AuditLog::new(dir.path());
        let lena = Actor { name: "Lena".into(), role: Role::Limits };
        for i in 5..12 {
            let action = if i % 2 == 0 { "counter.reset" } else { "policies.replace" };
            log.record(&lena, action, &format!("T{i}"), json!(null), json!(null)).unwrap();
        }
        let newest_first: Vec<String> = (0..12).rev().map(|i| format!("T{i}")).collect();
        for size in [1, 3, 5, 12, 100] {
            let (seen, cursors) = pages(&log, &Filter::default(), size);
            assert_eq!(seen, newest_first, "pages of {size}");
            assert_eq!(cursors.len(), (12 - 1) / size, "pages of {size}");
        }
        // Filters: action and who, any case, across both files.
        let (seen, _) = pages(&log, &Filter::new(Some("RESET"), None, None), 2);
        assert_eq!(seen, ["T10", "T8", "T6"]);
        let (seen, _) = pages(&log, &Filter::new(None, Some("ott"), Some("t")), 2);
        assert_eq!(seen, ["T4", "T3", "T2", "T1", "T0"]);
        let (seen, cursors) = pages(&log, &Filter::new(Some("purge"), None, Some("T4")), 1);
        assert_eq!((seen, cursors), (vec!["T4".to_owned()], vec![]));
        // A cursor names the same record after more appends, and after the active file
        // became a segment.
        let first = log.page(None, &Filter::default(), 4).unwrap();
        let cursor = first.next.unwrap();
        assert_eq!(cursor.file, 2, "the active file is numbered as the segment it becomes");
        log.record(&lena, "counter.reset", "T12", json!(null), json!(null)).unwrap();
        let after = |log: &AuditLog| {
            let page = log.page(Some(cursor), &Filter::default(), 3).unwrap();
            page.records
                .iter()
                .map(|r| r["target"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(after(&log), ["T7", "T6", "T5"]);
        drop(log);
        std::fs::rename(dir.path().join("audit.jsonl"), dir.path().join("audit.2.jsonl")).unwrap();
        let log = AuditLog::new(dir.path());
        assert_eq!(after(&log), ["T7", "T6", "T5"]);
        log.record(&lena, "counter.reset", "T13", json!(null), json!(null)).unwrap();
        assert_eq!(log.newest(2).unwrap()[1]["target"], "T12");
        // A cursor past a file's end or inside a line lists what is older, never a torn line.
        let inside = Position { file: 2, offset: cursor.offset + 7 };
        let page = log.page(Some(inside), &Filter::default(), 1).unwrap();
        assert_eq!(page.records[0]["target"], "T7");
        let far = Position { file: 9, offset: u64::MAX };
        assert_eq!(log.page(Some(far), &Filter::default(), 1).unwrap().records[0]["target"], "T13");
        assert!(
            log.page(Some(Position { file: 1, offset: 0 }), &Filter::default(), 5)
                .unwrap()
                .records
                .is_empty()
        );
    }
}
