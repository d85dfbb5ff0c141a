//! Inbound: files taken from landing directories, and uploads to `POST /v1/interchanges`.
//!
//! Invariants:
//! - A landing file is taken only once it has been unchanged (size and mtime) for `settle_ms`,
//!   and never while its name starts with `.` or ends in `.tmp` / `.part` (an upload still in
//!   progress).
//! - A landing file is removed, and an upload answered 202, only after [`Spool::receive`] has
//!   made the bytes durable and recorded them. A crash before that leaves the landing file in
//!   place (taken again) or the upload unanswered (the sender retries).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header::CONTENT_LENGTH};
use axum::response::{IntoResponse, Response};
use tokio::sync::{mpsc, watch};
use tollgate_server::problem::Problem;

use crate::envelope;
use crate::pipeline::Event;
use crate::spool::Spool;

/// Files taken per spool transaction at most.
const MAX_FILES_PER_BATCH: usize = 64;

/// True for names of files still being written by the sender.
pub fn in_progress(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.ends_with(".part")
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    len: u64,
    modified: Option<SystemTime>,
    since: Instant,
    /// Sniffed once the file has settled.
    sender: Option<String>,
}

/// Polls the landing directories (woken early by file-system notifications where available)
/// until `stop` turns true.
pub async fn poll(
    dirs: Vec<PathBuf>,
    poll: std::time::Duration,
    settle: std::time::Duration,
    spool: Arc<Spool>,
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) {
    let mut seen: HashMap<PathBuf, Seen> = HashMap::new();
    let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
    let _watcher = watch_dirs(&dirs, wake_tx);
    loop {
        if *stop.borrow() {
            return;
        }
        let ready = scan(&dirs, settle, &mut seen);
        let mut more = ready.len() > MAX_FILES_PER_BATCH;
        let batch = fair_batch(ready, MAX_FILES_PER_BATCH);
        if !batch.is_empty() {
            let spool = spool.clone();
            let taken = tokio::task::spawn_blocking(move || take(&spool, batch)).await;
            match taken {
                Ok(Ok((mut records, taken_paths, senders))) => {
                    for (r, s) in records.iter_mut().zip(senders) {
                        r.sender = s;
                    }
                    if !records.is_empty() {
                        let _ = events.send(Event::Received(records));
                    }
                    // Durable and recorded: now the landing files may go (after the event,
                    // so that removing them is not on the way to delivery).
                    for p in &taken_paths {
                        seen.remove(p);
                    }
                    let _ = tokio::task::spawn_blocking(move || remove_taken(&taken_paths)).await;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "spooling inbound files failed; retrying");
                    more = false; // wait a poll period before trying again
                }
                Err(e) => {
                    tracing::error!(error = %e, "spooling task failed; retrying");
                    more = false;
                }
            }
        }
        if more {
            // Scan again at once: files that arrived meanwhile get their fair share of the
            // next batch instead of waiting behind the whole backlog.
            continue;
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(poll) => {}
            _ = wake_rx.recv() => {}
        }
    }
}

/// Wakes the poller when something changes in a landing directory; `None` (polling only)
/// where notifications are unavailable.
fn watch_dirs(dirs: &[PathBuf], wake: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
        let _ = wake.try_send(());
    })
    .ok()?;
    for d in dirs {
        if let Err(e) = watcher.watch(d, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %d.display(), error = %e, "no change notifications; polling only");
        }
    }
    Some(watcher)
}

/// Up to `max` files, taken round-robin across senders (in arrival order within a sender), so
/// that one partner's backlog of files does not delay the others' files.
fn fair_batch(ready: Vec<(PathBuf, String)>, max: usize) -> Vec<(PathBuf, String)> {
    let mut order: Vec<String> = Vec::new();
    let mut queues: HashMap<String, std::collections::VecDeque<PathBuf>> = HashMap::new();
    for (path, sender) in ready {
        if !queues.contains_key(&sender) {
            order.push(sender.clone());
        }
        queues.entry(sender).or_default().push_back(path);
    }
    let mut batch = Vec::new();
    while batch.len() < max {
        let before = batch.len();
        for s in &order {
            if batch.len() >= max {
                break;
            }
            if let Some(p) = queues.get_mut(s).and_then(|q| q.pop_front()) {
                batch.push((p, s.clone()));
            }
        }
        if batch.len() == before {
            break;
        }
    }
    batch
}

/// The sender of the first interchange, from the head of the file (empty when unknown).
fn sniff_sender(path: &Path) -> String {
    use std::io::Read;
    let mut head = vec![0u8; 1024];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    head.truncate(n);
    envelope::scan(&head).envelopes.first().map(|e| e.sender.clone()).unwrap_or_default()
}

/// Lists settled files with their sender; remembers the others' size and mtime.
fn scan(
    dirs: &[PathBuf],
    settle: std::time::Duration,
    seen: &mut HashMap<PathBuf, Seen>,
) -> Vec<(PathBuf, String)> {
    let now = Instant::now();
    let mut ready = Vec::new();
    let mut present = std::collections::HashSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if in_progress(name) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let path = entry.path();
            present.insert(path.clone());
            let cur =
                Seen { len: meta.len(), modified: meta.modified().ok(), since: now, sender: None };
            let e = seen.entry(path.clone()).or_insert_with(|| cur.clone());
            if e.len != cur.len || e.modified != cur.modified {
                *e = cur;
            }
            if now.duration_since(e.since) >= settle {
                let sender = e.sender.get_or_insert_with(|| sniff_sender(&path)).clone();
                ready.push((path, sender));
            }
        }
    }
    seen.retain(|p, _| present.contains(p));
    ready.sort();
    ready
}

type Taken = (Vec<crate::spool::FileRecord>, Vec<PathBuf>, Vec<String>);

/// Reads the files and spools them durably (the caller then removes them).
fn take(spool: &Spool, paths: Vec<(PathBuf, String)>) -> Result<Taken, crate::spool::SpoolError> {
    let mut files = Vec::new();
    let mut taken = Vec::new();
    let mut senders = Vec::new();
    for (p, sender) in paths {
        match std::fs::read(&p) {
            Ok(bytes) => {
                files.push((bytes, p.display().to_string()));
                taken.push(p);
                senders.push(sender);
            }
            Err(e) => tracing::warn!(path = %p.display(), error = %e, "cannot read inbound file"),
        }
    }
    let refs: Vec<(&[u8], String)> = files.iter().map(|(b, o)| (b.as_slice(), o.clone())).collect();
    let records = spool.receive(&refs)?;
    Ok((records, taken, senders))
}

/// Removes landing files that [`take`] has spooled, and makes the removal durable (a file
/// whose removal is lost in a crash is received again and quarantined as a duplicate).
fn remove_taken(taken: &[PathBuf]) {
    let mut dirs = std::collections::BTreeSet::new();
    for p in taken {
        if let Err(e) = std::fs::remove_file(p) {
            tracing::error!(path = %p.display(), error = %e, "cannot remove a spooled inbound file");
        }
        if let Some(d) = p.parent() {
            dirs.insert(d.to_path_buf());
        }
    }
    for d in dirs {
        let _ = crate::spool::sync_dir(&d);
    }
}

/// What the upload handler needs.
#[derive(Clone)]
pub struct Upload {
    /// The spool.
    pub spool: Arc<Spool>,
    /// The pipeline's inbox.
    pub events: mpsc::UnboundedSender<Event>,
    /// `max_upload_bytes`.
    pub max_bytes: u64,
}

fn too_large(max: u64, got: Option<u64>) -> Response {
    let detail = match got {
        Some(n) => format!("the body has {n} bytes; max_upload_bytes is {max}"),
        None => format!("the body is larger than max_upload_bytes ({max})"),
    };
    Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "upload-too-large", "Upload too large")
        .detail(detail)
        .with("max_upload_bytes", max)
        .into_response()
}

/// `POST /v1/interchanges`: spool the body durably, answer 202 `{"id", "state"}`.
pub async fn upload(State(up): State<Upload>, headers: HeaderMap, body: Body) -> Response {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > up.max_bytes) {
        return too_large(up.max_bytes, Some(n));
    }
    let limit = usize::try_from(up.max_bytes).unwrap_or(usize::MAX);
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => return too_large(up.max_bytes, None),
    };
    let scan = envelope::scan(&bytes);
    if scan.envelopes.is_empty() {
        let detail = scan.error.unwrap_or_else(|| "no X12 or EDIFACT interchange found".into());
        return Problem::new(StatusCode::BAD_REQUEST, "not-edi", "Not an EDI interchange")
            .detail(detail)
            .with("bytes", bytes.len())
            .into_response();
    }
    let sender = scan.envelopes[0].sender.clone();
    let spool = up.spool.clone();
    let res =
        tokio::task::spawn_blocking(move || spool.receive(&[(&bytes[..], "upload".to_owned())]))
            .await;
    match res {
        Ok(Ok(mut records)) if !records.is_empty() => {
            let mut rec = records.remove(0);
            rec.sender = sender;
            let id = rec.id.clone();
            let _ = up.events.send(Event::Received(vec![rec]));
            (StatusCode::ACCEPTED, Json(serde_json::json!({"id": id, "state": "received"})))
                .into_response()
        }
        Ok(Ok(_)) => spool_failed("nothing was recorded".into()),
        Ok(Err(e)) => spool_failed(e.to_string()),
        Err(e) => spool_failed(e.to_string()),
    }
}

fn spool_failed(detail: String) -> Response {
    tracing::error!(error = %detail, "spooling an upload failed");
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "spool-unavailable", "Spool unavailable")
        .detail(detail)
        .into_response()
}

/// Creates the landing directories so that senders can write into them.
pub fn ensure_dirs(dirs: &[PathBuf]) -> std::io::Result<()> {
    dirs.iter().try_for_each(|d: &PathBuf| std::fs::create_dir_all(Path::new(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_progress_are_left_alone() {
        assert!(in_progress(".x.edi"));
        assert!(in_progress("x.edi.tmp"));
        assert!(in_progress("x.part"));
        assert!(!in_progress("x.edi"));
    }

    #[test]
    fn batches_are_fair_across_senders() {
        let ready: Vec<(PathBuf, String)> = (0..6)
            .map(|i| (PathBuf::from(format!("b{i}")), "ZZ:BURST".to_owned()))
            .chain([(PathBuf::from("n1"), "ZZ:NORMAL".to_owned())])
            .collect();
        let batch = fair_batch(ready, 3);
        let paths: Vec<PathBuf> = batch.into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, vec![PathBuf::from("b0"), PathBuf::from("n1"), PathBuf::from("b1")]);
    }

    #[test]
    fn files_settle_before_they_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.edi"), b"x").unwrap();
        std::fs::write(dir.path().join("b.part"), b"x").unwrap();
        let mut seen = HashMap::new();
        let dirs = vec![dir.path().to_path_buf()];
        let settle = std::time::Duration::from_millis(50);
        assert!(scan(&dirs, settle, &mut seen).is_empty());
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(scan(&dirs, settle, &mut seen), vec![(dir.path().join("a.edi"), String::new())]);
    }
}
