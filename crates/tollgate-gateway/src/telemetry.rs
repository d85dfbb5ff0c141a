//! Gateway metrics through the `metrics` facade, labelled by partner and route.
//!
//! Counters: `tollgate_gateway_{received,delivered,held,duplicates,rejected,dead,fail_open}_total`;
//! histogram `tollgate_gateway_delivery_latency_seconds` (receive to delivery); gauges
//! `tollgate_gateway_queue_depth{state}` and `tollgate_gateway_held{partner,route}`.

use std::time::Duration;

use crate::item::Item;

/// A pipeline event worth counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
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
}

impl Event {
    fn metric(self) -> &'static str {
        match self {
            Self::Received => "tollgate_gateway_received_total",
            Self::Delivered => "tollgate_gateway_delivered_total",
            Self::Held => "tollgate_gateway_held_total",
            Self::Duplicate => "tollgate_gateway_duplicates_total",
            Self::Rejected => "tollgate_gateway_rejected_total",
            Self::Dead => "tollgate_gateway_dead_total",
            Self::FailOpen => "tollgate_gateway_fail_open_total",
        }
    }
}

/// Counts one event for the item's partner and route.
pub fn count(event: Event, item: &Item) {
    let route = item.route.clone().unwrap_or_default();
    metrics::counter!(event.metric(), "partner" => item.partner.clone(), "route" => route)
        .increment(1);
}

/// Records the receive-to-delivery latency of an item.
pub fn delivery_latency(item: &Item, latency: Duration) {
    let route = item.route.clone().unwrap_or_default();
    metrics::histogram!("tollgate_gateway_delivery_latency_seconds",
        "partner" => item.partner.clone(), "route" => route)
    .record(latency.as_secs_f64());
}

/// Sets the number of live items in a state.
pub fn queue_depth(state: &'static str, depth: usize) {
    metrics::gauge!("tollgate_gateway_queue_depth", "state" => state).set(depth as f64);
}

/// Sets the number of held items of one partner and route.
pub fn held_depth(item: &Item, depth: usize) {
    let route = item.route.clone().unwrap_or_default();
    metrics::gauge!("tollgate_gateway_held", "partner" => item.partner.clone(), "route" => route)
        .set(depth as f64);
}
