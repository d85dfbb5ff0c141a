//! The policy endpoints of the admin API: show the policy set in force, replace it whole.
//!
//! - `GET /v1/policies` shows the policies in force, their source and the last reload error.
//! - `PUT /v1/policies` with `{"policies": [ … ]}` (the `[[policy]]` keys, as JSON) validates
//!   the whole set and replaces the one in force. When the server reads a config file, the
//!   file's `[[policy]]` tables are rewritten atomically too, so the change survives a reload
//!   and a restart (other sections, comments, the file's mode, owner and symlink are kept;
//!   see [`crate::config_file`]). A refused set is a 400 `invalid-policies` that names the
//!   first refused rule and key (`index`, `field`, `pointer` such as `/policies/0/limit`), so a
//!   form can show the error beside its field.
//!
//! Two editors cannot silently overwrite each other: `GET` (and a successful `PUT`) answer an
//! `ETag`, the version of the set in force, and a `PUT` that sends it back in `If-Match` is
//! refused with 412 `policies-changed` when the set has changed since (naming the version it
//! sent and the one in force). A `PUT` without `If-Match` replaces whatever is in force.
//! Writers are serialized (see [`crate::policy`]); the change and its audit record run in a
//! task of their own, so a client that hangs up cannot leave a change without its record, and
//! the 200 is sent only once the record is durable.
//!
//! Access goes through [`tollgate_http::AccessGuard`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{ETAG, HeaderValue};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::policy::{IfMatch, ReplaceError};
use crate::state::AppState;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;
use tollgate_policy::PolicyRule;
use tollgate_policy::PolicySet;

/// The answer of `GET` and `PUT`: `current` (the set in force, or the one a `PUT` put in
/// force) as JSON, with its version in `ETag`.
fn policies_answer(state: &AppState, current: &PolicySet) -> Response {
    let policies = state.policies();
    let status = policies.status();
    let body = json!({
        "policies": current.rules(),
        "source": policies.file().map(|f| f.display().to_string()),
        "generation": status.generation,
        "last_error": status.last_error,
    });
    let etag = crate::policy::version::etag(current);
    let mut answer = Json(body).into_response();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        answer.headers_mut().insert(ETAG, v);
    }
    answer
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
        (status = 200, description = "The policies.", body = PolicyState,
            headers(("ETag" = String, description = "The version of the set in force; send it back in `If-Match` with `PUT`."))),
        tollgate_http::openapi::AccessRefused,
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn get_policies(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    state.admin().allow(&headers, Permission::Read)?;
    Ok(policies_answer(&state, &state.policies().current()))
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
    params(("If-Match" = Option<String>, Header, description = "The `ETag` of `GET /v1/policies` (or `*`): apply only if the set in force is still that version. Without it, the set in force is replaced whatever it is.")),
    request_body(content = PolicyBodyDoc, description = "The new set; other members are ignored.", content_type = "application/json"),
    responses(
        (status = 200, description = "The new set is in force and its audit record written.", body = PolicyState,
            headers(("ETag" = String, description = "The version of the new set."))),
        (status = 400, description = "The body is not a valid policy set (problem invalid-policies, with line and column), or If-Match is not `*` or a list of entity tags (problem invalid-header).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        tollgate_http::openapi::AccessRefused,
        (status = 409, description = "The config file holds an edit not loaded yet (or a save half done), or would fail the start-up checks once rewritten (problem config-file-conflict); nothing changed.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 412, description = "If-Match does not name the version in force: someone else changed the policies (problem policies-changed, with `if_match` and `current`); nothing changed.", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The config file could not be rewritten; the old set stays (problem policy-write-failed). Or the new set is in force but its audit record could not be written (problem audit-write-failed).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub(crate) async fn put_policies(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let who = state.admin().allow(&headers, Permission::Limits)?;
    let if_match = IfMatch::from_headers(&headers)?;
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
    let set = PolicySet::new(parsed.policies);
    let (policies, admin) = (state.policies().clone(), state.admin().clone());
    let sent = if_match.clone();
    // A task of its own (blocking: a file write and fsyncs), awaited here: a client that hangs
    // up drops this handler, not the change and its record.
    let outcome = tokio::task::spawn_blocking(move || {
        policies.replace_if(set, sent.as_ref(), |before, after| {
            let (before, after) = (json!(before.rules()), json!(after.rules()));
            admin.record(&who, "policies.replace", "policies", before, after)
        })
    })
    .await
    .unwrap_or_else(|e| Err(ReplaceError::Write(format!("the write task failed: {e}"))));
    match outcome {
        Ok(installed) => Ok(policies_answer(&state, &installed)),
        Err(ReplaceError::Stale { current }) => {
            let sent = if_match.map(|m| m.shown()).unwrap_or_default();
            Err(Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "policies-changed",
                "Policies changed since they were loaded",
            )
            .detail(format!(
                "If-Match {sent} is not the version in force ({current}): someone else changed \
                 the policies; reload them (GET /v1/policies) and apply your change again"
            ))
            .with("if_match", sent)
            .with("current", current))
        }
        Err(ReplaceError::Write(e)) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "policy-write-failed",
            "Policies not saved",
        )
        .detail(e)),
        Err(ReplaceError::Conflict(e)) => Err(Problem::new(
            StatusCode::CONFLICT,
            "config-file-conflict",
            "The config file cannot take this change now",
        )
        .detail(e)),
        Err(ReplaceError::After(e)) => Err(tollgate_http::audit::write_failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
