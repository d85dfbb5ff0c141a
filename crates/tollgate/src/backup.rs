//! Backups of the data directory while the service runs: `POST /v1/admin/backup?to=DIR` on
//! the server, and `tollgate backup --to DIR` calling it.
//!
//! A running server's redb files are locked by it and not consistent to copy byte by byte, so
//! the server writes the backup itself: `counters.redb` from a snapshot taken after a flush
//! (every answered check is in it), `gateway.redb` from a snapshot and the spool files that
//! snapshot needs (`spool/`), the usage history (`usage.redb`, from a snapshot after a flush),
//! and the audit log (`audit.jsonl`, appended to only). `DIR` is a new directory on the server's host; a restore is
//! copying its contents into an empty data directory and starting `tollgate serve` on it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};
use tollgate_gateway::SpoolBackup;
use tollgate_quota::AnyStore;
use tollgate_server::admin::AdminGuard;
use tollgate_server::problem::Problem;
use tollgate_server::usage::UsageHistory;

use crate::admin::{self, AdminTarget, encode_segment};
use crate::config::embedded_file;

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
    println!("{}", serde_json::to_string_pretty(&body).unwrap_or(text));
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
    pub guard: AdminGuard,
    /// The usage history, when kept.
    pub usage: Option<UsageHistory>,
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
    params(("to" = String, Query, description = "A new directory on the server's host (absolute path; its parent must exist).")),
    responses(
        (status = 201, description = "Written; what was copied (also in DIR/backup.json).", body = Object),
        (status = 400, description = "to is missing or not absolute (problem backup-target).", body = tollgate_server::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_server::openapi::AdminAccessRefused,
        (status = 409, description = "The directory cannot be created: it exists, or its parent does not (problem backup-target).", body = tollgate_server::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "Copying failed; the directory holds an incomplete backup (problem backup-failed).", body = tollgate_server::openapi::ProblemDoc, content_type = "application/problem+json"),
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
    if let Err(e) = std::fs::create_dir(&dir) {
        return Problem::new(StatusCode::CONFLICT, "backup-target", "Cannot create the backup")
            .detail(format!("to = {to:?}: {e} (the directory must not exist; its parent must)"))
            .into_response();
    }
    match write(&api, &dir).await {
        Ok(report) => (StatusCode::CREATED, Json(report)).into_response(),
        Err(e) => {
            tracing::error!(to = %dir.display(), error = %e, "backup failed");
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "backup-failed", "Backup failed")
                .detail(format!("{e}; {to} holds an incomplete backup: delete it"))
                .into_response()
        }
    }
}

async fn write(api: &BackupApi, dir: &Path) -> anyhow::Result<Value> {
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
        "to": dir.display().to_string(),
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
    tracing::info!(to = %dir.display(), "backup written");
    Ok(report)
}
