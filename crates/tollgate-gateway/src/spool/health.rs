//! Whether the spool can be written, for `/readyz`, intake and the probe that finds when a
//! full (or failing) disk has space again.
//!
//! Every spool write reports here: a failure sets the state to failing (logged once, counted
//! in `tollgate_gateway_spool_errors_total`, `tollgate_gateway_spool_failing` 1), a success
//! clears it (logged once). While it is
//! failing, intake waits instead of writing, and [`Spool::probe`] (run once per `poll_ms` by
//! the gateway) writes a small file and removes it: the first that succeeds clears the state,
//! so intake, uploads and `/readyz` recover by themselves once space is back.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::{Spool, SpoolError, io_err};

/// The counter of failed spool writes.
pub(crate) const SPOOL_ERRORS: &str = "tollgate_gateway_spool_errors_total";
/// The gauge that is 1 while the spool cannot be written.
pub(crate) const SPOOL_FAILING: &str = "tollgate_gateway_spool_failing";

/// Bytes the probe writes: enough that a disk with room for it can take a small interchange.
const PROBE_BYTES: usize = 64 * 1024;

/// The file the probe writes and removes, in the data dir (beside `spool/`, never in it, so
/// one left by a crash is not taken for a spool file).
pub(super) const PROBE_FILE: &str = ".spool-probe";

/// The spool's write health: the last failure, until a write succeeds.
#[derive(Debug)]
pub struct SpoolHealth {
    failure: Mutex<Option<String>>,
    /// True while failing: what intake waits on.
    failing: watch::Sender<bool>,
}

impl Default for SpoolHealth {
    fn default() -> Self {
        Self { failure: Mutex::new(None), failing: watch::Sender::new(false) }
    }
}

impl SpoolHealth {
    /// A write failed with `error`.
    pub fn failed(&self, error: &SpoolError) {
        metrics::counter!(SPOOL_ERRORS).increment(1);
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if failure.is_none() {
            tracing::error!(
                %error,
                "the spool cannot be written: intake waits and uploads get 503 until a write \
                 succeeds (a probe tries once per poll_ms); /readyz reports it meanwhile"
            );
        }
        *failure = Some(error.to_string());
        self.failing.send_replace(true);
        metrics::gauge!(SPOOL_FAILING).set(1.0);
    }

    /// A write succeeded.
    pub fn succeeded(&self) {
        if !*self.failing.borrow() {
            return;
        }
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if failure.take().is_some() {
            tracing::info!("the spool can be written again: intake and uploads resume");
        }
        self.failing.send_replace(false);
        metrics::gauge!(SPOOL_FAILING).set(0.0);
    }

    /// The last failure, while no write has succeeded since.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Follows the state: `true` while failing.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.failing.subscribe()
    }
}

impl Spool {
    /// The spool's write health.
    pub fn health(&self) -> &SpoolHealth {
        &self.health
    }

    /// Writes [`PROBE_BYTES`] to [`PROBE_FILE`] (synced), removes it, and writes an empty
    /// transaction to the state database (reopening it if a write failed): success clears
    /// the failing state. What it wrote is removed whether it succeeds or not.
    pub fn probe(&self) -> Result<(), SpoolError> {
        let result = self.try_probe();
        match &result {
            Ok(()) => self.health.succeeded(),
            Err(e) => tracing::debug!(error = %e, "spool probe failed"),
        }
        result
    }

    /// [`PROBE_FILE`] in the data dir (the parent of `spool/`).
    fn probe_path(&self) -> std::path::PathBuf {
        self.dir.parent().unwrap_or(&self.dir).join(PROBE_FILE)
    }

    fn try_probe(&self) -> Result<(), SpoolError> {
        let path = self.probe_path();
        let written = std::fs::File::create(&path).and_then(|mut f| {
            f.write_all(&[0u8; PROBE_BYTES])?;
            if self.fsync { f.sync_all() } else { Ok(()) }
        });
        let removed = std::fs::remove_file(&path);
        written.map_err(io_err(&path))?;
        removed.map_err(io_err(&path))?;
        self.rows.probe()
    }
}

/// Runs [`Spool::probe`] once per `period` while the spool is failing, until `stop` turns
/// true; costs nothing while it is not.
pub(crate) async fn probe_while_failing(
    spool: Arc<Spool>,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut failing = spool.health().watch();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            down = failing.wait_for(|f| *f) => if down.is_err() { return },
        }
        while *failing.borrow() {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let s = Arc::clone(&spool);
            let _ = tokio::task::spawn_blocking(move || s.probe()).await;
        }
    }
}
