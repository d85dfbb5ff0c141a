//! The Tollgate quota service over HTTP.
//!
//! Middleware calls `GET /v1/quota` with the quota headers it already sends to API management
//! products (`metering-id`, `quota-limit`, `quota-timeunit`, …) and gets 200 (go on) or 429
//! (hold it). Around that check sit server-side policies ([`Policies`]), an admin API, the
//! [`usage`] history, Prometheus [`metrics`] and health probes. Who may
//! call what, client keys and problem+json answers come from `tollgate-http`.
//!
//! The public surface is the `pub use` list below plus three namespaces the binary reads:
//! [`metrics`] (the metric names), [`openapi`] (the document) and [`usage`] (the history).
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use tollgate_quota::{AnyStore, store::MemoryStore};
//! use tollgate_policy::PolicySet;
//! use tollgate_http::AccessGuard;
//! use tollgate_server::{AppState, Policies};
//!
//! let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
//! let policies = Policies::fixed(PolicySet::default());
//! let state = AppState::builder(store, policies, AccessGuard::new(None, true)).build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! tollgate_server::serve(listener, tollgate_server::App::new(state), std::future::pending()).await
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod admin;
mod app;
mod audit;
mod body_pace;
mod config_file;
mod headers;
mod health;
mod limits;
pub mod metrics;
pub mod openapi;
mod parse_error;
mod policy;
mod quota;
mod refund;
mod reload;
mod request_id;
mod send_timeout;
mod serve;
mod state;
pub mod usage;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

pub use admin::counters::MAX_PAGE as MAX_COUNTER_PAGE;
pub use app::App;
pub use limits::ConnectionLimits;
pub use policy::{Policies, PolicyWatcher, parse_policies};
pub use reload::{FileCheck, FileValidator};
pub use serve::{serve, serve_tls, serve_with};
pub use state::{AppState, AppStateBuilder, ReadinessCheck};

/// The largest request body the service's own routes read (`PUT /v1/policies`); larger
/// bodies get 413.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The service's routes. The binary may `merge` more (the gateway's) before [`serve()`]; 404,
/// 405, 408, 413, 414 and 431 become problem+json in [`serve()`], so they cover merged routes
/// too, as do the listener's timeouts and connection cap ([`ConnectionLimits`]).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/quota", get(quota::check))
        .route("/v1/quota/refund", axum::routing::post(refund::refund))
        .route("/v1/counters", get(admin::list_counters))
        .route("/v1/counters/{*id}", axum::routing::delete(admin::reset_counter))
        .route("/v1/policies", get(admin::get_policies).put(admin::put_policies))
        .route("/v1/audit", get(audit::list))
        .route("/v1/usage", get(usage::http::get))
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}
