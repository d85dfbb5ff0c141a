//! Optional API keys for `/v1/quota` (`[[client]]` in the config file).
//!
//! When at least one key is configured, every quota check must carry one in the `x-api-key`
//! header (the header API gateways such as Apigee and SAP API Management use for API keys;
//! `Authorization: Bearer` stays reserved for the admin token, so one caller can hold both).
//! A missing or unknown key gets 401; a key whose `allow` globs do not match the
//! `metering-id` gets 403. With no keys configured, `/v1/quota` is open.

use axum::http::{HeaderMap, StatusCode};
use tollgate_quota::MeteringId;

use crate::config::{ClientKey, GlobPattern};
use crate::problem::Problem;

/// The header that carries a client key.
pub const API_KEY_HEADER: &str = "x-api-key";

/// One configured client.
#[derive(Debug, Clone)]
pub struct Client {
    key: String,
    name: String,
    allow: Option<Vec<GlobPattern>>,
}

impl Client {
    /// The client's name, for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when this client may check `id`.
    pub fn permits(&self, id: &MeteringId) -> bool {
        match &self.allow {
            None => true,
            Some(globs) => globs.iter().any(|g| g.is_match(id.as_str())),
        }
    }
}

/// The configured client keys; empty means `/v1/quota` needs no key.
#[derive(Debug, Clone, Default)]
pub struct ClientKeys {
    clients: Vec<Client>,
}

impl ClientKeys {
    /// Keys from the `[[client]]` tables.
    pub fn new(keys: &[ClientKey]) -> Self {
        let clients = keys
            .iter()
            .map(|k| Client { key: k.key.clone(), name: k.name.clone(), allow: k.allow.clone() })
            .collect();
        Self { clients }
    }

    /// True when keys are required.
    pub fn enabled(&self) -> bool {
        !self.clients.is_empty()
    }

    /// The client presenting `x-api-key`: `Ok(None)` when no keys are configured, 401 when
    /// the key is missing or unknown.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Option<&Client>, Problem> {
        if self.clients.is_empty() {
            return Ok(None);
        }
        let Some(presented) = headers.get(API_KEY_HEADER) else {
            return Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "missing-api-key",
                "API key required",
            )
            .detail("this service requires a client key in the x-api-key header")
            .with("header", API_KEY_HEADER));
        };
        let presented = presented.as_bytes();
        // Compare against every key without stopping early, so timing does not tell which
        // prefix matched.
        let mut found = None;
        for c in &self.clients {
            if constant_time_eq(c.key.as_bytes(), presented) && found.is_none() {
                found = Some(c);
            }
        }
        found.map(Some).ok_or_else(|| {
            Problem::new(StatusCode::UNAUTHORIZED, "invalid-api-key", "Invalid API key")
                .detail("the key in x-api-key is not a configured client key")
                .with("header", API_KEY_HEADER)
        })
    }
}

/// A 403 for a client asking about an id outside its `allow` globs.
pub fn forbidden(client: &Client, id: &MeteringId) -> Problem {
    Problem::new(StatusCode::FORBIDDEN, "metering-id-not-allowed", "Metering id not allowed")
        .detail(format!("client {:?} may not check metering-id {id}", client.name()))
        .with("client", client.name())
        .with("metering_id", id.as_str())
}

/// Equality whose running time depends only on the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn keys() -> ClientKeys {
        ClientKeys::new(&[
            ClientKey {
                key: "k1".into(),
                name: "pi".into(),
                allow: Some(vec!["ShipmentStatus:*".parse().unwrap()]),
            },
            ClientKey { key: "k2".into(), name: "ops".into(), allow: None },
        ])
    }

    fn with_key(k: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(API_KEY_HEADER, HeaderValue::from_str(k).unwrap());
        h
    }

    #[test]
    fn none_configured_means_open() {
        assert!(ClientKeys::default().authenticate(&HeaderMap::new()).unwrap().is_none());
    }

    #[test]
    fn missing_and_wrong_keys_are_401() {
        let k = keys();
        assert_eq!(k.authenticate(&HeaderMap::new()).unwrap_err().slug(), "missing-api-key");
        assert_eq!(k.authenticate(&with_key("nope")).unwrap_err().slug(), "invalid-api-key");
        assert_eq!(
            k.authenticate(&with_key("k1x")).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn allow_globs_limit_ids() {
        let k = keys();
        let pi = k.authenticate(&with_key("k1")).unwrap().unwrap();
        assert!(pi.permits(&MeteringId::new("ShipmentStatus:X").unwrap()));
        assert!(!pi.permits(&MeteringId::new("Invoice:X").unwrap()));
        let ops = k.authenticate(&with_key("k2")).unwrap().unwrap();
        assert!(ops.permits(&MeteringId::new("Invoice:X").unwrap()));
    }
}
