//! `tollgate-gateway`: the EDI gateway. It takes interchanges from landing directories and
//! HTTP uploads, parses their envelopes, spools them durably, drops duplicates, meters each
//! interchange against its partner's quota for its document type (weighted by record count),
//! and delivers it, holds it until the window resets, or rejects it.
//!
//! ```text
//! inbound (dir | POST /v1/interchanges) → parse → spool → dedup → meter → deliver | hold | reject
//! ```
//!
//! Each file is parsed once, off the async runtime: by intake (a landing file, to see that it
//! is complete; an upload, to check its senders), or by the pipeline for a file resumed after
//! a restart. Weights, split layouts and acknowledgements come from that parse
//! (`envelope`); splitting reads the bytes back from the spool but does not parse them.
//!
//! [`Gateway::builder`] starts it inside `tollgate serve`; [`Gateway::router`] serves the upload
//! endpoint and the queue admin API; [`Gateway::shutdown`] stops intake and parks in-flight
//! work on disk (it resumes on the next start).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod batch;
mod blocking;
mod breaker;
mod bulk;
mod clock;
mod config;
mod credentials;
mod delivery;
mod envelope;
mod filter;
mod hold;
mod inbound;
mod item;
mod landing;
mod lane;
mod meter;
mod openapi;
mod pipeline;
mod queue;
mod receipt;
mod spool;
mod statedb;
mod taken;
mod tally;
mod telemetry;
mod trust;
mod upkeep;
mod upload;

/// The internals the benches drive (the per-file preparation of the pipeline, the store key
/// of a transaction fingerprint); not part of the API.
#[doc(hidden)]
pub mod bench {
    pub use crate::delivery::Deliverer;
    pub use crate::meter::Meter;
    pub use crate::pipeline::{Parts, fingerprint_key};
    pub use crate::receipt::{parse, prepare};
    pub use crate::spool::{Change, FileRecord, Spool};
}

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::routing::{delete, get, post};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_policy::Decider;

pub use clock::GatewayClock;
pub use config::{
    ConfigError, Dedup, DeliveryConfig, GatewayConfig, OnQuotaUnavailable, Plan, QuotaMode, Target,
    UnknownSenders,
};
pub use filter::QueueFilter;
pub use item::{Item, State};
pub use spool::BackupReport;
pub use statedb::SpoolOptions;
pub use tally::{QueueTally, StateCounts, TallyKey};

/// The gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A `[gateway]` key is invalid.
    #[error("invalid gateway config: {0}")]
    Config(#[from] ConfigError),
    /// The spool (data dir) could not be opened.
    #[error("gateway spool: {0}")]
    Spool(#[from] spool::SpoolError),
    /// A landing directory could not be created, or its path is not a directory.
    #[error("gateway.inbound {}: {source}", path.display())]
    Inbound {
        /// The `inbound` entry.
        path: std::path::PathBuf,
        /// Why it cannot be used.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// A `ca_file` could not be read as PEM certificates (the key, the file and why).
    #[error("{0}")]
    CaFile(String),
}

/// The delivered items the stopped gateway of `data_dir` keeps (until its dedup window
/// prunes them), read without changing anything; `tollgate advise --from-queue` reads them.
pub fn delivered_items(data_dir: &Path) -> Result<Vec<Item>, GatewayError> {
    Ok(spool::delivered_items(data_dir)?)
}

/// A running gateway.
pub struct Gateway {
    spool: Arc<spool::Spool>,
    events: mpsc::UnboundedSender<pipeline::Event>,
    max_upload_bytes: u64,
    budget: upload::UploadBudget,
    pace: upload::Pace,
    partners: Arc<std::collections::HashMap<String, String>>,
    parts: Arc<pipeline::Parts>,
    jobs: bulk::Jobs,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// A gateway to start ([`Gateway::builder`]): its config, data directory and decision path,
/// and the optional spool options and clock.
pub struct GatewayBuilder {
    config: GatewayConfig,
    data_dir: std::path::PathBuf,
    decider: Decider,
    options: SpoolOptions,
    clock: GatewayClock,
}

impl GatewayBuilder {
    /// Spool options (`--move-aside-corrupt`, an ephemeral spool for simulations).
    pub fn options(mut self, options: SpoolOptions) -> Self {
        self.options = options;
        self
    }

    /// Reads the time of day (and draws retry jitter) from `clock`; the simulator passes its
    /// virtual clock, shared with the engine's store.
    pub fn clock(mut self, clock: GatewayClock) -> Self {
        self.clock = clock;
        self
    }

    /// Validates the config, opens the spool, resumes unfinished items and starts polling
    /// the landing directories.
    pub async fn start(self) -> Result<Gateway, GatewayError> {
        Gateway::start(self).await
    }
}

impl Gateway {
    /// A gateway for `config` with its spool in `data_dir`. Embedded metering decides through
    /// `decider`: the server's store and the `[[policy]]` set in force, so a policy binds the
    /// gateway's routes exactly as it binds `GET /v1/quota`. Transaction fingerprints are
    /// claimed in the decider's store too.
    pub fn builder(config: GatewayConfig, data_dir: &Path, decider: Decider) -> GatewayBuilder {
        GatewayBuilder {
            config,
            data_dir: data_dir.to_path_buf(),
            decider,
            options: SpoolOptions::default(),
            clock: GatewayClock::system(),
        }
    }

    async fn start(b: GatewayBuilder) -> Result<Gateway, GatewayError> {
        let GatewayBuilder { config, data_dir, decider, options, clock } = b;
        let data_dir = data_dir.as_path();
        let store = decider.store().clone();
        let plan = config.plan()?;
        telemetry::register(&plan);
        inbound::ensure_dirs(&plan.inbound)
            .map_err(|(path, source)| GatewayError::Inbound { path, source })?;
        std::fs::create_dir_all(data_dir).map_err(|e| spool::SpoolError::Io {
            path: data_dir.display().to_string(),
            source: e,
        })?;
        let dir = data_dir.to_path_buf();
        let spool = tokio::task::spawn_blocking(move || {
            spool::Spool::open_with_clock(&dir, options, clock)
        })
        .await
        .map_err(|e| spool::SpoolError::Db(e.to_string()))??;
        let spool = Arc::new(spool);
        let meter = match &plan.remote {
            Some(remote) => meter::Meter::remote(remote).map_err(GatewayError::CaFile)?,
            None => meter::Meter::embedded(decider),
        };
        let mut deliverer = delivery::Deliverer::new(&plan.routes, plan.deliver_ca_file.as_deref())
            .map_err(GatewayError::CaFile)?;
        if options.ephemeral {
            deliverer = deliverer.simulated();
        }
        let (events, rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let parts = Arc::new(pipeline::Parts {
            plan: plan.clone(),
            spool: spool.clone(),
            meter,
            deliverer,
            seen: store,
        });
        let (pipe, pending) = {
            let parts = parts.clone();
            let events = events.clone();
            tokio::task::spawn_blocking(move || pipeline::Pipeline::load(parts, events))
                .await
                .map_err(|e| spool::SpoolError::Db(e.to_string()))??
        };
        let mut tasks = vec![
            tokio::spawn(pipe.run(rx, pending, stop_rx.clone())),
            tokio::spawn(spool::probe_while_failing(spool.clone(), plan.poll, stop_rx.clone())),
        ];
        if !plan.inbound.is_empty() {
            tasks.push(tokio::spawn(inbound::poll(
                inbound::Landing::new(&plan),
                spool.clone(),
                events.clone(),
                stop_rx.clone(),
            )));
        }
        {
            let (spool, events, plan) = (spool.clone(), events.clone(), plan.clone());
            tasks.push(tokio::spawn(
                async move { upkeep::daily(spool, events, &plan, stop_rx).await },
            ));
        }
        tracing::info!(routes = plan.routes.len(), inbound = plan.inbound.len(), "gateway started");
        Ok(Gateway {
            spool,
            events,
            max_upload_bytes: plan.max_upload_bytes,
            budget: upload::UploadBudget::new(plan.upload_budget_bytes, plan.max_upload_bytes),
            pace: upload::Pace { min_rate: plan.upload_min_rate, grace: plan.upload_rate_grace },
            partners: Arc::new(plan.partners.clone()),
            parts,
            jobs: bulk::Jobs::default(),
            stop,
            tasks,
        })
    }

    /// A readiness check for `/readyz`: fails while the remote quota service refuses the
    /// gateway's requests (a wrong `api_key` or `url`), with the service's answer.
    pub fn quota_readiness(&self) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
        let parts = self.parts.clone();
        move || match parts.meter.misconfiguration() {
            Some(reason) => Err(format!("gateway quota misconfigured: {reason}")),
            None => Ok(()),
        }
    }

    /// A readiness check for `/readyz`: fails while the spool cannot be written (a full or
    /// failing disk), with the last error; it recovers by itself once a write succeeds (a
    /// probe tries once per `poll_ms`).
    pub fn spool_readiness(&self) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
        let spool = self.spool.clone();
        move || match spool.health().failure() {
            Some(e) => Err(format!("the spool cannot be written: {e}")),
            None => Ok(()),
        }
    }

    /// `POST /v1/interchanges` and the `/v1/queue` admin API, for the binary to merge:
    /// `guard` admits the queue's operators (and uploads with an admin token), `clients`'
    /// keys may upload (within their `partners`); once either is configured uploads need
    /// credentials.
    pub fn router(&self, guard: AccessGuard, clients: ClientKeys) -> Router {
        let upload = upload::Upload {
            spool: self.spool.clone(),
            events: self.events.clone(),
            max_bytes: self.max_upload_bytes,
            budget: self.budget.clone(),
            pace: self.pace,
            guard: credentials::UploadGuard::new(guard.clone(), clients),
            partners: self.partners.clone(),
            plan: Arc::new(self.parts.plan.clone()),
        };
        let api = queue::QueueApi {
            guard,
            spool: self.spool.clone(),
            events: self.events.clone(),
            jobs: self.jobs.clone(),
        };
        Router::new()
            .route("/v1/interchanges", post(upload::upload).with_state(upload))
            .route("/v1/queue", get(queue::list).with_state(api.clone()))
            .route("/v1/queue/purge", post(bulk::purge).with_state(api.clone()))
            .route("/v1/queue/release", post(bulk::release).with_state(api.clone()))
            .route("/v1/queue/jobs", get(bulk::list).with_state(api.clone()))
            .route(
                "/v1/queue/jobs/{id}",
                get(bulk::show).delete(bulk::stop).with_state(api.clone()),
            )
            .route("/v1/queue/{id}/retry", post(queue::retry).with_state(api.clone()))
            .route("/v1/queue/{id}/release", post(queue::release).with_state(api.clone()))
            .route("/v1/queue/{id}/payload", get(queue::payload).with_state(api.clone()))
            .route("/v1/queue/{id}", delete(queue::purge).with_state(api))
    }

    /// Takes files in as a landing directory does, without one: each is parsed, the batch is
    /// spooled in one transaction and handed to the pipeline. For in-process callers (the
    /// simulator); `files` are (bytes, origin). Returns the file ids, in input order.
    pub async fn submit(&self, files: Vec<(Vec<u8>, String)>) -> Result<Vec<String>, GatewayError> {
        let parts = self.parts.clone();
        let inline = parts.spool.is_ephemeral();
        let done = blocking::off_runtime(inline, move || {
            let parsed: Vec<receipt::Parsed> =
                files.iter().map(|(b, _)| receipt::parse(b, &parts.plan)).collect();
            let batch: Vec<(&[u8], String)> =
                files.iter().map(|(b, o)| (b.as_slice(), o.clone())).collect();
            let mut records = parts.spool.receive(&batch)?;
            for (rec, parsed) in records.iter_mut().zip(parsed) {
                rec.sender =
                    parsed.scan.envelopes.first().map(|e| e.sender.clone()).unwrap_or_default();
                rec.parsed = Some(Arc::new(parsed));
            }
            Ok::<_, spool::SpoolError>(records)
        })
        .await
        .map_err(|e| spool::SpoolError::Db(format!("intake task failed: {e}")))??;
        let ids = done.iter().map(|r| r.id.clone()).collect();
        let _ = self.events.send(pipeline::Event::Received(done));
        Ok(ids)
    }

    /// Every item the spool keeps (live, and finished ones not yet pruned), in arrival order.
    pub async fn items(&self) -> Result<Vec<Item>, GatewayError> {
        self.items_as(QueueFilter::default(), Some).await
    }

    /// What `f` keeps of every item the spool keeps that `filter` matches (`None`: nothing),
    /// in arrival order; each item is mapped as it is read, so the spool is never held whole.
    pub async fn items_as<T: Send + 'static>(
        &self,
        filter: QueueFilter,
        f: impl Fn(Item) -> Option<T> + Send + 'static,
    ) -> Result<Vec<T>, GatewayError> {
        let spool = self.spool.clone();
        let items = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            spool.each_item(&filter, &mut |item| out.extend(f(item)))?;
            Ok::<_, spool::SpoolError>(out)
        })
        .await
        .map_err(|e| spool::SpoolError::Db(format!("read task failed: {e}")))??;
        Ok(items)
    }

    /// Items per partner, route, metering id and state, as of the last spool commit (the
    /// console's overview and `X-Total-Count` read it).
    pub fn tally(&self) -> QueueTally {
        self.spool.tally().clone()
    }

    /// The OpenAPI description of [`Gateway::router`]'s routes, for the binary to merge.
    pub fn openapi() -> utoipa::openapi::OpenApi {
        openapi::document()
    }

    /// A handle that copies the spool while the gateway runs (`tollgate backup`).
    pub fn backup(&self) -> SpoolBackup {
        SpoolBackup { spool: self.spool.clone() }
    }

    /// Stops intake and the pipeline. Admitted items not yet delivered stay admitted on disk
    /// and are delivered after the next start.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        tracing::info!("gateway stopped");
    }
}

/// Copies the gateway's spool while it runs: its state database as one snapshot and the spool
/// files that state needs (see `spool::backup` for why the copy is consistent).
#[derive(Clone)]
pub struct SpoolBackup {
    spool: Arc<spool::Spool>,
}

impl SpoolBackup {
    /// Writes `dir/gateway.redb` and `dir/spool/` into the existing directory `dir`.
    pub async fn write_to(&self, dir: &Path) -> Result<BackupReport, GatewayError> {
        let spool = self.spool.clone();
        let dir = dir.to_path_buf();
        let done = tokio::task::spawn_blocking(move || spool.backup_to(&dir)).await;
        Ok(done.map_err(|e| spool::SpoolError::Db(format!("backup task failed: {e}")))??)
    }
}
