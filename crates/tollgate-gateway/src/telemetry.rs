//! Gateway metrics through the `metrics` facade, labelled by partner and route.
//!
//! Counters: `tollgate_gateway_{received,delivered,held,duplicates,rejected,dead,fail_open}_total`
//! (interchanges), `tollgate_gateway_duplicate_transactions_total` (resent transactions removed
//! on `dedup = "transaction"` routes) and `tollgate_gateway_dedup_skipped_total` (items metered
//! without that dedup while the fingerprint store was unavailable);
//! histogram `tollgate_gateway_delivery_latency_seconds` (receive to delivery); gauges
//! `tollgate_gateway_queue_depth{state}` and `tollgate_gateway_held{partner,route}`.
//!
//! Invariant: **label values come from the config, never from a file.** `partner` is a name
//! from `[[gateway.partner]]` or `unknown` (every sender not listed there, and input with no
//! sender); `route` is a name from `[[gateway.route]]` or empty. So the number of series is
//! bounded by the config, whatever senders, document types or garbage arrive.

use std::time::Duration;

use crate::config::Plan;
use crate::item::Item;

/// The `partner` label of every sender not listed in `[[gateway.partner]]`.
pub const UNKNOWN_PARTNER: &str = "unknown";

/// A per-partner, per-route counter of what happened to interchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
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
pub fn count(counter: Counter, item: &Item, plan: &Plan) {
    count_by(counter, item, plan, 1);
}

/// Adds `n` to the counter for the item's partner and route.
pub fn count_by(counter: Counter, item: &Item, plan: &Plan, n: u64) {
    let Labels { partner, route } = Labels::of(item, plan);
    metrics::counter!(counter.name(), "partner" => partner, "route" => route).increment(n);
}

/// Records the receive-to-delivery latency of an item.
pub fn delivery_latency(item: &Item, plan: &Plan, latency: Duration) {
    let Labels { partner, route } = Labels::of(item, plan);
    metrics::histogram!("tollgate_gateway_delivery_latency_seconds",
        "partner" => partner, "route" => route)
    .record(latency.as_secs_f64());
}

/// Sets the number of live items in a state.
pub fn queue_depth(state: &'static str, depth: usize) {
    metrics::gauge!("tollgate_gateway_queue_depth", "state" => state).set(depth as f64);
}

/// Sets the number of held items of one partner and route (its metering id's group). Held
/// items of unknown senders have one group per sender, which one gauge cannot show: they are
/// counted in `tollgate_gateway_queue_depth{state="held"}` only.
pub fn held_depth(plan: &Plan, item: &Item, depth: usize) {
    let labels = Labels::of(item, plan);
    if !labels.known_partner() {
        return;
    }
    metrics::gauge!("tollgate_gateway_held", "partner" => labels.partner, "route" => labels.route)
        .set(depth as f64);
}
