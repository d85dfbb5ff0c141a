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

/// `GET /v1/counters?prefix=`.
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

/// `GET /v1/policies`.
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
