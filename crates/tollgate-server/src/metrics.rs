//! Prometheus metrics through the `metrics` facade, rendered at `GET /metrics`.
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `tollgate_decisions_total{outcome,transport}` | counter | `/v1/quota` answers (`transport="http"`) and gRPC `ShouldRateLimit` decisions, one per decided descriptor or refused call (`transport="grpc"`), by outcome |
//! | `tollgate_quota_replays_total` | counter | `/v1/quota` answers given again from a `quota-request-id` record (nothing counted) |
//! | `tollgate_quota_refunds_total{result}` | counter | `POST /v1/quota/refund` answers: `given_back`, `window_ended`, `unknown`, `conflict`, `error` |
//! | `tollgate_quota_refunded_units_total` | counter | units given back by refunds |
//! | `tollgate_store_latency_seconds` | histogram | time the store took to decide |
//! | `tollgate_live_counters` | gauge | counters held by a memory or embedded store, sampled at scrape time (expired ones count until the next sweep, within a second) |
//! | `tollgate_policy_reloads_total` | counter | policy sets taken from the file |
//! | `tollgate_policy_reload_errors_total` | counter | policy files refused |
//! | `tollgate_policy_error` | gauge | 1 while the last policy file was refused |
//! | `tollgate_store_degraded` | gauge | 1 while the shared store is not answering (sampled) |
//! | `tollgate_tls_reloads_total` | counter | rotated certificate pairs taken into use |
//! | `tollgate_tls_reload_errors_total` | counter | changed certificate pairs refused |
//! | `tollgate_usage_flush_errors_total` | counter | usage history writes that failed (retried; see [`crate::usage`]) |
//! | `tollgate_usage_untracked_total` | counter | decisions for ids beyond `usage_max_ids`, not kept |
//! | `tollgate_usage_dropped_total` | counter | usage deltas dropped while too many waited to be written, and fields a Redis usage key refused (see [`crate::usage`]) |
//! | `tollgate_usage_tracked_ids` | gauge | metering ids the usage history tracks |
//!
//! The recorder is installed once per process ([`install`] is idempotent), so several servers
//! in one test process share it.

use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use tollgate_http::tls::{TLS_RELOAD_ERRORS, TLS_RELOADS};
use tollgate_policy::{DecisionOutcome, Transport};

use crate::state::AppState;

/// `/v1/quota` answers by outcome.
pub const DECISIONS: &str = "tollgate_decisions_total";
/// Store decision latency.
pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";
/// Counters held by a memory or embedded store (expired ones until the next sweep, within 1 s).
pub const LIVE_COUNTERS: &str = "tollgate_live_counters";
/// Policy sets taken from the file.
pub const POLICY_RELOADS: &str = "tollgate_policy_reloads_total";
/// Policy files refused.
pub const POLICY_RELOAD_ERRORS: &str = "tollgate_policy_reload_errors_total";
/// 1 while the last policy file was refused.
pub const POLICY_ERROR: &str = "tollgate_policy_error";
/// 1 while the shared store is not answering.
pub const STORE_DEGRADED: &str = "tollgate_store_degraded";
/// `/v1/quota` answers given again from a `quota-request-id` record.
pub const REPLAYS: &str = "tollgate_quota_replays_total";
/// `POST /v1/quota/refund` answers, by result.
pub const REFUNDS: &str = "tollgate_quota_refunds_total";
/// Units given back by refunds.
pub const REFUNDED_UNITS: &str = "tollgate_quota_refunded_units_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often buffered histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder (once per process) and returns its handle. If another
/// recorder was installed first, a detached handle is returned and `/metrics` stays empty.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(STORE_LATENCY.into()),
                    &[
                        0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5,
                        0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
                    ],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(handle) => {
                    // Histograms buffer raw samples until drained; drain them even when nobody
                    // scrapes, so memory stays bounded.
                    let upkeep = handle.clone();
                    let spawned = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(
                        move || {
                            loop {
                                std::thread::sleep(UPKEEP_EVERY);
                                upkeep.run_upkeep();
                            }
                        },
                    );
                    if let Err(e) = spawned {
                        tracing::warn!(error = %e, "cannot start the metrics upkeep thread");
                    }
                    handle
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a metrics recorder is already installed");
                    PrometheusBuilder::new().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// Handles of the per-request metrics, registered once: recording through a handle is an
/// atomic add, where the `counter!` macro would look the metric up on every request.
struct Hot {
    /// By transport, then outcome (both label sets are fixed: bounded series).
    decisions: [[metrics::Counter; 8]; 3],
    store_latency: metrics::Histogram,
}

static HOT: OnceLock<Hot> = OnceLock::new();

fn hot() -> &'static Hot {
    HOT.get_or_init(|| {
        // Handles must be registered with the Prometheus recorder, not the no-op default.
        install();
        Hot {
            decisions: Transport::ALL.map(|t| {
                DecisionOutcome::ALL.map(|o| {
                    metrics::counter!(DECISIONS, "outcome" => o.label(), "transport" => t.label())
                })
            }),
            store_latency: metrics::histogram!(STORE_LATENCY),
        }
    })
}

/// Registers the decision counters (every outcome over every transport) and the store latency
/// histogram, so dashboards and alerts find them, at zero, from start-up.
pub fn register() {
    hot();
}

/// Counts one `/v1/quota` answer.
pub fn decision(outcome: DecisionOutcome) {
    decision_via(Transport::Http, outcome);
}

/// Counts one decision asked over `transport`.
pub fn decision_via(transport: Transport, outcome: DecisionOutcome) {
    // Both ALL arrays are in declaration order, so a variant's discriminant is its index.
    hot().decisions[transport as usize][outcome as usize].increment(1);
}

/// Counts one answer replayed from a `quota-request-id` record.
pub fn replayed() {
    metrics::counter!(REPLAYS).increment(1);
}

/// Counts one refund answer by `result`, and the units it gave back.
pub fn refund(result: &'static str, units: u64) {
    metrics::counter!(REFUNDS, "result" => result).increment(1);
    if units > 0 {
        metrics::counter!(REFUNDED_UNITS).increment(units);
    }
}

/// Records how long the store took.
pub fn store_latency(d: Duration) {
    hot().store_latency.record(d.as_secs_f64());
}

/// Counts a policy set taken from the file.
pub fn policy_reloaded() {
    metrics::counter!(POLICY_RELOADS).increment(1);
}

/// Counts a refused policy file and raises the error gauge.
pub fn policy_reload_failed() {
    metrics::counter!(POLICY_RELOAD_ERRORS).increment(1);
    policy_error(true);
}

/// Sets the policy error gauge.
pub fn policy_error(failing: bool) {
    metrics::gauge!(POLICY_ERROR).set(if failing { 1.0 } else { 0.0 });
}

/// `GET /metrics`: the Prometheus text format. Samples the live-counter gauge first.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    summary = "Prometheus metrics (text exposition format)",
    responses((status = 200, description = "The metrics.", body = String, content_type = "text/plain; version=0.0.4")),
)]
pub async fn render(State(state): State<AppState>) -> Response {
    // Counted for stores held in this process, without listing them; for Redis it would mean
    // a SCAN of the whole shared key space on every scrape, so the gauge is left out there.
    if let Some(held) = state.store().held_counters() {
        metrics::gauge!(LIVE_COUNTERS).set(held as f64);
    }
    let degraded = matches!(state.store().health(), tollgate_quota::StoreHealth::Degraded(_));
    metrics::gauge!(STORE_DEGRADED).set(if degraded { 1.0 } else { 0.0 });
    // Make sure the policy metrics exist even before the first reload (adding zero keeps the
    // value: a refused file stays visible).
    metrics::counter!(POLICY_RELOAD_ERRORS).increment(0);
    metrics::counter!(POLICY_RELOADS).increment(0);
    metrics::gauge!(POLICY_ERROR).increment(0.0);
    if state.tls().is_some() {
        metrics::counter!(TLS_RELOADS).increment(0);
        metrics::counter!(TLS_RELOAD_ERRORS).increment(0);
    }
    let body = state.metrics().render();
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}
