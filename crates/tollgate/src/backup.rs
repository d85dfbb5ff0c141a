//! Backups of the data directory while the service runs: `POST /v1/admin/backup?to=DIR` on
//! the server, and `tollgate backup --to DIR` calling it.
//!
//! A running server's redb files are locked by it and not consistent to copy byte by byte, so
//! the server writes the backup itself: `counters.redb` from a snapshot taken after a flush
//! (every answered check is in it), `gateway.redb` from a snapshot and the spool files that
//! snapshot needs (`spool/`), the usage history (`usage.redb`, from a snapshot after a flush),
//! and the audit log (`audit.jsonl` and its segments, appended to only). `DIR` is a new
//! directory on the server's host; a restore is copying its contents into an empty data
//! directory and starting `tollgate serve` on it.
//!
//! Invariants:
//! - **One at a time.** A second backup while one runs is refused with 409 `backup-running`.
//! - **Complete or absent.** The backup is written into a temporary directory beside `DIR`
//!   (`.NAME.partial-…`) that carries [`PARTIAL_MARKER`] from the start; only when everything
//!   is written and fsynced does it get [`COMPLETE_MARKER`], lose the partial one, and take the
//!   name `DIR`. A backup cut short (a crash, a full disk) leaves no `DIR`, only the temporary
//!   directory, and `tollgate serve` refuses a data directory with the partial marker and no
//!   complete one ([`check_data_dir`]). A backup runs in a task of its own, so a client that
//!   hangs up does not cut it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::Mutex;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};
use tollgate_gateway::SpoolBackup;
use tollgate_http::AccessGuard;
use tollgate_http::problem::Problem;
use tollgate_quota::AnyStore;
use tollgate_server::usage::UsageHistory;

use crate::admin::{self, AdminTarget, encode_segment};
use crate::config::embedded_file;
use crate::output::outln;

/// The file every backup directory has from its start until it is complete.
pub const PARTIAL_MARKER: &str = "backup.partial";
/// The file a backup directory gets once everything in it is written and fsynced.
pub const COMPLETE_MARKER: &str = "backup.complete";

/// How long `tollgate backup` waits for the server to finish writing.
const BACKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Arguments of `tollgate backup`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    #[command(flatten)]
    target: AdminTarget,
    /// New directory, on the server's host, to write the backup into (absolute path).
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
}

/// Runs `tollgate backup`.
pub fn run(args: BackupArgs) -> ExitCode {
    admin::run("backup", backup(args))
}

async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let to = std::path::absolute(&args.to)
        .map_err(|e| anyhow::anyhow!("--to {}: {e}", args.to.display()))?;
    let path = format!("/v1/admin/backup?to={}", encode_segment(&to.to_string_lossy()));
    // Copying a large spool takes a while: wait longer than for other admin calls.
    let text = args.target.send_within(Method::POST, &path, BACKUP_TIMEOUT).await?;
    let body: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("unexpected answer ({e}): {text}"))?;
    outln!("{}", serde_json::to_string_pretty(&body).unwrap_or(text));
    Ok(())
}

/// What the backup route needs: the store, the gateway's spool (when configured), the guard.
#[derive(Clone)]
pub struct BackupApi {
    /// The server's counter store.
    pub store: Arc<AnyStore>,
    /// The gateway's spool, when the config has a `[gateway]`.
    pub gateway: Option<SpoolBackup>,
    /// Admin authorization.
    pub guard: AccessGuard,
    /// The usage history, when kept.
    pub usage: Option<UsageHistory>,
    /// Held while a backup runs (one at a time).
    pub running: Arc<Mutex<()>>,
}

/// `Err` naming `dir` and the missing marker when `dir` was left by a backup that did not
/// finish (it has [`PARTIAL_MARKER`] and not [`COMPLETE_MARKER`]): serving it would start from
/// whatever part was copied, e.g. an empty queue.
pub fn check_data_dir(dir: &Path) -> Result<(), String> {
    if dir.join(PARTIAL_MARKER).exists() && !dir.join(COMPLETE_MARKER).exists() {
        return Err(format!(
            "{}: left by a backup that did not finish: it has {PARTIAL_MARKER} and no \
             {COMPLETE_MARKER}, so parts of the data may be missing; restore from a complete \
             backup (one with {COMPLETE_MARKER}) into an empty data directory, or delete this one",
            dir.display()
        ));
    }
    Ok(())
}

/// The query of `POST /v1/admin/backup`.
#[derive(serde::Deserialize)]
pub struct BackupQuery {
    to: Option<String>,
}

/// `POST /v1/admin/backup?to=DIR`: writes a consistent copy of the data directory into the new
/// directory `DIR` and answers what it wrote (also kept in `DIR/backup.json`).
#[utoipa::path(
    post,
    path = "/v1/admin/backup",
    tag = "admin",
    operation_id = "backup",
    summary = "Write a consistent copy of the data directory into a new directory",
    params(("to" = String, Query, description = "A new directory on the server's host (absolute path; its parent must exist).", min_length = 1, pattern = "^/")),
    responses(
        (status = 201, description = "Written and complete (DIR/backup.complete); what was copied (also in DIR/backup.json).", body = Object),
        (status = 400, description = "to is missing or not absolute (problem backup-target).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 409, description = "Another backup is running (problem backup-running), or the directory cannot be made: it exists, or its parent does not (problem backup-target).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Copying failed; no DIR was made and the temporary directory was removed (problem backup-failed).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn route(
    State(api): State<BackupApi>,
    headers: HeaderMap,
    Query(q): Query<BackupQuery>,
) -> Response {
    if let Err(p) = api.guard.authorize(&headers) {
        return p.into_response();
    }
    let bad = |detail: String| {
        Problem::new(StatusCode::BAD_REQUEST, "backup-target", "Bad backup directory")
            .detail(detail)
            .into_response()
    };
    let Some(to) = q.to.filter(|t| !t.is_empty()) else {
        return bad("to: missing; give the new backup directory as ?to=/absolute/path".into());
    };
    let dir = PathBuf::from(&to);
    if !dir.is_absolute() {
        return bad(format!("to = {to:?}: must be an absolute path"));
    }
    let Ok(running) = Arc::clone(&api.running).try_lock_owned() else {
        return Problem::new(StatusCode::CONFLICT, "backup-running", "A backup is running")
            .detail(format!(
                "to = {to:?}: another backup is being written; one runs at a time, try again \
                 when it is done"
            ))
            .into_response();
    };
    let cannot = |detail: String| {
        Problem::new(StatusCode::CONFLICT, "backup-target", "Cannot create the backup")
            .detail(format!(
                "to = {to:?}: {detail} (the directory must not exist; its parent must)"
            ))
            .into_response()
    };
    if dir.symlink_metadata().is_ok() {
        return cannot("it exists".into());
    }
    let partial = match start_partial(&dir) {
        Ok(p) => p,
        Err(e) => return cannot(e),
    };
    // A task of its own, holding the lock: a client that hangs up does not cut the backup.
    let task = tokio::spawn(async move {
        let _running = running;
        let written = async {
            let report = write(&api, &partial, &dir).await?;
            finish(&partial, &dir).await?;
            anyhow::Ok(report)
        }
        .await;
        if written.is_err() {
            let _ = tokio::fs::remove_dir_all(&partial).await;
        }
        written
    });
    match task.await.map_err(anyhow::Error::from).and_then(|r| r) {
        Ok(report) => (StatusCode::CREATED, Json(report)).into_response(),
        Err(e) => {
            tracing::error!(to = %to, error = %e, "backup failed");
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "backup-failed", "Backup failed")
                .detail(format!("{e}; no backup was made at {to}"))
                .into_response()
        }
    }
}

/// Makes the temporary directory beside `dir` and its partial marker; the error says why not.
fn start_partial(dir: &Path) -> Result<PathBuf, String> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err("not a directory name".into());
    };
    let stamp = jiff::Timestamp::now().as_nanosecond();
    let partial =
        parent.join(format!(".{}.partial-{}-{stamp}", name.to_string_lossy(), std::process::id()));
    std::fs::create_dir(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let note = format!(
        "an unfinished backup for {}, started at {} by tollgate {}; not usable until it has {}\n",
        dir.display(),
        jiff::Timestamp::now(),
        env!("CARGO_PKG_VERSION"),
        COMPLETE_MARKER,
    );
    let marked = std::fs::write(partial.join(PARTIAL_MARKER), note)
        .and_then(|()| std::fs::File::open(partial.join(PARTIAL_MARKER))?.sync_all())
        .and_then(|()| std::fs::File::open(&partial)?.sync_all());
    if let Err(e) = marked {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(format!("{}: {e}", partial.display()));
    }
    Ok(partial)
}

/// Makes `partial` durable, marks it complete and gives it the name `dir` (see the module
/// invariants). The rename never replaces a directory with content.
async fn finish(partial: &Path, dir: &Path) -> anyhow::Result<()> {
    let (partial, dir) = (partial.to_owned(), dir.to_owned());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let shown = |p: &Path, e: std::io::Error| anyhow::anyhow!("{}: {e}", p.display());
        sync_tree(&partial).map_err(|e| shown(&partial, e))?;
        let marker = partial.join(COMPLETE_MARKER);
        let text = format!("{{\"completed_at\":\"{}\"}}\n", jiff::Timestamp::now());
        std::fs::write(&marker, text).map_err(|e| shown(&marker, e))?;
        std::fs::File::open(&marker).and_then(|f| f.sync_all()).map_err(|e| shown(&marker, e))?;
        let note = partial.join(PARTIAL_MARKER);
        std::fs::remove_file(&note).map_err(|e| shown(&note, e))?;
        std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(|e| shown(&partial, e))?;
        if dir.symlink_metadata().is_ok() {
            anyhow::bail!(
                "{}: made by someone else meanwhile; the backup stays unnamed",
                dir.display()
            );
        }
        std::fs::rename(&partial, &dir).map_err(|e| shown(&dir, e))?;
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent).and_then(|f| f.sync_all()).map_err(|e| shown(parent, e))?;
        }
        Ok(())
    })
    .await?
}

/// fsyncs every file and directory under `dir` (the copies are not durable by themselves).
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Writes the backup's files into `dir` (the temporary directory); `to` is the name it gets.
async fn write(api: &BackupApi, dir: &Path, to: &Path) -> anyhow::Result<Value> {
    let counters = match api.store.as_ref() {
        AnyStore::Embedded(store) => {
            store.backup_to(&embedded_file(dir)).await?;
            json!("counters.redb")
        }
        AnyStore::Memory(_) => json!("none: the memory store keeps nothing on disk"),
        AnyStore::Redis(_) => json!("none: the counters are in Redis; back Redis up"),
    };
    let gateway = match &api.gateway {
        Some(g) => {
            let r = g.write_to(dir).await?;
            json!({"state": "gateway.redb", "items": r.items, "spool_files": r.spool_files})
        }
        None => Value::Null,
    };
    let audit = match api.guard.audit().cloned() {
        Some(log) => {
            let to = dir.to_path_buf();
            let copied = tokio::task::spawn_blocking(move || log.copy_to(&to)).await??;
            json!(copied)
        }
        None => json!([]),
    };
    let usage = match &api.usage {
        Some(history) => json!(history.backup_to(dir).await?),
        None => Value::Null,
    };
    let report = json!({
        "to": to.display().to_string(),
        "audit": audit,
        "usage": usage,
        "version": env!("CARGO_PKG_VERSION"),
        "created_at": jiff::Timestamp::now().to_string(),
        "counters": counters,
        "gateway": gateway,
    });
    let manifest = dir.join("backup.json");
    let text = serde_json::to_vec_pretty(&report)?;
    std::fs::write(&manifest, text).map_err(|e| anyhow::anyhow!("{}: {e}", manifest.display()))?;
    tracing::info!(to = %to.display(), "backup written");
    Ok(report)
}
