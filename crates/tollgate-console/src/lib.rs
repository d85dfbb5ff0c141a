//! The Tollgate console: web pages at `/ui/` (overview, partner, queue, limits, health, audit)
//! for the teams who own the limits.
//!
//! The console is a client of Tollgate's own HTTP API: its pages are static, and their script
//! reads and acts through `/v1/*` with the same credentials and the same audit log as any
//! script. What it adds on the server:
//! - the pages and their assets, embedded in the binary (module `pages`, sized by [`page_weights`]);
//! - login and logout, which turn a token into a session cookie and a CSRF token (module `login`),
//!   with failed logins limited per source address
//!   ([`tollgate_http::failed_logins`]);
//! - `GET /ui/api/overview`, one page of the overview computed from the counters
//!   ([`overview`]), and `GET /ui/api/routes`, the gateway's route limits; both ask the admin
//!   guard for read access, as `/v1/counters` does.
//!
//! An unknown page under `/ui/` is an HTML page saying so (status 404) with a link to the
//! overview; an unknown path under `/ui/api/` is a problem+json 404, as under `/v1/`.
//!
//! Every answer under `/ui/` carries a Content-Security-Policy that allows only the console's
//! own script and style (no inline script), `frame-ancestors 'none'` and `nosniff`; partner
//! text (metering ids, sender ids, reasons) is only ever set as text by the script.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod bursting;
mod login;
mod overview;
mod pages;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, HeaderValue, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Json, Redirect, Response};
use axum::routing::{any, get, post};
use tollgate_gateway::QueueTally;
use tollgate_http::AccessGuard;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;
use tollgate_policy::Decider;
use tollgate_quota::Store;

pub use bursting::{Burst, MAX_EXAMINED, SURGE, Traffic, TrafficSource};
pub use overview::{
    OverviewPage, OverviewQuery, RouteLimit, Row, RowState, SortKey, Sources, overview,
};
pub use pages::page_weights;

/// The policy sent with every console answer: own script and style only, no inline script,
/// no framing, no plug-ins, forms and connections to this origin only.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

/// What the console's handlers need.
#[derive(Clone)]
pub struct Console {
    access: AccessGuard,
    decider: Decider,
    tls: bool,
    routes: Arc<[RouteLimit]>,
    /// The gateway's queue tally, when a gateway runs.
    queue: Option<QueueTally>,
    /// The usage history's recent traffic, for the bursting view.
    traffic: Option<Arc<dyn TrafficSource>>,
    /// The metering ids the gateway's routes expect (route × configured partner).
    expected: Arc<[String]>,
    /// The most live counters one view is made from (see [`MAX_COUNTERS`]).
    max_counters: usize,
    /// One view's read of the counters at a time: each holds up to `max_counters` of them.
    reading: Arc<tokio::sync::Semaphore>,
}

/// The most live counters the overview and the bursting view read per refresh: beyond it a
/// view is made from the first of them by metering id and says so (`partial`), so a store of
/// a million counters costs a refresh what 100,000 do (BENCHMARKS.md, console).
pub const MAX_COUNTERS: usize = 100_000;

/// The store's counters for one view: at most [`Console::max_counters`] of them.
struct CounterRead {
    counters: Vec<tollgate_quota::CounterInfo>,
    /// Set when the store holds more than were read.
    partial: bool,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Console {
    /// A console behind `access` (the API's own guard, sessions and audit log), showing the
    /// counters and policies of `decider` and the gateway's `routes` (empty without a
    /// gateway); `tls` when the listener speaks HTTPS (cookies are then `Secure`).
    pub fn new(access: AccessGuard, decider: Decider, tls: bool, routes: Vec<RouteLimit>) -> Self {
        Self {
            access,
            decider,
            tls,
            routes: routes.into(),
            queue: None,
            traffic: None,
            expected: Arc::new([]),
            max_counters: MAX_COUNTERS,
            reading: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Makes each view from at most `n` live counters (at least 1) instead of [`MAX_COUNTERS`].
    pub fn max_counters(mut self, n: usize) -> Self {
        self.max_counters = n.max(1);
        self
    }

    /// Shows the gateway queue's counts (held, delivered, duplicate, rejected) in the overview.
    pub fn queue(mut self, tally: QueueTally) -> Self {
        self.queue = Some(tally);
        self
    }

    /// Reads recent traffic for the bursting view from `source`; `expected` are the metering
    /// ids the routes expect (so a silent partner is seen although it has no counter).
    pub fn traffic(mut self, source: Arc<dyn TrafficSource>, expected: Vec<String>) -> Self {
        self.traffic = Some(source);
        self.expected = expected.into();
        self
    }

    /// The console's routes: `/` (a redirect), `/ui/…` pages, assets, login and its JSON.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(|| async { Redirect::to("/ui/") }))
            .route("/ui", get(|| async { Redirect::to("/ui/") }))
            .route("/ui/", get(pages::overview))
            .route("/ui/partner", get(pages::partner))
            .route("/ui/queue", get(pages::queue))
            .route("/ui/limits", get(pages::limits))
            .route("/ui/health", get(pages::health))
            .route("/ui/audit", get(pages::audit))
            .route("/ui/login", get(pages::login).post(login::login))
            .route("/ui/logout", post(login::logout))
            .route("/ui/assets/console.js", get(pages::script))
            .route("/ui/assets/console.css", get(pages::style))
            .route("/ui/api/session", get(login::session))
            .route("/ui/api/overview", get(overview_json))
            .route("/ui/api/bursting", get(bursting_json))
            .route("/ui/api/routes", get(routes_json))
            .route("/ui/api", any(api_not_found))
            .route("/ui/api/{*rest}", any(api_not_found))
            .route("/ui/{*rest}", any(pages::not_found))
            .layer(axum::middleware::from_fn(security_headers))
            .with_state(self)
    }
}

/// Adds the console's security headers to every answer.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.entry(CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    res
}

/// `GET /ui/api/overview`: one page of [`overview::overview`].
async fn overview_json(
    State(c): State<Console>,
    headers: HeaderMap,
    query: Result<Query<overview::OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    c.access.allow(&headers, Permission::Read)?;
    let Query(q) = query.map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
            .detail(e.body_text())
    })?;
    let read = counters(&c, &q.id_prefix(&c.routes)).await?;
    let policies = c.decider.policies().current();
    let queue = c.queue.as_ref().map(QueueTally::snapshot).unwrap_or_default();
    let src =
        Sources { counters: &read.counters, policies: &policies, routes: &c.routes, queue: &queue };
    let mut page = overview::overview(src, jiff::Timestamp::now(), &q);
    page.partial = read.partial.then_some(read.counters.len());
    Ok(Json(page).into_response())
}

/// The first [`Console::max_counters`] live counters by metering id among those starting with
/// `prefix`, read one view at a time.
async fn counters(c: &Console, prefix: &str) -> Result<CounterRead, Problem> {
    let unavailable = |detail: String| {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Store unavailable")
            .detail(detail)
    };
    let permit = c.reading.clone().acquire_owned().await.map_err(|e| unavailable(e.to_string()))?;
    let listing = tollgate_quota::CounterListing { prefix, after: None, limit: c.max_counters };
    let page =
        c.decider.store().counters(&listing).await.map_err(|e| unavailable(e.to_string()))?;
    Ok(CounterRead { counters: page.counters, partial: page.next.is_some(), _permit: permit })
}

/// `GET /ui/api/bursting`: the [`bursting`] view.
async fn bursting_json(State(c): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    c.access.allow(&headers, Permission::Read)?;
    let read = counters(&c, "").await?;
    let policies = c.decider.policies().current();
    let queue = c.queue.as_ref().map(QueueTally::snapshot).unwrap_or_default();
    let src =
        Sources { counters: &read.counters, policies: &policies, routes: &c.routes, queue: &queue };
    let now = jiff::Timestamp::now();
    let mut rows = overview::rows(src, now);
    let ids = bursting::candidates(&mut rows, &c.expected);
    let traffic = match &c.traffic {
        Some(t) => t.traffic(&ids, now).await,
        None => vec![Traffic::default(); ids.len()],
    };
    Ok(Json(bursting::bursting(&rows, &ids, &traffic)).into_response())
}

/// An unknown path under `/ui/api`: a JSON 404, as the API answers.
async fn api_not_found(uri: axum::http::Uri) -> Problem {
    Problem::not_found(uri.path())
}

/// `GET /ui/api/routes`: the gateway's routes and their limits.
async fn routes_json(State(c): State<Console>, headers: HeaderMap) -> Result<Response, Problem> {
    c.access.allow(&headers, Permission::Read)?;
    Ok(Json(&*c.routes).into_response())
}
