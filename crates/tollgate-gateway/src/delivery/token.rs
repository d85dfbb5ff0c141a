//! OAuth 2.0 client credentials (RFC 6749 §4.4) for one route: the bearer token its
//! deliveries send, fetched from the token endpoint and kept until shortly before it expires.
//!
//! - A fetch POSTs `grant_type=client_credentials` (and `scope` when set) as a form, with the
//!   client id and secret in HTTP Basic (each form-encoded first, RFC 6749 §2.3.1), and reads
//!   `access_token` and `expires_in` from the JSON answer.
//! - A token is used until [`EARLY`] before its `expires_in` (at most half its life early;
//!   [`LIFETIME_UNSTATED`] when the answer has no `expires_in`), then fetched again.
//! - One fetch at a time: deliveries that need a token while one is being fetched wait for it
//!   and share it; when that fetch fails, they all get its error instead of fetching again.
//! - A target that answers 401 to a token has it replaced ([`Tokens::renew`]); a renewal
//!   asked for a token already replaced gets the new one without a fetch.
//!
//! A failure reads `oauth2 token_url URL answered STATUS: …` (or the connection error) and
//! never shows the secret or a token.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::OAuth2;

/// How long before its expiry a token is replaced.
const EARLY: Duration = Duration::from_secs(30);
/// How long a token whose answer has no `expires_in` is used.
const LIFETIME_UNSTATED: Duration = Duration::from_secs(3600);
/// The longest a token is used, whatever its `expires_in` says.
const LIFETIME_MAX: Duration = Duration::from_secs(86_400);
/// The most of an error answer shown in a reason.
const SNIPPET: usize = 200;

/// A bearer token as sent, and when to stop using it.
#[derive(Clone)]
pub(crate) struct Token {
    /// `Bearer …`, marked sensitive.
    pub(crate) header: HeaderValue,
    /// Which fetch made it (a renewal names the token it replaces).
    serial: u64,
    /// When it is to be replaced.
    fresh_until: Instant,
}

/// What the last fetch left.
#[derive(Default)]
struct State {
    token: Option<Token>,
    failure: Option<String>,
}

/// One route's token source.
pub(crate) struct Tokens {
    oauth: OAuth2,
    client: reqwest::Client,
    /// Held during a fetch: the single flight.
    state: Mutex<State>,
    /// Fetches started, to tell a caller that one ran while it waited.
    fetches: AtomicU64,
}

impl Tokens {
    /// Tokens from `oauth`'s endpoint, fetched with `client` (the route's, so its CA file and
    /// client certificate apply).
    pub(crate) fn new(oauth: OAuth2, client: reqwest::Client) -> Self {
        Self { oauth, client, state: Mutex::default(), fetches: AtomicU64::new(0) }
    }

    /// The token to send: the kept one while it is fresh, else a new one.
    pub(crate) async fn current(&self) -> Result<Token, String> {
        self.get(None).await
    }

    /// A token other than `refused` (which the target answered 401 to).
    pub(crate) async fn renew(&self, refused: &Token) -> Result<Token, String> {
        self.get(Some(refused.serial)).await
    }

    async fn get(&self, refused: Option<u64>) -> Result<Token, String> {
        let seen = self.fetches.load(Ordering::SeqCst);
        let mut state = self.state.lock().await;
        if let Some(t) = &state.token
            && Some(t.serial) != refused
            && Instant::now() < t.fresh_until
        {
            return Ok(t.clone());
        }
        if self.fetches.load(Ordering::SeqCst) != seen
            && let Some(why) = &state.failure
        {
            // A fetch failed while this caller waited: the same answer, without a second call.
            return Err(why.clone());
        }
        let serial = self.fetches.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fetch(serial).await {
            Ok(t) => {
                *state = State { token: Some(t.clone()), failure: None };
                Ok(t)
            }
            Err(why) => {
                *state = State { token: None, failure: Some(why.clone()) };
                Err(why)
            }
        }
    }

    /// One call to the token endpoint.
    async fn fetch(&self, serial: u64) -> Result<Token, String> {
        let url = self.oauth.token_url.as_str();
        let mut form = String::from("grant_type=client_credentials");
        if let Some(scope) = &self.oauth.scope {
            form.push_str("&scope=");
            form.push_str(&form_encode(scope));
        }
        let started = Instant::now();
        let answer = self
            .client
            .post(url)
            .basic_auth(
                form_encode(&self.oauth.client_id),
                Some(form_encode(self.oauth.client_secret.expose())),
            )
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(form)
            .send()
            .await;
        let answer = match answer {
            Ok(a) => a,
            Err(e) if e.is_timeout() => {
                return Err(format!("oauth2 token_url {url} timed out: {e}"));
            }
            Err(e) => {
                return Err(format!("oauth2 token_url {url}: {}", crate::trust::describe(&e)));
            }
        };
        let status = answer.status();
        let body = answer
            .bytes()
            .await
            .map_err(|e| format!("oauth2 token_url {url}: reading the answer: {e}"))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let snippet: String = text.chars().take(SNIPPET).collect();
            let snippet = snippet.replace(self.oauth.client_secret.expose(), "(hidden)");
            return Err(format!("oauth2 token_url {url} answered {status}: {snippet}"));
        }
        let (header, lifetime) = read_token(&body)
            .map_err(|why| format!("oauth2 token_url {url} answered {status}: {why}"))?;
        let lifetime = lifetime.min(LIFETIME_MAX);
        let early = EARLY.min(lifetime / 2);
        tracing::debug!(token_url = url, expires_in = lifetime.as_secs(), "oauth2 token fetched");
        Ok(Token { header, serial, fresh_until: started + lifetime - early })
    }
}

/// The `Authorization` value and lifetime of a token endpoint's JSON answer. The reasons
/// never quote the answer (it holds the token).
fn read_token(body: &[u8]) -> Result<(HeaderValue, Duration), String> {
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_owned())?;
    let token = json
        .get("access_token")
        .and_then(serde_json::Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("the answer has no access_token")?;
    if let Some(kind) = json.get("token_type").and_then(serde_json::Value::as_str)
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!("token_type {kind:?} is not Bearer"));
    }
    let lifetime = match json.get("expires_in") {
        None | Some(serde_json::Value::Null) => LIFETIME_UNSTATED,
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .map(Duration::from_secs)
            .ok_or("expires_in is not a number of seconds")?,
        // Some servers send it as a string.
        Some(serde_json::Value::String(s)) => s
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| "expires_in is not a number of seconds".to_owned())?,
        Some(_) => return Err("expires_in is not a number of seconds".into()),
    };
    let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "the access_token is not visible ASCII".to_owned())?;
    header.set_sensitive(true);
    Ok((header, lifetime))
}

/// `s` in `application/x-www-form-urlencoded`: letters, digits and `*-._` as they are, space
/// as `+`, every other byte `%XX`.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_keeps_unreserved_bytes() {
        assert_eq!(form_encode("sb-na-1!b2|it-rt a.b_c*"), "sb-na-1%21b2%7Cit-rt+a.b_c*");
        assert_eq!(form_encode("é"), "%C3%A9");
    }

    #[test]
    fn a_token_answer_is_read_without_quoting_it() {
        let (h, life) =
            read_token(br#"{"access_token":"abc","token_type":"bearer","expires_in":"120"}"#)
                .unwrap();
        assert_eq!(h.to_str().unwrap(), "Bearer abc");
        assert!(h.is_sensitive());
        assert_eq!(life, Duration::from_secs(120));
        let (_, life) = read_token(br#"{"access_token":"abc"}"#).unwrap();
        assert_eq!(life, LIFETIME_UNSTATED);
        let e = read_token(br#"{"access_token":"s3cret","token_type":"mac"}"#).unwrap_err();
        assert!(e.contains("mac") && !e.contains("s3cret"), "{e}");
        let e = read_token(br#"{"access_token":"s3cret","expires_in":true}"#).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(read_token(b"<html>").is_err());
        assert!(read_token(br#"{"access_token":"a\nb"}"#).is_err());
    }
}
