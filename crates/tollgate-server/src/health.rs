//! Liveness and readiness.
//!
//! `GET /healthz` answers 200 `ok` while the process serves HTTP (it does nothing else, so it
//! is also the ceiling in load runs). `GET /readyz` reports the store, the policies and any
//! registered checks as JSON: 503 when a registered check fails, otherwise 200. A refused
//! policy file, or a shared store that is not answering (`store_error`), shows as
//! `"status": "degraded"` with the reason, but stays 200: the previous policies are still
//! enforced and `store_unavailable` decides the answers, and pulling every instance out of a
//! load balancer over a config typo or a Redis blip would stop the pipeline it protects.
//! `restart_needed` lists accepted config changes that only a restart applies.
//!
//! Over HTTPS, `tls` shows the certificate file, how many pairs were taken into use and
//! `last_error`: a rotated pair that was refused (unreadable, bad PEM, key not matching).
//! That too is `"degraded"` with 200, not 503: the previous certificate is still served, so
//! the instance works; the error stays until a good pair is in place.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use tollgate_quota::StoreHealth;

use crate::state::AppState;

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    summary = "Liveness: 200 ok while the process serves HTTP",
    responses((status = 200, description = "Alive.", body = String, content_type = "text/plain", example = "ok")),
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// The body of `GET /readyz` (see the module docs).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Readiness {
    /// `ready`, `degraded` (still serving; see the errors) or `not-ready` (503).
    #[schema(pattern = "^(ready|degraded|not-ready)$")]
    status: String,
    /// memory, embedded or redis.
    store: String,
    /// Why the shared store is not answering, while it is not.
    store_error: Option<String>,
    /// The policies in force.
    policies: serde_json::Value,
    /// Config changes that only a restart applies.
    restart_needed: Vec<String>,
    /// Registered checks by name: `{"ok": bool, "error"?: string}`.
    checks: serde_json::Value,
    /// The certificate in use over HTTPS (`null` over plain HTTP).
    tls: Option<serde_json::Value>,
}

/// `GET /readyz`.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    summary = "Readiness: the store, the policies and the registered checks",
    responses(
        (status = 200, description = "Ready or degraded (still serving).", body = Readiness),
        (status = 503, description = "A registered check fails.", body = Readiness),
    ),
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let status = state.policies().status();
    let mut checks = Map::new();
    let mut failing = false;
    for (name, result) in state.readiness() {
        let v = match result {
            Ok(()) => json!({ "ok": true }),
            Err(reason) => {
                failing = true;
                json!({ "ok": false, "error": reason })
            }
        };
        checks.insert(name, v);
    }
    let store_error = match state.store().health() {
        StoreHealth::Ok => None,
        StoreHealth::Degraded(reason) => Some(reason),
    };
    let tls = state.tls().map(|t| (t.files().cert.display().to_string(), t.status()));
    let tls_error = tls.as_ref().is_some_and(|(_, s)| s.last_error.is_some());
    let overall = if failing {
        "not-ready"
    } else if status.last_error.is_some() || store_error.is_some() || tls_error {
        "degraded"
    } else {
        "ready"
    };
    let body = json!({
        "status": overall,
        "store": state.store().kind(),
        "store_error": store_error,
        "policies": {
            "count": state.policies().current().rules().len(),
            "source": state.policies().file().map(|f| f.display().to_string()),
            "generation": status.generation,
            "last_error": status.last_error,
        },
        // Changes in the file that only a restart applies (the policies are live already).
        "restart_needed": status.restart_needed,
        "checks": Value::Object(checks),
        "tls": tls.map(|(cert, s)| json!({
            "cert": cert,
            "generation": s.generation,
            "last_error": s.last_error,
        })),
    });
    let code = if failing { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (code, Json(body)).into_response()
}
