//! `[gateway.route.delivery]`: how a route's HTTP target is called (OAuth 2.0 client
//! credentials, HTTP Basic, a client certificate for mutual TLS, fixed headers, the
//! Content-Type), as written in the file ([`DeliveryConfig`]) and as deliveries use it
//! ([`Delivery`]). Secret files are read once, when the plan is built (at load); a missing or
//! empty one is a config error naming the route and the key. Secrets live in types whose
//! `Debug` hides them, and no error shows one.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::de::Error as _;

use super::*;

/// The Content-Type sent when a route sets none: the X12 media type of RFC 1767.
const DEFAULT_CONTENT_TYPE: &str = "application/edi-x12";

/// `[gateway.route.delivery]`, key for key; every key is optional.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// OAuth 2.0 client credentials: a bearer token from `token_url` on every delivery.
    #[serde(default)]
    pub oauth2: Option<Spanned<OAuth2Config>>,
    /// HTTP Basic, the password read from a file.
    #[serde(default)]
    pub basic: Option<Spanned<BasicConfig>>,
    /// The client certificate chain (PEM, leaf first) shown to the target (mutual TLS).
    #[serde(default)]
    pub client_cert: Option<Spanned<PathBuf>>,
    /// The private key of `client_cert` (PEM: PKCS#8, PKCS#1 or SEC1, unencrypted).
    #[serde(default)]
    pub client_key: Option<Spanned<PathBuf>>,
    /// Headers sent with every delivery; their values are secrets (never logged or shown).
    #[serde(default, deserialize_with = "headers")]
    pub headers: FixedHeaders,
    /// The Content-Type sent (`application/edi-x12` when absent).
    #[serde(default, deserialize_with = "content_type")]
    pub content_type: Option<ContentType>,
}

/// `oauth2 = { token_url, client_id, client_secret_file, scope }` (RFC 6749 §4.4).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Config {
    /// The authorization server's token endpoint.
    #[serde(deserialize_with = "token_url")]
    pub token_url: HttpUrl,
    /// The client identifier.
    #[serde(deserialize_with = "client_id")]
    pub client_id: String,
    /// A file holding the client secret (one trailing newline is ignored).
    pub client_secret_file: Spanned<PathBuf>,
    /// The scope asked for, space-separated; the server's default when absent.
    #[serde(default, deserialize_with = "scope")]
    pub scope: Option<String>,
}

/// `basic = { user, password_file }` (RFC 7617).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicConfig {
    /// The user id (no `:`).
    #[serde(deserialize_with = "user")]
    pub user: String,
    /// A file holding the password (one trailing newline is ignored).
    pub password_file: Spanned<PathBuf>,
}

/// Checked fixed headers: valid names the gateway does not set itself, each once, and valid
/// values marked sensitive.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FixedHeaders(Vec<(HeaderName, HeaderValue)>);

impl FixedHeaders {
    /// Whether `name` is among them.
    fn has(&self, name: &HeaderName) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }
}

/// A Content-Type value: `type/subtype` with optional parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentType(HeaderValue);

impl FromStr for ContentType {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const SHAPE: &str = "expected a media type such as application/edifact or \
                             application/edi-x12; charset=utf-8";
        let essence = s.split(';').next().unwrap_or_default().trim();
        let token = |t: &str| !t.is_empty() && t.bytes().all(is_tchar);
        match essence.split_once('/') {
            Some((t, sub)) if token(t) && token(sub) => {}
            _ => return Err(SHAPE),
        }
        HeaderValue::from_str(s).map(Self).map_err(|_| SHAPE)
    }
}

/// A byte of an HTTP token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A secret read from a file: `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the request that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// How a route's deliveries are made, its secrets read.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The Content-Type sent.
    pub content_type: HeaderValue,
    /// Fixed headers (values marked sensitive).
    pub headers: HeaderMap,
    /// The credentials, if any.
    pub auth: Option<Auth>,
    /// The client certificate and key shown to the target, if any.
    pub identity: Option<reqwest::Identity>,
}

impl Default for Delivery {
    fn default() -> Self {
        Self {
            content_type: HeaderValue::from_static(DEFAULT_CONTENT_TYPE),
            headers: HeaderMap::new(),
            auth: None,
            identity: None,
        }
    }
}

/// A route's credentials.
#[derive(Debug, Clone)]
pub enum Auth {
    /// HTTP Basic.
    Basic {
        /// The user id.
        user: String,
        /// The password.
        password: Secret,
    },
    /// A bearer token from an OAuth 2.0 token endpoint (client credentials).
    OAuth2(OAuth2),
}

/// OAuth 2.0 client credentials, the secret read.
#[derive(Debug, Clone)]
pub struct OAuth2 {
    /// The token endpoint.
    pub token_url: HttpUrl,
    /// The client identifier.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// The scope asked for.
    pub scope: Option<String>,
}

/// The delivery of route number `i` (`r`), its files read; `k` names its keys in errors
/// (`gateway.route[0].delivery.basic.password_file`).
pub(super) fn resolve(
    r: &RouteConfig,
    k: &dyn Fn(&str) -> String,
) -> Result<Arc<Delivery>, ConfigError> {
    let Some(d) = &r.delivery else { return Ok(Arc::default()) };
    let span = d.span();
    let d = d.get_ref();
    if matches!(r.deliver, Target::Dir(_)) {
        return Err(ConfigError::at(
            span,
            format!(
                "{}: a dir: target takes no delivery settings (they are for http:// and \
                 https:// targets)",
                k("delivery")
            ),
        ));
    }
    let auth = match (&d.oauth2, &d.basic) {
        (Some(o), Some(_)) => {
            return Err(ConfigError::at(
                o.span(),
                format!(
                    "{}: set oauth2 or basic, not both (each sends Authorization)",
                    k("delivery.oauth2")
                ),
            ));
        }
        (Some(o), None) => {
            let o = o.get_ref();
            Some(Auth::OAuth2(OAuth2 {
                token_url: o.token_url.clone(),
                client_id: o.client_id.clone(),
                client_secret: read_secret(
                    &k("delivery.oauth2.client_secret_file"),
                    &o.client_secret_file,
                )?,
                scope: o.scope.clone(),
            }))
        }
        (None, Some(b)) => {
            let b = b.get_ref();
            Some(Auth::Basic {
                user: b.user.clone(),
                password: read_secret(&k("delivery.basic.password_file"), &b.password_file)?,
            })
        }
        (None, None) => None,
    };
    if auth.is_some() && d.headers.has(&AUTHORIZATION) {
        return Err(ConfigError::at(
            span,
            format!(
                "{} = (hidden): Authorization is sent by oauth2 or basic; remove it from headers",
                k("delivery.headers")
            ),
        ));
    }
    let identity = match (&d.client_cert, &d.client_key) {
        (Some(cert), Some(key)) => {
            Some(identity((&k("delivery.client_cert"), cert), (&k("delivery.client_key"), key))?)
        }
        (Some(one), None) | (None, Some(one)) => {
            let (this, other) = if d.client_cert.is_some() {
                ("client_cert", "client_key")
            } else {
                ("client_key", "client_cert")
            };
            return Err(ConfigError::at(
                one.span(),
                format!(
                    "{} = {:?}: needs {other} too",
                    k(&format!("delivery.{this}")),
                    one.get_ref()
                ),
            ));
        }
        (None, None) => None,
    };
    let content_type = d
        .content_type
        .as_ref()
        .map_or_else(|| HeaderValue::from_static(DEFAULT_CONTENT_TYPE), |c| c.0.clone());
    let headers = d.headers.0.iter().cloned().collect();
    Ok(Arc::new(Delivery { content_type, headers, auth, identity }))
}

/// The secret in `file` (the value of `key`): its text without trailing line breaks. A file
/// that cannot be read, is not UTF-8 or is empty is refused; its content is never shown.
fn read_secret(key: &str, file: &Spanned<PathBuf>) -> Result<Secret, ConfigError> {
    let path = file.get_ref();
    let refuse = |why: String| ConfigError::at(file.span(), format!("{key} = {path:?}: {why}"));
    let bytes = std::fs::read(path).map_err(|e| refuse(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("is not UTF-8 text".into()))?;
    let secret = text.trim_end_matches(['\r', '\n']);
    if secret.is_empty() {
        return Err(refuse("the file is empty".into()));
    }
    Ok(Secret(secret.to_owned()))
}

/// The client identity of `client_cert` and `client_key` (each `(key, path)`): the
/// certificates and the key are read as PEM, and the key must be the certificate's.
fn identity(
    (cert_key, cert): (&str, &Spanned<PathBuf>),
    (key_key, key): (&str, &Spanned<PathBuf>),
) -> Result<reqwest::Identity, ConfigError> {
    let read = |name: &str, file: &Spanned<PathBuf>| {
        std::fs::read(file.get_ref()).map_err(|e| {
            ConfigError::at(file.span(), format!("{name} = {:?}: cannot read: {e}", file.get_ref()))
        })
    };
    let refuse = |name: &str, file: &Spanned<PathBuf>, why: &str| {
        ConfigError::at(file.span(), format!("{name} = {:?}: {why}", file.get_ref()))
    };
    let cert_pem = read(cert_key, cert)?;
    let key_pem = read(key_key, key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| refuse(cert_key, cert, &format!("not a PEM file of certificates: {e}")))?;
    if chain.is_empty() {
        return Err(refuse(cert_key, cert, "no CERTIFICATE block in the file"));
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
        refuse(
            key_key,
            key,
            "no unencrypted PRIVATE KEY block (PKCS#8, PKCS#1 or SEC1) in the file",
        )
    })?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, private, &provider)
        .map_err(|e| refuse(key_key, key, &format!("cannot be used with {cert_key}: {e}")))?;
    // Only the blocks read above: reqwest refuses a file with others (EC PARAMETERS, say).
    let mut pem = pem_blocks(&cert_pem, &["CERTIFICATE"]);
    pem.push_str(&pem_blocks(&key_pem, &["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"]));
    reqwest::Identity::from_pem(pem.as_bytes())
        .map_err(|e| refuse(key_key, key, &format!("cannot be used with {cert_key}: {e}")))
}

/// The PEM blocks of `pem` whose label is one of `labels`, in order.
fn pem_blocks(pem: &[u8], labels: &[&str]) -> String {
    let text = String::from_utf8_lossy(pem);
    let mut out = String::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else { break };
        let label = &after[..label_end];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = rest[start..].find(&end_marker) else { break };
        let block_end = start + end + end_marker.len();
        if labels.contains(&label) {
            out.push_str(&rest[start..block_end]);
            out.push('\n');
        }
        rest = &rest[block_end..];
    }
    out
}

fn headers<'de, D: Deserializer<'de>>(d: D) -> Result<FixedHeaders, D::Error> {
    let written = std::collections::BTreeMap::<String, String>::deserialize(d)?;
    let mut out: Vec<(HeaderName, HeaderValue)> = Vec::new();
    for (name, value) in written {
        let refuse = |why: &str| D::Error::custom(format!("headers = (hidden): {name:?}: {why}"));
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| refuse("not a header name (letters, digits and !#$%&'*+-.^_`|~ only)"))?;
        let lower = parsed.as_str();
        if lower == "content-type" {
            return Err(refuse("set content_type instead"));
        }
        if [
            "content-length",
            "transfer-encoding",
            "host",
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "upgrade",
        ]
        .contains(&lower)
        {
            return Err(refuse("the HTTP client sets this header"));
        }
        if lower.starts_with("tollgate-") {
            return Err(refuse("the gateway sets the Tollgate-* headers"));
        }
        if out.iter().any(|(n, _)| *n == parsed) {
            return Err(refuse("given twice (header names are not case-sensitive)"));
        }
        let ascii = value.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b));
        let mut v = HeaderValue::from_str(&value)
            .ok()
            .filter(|_| ascii && !value.trim().is_empty())
            .ok_or_else(|| refuse("the value must be non-empty visible ASCII"))?;
        v.set_sensitive(true);
        out.push((parsed, v));
    }
    Ok(FixedHeaders(out))
}

fn content_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ContentType>, D::Error> {
    tollgate_http::config::key::parsed(d, "content_type").map(Some)
}

fn token_url<'de, D: Deserializer<'de>>(d: D) -> Result<HttpUrl, D::Error> {
    let s = String::deserialize(d)?;
    let refuse = |why: String| {
        D::Error::custom(format!("oauth2.token_url = {:?}: {why}", value::without_password(&s)))
    };
    let url: HttpUrl = s.parse().map_err(refuse)?;
    if value::has_userinfo(&url) {
        return Err(refuse(
            "a user or password in the URL is refused: the client secret goes in \
             client_secret_file"
                .into(),
        ));
    }
    Ok(url)
}

fn client_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || !s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(D::Error::custom(format!(
            "oauth2.client_id = {s:?}: must be non-empty printable ASCII"
        )));
    }
    Ok(s)
}

fn scope<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    // RFC 6749 §3.3: scope tokens of %x21 / %x23-5B / %x5D-7E, separated by single spaces.
    let token_byte = |b: u8| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b);
    let ok = !s.is_empty() && s.split(' ').all(|t| !t.is_empty() && t.bytes().all(token_byte));
    if !ok {
        return Err(D::Error::custom(format!(
            "oauth2.scope = {s:?}: expected scope tokens separated by single spaces (no quotes \
             or backslashes)"
        )));
    }
    Ok(Some(s))
}

fn user<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s.contains(':') || s.chars().any(char::is_control) {
        return Err(D::Error::custom(format!(
            "basic.user = {s:?}: must be non-empty, without ':' or control characters"
        )));
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
