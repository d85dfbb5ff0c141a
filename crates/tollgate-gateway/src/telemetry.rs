//! Gateway metrics through the `metrics` facade, labelled by partner and route.
//!
//! Counters: `tollgate_gateway_{received,delivered,held,duplicates,rejected,dead,fail_open}_total`
//! (interchanges), `tollgate_gateway_duplicate_transactions_total` (resent transactions removed
//! on `dedup = "transaction"` routes), `tollgate_gateway_dedup_skipped_total` (items metered
//! without that dedup while the fingerprint store was unavailable) and
//! `tollgate_gateway_delivery_errors_total` (failed delivery attempts, retried or not);
//! histogram `tollgate_gateway_delivery_latency_seconds` (receive to delivery); gauges
//! `tollgate_gateway_queue_depth{state}`, `tollgate_gateway_held{partner,route}`,
//! `tollgate_gateway_breaker_open` (1 while the quota breaker is open or probing) and
//! `tollgate_gateway_spool_files` / `tollgate_gateway_spool_bytes` (the spool directory);
//! counters `tollgate_gateway_landing_scans_total` (listings of the landing directories) and
//! `tollgate_gateway_spool_errors_total` (failed spool writes, see `spool::health`); gauge
//! `tollgate_gateway_spool_failing` (1 while the spool cannot be written).
//!
//! Every counter exists from start-up for each configured partner and route (at zero, see
//! [`register`]), so `rate()` and `increase()` in alerts see a series before its first event.
//!
//! Invariant: **label values come from the config, never from a file.** `partner` is a name
//! from `[[gateway.partner]]` or `unknown` (every sender not listed there, and input with no
//! sender); `route` is a name from `[[gateway.route]]` or empty. So the number of series is
//! bounded by the config, whatever senders, document types or garbage arrive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::Plan;
use crate::item::Item;

/// The `partner` label of every sender not listed in `[[gateway.partner]]`.
pub(crate) const UNKNOWN_PARTNER: &str = "unknown";

/// A per-partner, per-route counter of what happened to interchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    /// An interchange entered the pipeline.
    Received,
    /// Delivered to the target.
    Delivered,
    /// Held (over quota, or quota down with `on_unavailable = "hold"`).
    Held,
    /// Quarantined as a duplicate.
    Duplicate,
    /// Rejected (malformed or no route).
    Rejected,
    /// Dead-lettered.
    Dead,
    /// Delivered without metering because the quota service was unavailable.
    FailOpen,
    /// Resent transactions removed (counted by transaction, not by interchange).
    DuplicateTransactions,
    /// Metered without removing resent transactions: the fingerprint store was unavailable.
    DedupSkipped,
    /// A delivery attempt failed (retried later, or dead-lettered).
    DeliveryError,
}

impl Counter {
    /// Every counter, for [`register`].
    const ALL: [Self; 10] = [
        Self::Received,
        Self::Delivered,
        Self::Held,
        Self::Duplicate,
        Self::Rejected,
        Self::Dead,
        Self::FailOpen,
        Self::DuplicateTransactions,
        Self::DedupSkipped,
        Self::DeliveryError,
    ];
}

impl Counter {
    fn name(self) -> &'static str {
        match self {
            Self::Received => "tollgate_gateway_received_total",
            Self::Delivered => "tollgate_gateway_delivered_total",
            Self::Held => "tollgate_gateway_held_total",
            Self::Duplicate => "tollgate_gateway_duplicates_total",
            Self::Rejected => "tollgate_gateway_rejected_total",
            Self::Dead => "tollgate_gateway_dead_total",
            Self::FailOpen => "tollgate_gateway_fail_open_total",
            Self::DuplicateTransactions => "tollgate_gateway_duplicate_transactions_total",
            Self::DedupSkipped => "tollgate_gateway_dedup_skipped_total",
            Self::DeliveryError => "tollgate_gateway_delivery_errors_total",
        }
    }
}

/// The bounded `(partner, route)` label values of an item (see the module invariant).
struct Labels {
    partner: String,
    route: String,
}

impl Labels {
    fn of(item: &Item, plan: &Plan) -> Labels {
        let partner = match plan.partners.get(&item.sender) {
            Some(name) => name.clone(),
            None => UNKNOWN_PARTNER.to_owned(),
        };
        let route = item
            .route
            .as_ref()
            .filter(|r| plan.routes.iter().any(|x| &x.name == *r))
            .cloned()
            .unwrap_or_default();
        Labels { partner, route }
    }

    fn known_partner(&self) -> bool {
        self.partner != UNKNOWN_PARTNER
    }
}

/// Adds one to the counter for the item's partner and route.
pub(crate) fn count(counter: Counter, item: &Item, plan: &Plan) {
    count_by(counter, item, plan, 1);
}

/// Adds `n` to the counter for the item's partner and route.
pub(crate) fn count_by(counter: Counter, item: &Item, plan: &Plan, n: u64) {
    let Labels { partner, route } = Labels::of(item, plan);
    metrics::counter!(counter.name(), "partner" => partner, "route" => route).increment(n);
}

/// Records the receive-to-delivery latency of an item.
pub(crate) fn delivery_latency(item: &Item, plan: &Plan, latency: Duration) {
    let Labels { partner, route } = Labels::of(item, plan);
    metrics::histogram!("tollgate_gateway_delivery_latency_seconds",
        "partner" => partner, "route" => route)
    .record(latency.as_secs_f64());
}

/// Sets the number of live items in a state.
pub(crate) fn queue_depth(state: &'static str, depth: usize) {
    metrics::gauge!("tollgate_gateway_queue_depth", "state" => state).set(depth as f64);
}

/// Sets the number of held items of one partner and route (its metering id's group). Held
/// items of unknown senders have one group per sender, which one gauge cannot show: they are
/// counted in `tollgate_gateway_queue_depth{state="held"}` only.
pub(crate) fn held_depth(plan: &Plan, item: &Item, depth: usize) {
    let labels = Labels::of(item, plan);
    if !labels.known_partner() {
        return;
    }
    metrics::gauge!("tollgate_gateway_held", "partner" => labels.partner, "route" => labels.route)
        .set(depth as f64);
}

/// Creates every per-partner, per-route counter at zero (each configured partner, plus
/// `unknown`, with each configured route), the held gauges and delivery latency histograms of
/// those pairs, the quota call counters, the queue depth gauges and the breaker gauge.
pub(crate) fn register(plan: &Plan) {
    let mut partners: Vec<String> = plan.partners.values().cloned().collect();
    partners.push(UNKNOWN_PARTNER.to_owned());
    partners.sort();
    partners.dedup();
    for partner in &partners {
        for route in &plan.routes {
            for c in Counter::ALL {
                metrics::counter!(c.name(), "partner" => partner.clone(), "route" => route.name.clone())
                    .increment(0);
            }
            // Registered without a sample, so the series exist from start-up.
            let _ = metrics::histogram!("tollgate_gateway_delivery_latency_seconds",
                "partner" => partner.clone(), "route" => route.name.clone());
            if partner != UNKNOWN_PARTNER {
                // Held items found on start are counted in by the pipeline once it has loaded.
                metrics::gauge!("tollgate_gateway_held", "partner" => partner.clone(), "route" => route.name.clone())
                    .set(0.0);
            }
        }
    }
    for name in [
        "tollgate_gateway_quota_errors_total",
        "tollgate_gateway_quota_misconfigured_total",
        "tollgate_gateway_breaker_opened_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    metrics::counter!(LANDING_SCANS).increment(0);
    metrics::counter!(crate::spool::SPOOL_ERRORS).increment(0);
    metrics::gauge!(crate::spool::SPOOL_FAILING).set(0.0);
    for state in ["received", "held", "admitted"] {
        queue_depth(state, 0);
    }
    breaker_open(false);
}

/// Listings of the landing directories (all of them once per scan).
const LANDING_SCANS: &str = "tollgate_gateway_landing_scans_total";

/// One more listing of the landing directories: an idle gateway lists about once per
/// `poll_ms`, so this counter's rate shows a poller that wakes too often.
pub(crate) fn landing_scanned() {
    metrics::counter!(LANDING_SCANS).increment(1);
}

/// Sets the breaker gauge: 1 while the breaker in front of the quota service refuses calls.
pub(crate) fn breaker_open(open: bool) {
    metrics::gauge!("tollgate_gateway_breaker_open").set(if open { 1.0 } else { 0.0 });
}

/// Spool files on disk and their bytes, published as `tollgate_gateway_spool_files` and
/// `tollgate_gateway_spool_bytes` on every change.
#[derive(Debug, Default)]
pub(crate) struct SpoolUsage {
    files: AtomicU64,
    bytes: AtomicU64,
}

impl SpoolUsage {
    /// One spool file of `bytes` written.
    pub(crate) fn add(&self, bytes: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.publish();
    }

    /// One spool file of `bytes` deleted.
    pub(crate) fn remove(&self, bytes: u64) {
        let sub = |n: u64| move |v: u64| Some(v.saturating_sub(n));
        let _ = self.files.fetch_update(Ordering::Relaxed, Ordering::Relaxed, sub(1));
        let _ = self.bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, sub(bytes));
        self.publish();
    }

    /// Counts the files already in `dir` (at open) and publishes the totals.
    pub(crate) fn count(&self, dir: &std::path::Path) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if let Ok(meta) = entry.metadata()
                && meta.is_file()
            {
                self.files.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(meta.len(), Ordering::Relaxed);
            }
        }
        self.publish();
    }

    /// Sets the gauges to the current totals.
    pub(crate) fn publish(&self) {
        let files = self.files.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        metrics::gauge!("tollgate_gateway_spool_files").set(files as f64);
        metrics::gauge!("tollgate_gateway_spool_bytes").set(bytes as f64);
    }
}
