//! Login and logout: `POST /ui/login` with `{"token": "…"}` (the admin token or a `[[user]]`'s)
//! opens a session ([`tollgate_http::session`]) and sets its cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/`, `Secure` over TLS); `GET /ui/api/session` tells the page who is
//! logged in and hands it the CSRF token; `POST /ui/logout` (with that token) ends the session.
//!
//! A login must be `Content-Type: application/json` (415 otherwise) and, when it carries an
//! `Origin`, come from the console's own origin (403 otherwise): a page on another site can
//! then neither submit a login form (to lock a source out, or to log the browser into the
//! attacker's session) nor read the answer. Both are checked before anything is counted.
//!
//! Wrong tokens are limited per source address ([`tollgate_http::failed_logins`], one count
//! with the API's bearer tokens, API keys and session cookies): beyond the limit a
//! login answers 429 `too-many-failed-logins` with `Retry-After`, whatever the token.
//!
//! Without any credentials configured, the admin API is open on a loopback listener; the
//! console then needs no login either (the session answer says `"open": true`), and refuses
//! everything elsewhere, as the API does.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde_json::json;
use tollgate_http::problem::Problem;
use tollgate_http::session::{SESSION_COOKIE, SESSION_TTL, session_cookie};
use tollgate_http::user::{Actor, Permission};

use crate::Console;

/// The longest login body read.
const MAX_LOGIN_BODY: usize = 4096;

#[derive(Deserialize)]
struct LoginBody {
    token: String,
}

fn session_json(actor: &Actor, csrf: &str, open: bool) -> serde_json::Value {
    json!({
        "name": actor.name,
        "role": actor.role.as_str(),
        "csrf": csrf,
        "open": open,
        "may": {
            "queue": actor.role.allows(Permission::Queue),
            "limits": actor.role.allows(Permission::Limits),
            "payload": actor.role.allows(Permission::Queue),
            "notify": actor.role.allows(Permission::Notify),
        },
        "version": env!("CARGO_PKG_VERSION"),
    })
}

fn cookie(c: &Console, value: &str, max_age: u64) -> Option<HeaderValue> {
    let secure = if c.tls { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .ok()
}

fn refused(detail: &str) -> Problem {
    Problem::new(StatusCode::UNAUTHORIZED, "login-failed", "Login failed").detail(detail)
}

/// `Err` (415) unless the request's body is declared `application/json`.
fn json_only(headers: &HeaderMap) -> Result<(), Problem> {
    let received = headers.get(CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
    let essence = received.as_deref().and_then(|v| v.split(';').next()).map(str::trim);
    if essence.is_some_and(|e| e.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    let shown = received.as_ref().map_or_else(|| "none".to_owned(), |v| format!("{v:?}"));
    Err(Problem::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "login-content-type",
        "Unsupported login content type",
    )
    .detail(format!(
        "a login must be sent as Content-Type: application/json; the Content-Type received \
         was {shown}"
    ))
    .with("received", received.map_or(serde_json::Value::Null, |v| v.into_owned().into())))
}

/// `scheme://host[:port]` in lowercase, without the scheme's default port.
fn normalized_origin(scheme: &str, host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    let default = if scheme == "https" { ":443" } else { ":80" };
    let host = host.strip_suffix(default).unwrap_or(&host);
    format!("{scheme}://{host}")
}

/// `Err` (403) when the request carries an `Origin` other than its own: the scheme of this
/// listener (`https` over TLS) and the `Host` it was sent to. No `Origin` (a script, curl) is
/// let through: browsers send one with every cross-site POST.
fn same_origin(headers: &HeaderMap, tls: bool) -> Result<(), Problem> {
    let Some(origin) = headers.get(ORIGIN) else { return Ok(()) };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let scheme = if tls { "https" } else { "http" };
    let host = headers.get(HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let own = normalized_origin(scheme, host);
    let sent = match origin.trim().split_once("://") {
        Some((s, rest)) => normalized_origin(&s.to_ascii_lowercase(), rest.trim_end_matches('/')),
        None => origin.clone(),
    };
    if !host.is_empty() && sent == own {
        return Ok(());
    }
    Err(Problem::new(StatusCode::FORBIDDEN, "cross-origin-login", "Cross-origin login refused")
        .detail(format!(
            "a login must come from the console's own origin {own}; the Origin received was \
             {origin:?}"
        ))
        .with("origin", origin))
}

/// `POST /ui/login`.
pub(crate) async fn login(
    State(c): State<Console>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let guard = &c.access;
    if guard.is_open() {
        let actor = Actor { name: "loopback".into(), role: tollgate_http::user::Role::Admin };
        return Ok(Json(session_json(&actor, "", true)).into_response());
    }
    if !guard.has_token() {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "admin-token-required",
            "Console disabled",
        )
        .detail("no admin token or [[user]] is configured, and the listener is not loopback"));
    }
    json_only(&headers)?;
    same_origin(&headers, c.tls)?;
    if body.len() > MAX_LOGIN_BODY {
        return Err(refused(&format!("the login body is over {MAX_LOGIN_BODY} bytes")));
    }
    let parsed: LoginBody = serde_json::from_slice(&body).map_err(|e| {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-login", "Invalid login")
            .detail(format!("expected {{\"token\": \"…\"}}: {e}"))
    })?;
    // Counted as a failure before the token is checked, given back when it is right.
    let ip = peer.map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |Extension(ConnectInfo(a))| a.ip());
    let failures = guard.failed_logins();
    failures.attempt(ip).map_err(|r| failures.problem(ip, r))?;
    let actor = guard
        .identify(parsed.token.trim())
        .ok_or_else(|| refused("the token is neither the admin token nor a user's"))?;
    failures.succeeded(ip);
    let login = guard.sessions().open(actor.clone());
    let mut res = Json(session_json(&actor, &login.csrf, false)).into_response();
    if let Some(v) = cookie(&c, &login.id, SESSION_TTL.as_secs()) {
        res.headers_mut().insert(SET_COOKIE, v);
    }
    Ok(res)
}

/// `GET /ui/api/session`: who is logged in, and the session's CSRF token.
pub(crate) async fn session(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let guard = &c.access;
    if guard.is_open() {
        let actor = Actor { name: "loopback".into(), role: tollgate_http::user::Role::Admin };
        return Ok(Json(session_json(&actor, "", true)).into_response());
    }
    let found = session_cookie(&headers).and_then(|id| guard.sessions().get(&id));
    let (actor, csrf) = found.ok_or_else(|| refused("not logged in"))?;
    Ok(Json(session_json(&actor, &csrf, false)).into_response())
}

/// `POST /ui/logout`: needs the session's CSRF token, like every change made with the cookie.
pub(crate) async fn logout(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let guard = &c.access;
    if guard.is_open() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    guard.allow(&headers, Permission::Read)?;
    if let Some(id) = session_cookie(&headers) {
        guard.sessions().close(&id);
    }
    let mut res = StatusCode::NO_CONTENT.into_response();
    if let Some(v) = cookie(&c, "", 0) {
        res.headers_mut().insert(SET_COOKIE, v);
    }
    Ok(res)
}
