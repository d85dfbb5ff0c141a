//! The console in `tollgate serve`: the pages at `/ui/`, a client of the same API on the same
//! listener (same guard, sessions and audit log), told which gateway routes and limits the
//! config holds, shown the gateway queue's tally, and reading recent traffic for its bursting
//! view from the usage history.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use tollgate_console::{Console, RouteLimit, Traffic, TrafficSource};
use tollgate_gateway::Gateway;
use tollgate_server::AppState;
use tollgate_server::usage::UsageHistory;

use crate::config::ConfigFile;

/// The console's routes, to merge into the service's router.
pub fn router(state: &AppState, file: &ConfigFile, gateway: Option<&Gateway>) -> axum::Router {
    let (access, decider) = (state.admin().clone(), state.decider().clone());
    let mut console = Console::new(access, decider, state.tls().is_some(), routes(file));
    if let Some(n) = file.server.console_max_counters {
        console = console.max_counters(n);
    }
    if let Some(gw) = gateway {
        console = console.queue(gw.tally());
    }
    if let Some(usage) = state.usage() {
        console = console.traffic(Arc::new(History(usage.clone())), expected(file));
    }
    console.router()
}

/// The gateway's routes and their limits, as the console shows them.
fn routes(file: &ConfigFile) -> Vec<RouteLimit> {
    let routes = file.gateway.iter().flat_map(|g| g.route.iter());
    routes
        .map(|r| RouteLimit {
            name: r.name.get_ref().to_string(),
            documents: r.documents.iter().map(|d| d.get_ref().clone()).collect(),
            metering_id: r.metering_id.get_ref().as_str().to_owned(),
            limit: r.limit,
            interval: r.interval.get_ref().get(),
            unit: r.unit,
        })
        .collect()
}

/// The metering ids the routes expect: each route's template for each configured partner.
fn expected(file: &ConfigFile) -> Vec<String> {
    let Some(g) = &file.gateway else { return Vec::new() };
    let mut partners: Vec<String> = g.partner.iter().map(|p| p.name.to_string()).collect();
    partners.sort();
    partners.dedup();
    g.route
        .iter()
        .flat_map(|r| {
            let template =
                r.metering_id.get_ref().as_str().replace("{route}", &r.name.get_ref().to_string());
            partners.iter().map(move |p| template.replace("{partner}", p))
        })
        .collect()
}

/// The usage history as the console's traffic source: the units each id was offered.
struct History(UsageHistory);

impl TrafficSource for History {
    fn traffic<'a>(
        &'a self,
        ids: &'a [String],
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = Vec<Traffic>> + Send + 'a>> {
        Box::pin(async move {
            let hour = now - SignedDuration::from_hours(1);
            let day = now - SignedDuration::from_hours(24);
            let week = now - SignedDuration::from_hours(7 * 24);
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let buckets = self.0.series(id, week, now).await.unwrap_or_default();
                let mut t = Traffic::default();
                let mut before = 0u64;
                for b in &buckets {
                    let units = [b.refused, b.held, b.duplicate]
                        .into_iter()
                        .fold(b.admitted, u64::saturating_add);
                    if b.start >= hour {
                        t.last_hour = t.last_hour.saturating_add(units);
                    } else {
                        before = before.saturating_add(units);
                    }
                    if b.start >= day {
                        t.last_day = t.last_day.saturating_add(units);
                    }
                }
                t.usual_per_hour = before as f64 / (7.0 * 24.0 - 1.0);
                out.push(t);
            }
            out
        })
    }
}
