//! The admin API: live counters and the policy set, behind [`AdminGuard`].
//!
//! - `GET /v1/counters?prefix=P` lists live counters whose id starts with `P`.
//! - `DELETE /v1/counters/{metering-id}` drops every counter of that id.
//! - `GET /v1/policies` shows the policies in force, their source and the last reload error.
//! - `PUT /v1/policies` with `{"policies": [ … ]}` (the `[[policy]]` keys, as JSON) validates
//!   the whole set and replaces the one in force. When the server reads a config file, the
//!   file's `[[policy]]` tables are rewritten atomically too, so the change survives a reload
//!   and a restart (other sections, comments, the file's mode, owner and symlink are kept;
//!   see [`crate::config_file`]). A refused set is a 400 `invalid-policies` that names the
//!   first refused rule and key (`index`, `field`, `pointer` such as `/policies/0/limit`), so a
//!   form can show the error beside its field.
//!
//! Access: with a configured admin token or `[[user]]`s, `Authorization: Bearer <token>` is
//! required (401 otherwise; the scheme is case-insensitive, the token is not): the admin
//! token may do everything, a user what its role allows (403 otherwise; see
//! [`crate::user`]). Without a bearer token, a console session (its cookie plus its
//! `X-CSRF-Token`) stands for the user who logged in (see [`crate::session`]). With no
//! credentials configured, the admin API is open only when the server listens on a loopback
//! address, and refused with 403 elsewhere.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate_quota::{CounterInfo, MeteringId, Store};

use crate::audit::AuditLog;
use crate::client::constant_time_eq;
use crate::config::PolicyRule;
use crate::policy::PolicySet;
use crate::problem::Problem;
use crate::session::{CSRF_HEADER, SessionError, Sessions};
use crate::state::AppState;
use crate::user::{Actor, Permission, Role, Users};

/// Decides whether a request may use the admin API (shared with the gateway's admin routes).
#[derive(Clone)]
pub struct AdminGuard {
    token: Option<Arc<str>>,
    users: Arc<Users>,
    loopback: bool,
    audit: Option<AuditLog>,
    sessions: Arc<Sessions>,
}

impl std::fmt::Debug for AdminGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminGuard")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("loopback", &self.loopback)
            .finish()
    }
}

impl AdminGuard {
    /// A guard for `token` (an empty token counts as none) on a listener that is (or is not)
    /// bound to a loopback address.
    pub fn new(token: Option<&str>, loopback: bool) -> Self {
        let token = token.filter(|t| !t.is_empty()).map(Arc::from);
        Self { token, users: Arc::default(), loopback, audit: None, sessions: Arc::default() }
    }

    /// This guard, recording every change made through it in `log`.
    pub fn with_audit(mut self, log: AuditLog) -> Self {
        self.audit = Some(log);
        self
    }

    /// The audit log, when one is kept.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_ref()
    }

    /// Records a change made by `who` in the audit log, when one is kept (blocking: call it
    /// off the runtime or accept one fsync; admin changes are rare).
    pub fn record(&self, who: &Actor, action: &str, target: &str, before: Value, after: Value) {
        if let Some(log) = &self.audit {
            log.record(who, action, target, before, after);
        }
    }

    /// The console's sessions, accepted as credentials with their CSRF token.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// True when the admin API is open without credentials (none configured, loopback
    /// listener).
    pub fn is_open(&self) -> bool {
        !self.has_token() && self.loopback
    }

    /// Who `token` is: the admin token, or a `[[user]]`'s.
    pub fn identify(&self, token: &str) -> Option<Actor> {
        let admin =
            self.token.as_ref().is_some_and(|t| constant_time_eq(token.as_bytes(), t.as_bytes()));
        if admin {
            return Some(Actor { name: "admin".into(), role: Role::Admin });
        }
        self.users.find(token)
    }

    /// This guard, also letting the `[[user]]`s in by their tokens and roles.
    pub fn with_users(mut self, users: Users) -> Self {
        self.users = Arc::new(users);
        self
    }

    /// True when an admin token or a user is configured (gateway uploads then need
    /// credentials, and nothing is open on loopback any more).
    pub fn has_token(&self) -> bool {
        self.token.is_some() || !self.users.is_empty()
    }

    /// `Ok` when the request may do everything (the admin token, or an `admin` user); see
    /// [`AdminGuard::allow`].
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Problem> {
        self.allow(headers, Permission::Admin).map(drop)
    }

    /// Who the caller is, when it may do what `need` covers; 401 for a missing or wrong bearer
    /// token, 403 for a user whose role does not cover `need`, or when no credentials are
    /// configured and the listener is not loopback.
    pub fn allow(&self, headers: &HeaderMap, need: Permission) -> Result<Actor, Problem> {
        if !self.has_token() {
            if self.loopback {
                return Ok(Actor { name: "loopback".into(), role: Role::Admin });
            }
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "admin-token-required",
                "Admin API disabled",
            )
            .detail(
                "the admin API is only open without a token on a loopback listener; configure \
                 [server] admin_token or TOLLGATE_ADMIN_TOKEN",
            ));
        };
        let presented = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer);
        let unauthorized = |detail: &str| {
            Problem::new(StatusCode::UNAUTHORIZED, "admin-unauthorized", "Admin token required")
                .detail(detail)
                .header(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"tollgate\""))
        };
        let actor = match presented {
            Some(presented) => self.identify(presented).ok_or_else(|| {
                unauthorized("the bearer token is neither the admin token nor a user's")
            })?,
            // Without a bearer token, a console session: its cookie and its CSRF token.
            None => match self.sessions.check(headers) {
                Ok(Some(actor)) => actor,
                Ok(None) => {
                    return Err(unauthorized(
                        "send the admin token or a user's token as Authorization: Bearer <token>",
                    ));
                }
                Err(SessionError::Unknown) => {
                    return Err(unauthorized(
                        "the session expired or was logged out; log in again",
                    ));
                }
                Err(SessionError::Csrf) => {
                    return Err(Problem::new(
                        StatusCode::FORBIDDEN,
                        "csrf-token-required",
                        "CSRF token required",
                    )
                    .detail(format!(
                        "a request made with the session cookie needs the session's CSRF token \
                         in the {CSRF_HEADER} header"
                    )));
                }
            },
        };
        if !actor.role.allows(need) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "role-forbidden",
                "Not allowed for this role",
            )
            .detail(format!(
                "user {:?} has the role {}, which may not {}",
                actor.name,
                actor.role,
                need.describe()
            ))
            .with("user", actor.name.clone())
            .with("role", actor.role.as_str()));
        }
        Ok(actor)
    }
}

/// The credentials of an `Authorization: Bearer <token>` value. The auth-scheme is matched
/// case-insensitively (RFC 9110 §11.1), so `bearer`, `BEARER` and `bEaReR` all work; the token
/// itself is compared exactly by the caller.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
}

/// `?prefix=` of the counter listing.
#[derive(Debug, Deserialize)]
pub struct CounterQuery {
    #[serde(default)]
    prefix: String,
}

fn counter_json(c: &CounterInfo) -> Value {
    json!({
        "identifier": c.identifier.as_str(),
        "interval": c.interval,
        "unit": c.unit.as_str(),
        "window": c.window.as_str(),
        "start": c.start.map(|t| t.to_string()),
        "used": c.used,
        "exceed_count": c.exceed_count,
        "total_exceed_count": c.total_exceed_count,
        "window_start": c.window_start.map(|t| t.to_string()),
        "window_end": c.window_end.map(|t| t.to_string()),
    })
}

fn store_problem(e: &tollgate_quota::StoreError) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Store unavailable")
        .detail(e.to_string())
}

/// One live counter, as listed by `GET /v1/counters`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Counter {
    /// The metering id.
    identifier: String,
    /// Window length in units.
    #[schema(minimum = 1, maximum = 4294967295_u64, format = Int64)]
    interval: u32,
    /// second … month.
    #[schema(pattern = "^(second|minute|hour|day|week|month)$")]
    unit: String,
    /// calendar, flexi or rolling.
    #[schema(pattern = "^(calendar|flexi|rolling)$")]
    window: String,
    /// The calendar anchor, when one was given.
    #[schema(format = DateTime)]
    start: Option<String>,
    /// Units counted in the current window.
    used: u64,
    /// Refusals in the current window.
    exceed_count: u64,
    /// Refusals since the counter was made.
    total_exceed_count: u64,
    /// When the current window began (`null` for rolling windows).
    #[schema(format = DateTime)]
    window_start: Option<String>,
    /// When the current window ends.
    #[schema(format = DateTime)]
    window_end: Option<String>,
}

/// The answer of `GET /v1/counters`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct CounterList {
    /// The prefix asked for.
    prefix: String,
    /// How many counters are listed.
    count: usize,
    /// The counters, by identifier.
    counters: Vec<Counter>,
}

/// The answer of `DELETE /v1/counters/{id}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct CounterReset {
    /// The metering id.
    identifier: String,
    /// How many counters (one per window shape) were dropped.
    removed: u64,
}

/// `GET /v1/counters?prefix=`.
#[utoipa::path(
    get,
    path = "/v1/counters",
    tag = "admin",
    operation_id = "listCounters",
    summary = "List live counters whose metering id starts with a prefix",
    params(("prefix" = Option<String>, Query, description = "Metering id prefix; all counters when empty or absent.")),
    responses(
        (status = 200, description = "The counters.", body = CounterList),
        (status = 400, description = "The query string is not valid (problem invalid-query).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "A token is configured and none, or a wrong one, was sent (problem admin-unauthorized).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"tollgate\"`"))),
        (status = 403, description = "The user's role does not allow this (problem role-forbidden), or no token is configured and the listener is not loopback (problem admin-token-required).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The store could not list (problem store-unavailable).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn list_counters(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<CounterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    let Query(q) = query.map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-query", "Invalid query")
            .detail(e.body_text())
    })?;
    let mut counters = state.store().counters(&q.prefix).await.map_err(|e| store_problem(&e))?;
    counters.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    let list: Vec<Value> = counters.iter().map(counter_json).collect();
    Ok(Json(json!({ "prefix": q.prefix, "count": list.len(), "counters": list })).into_response())
}

/// `DELETE /v1/counters/{metering-id}`: 200 with how many counters were dropped.
#[utoipa::path(
    delete,
    path = "/v1/counters/{id}",
    tag = "admin",
    operation_id = "resetCounter",
    summary = "Drop every counter of a metering id (all window shapes)",
    params(("id" = String, Path, description = "The metering id (may contain `/`).", pattern = r"^[!-~]{1,256}$")),
    responses(
        (status = 200, description = "The counters were dropped (removed may be 0).", body = CounterReset),
        (status = 400, description = "The id is not a metering id (problem invalid-metering-id), or not UTF-8 once decoded.", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "A token is configured and none, or a wrong one, was sent (problem admin-unauthorized).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"tollgate\"`"))),
        (status = 403, description = "The user's role does not allow this (problem role-forbidden), or no token is configured and the listener is not loopback (problem admin-token-required).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 404, description = "An empty id: no route (problem not-found).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "The store could not reset (problem store-unavailable).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn reset_counter(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let who = state.admin().allow(&headers, Permission::Limits)?;
    let id = MeteringId::new(&id).map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-metering-id", "Invalid metering id")
            .detail(e.to_string())
            .with("value", id.clone())
    })?;
    let before = state.store().counters(id.as_str()).await.map_err(|e| store_problem(&e))?;
    let before: Vec<Value> =
        before.iter().filter(|c| c.identifier == id).map(counter_json).collect();
    let removed = state.store().reset(&id).await.map_err(|e| store_problem(&e))?;
    tracing::info!(identifier = %id, removed, "counter reset via the API");
    let after = json!({ "removed": removed });
    state.admin().record(&who, "counter.reset", id.as_str(), Value::Array(before), after);
    Ok(Json(json!({ "identifier": id.as_str(), "removed": removed })).into_response())
}

fn policies_json(state: &AppState) -> Value {
    let policies = state.policies();
    let status = policies.status();
    json!({
        "policies": policies.current().rules(),
        "source": policies.file().map(|f| f.display().to_string()),
        "generation": status.generation,
        "last_error": status.last_error,
    })
}

/// The policies in force, as `GET` and `PUT /v1/policies` answer.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct PolicyState {
    /// The rules, in matching order.
    policies: Vec<PolicyDoc>,
    /// The config file they come from, when the server reads one.
    source: Option<String>,
    /// Incremented each time a set comes into force.
    generation: u64,
    /// Why the last policy file was refused, while it is.
    last_error: Option<String>,
}

/// One `[[policy]]`: a glob over metering ids and what it supplies.
#[derive(utoipa::ToSchema)]
#[schema(as = Policy)]
#[allow(dead_code)]
pub(crate) struct PolicyDoc {
    /// Glob over metering-id (`*`, `?`, `[…]`).
    #[schema(rename = "match", min_length = 1)]
    pattern: String,
    /// Units per window (`null` is the same as absent).
    #[schema(required = false)]
    limit: Option<u64>,
    /// Window length in units (`null` is the same as absent).
    #[schema(required = false, minimum = 1, maximum = 4294967295_u64, format = Int64)]
    interval: Option<u32>,
    /// second … month (singular or plural, any case, when sent).
    #[schema(
        required = false,
        pattern = r"^\s*([Ss][Ee][Cc][Oo][Nn][Dd]|[Mm][Ii][Nn][Uu][Tt][Ee]|[Hh][Oo][Uu][Rr]|[Dd][Aa][Yy]|[Ww][Ee][Ee][Kk]|[Mm][Oo][Nn][Tt][Hh])[Ss]?\s*$"
    )]
    unit: String,
    /// calendar, flexi or rolling (any case, when sent).
    #[schema(
        required = false,
        pattern = r"^\s*([Cc][Aa][Ll][Ee][Nn][Dd][Aa][Rr]|[Ff][Ll][Ee][Xx][Ii]|[Rr][Oo][Ll][Ll][Ii][Nn][Gg])\s*$"
    )]
    window: String,
    /// The policy beats the headers instead of filling gaps (default false).
    #[schema(rename = "override", required = false)]
    override_headers: bool,
    /// enforce (default) or shadow.
    #[schema(required = false, pattern = "^(enforce|shadow)$")]
    mode: String,
}

/// The body of `PUT /v1/policies`.
#[derive(utoipa::ToSchema)]
#[schema(as = PolicyReplacement)]
#[allow(dead_code)]
pub(crate) struct PolicyBodyDoc {
    /// The whole new set, in matching order.
    policies: Vec<PolicyDoc>,
}

/// `GET /v1/policies`.
#[utoipa::path(
    get,
    path = "/v1/policies",
    tag = "admin",
    operation_id = "getPolicies",
    summary = "The policies in force, their source and the last reload error",
    responses(
        (status = 200, description = "The policies.", body = PolicyState),
        (status = 401, description = "A token is configured and none, or a wrong one, was sent (problem admin-unauthorized).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"tollgate\"`"))),
        (status = 403, description = "The user's role does not allow this (problem role-forbidden), or no token is configured and the listener is not loopback (problem admin-token-required).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn get_policies(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    Ok(Json(policies_json(&state)).into_response())
}

/// The body of `PUT /v1/policies` (other members, such as those `GET` returns, are ignored).
#[derive(Debug, Deserialize)]
struct PolicyBody {
    policies: Vec<PolicyRule>,
}

/// The first refused rule of a `{"policies": [ … ]}` body and the key to blame: each key is
/// tried alone beside a valid `match` (the same checks as the file), then the keys named in
/// the whole rule's error (checks across keys, such as `interval` against `unit`).
fn locate(body: &Value) -> Option<(usize, String)> {
    let rules = body.get("policies")?.as_array()?;
    let refused = |v: &Value| serde_json::from_value::<PolicyRule>(v.clone()).err();
    for (index, rule) in rules.iter().enumerate() {
        let Some(err) = refused(rule) else { continue };
        let Some(fields) = rule.as_object() else { return Some((index, "match".into())) };
        if !fields.contains_key("match") || refused(&json!({ "match": fields["match"] })).is_some()
        {
            return Some((index, "match".into()));
        }
        for (key, value) in fields.iter().filter(|(k, _)| k.as_str() != "match") {
            if refused(&json!({ "match": fields["match"], key.as_str(): value })).is_some() {
                return Some((index, key.clone()));
            }
        }
        let text = err.to_string();
        let named = ["interval", "limit", "unit", "window", "mode", "override"]
            .into_iter()
            .find(|k| text.contains(k) && fields.contains_key(*k));
        return Some((index, named.unwrap_or("match").to_owned()));
    }
    None
}

/// `PUT /v1/policies`: validates the whole set, then replaces the one in force.
#[utoipa::path(
    put,
    path = "/v1/policies",
    tag = "admin",
    operation_id = "replacePolicies",
    summary = "Replace the whole policy set (and the config file's [[policy]] tables)",
    request_body(content = PolicyBodyDoc, description = "The new set; other members are ignored.", content_type = "application/json"),
    responses(
        (status = 200, description = "The new set is in force.", body = PolicyState),
        (status = 400, description = "The body is not a valid policy set (problem invalid-policies, with line and column).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "A token is configured and none, or a wrong one, was sent (problem admin-unauthorized).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"tollgate\"`"))),
        (status = 403, description = "The user's role does not allow this (problem role-forbidden), or no token is configured and the listener is not loopback (problem admin-token-required).",
            body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The config file could not be rewritten; the old set stays (problem policy-write-failed).", body = crate::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn put_policies(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let who = state.admin().allow(&headers, Permission::Limits)?;
    let body = body.map_err(|e| {
        let status = e.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(status, "body-too-large", "Request body too large").detail(e.body_text())
        } else {
            Problem::new(status, "invalid-body", "Invalid request body").detail(e.body_text())
        }
    })?;
    let parsed: PolicyBody = serde_json::from_slice(&body).map_err(|e| {
        let problem = Problem::new(StatusCode::BAD_REQUEST, "invalid-policies", "Invalid policies")
            .detail(format!("line {} column {}: {e}", e.line(), e.column()));
        // Which rule and key, so a form can show the error beside its field.
        match serde_json::from_slice::<Value>(&body).ok().as_ref().and_then(locate) {
            Some((index, field)) => problem
                .with("index", index)
                .with("field", field.clone())
                .with("pointer", format!("/policies/{index}/{field}")),
            None => problem,
        }
    })?;
    let before = json!(state.policies().current().rules());
    let set = PolicySet::new(parsed.policies);
    state.policies().replace(set).map_err(|e| {
        Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "policy-write-failed", "Policies not saved")
            .detail(e)
    })?;
    let after = json!(state.policies().current().rules());
    state.admin().record(&who, "policies.replace", "policies", before, after);
    Ok(Json(policies_json(&state)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        h
    }

    #[test]
    fn token_is_required_when_configured() {
        let g = AdminGuard::new(Some("s3cret"), true);
        assert_eq!(g.authorize(&HeaderMap::new()).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        assert_eq!(g.authorize(&bearer("nope")).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        assert!(g.authorize(&bearer("s3cret")).is_ok());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let g = AdminGuard::new(Some("s3cret"), true);
        for v in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"] {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_static(v));
            assert!(g.authorize(&h).is_ok(), "{v}");
        }
        for v in ["Basic s3cret", "Bearers3cret", "s3cret", "Bearer S3CRET", "Bearer"] {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_static(v));
            assert!(g.authorize(&h).is_err(), "{v}");
        }
    }

    #[test]
    fn a_refused_rule_is_located_by_index_and_key() {
        let at = |v: Value| locate(&v);
        assert_eq!(at(json!({"policies": [{"match": "a:*", "limit": 5}]})), None);
        let two = json!({"policies": [{"match": "a:*"}, {"match": "b:*", "limit": -1}]});
        assert_eq!(at(two), Some((1, "limit".into())));
        let unit = json!({"policies": [{"match": "a:*", "unit": "fortnight"}]});
        assert_eq!(at(unit), Some((0, "unit".into())));
        let unknown = json!({"policies": [{"match": "a:*", "limt": 3}]});
        assert_eq!(at(unknown), Some((0, "limt".into())));
        let across = json!({"policies": [{"match": "a:*", "interval": 100000, "unit": "month"}]});
        assert_eq!(at(across), Some((0, "interval".into())));
    }

    #[test]
    fn a_session_cookie_counts_only_with_its_csrf_token() {
        use crate::session::SESSION_COOKIE;
        let g = AdminGuard::new(Some("s3cret"), true);
        let login = g.sessions().open(Actor { name: "ann".into(), role: Role::Viewer });
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            HeaderValue::from_str(&format!("{SESSION_COOKIE}={}", login.id)).unwrap(),
        );
        let p = g.allow(&h, Permission::Read).unwrap_err();
        assert_eq!(p.status(), StatusCode::FORBIDDEN);
        h.insert(CSRF_HEADER, HeaderValue::from_str(&login.csrf).unwrap());
        assert_eq!(g.allow(&h, Permission::Read).unwrap().name, "ann");
        let p = g.allow(&h, Permission::Queue).unwrap_err();
        assert_eq!(p.status(), StatusCode::FORBIDDEN, "a viewer's session may not act");
        g.sessions().close(&login.id);
        assert_eq!(g.allow(&h, Permission::Read).unwrap_err().status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn no_token_is_open_only_on_loopback() {
        assert!(AdminGuard::new(None, true).authorize(&HeaderMap::new()).is_ok());
        let p = AdminGuard::new(None, false).authorize(&bearer("x")).unwrap_err();
        assert_eq!(p.status(), StatusCode::FORBIDDEN);
        assert!(AdminGuard::new(Some(""), false).authorize(&HeaderMap::new()).is_err());
    }
}
