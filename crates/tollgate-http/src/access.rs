//! Who may change or read state: [`AccessGuard`] decides, from bearer tokens, `[[user]]` roles
//! and console sessions, for the admin API, the gateway's queue and uploads, and the console.
//!
//! Access: with a configured admin token or `[[user]]`s, `Authorization: Bearer <token>` is
//! required (401 otherwise; the scheme is case-insensitive, the token is not): the admin
//! token may do everything, a user what its role allows (403 otherwise; see
//! [`crate::user`]). Without a bearer token, a console session (its cookie plus its
//! `X-CSRF-Token`) stands for the user who logged in (see [`crate::session`]). With no
//! credentials configured, the admin API is open only when the server listens on a loopback
//! address, and refused with 403 elsewhere. Open, it answers only requests from this host:
//! their `Host` a loopback name or address, and their `Origin`, when a browser sends one, that
//! same host; so a page of another site open in a browser on the host cannot post to it, nor
//! read from it through a DNS name rebound to 127.0.0.1 (403 `cross-origin-refused`).
//!
//! Every wrong credential counts toward its source's failed logins ([`CredentialLimit`]).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::http::header::{AUTHORIZATION, HOST, HeaderValue, ORIGIN, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::{BoxFuture, Either, FutureExt, Ready, ready};
use serde_json::Value;

use crate::audit::AuditLog;
use crate::client::{API_KEY_HEADER, constant_time_eq};
use crate::failed_logins::FailedLogins;
use crate::problem::Problem;
use crate::session::{CSRF_HEADER, SessionError, Sessions, session_cookie};
use crate::user::{Actor, Permission, Role, Users};

/// Decides whether a request may use the admin API (shared with the gateway's admin routes).
#[derive(Clone)]
pub struct AccessGuard {
    token: Option<Arc<str>>,
    users: Arc<Users>,
    loopback: bool,
    audit: Option<AuditLog>,
    sessions: Arc<Sessions>,
    failed_logins: Arc<FailedLogins>,
}

impl std::fmt::Debug for AccessGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessGuard")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("loopback", &self.loopback)
            .finish()
    }
}

impl AccessGuard {
    /// A guard for `token` (an empty token counts as none) on a listener that is (or is not)
    /// bound to a loopback address.
    pub fn new(token: Option<&str>, loopback: bool) -> Self {
        let token = token.filter(|t| !t.is_empty()).map(Arc::from);
        Self {
            token,
            users: Arc::default(),
            loopback,
            audit: None,
            sessions: Arc::default(),
            failed_logins: Arc::default(),
        }
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
    /// from `spawn_blocking`). `Err` says why the record is missing: the change must then not
    /// be acknowledged as done and recorded (see [`crate::audit::write_failed`]).
    pub fn record(
        &self,
        who: &Actor,
        action: &str,
        target: &str,
        before: Value,
        after: Value,
    ) -> Result<(), String> {
        match &self.audit {
            Some(log) => log.record(who, action, target, before, after),
            None => Ok(()),
        }
    }

    /// The console's sessions, accepted as credentials with their CSRF token.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Failed credentials per source address: console logins, bearer tokens, API keys and
    /// session cookies all count here.
    pub fn failed_logins(&self) -> &Arc<FailedLogins> {
        &self.failed_logins
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
    /// [`AccessGuard::allow`].
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Problem> {
        self.allow(headers, Permission::Admin).map(drop)
    }

    /// On a loopback listener, `Ok` only for a request from this host (its `Host` a loopback
    /// name or address, its `Origin`, if any, the same): what the quota API asks of a caller
    /// no `[[client]]` key admitted, so a web page that rebinds its DNS name to 127.0.0.1
    /// cannot spend or give back a partner's quota. Any request passes on other listeners.
    pub fn from_this_host_on_loopback(&self, headers: &HeaderMap) -> Result<(), Problem> {
        if !self.loopback {
            return Ok(());
        }
        from_this_host(headers, "configure [[client]] keys to use the quota API from elsewhere")
    }

    /// Who the caller is, when it may do what `need` covers; 401 for a missing or wrong bearer
    /// token, 403 for a user whose role does not cover `need`, or when no credentials are
    /// configured and the listener is not loopback.
    pub fn allow(&self, headers: &HeaderMap, need: Permission) -> Result<Actor, Problem> {
        if !self.has_token() {
            if self.loopback {
                from_this_host(
                    headers,
                    "configure [server] admin_token or [[user]]s to use it from elsewhere",
                )?;
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

/// A layer over every route: a request carrying credentials (`Authorization`, `x-api-key` or
/// the session cookie) from a source locked out by [`FailedLogins`] gets its 429 with
/// `Retry-After`, and one answered 401 counts as a failure of its source. `POST /ui/login`
/// counts its own attempts. Requests without credentials are neither refused nor counted, and
/// pass to the route as they came: no clone, no allocation (every quota check is one).
#[derive(Clone)]
pub struct CredentialLimit {
    failed_logins: Arc<FailedLogins>,
}

impl CredentialLimit {
    /// The layer counting failures in `guard`'s [`FailedLogins`].
    pub fn new(guard: &AccessGuard) -> Self {
        Self { failed_logins: Arc::clone(&guard.failed_logins) }
    }
}

impl<S> tower::Layer<S> for CredentialLimit {
    type Service = CredentialLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CredentialLimited { inner, failed_logins: Arc::clone(&self.failed_logins) }
    }
}

/// A route behind [`CredentialLimit`].
#[derive(Clone)]
pub struct CredentialLimited<S> {
    inner: S,
    failed_logins: Arc<FailedLogins>,
}

type Answer = Result<Response, Infallible>;

impl<S> tower::Service<Request> for CredentialLimited<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Either<Ready<Answer>, BoxFuture<'static, Answer>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let headers = req.headers();
        let credentialed = headers.contains_key(AUTHORIZATION)
            || headers.contains_key(API_KEY_HEADER)
            || session_cookie(headers).is_some();
        if !credentialed || req.uri().path() == "/ui/login" {
            return Either::Left(self.inner.call(req));
        }
        let ip = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |ConnectInfo(a)| a.ip());
        let failures = Arc::clone(&self.failed_logins);
        if let Some(refused) = failures.locked(ip) {
            return Either::Right(Either::Left(ready(Ok(failures
                .problem(ip, refused)
                .into_response()))));
        }
        let answer = self.inner.call(req);
        Either::Right(Either::Right(
            async move {
                let res = answer.await?;
                if res.status() == StatusCode::UNAUTHORIZED {
                    failures.failed(ip);
                }
                Ok(res)
            }
            .boxed(),
        ))
    }
}

/// The credentials of an `Authorization: Bearer <token>` value. The auth-scheme is matched
/// case-insensitively (RFC 9110 §11.1), so `bearer`, `BEARER` and `bEaReR` all work; the token
/// itself is compared exactly by the caller.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
}

/// `Ok` when a request to the open admin API comes from this host (see the module docs). A
/// request without `Host` or `Origin` is not a browser's, so they are checked when present.
fn from_this_host(headers: &HeaderMap, hint: &str) -> Result<(), Problem> {
    let refused = |detail: String| {
        Problem::new(StatusCode::FORBIDDEN, "cross-origin-refused", "Only this host may ask")
            .detail(format!(
                "{detail}; without credentials the API answers only requests from this host \
                 ({hint})"
            ))
    };
    let host = headers.get(HOST).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(host) = &host
        && !is_loopback_authority(host)
    {
        return Err(refused(format!("Host `{host}` is not a loopback name or address")));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let of_origin = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if of_origin.is_none() || of_origin != host.as_deref() {
            return Err(refused(format!(
                "Origin `{origin}` is not this server's (Host `{}`)",
                host.as_deref().unwrap_or("")
            )));
        }
    }
    Ok(())
}

/// Whether `authority` (`host[:port]`) names this host: `localhost` or a loopback address.
fn is_loopback_authority(authority: &str) -> bool {
    let name = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
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
    fn open_without_credentials_only_to_requests_from_this_host() {
        let g = AccessGuard::new(None, true);
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.insert(*name, HeaderValue::from_static(value));
            }
            g.allow(&h, Permission::Admin)
        };
        for ok in [
            &[][..],
            &[("host", "127.0.0.1:8080")],
            &[("host", "localhost:8080"), ("origin", "http://localhost:8080")],
            &[("host", "[::1]:8080"), ("origin", "https://[::1]:8080")],
            &[("host", "127.0.0.2")],
        ] {
            assert!(with(ok).is_ok(), "{ok:?}");
        }
        for refused in [
            &[("host", "evil.example:8080")][..],
            &[("host", "evil.example:8080"), ("origin", "http://evil.example:8080")],
            &[("host", "127.0.0.1:8080"), ("origin", "http://evil.example")],
            &[("host", "127.0.0.1:8080"), ("origin", "null")],
            &[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:9090")],
            &[("host", "10.0.0.1:8080")],
        ] {
            let p = with(refused).unwrap_err();
            assert_eq!(p.status(), StatusCode::FORBIDDEN, "{refused:?}");
        }
    }

    #[test]
    fn token_is_required_when_configured() {
        let g = AccessGuard::new(Some("s3cret"), true);
        assert_eq!(g.authorize(&HeaderMap::new()).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        assert_eq!(g.authorize(&bearer("nope")).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        assert!(g.authorize(&bearer("s3cret")).is_ok());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let g = AccessGuard::new(Some("s3cret"), true);
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
    fn a_session_cookie_counts_only_with_its_csrf_token() {
        use crate::session::SESSION_COOKIE;
        let g = AccessGuard::new(Some("s3cret"), true);
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
        assert!(AccessGuard::new(None, true).authorize(&HeaderMap::new()).is_ok());
        let p = AccessGuard::new(None, false).authorize(&bearer("x")).unwrap_err();
        assert_eq!(p.status(), StatusCode::FORBIDDEN);
        assert!(AccessGuard::new(Some(""), false).authorize(&HeaderMap::new()).is_err());
    }
}
