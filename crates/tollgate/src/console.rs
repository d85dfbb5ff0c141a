//! The console in `tollgate serve`: the pages at `/ui/`, a client of the same API on the same
//! listener (same guard, sessions and audit log), told which gateway routes and limits the
//! config holds.

use tollgate_console::{Console, RouteLimit};
use tollgate_server::AppState;

use crate::config::ConfigFile;

/// The console's routes, to merge into the service's router.
pub fn router(state: &AppState, file: &ConfigFile) -> axum::Router {
    let (access, decider) = (state.admin().clone(), state.decider().clone());
    Console::new(access, decider, state.tls().is_some(), routes(file)).router()
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
