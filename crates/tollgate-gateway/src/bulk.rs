//! Bulk actions: release or purge every item a [`QueueFilter`] keeps ("purge all held of
//! CarrierXYZ received before 05:00"), as a job that runs in the background and reports its
//! progress.
//!
//! - `POST /v1/queue/purge?<filter>` and `POST /v1/queue/release?<filter>` answer 202 with a
//!   `Location: /v1/queue/jobs/{id}`; `GET` there gives `total`, `done`, `skipped` and `state`
//!   (`running`, `done`, `stopped`, `failed`); `DELETE` there stops the job after the pages
//!   under way; `GET /v1/queue/jobs` lists the recent jobs, newest first.
//!
//! Invariants:
//! - **Exactly once, by the pipeline's rules.** A job acts through the same operator events as
//!   `DELETE /v1/queue/{id}` and `POST /v1/queue/{id}/release`, one page of [`PAGE`] items at a
//!   time (the pipeline applies a page in one spool commit). An item another operator purged
//!   or released first is skipped, never acted on twice; an item whose delivery is under way
//!   is skipped too (`skipped` counts them).
//! - **The filter's items at the start, not later arrivals.** A job's filter gets a `to` bound
//!   of its start time, so a partner that keeps sending does not keep the job running.
//! - **One audit record per job**, when it ends, naming the filter, the total and what was
//!   done; one job runs at a time (a second answers 409 with the running one's `Location`).
//! - **Bounded.** The most recent [`KEPT`] jobs are kept, in memory only; a restart forgets
//!   them (what they did is in the queue and the audit log).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header::LOCATION};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate_http::problem::Problem;
use tollgate_http::user::{Actor, Permission};

use crate::filter::{FilterQuery, QueueFilter};
use crate::item::rfc3339;
use crate::pipeline::AdminOp;
use crate::queue::{QueueApi, invalid, total, unavailable};

/// Items acted on per page (one pipeline batch).
pub(crate) const PAGE: usize = 500;
/// Jobs kept for `GET /v1/queue/jobs`.
pub(crate) const KEPT: usize = 32;

mod pages;
pub(crate) use pages::{Pages, each_page};

/// What a job does to each item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BulkAction {
    /// `POST /v1/queue/purge`.
    Purge,
    /// `POST /v1/queue/release`.
    Release,
}

impl BulkAction {
    fn op(self) -> AdminOp {
        match self {
            Self::Purge => AdminOp::Purge,
            Self::Release => AdminOp::Release,
        }
    }

    fn audit_action(self) -> &'static str {
        match self {
            Self::Purge => "queue.purge_filter",
            Self::Release => "queue.release_filter",
        }
    }
}

/// Where a job is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum JobState {
    Running,
    Done,
    Stopped,
    Failed,
}

/// One bulk job.
struct Job {
    id: u64,
    action: BulkAction,
    filter: QueueFilter,
    who: Actor,
    started_ms: i64,
    total: AtomicU64,
    done: AtomicU64,
    skipped: AtomicU64,
    stop: AtomicBool,
    end: Mutex<Option<(JobState, i64, Option<String>)>>,
}

/// A job as `GET /v1/queue/jobs/{id}` answers it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct JobView {
    /// The job's id.
    id: u64,
    /// `purge` or `release`.
    #[schema(value_type = String, pattern = "^(purge|release)$")]
    action: BulkAction,
    /// The filter, as `GET /v1/queue` takes it (with `to` set to the job's start when absent).
    #[schema(value_type = Object)]
    filter: QueueFilter,
    /// Items the filter kept when the job started.
    total: u64,
    /// Items purged or released so far.
    done: u64,
    /// Items another operator acted on first, or whose delivery was under way.
    skipped: u64,
    /// `running`, `done`, `stopped` or `failed`.
    #[schema(value_type = String, pattern = "^(running|done|stopped|failed)$")]
    state: JobState,
    /// Who started it.
    who: String,
    /// When it started.
    #[schema(format = DateTime)]
    started_at: String,
    /// When it ended.
    #[schema(format = DateTime)]
    finished_at: Option<String>,
    /// Why it failed.
    error: Option<String>,
}

impl Job {
    fn view(&self) -> JobView {
        let end = self.end.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let (state, finished, error) = match end {
            Some((s, at, e)) => (s, Some(rfc3339(at)), e),
            None => (JobState::Running, None, None),
        };
        JobView {
            id: self.id,
            action: self.action,
            filter: self.filter.clone(),
            total: self.total.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            state,
            who: self.who.name.clone(),
            started_at: rfc3339(self.started_ms),
            finished_at: finished,
            error,
        }
    }

    fn running(&self) -> bool {
        self.end.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }
}

/// The jobs of one gateway; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Jobs(Arc<Mutex<VecDeque<Arc<Job>>>>);

impl Jobs {
    fn find(&self, id: u64) -> Option<Arc<Job>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).iter().find(|j| j.id == id).cloned()
    }

    /// Adds `make(id)` unless a job is running (then `Err` with the running one).
    fn start(&self, make: impl FnOnce(u64) -> Job) -> Result<Arc<Job>, Arc<Job>> {
        let mut jobs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = jobs.iter().find(|j| j.running()) {
            return Err(running.clone());
        }
        let id = jobs.back().map_or(1, |j| j.id + 1);
        let job = Arc::new(make(id));
        jobs.push_back(job.clone());
        while jobs.len() > KEPT {
            jobs.pop_front();
        }
        Ok(job)
    }
}

fn location(id: u64) -> String {
    format!("/v1/queue/jobs/{id}")
}

/// The answers of `POST /v1/queue/purge` and `POST /v1/queue/release`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum BulkAnswers {
    /// 202: started.
    #[response(
        status = 202,
        description = "The job started.",
        headers(("Location" = String, description = "`/v1/queue/jobs/{id}`: the job's progress."))
    )]
    Started(JobView),
    /// 400: a bad or empty filter.
    #[response(
        status = 400,
        description = "A filter parameter is invalid, or the filter is empty (problem invalid-query, naming it and the value).",
        content_type = "application/problem+json"
    )]
    BadFilter(tollgate_http::openapi::ProblemDoc),
    /// 409: another job runs.
    #[response(
        status = 409,
        description = "A bulk job is running (problem bulk-job-running, with its Location).",
        content_type = "application/problem+json"
    )]
    Running(tollgate_http::openapi::ProblemDoc),
    /// 503: the spool failed.
    #[response(
        status = 503,
        description = "The spool could not be read (problem gateway-unavailable).",
        content_type = "application/problem+json"
    )]
    Unavailable(tollgate_http::openapi::ProblemDoc),
}

/// `POST /v1/queue/purge`.
#[utoipa::path(
    post,
    path = "/v1/queue/purge",
    tag = "gateway",
    operation_id = "purgeQueueFilter",
    summary = "Purge every item a filter keeps, as a background job",
    params(FilterQuery),
    responses(BulkAnswers, tollgate_http::openapi::AccessRefused),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn purge(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    query: Result<Query<FilterQuery>, QueryRejection>,
    pairs: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    begin(api, headers, query, pairs, BulkAction::Purge).await
}

/// `POST /v1/queue/release`.
#[utoipa::path(
    post,
    path = "/v1/queue/release",
    tag = "gateway",
    operation_id = "releaseQueueFilter",
    summary = "Release (deliver without metering) every item a filter keeps, as a background job",
    params(FilterQuery),
    responses(BulkAnswers, tollgate_http::openapi::AccessRefused),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn release(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    query: Result<Query<FilterQuery>, QueryRejection>,
    pairs: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    begin(api, headers, query, pairs, BulkAction::Release).await
}

/// The parameters a bulk filter takes.
const FILTER_PARAMETERS: [&str; 5] = ["partner", "route", "state", "from", "to"];

/// A bulk action deletes or delivers without metering: a parameter it does not take (a
/// misspelt `parnter=`) or an empty partner, route or state (a script's unset variable) is
/// refused, where the listing reads them as absent and the action would widen to every item.
fn refused_parameter(
    pairs: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Option<Response> {
    let invalid = || Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query");
    let pairs = match pairs {
        Ok(Query(pairs)) => pairs,
        Err(e) => return Some(invalid().detail(e.body_text()).into_response()),
    };
    pairs.into_iter().find_map(|(name, value)| {
        let why = if !FILTER_PARAMETERS.contains(&name.as_str()) {
            format!(
                "a bulk action takes only {}: {name:?} is not one of them",
                FILTER_PARAMETERS.join(", ")
            )
        } else if value.is_empty() && !matches!(name.as_str(), "from" | "to") {
            format!("{name} is empty: name one, or leave the parameter out")
        } else {
            return None;
        };
        let problem = invalid().detail(why).with("invalid_parameter", name).with("value", value);
        Some(problem.into_response())
    })
}

async fn begin(
    api: QueueApi,
    headers: HeaderMap,
    query: Result<Query<FilterQuery>, QueryRejection>,
    pairs: Result<Query<Vec<(String, String)>>, QueryRejection>,
    action: BulkAction,
) -> Response {
    let who = match api.guard.allow(&headers, Permission::Queue) {
        Ok(who) => who,
        Err(p) => return p.into_response(),
    };
    if let Some(refused) = refused_parameter(pairs) {
        return refused;
    }
    let Query(q) = match query {
        Ok(q) => q,
        Err(e) => {
            return Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
                .detail(e.body_text())
                .into_response();
        }
    };
    let mut filter = match QueueFilter::parse(&q) {
        Ok(f) => f,
        Err(bad) => return invalid(bad),
    };
    if filter == QueueFilter::default() {
        return invalid(crate::filter::BadParameter {
            name: "partner",
            value: String::new(),
            why: "a bulk action needs a filter: at least one of partner, route, state, from or \
                  to"
            .into(),
        });
    }
    let started_ms = api.spool.now_ms();
    filter.to_ms = Some(filter.to_ms.map_or(started_ms + 1, |t| t.min(started_ms + 1)));
    let make = |id| Job {
        id,
        action,
        filter: filter.clone(),
        who,
        started_ms,
        total: AtomicU64::new(0),
        done: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        end: Mutex::new(None),
    };
    let job = match api.jobs.start(make) {
        Ok(job) => job,
        Err(running) => {
            let at = location(running.id);
            let problem =
                Problem::new(StatusCode::CONFLICT, "bulk-job-running", "A bulk job is running")
                    .detail(format!(
                        "bulk job {} ({:?}) is still running: stop it or wait for it to end",
                        running.id, running.action
                    ))
                    .with("location", at.clone());
            return ([(LOCATION, at)], problem).into_response();
        }
    };
    let spool = api.spool.clone();
    let f = job.filter.clone();
    match tokio::task::spawn_blocking(move || total(&spool, &f)).await {
        Ok(Ok(n)) => job.total.store(n, Ordering::Relaxed),
        Ok(Err(e)) => return failed_to_start(&job, e.to_string()),
        Err(e) => return failed_to_start(&job, e.to_string()),
    }
    tokio::spawn(run(api, job.clone()));
    (StatusCode::ACCEPTED, [(LOCATION, location(job.id))], Json(job.view())).into_response()
}

fn failed_to_start(job: &Job, e: String) -> Response {
    let now = jiff::Timestamp::now().as_millisecond();
    *job.end.lock().unwrap_or_else(PoisonError::into_inner) =
        Some((JobState::Failed, now, Some(e.clone())));
    unavailable(e)
}

/// Acts on the filter's items a page at a time until none is left, the job is stopped or the
/// gateway fails; then writes the job's audit record.
async fn run(api: QueueApi, job: Arc<Job>) {
    let acted =
        each_page(&api.spool, &api.events, &job.filter, job.action.op(), &job.stop, |done| {
            let tally = if done { &job.done } else { &job.skipped };
            tally.fetch_add(1, Ordering::Relaxed);
        });
    let outcome = match acted.await {
        Ok(Pages::Done) => (JobState::Done, None),
        Ok(Pages::Stopped) => (JobState::Stopped, None),
        Err(e) => (JobState::Failed, Some(e)),
    };
    let (state, error) = outcome;
    let now = api.spool.now_ms();
    *job.end.lock().unwrap_or_else(PoisonError::into_inner) = Some((state, now, error));
    let view = job.view();
    let filter = job.filter.query();
    let target = filter.trim_end_matches('&').to_owned();
    let before = serde_json::json!({ "filter": view.filter, "total": view.total });
    let after = serde_json::json!({
        "done": view.done, "skipped": view.skipped, "state": view.state, "error": view.error,
    });
    let (guard, who, action) = (api.guard.clone(), job.who.clone(), job.action.audit_action());
    let written =
        tokio::task::spawn_blocking(move || guard.record(&who, action, &target, before, after))
            .await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::error!(job = job.id, "the audit record of a bulk queue job could not be written");
    }
}

/// `GET /v1/queue/jobs/{id}`.
#[utoipa::path(
    get,
    path = "/v1/queue/jobs/{id}",
    tag = "gateway",
    operation_id = "getQueueJob",
    summary = "A bulk job's progress",
    params(("id" = u64, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job.", body = JobView),
        tollgate_http::openapi::AccessRefused,
        (status = 404, description = "No such job (problem queue-job-not-found); jobs are kept in memory, the 32 most recent.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn show(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(p) = api.guard.allow(&headers, Permission::Read) {
        return p.into_response();
    }
    match lookup(&api, &id) {
        Some(job) => Json(job.view()).into_response(),
        None => no_job(&id),
    }
}

/// `DELETE /v1/queue/jobs/{id}`.
#[utoipa::path(
    delete,
    path = "/v1/queue/jobs/{id}",
    tag = "gateway",
    operation_id = "stopQueueJob",
    summary = "Stop a bulk job after the page under way",
    params(("id" = u64, Path, description = "The job's id.")),
    responses(
        (status = 202, description = "Asked to stop; its state turns `stopped` once the page under way is done.", body = JobView),
        tollgate_http::openapi::AccessRefused,
        (status = 404, description = "No such job (problem queue-job-not-found).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn stop(
    State(api): State<QueueApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(p) = api.guard.allow(&headers, Permission::Queue) {
        return p.into_response();
    }
    match lookup(&api, &id) {
        Some(job) => {
            job.stop.store(true, Ordering::Relaxed);
            (StatusCode::ACCEPTED, Json(job.view())).into_response()
        }
        None => no_job(&id),
    }
}

/// `GET /v1/queue/jobs`.
#[utoipa::path(
    get,
    path = "/v1/queue/jobs",
    tag = "gateway",
    operation_id = "listQueueJobs",
    summary = "The recent bulk jobs, newest first",
    responses(
        (status = 200, description = "The jobs kept (at most 32).", body = Vec<JobView>),
        tollgate_http::openapi::AccessRefused,
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn list(State(api): State<QueueApi>, headers: HeaderMap) -> Response {
    if let Err(p) = api.guard.allow(&headers, Permission::Read) {
        return p.into_response();
    }
    let jobs = api.jobs.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Json(jobs.iter().rev().map(|j| j.view()).collect::<Vec<_>>()).into_response()
}

fn lookup(api: &QueueApi, id: &str) -> Option<Arc<Job>> {
    id.parse().ok().and_then(|n| api.jobs.find(n))
}

fn no_job(id: &str) -> Response {
    Problem::new(StatusCode::NOT_FOUND, "queue-job-not-found", "No such bulk job")
        .detail(format!("no bulk job {id} (the {KEPT} most recent are kept)"))
        .with("id", id.to_owned())
        .into_response()
}
