//! Blocking work (the spool's database and files, parsing) off the async runtime — or inline
//! for an ephemeral gateway (a simulation), whose spool lives in memory without fsync, so a
//! hop to the blocking pool and back costs more than the work.

/// Runs `f` on the blocking pool, or inline when `inline`; `Err` names a task that failed.
pub(crate) async fn off_runtime<T: Send + 'static>(
    inline: bool,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    if inline {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await.map_err(|e| e.to_string())
}
