//! Console sessions: a login with a token (the admin token or a `[[user]]`'s) yields a random
//! session id, sent back as an `HttpOnly; SameSite=Strict` cookie, and a CSRF token bound to it.
//! The admin API accepts the cookie as credentials only together with that CSRF token in the
//! `X-CSRF-Token` header (see [`crate::access::AccessGuard::allow`]), so a page on another site
//! cannot act with a logged-in browser's cookie.
//!
//! Bounds: at most [`MAX_SESSIONS_PER_USER`] sessions per user (the name logged in as; all holders
//! of the admin token are `admin`): a login beyond that ends that user's oldest session, never
//! another user's. At most [`MAX_SESSIONS`] in all: a login beyond that ends the oldest session of
//! the user holding the most. Each is valid for [`SESSION_TTL`] after login. Sessions live in memory: a restart
//! logs everyone out.
//!
//! Invariant: **no session id is kept.** The map is keyed by the SHA-256 of the id, so neither a
//! memory dump nor the timing of a lookup tells a valid id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use sha2::{Digest, Sha256};

use crate::client::constant_time_eq;
use crate::user::Actor;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tollgate_session";
/// The header that carries the CSRF token with every cookie-authenticated API call.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The most sessions kept at once.
pub const MAX_SESSIONS: usize = 1024;
/// The most sessions one user keeps at once.
pub const MAX_SESSIONS_PER_USER: usize = 32;
/// How long a session lasts after login.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// A logged-in browser.
#[derive(Debug, Clone)]
struct Session {
    actor: Actor,
    csrf: String,
    expires: Instant,
}

/// What a login hands out: the cookie value and the CSRF token (both 256 random bits, hex).
#[derive(Debug, Clone)]
pub struct Login {
    /// The session id, the cookie's value.
    pub id: String,
    /// The CSRF token to send as `X-CSRF-Token`.
    pub csrf: String,
}

/// Why cookie credentials were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    /// No such session, or it expired or was logged out.
    Unknown,
    /// The session exists but the request lacks its CSRF token (or carries another).
    Csrf,
}

/// The live sessions, shared by the console's login and the admin guard.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<[u8; 32], Session>>,
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Opens a session for `actor`.
    pub fn open(&self, actor: Actor) -> Login {
        let login = Login { id: random_hex(), csrf: random_hex() };
        let now = Instant::now();
        let session = Session { actor, csrf: login.csrf.clone(), expires: now + SESSION_TTL };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.expires > now);
        // Invariant: a user holds at most MAX_SESSIONS_PER_USER sessions, the map at most
        // MAX_SESSIONS; making room only ever ends the sessions of the user who has the most.
        let mine = map.values().filter(|s| s.actor.name == session.actor.name).count();
        let crowded = if mine >= MAX_SESSIONS_PER_USER {
            Some(session.actor.name.clone())
        } else if map.len() >= MAX_SESSIONS {
            let mut per_user: HashMap<&str, usize> = HashMap::new();
            for s in map.values() {
                *per_user.entry(s.actor.name.as_str()).or_default() += 1;
            }
            per_user.into_iter().max_by_key(|(_, n)| *n).map(|(name, _)| name.to_owned())
        } else {
            None
        };
        if let Some(name) = crowded {
            let oldest = map
                .iter()
                .filter(|(_, s)| s.actor.name == name)
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(key(&login.id), session);
        login
    }

    /// Ends the session `id` (nothing when there is none).
    pub fn close(&self, id: &str) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).remove(&key(id));
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| s.expires > now)
            .count()
    }

    /// True when no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session `id`'s user and CSRF token, when it is live.
    pub fn get(&self, id: &str) -> Option<(Actor, String)> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.get(&key(id)).filter(|s| s.expires > Instant::now())?;
        Some((s.actor.clone(), s.csrf.clone()))
    }

    /// The user of the request's session cookie, when the request also carries the session's
    /// CSRF token; `Ok(None)` without a session cookie.
    pub fn check(&self, headers: &HeaderMap) -> Result<Option<Actor>, SessionError> {
        let Some(id) = session_cookie(headers) else { return Ok(None) };
        let (actor, csrf) = self.get(&id).ok_or(SessionError::Unknown)?;
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !constant_time_eq(sent.trim().as_bytes(), csrf.as_bytes()) {
            return Err(SessionError::Csrf);
        }
        Ok(Some(actor))
    }
}

/// The value of the session cookie among the request's `Cookie` headers.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user::Role;
    use axum::http::HeaderValue;

    fn actor() -> Actor {
        Actor { name: "ann".into(), role: Role::Viewer }
    }

    fn headers(cookie: &str, csrf: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(cookie).unwrap());
        if let Some(c) = csrf {
            h.insert(CSRF_HEADER, HeaderValue::from_str(c).unwrap());
        }
        h
    }

    #[test]
    fn a_session_needs_its_own_csrf_token() {
        let s = Sessions::default();
        let login = s.open(actor());
        let cookie = format!("a=b; {SESSION_COOKIE}={}", login.id);
        assert_eq!(s.check(&headers(&cookie, Some(&login.csrf))), Ok(Some(actor())));
        assert_eq!(s.check(&headers(&cookie, None)), Err(SessionError::Csrf));
        let other = s.open(actor());
        assert_eq!(s.check(&headers(&cookie, Some(&other.csrf))), Err(SessionError::Csrf));
        assert_eq!(s.check(&headers("a=b", None)), Ok(None));
        s.close(&login.id);
        assert_eq!(s.check(&headers(&cookie, Some(&login.csrf))), Err(SessionError::Unknown));
    }

    #[test]
    fn a_user_evicts_only_their_own_oldest_session() {
        let s = Sessions::default();
        let admin = s.open(Actor { name: "admin".into(), role: Role::Admin });
        let first = s.open(actor());
        let second = s.open(actor());
        for _ in 0..MAX_SESSIONS {
            s.open(actor());
        }
        assert_eq!(s.len(), MAX_SESSIONS_PER_USER + 1);
        assert!(s.get(&admin.id).is_some(), "another user's session stays");
        assert!(s.get(&first.id).is_none() && s.get(&second.id).is_none(), "the oldest go");
    }

    #[test]
    fn sessions_are_bounded_in_all() {
        let s = Sessions::default();
        let admin = s.open(Actor { name: "admin".into(), role: Role::Admin });
        for i in 0..MAX_SESSIONS {
            s.open(Actor { name: format!("user-{}", i % (MAX_SESSIONS / 2)), role: Role::Viewer });
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(s.get(&admin.id).is_some(), "the user with the fewest sessions keeps theirs");
    }
}
