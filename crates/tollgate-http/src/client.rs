//! Optional API keys for `/v1/quota` (`[[client]]` in the config file).
//!
//! When at least one key is configured, every quota check must carry one in the `x-api-key`
//! header (the header API gateways such as Apigee and SAP API Management use for API keys;
//! `Authorization: Bearer` stays reserved for the admin token, so one caller can hold both).
//! A missing or unknown key gets 401; a key whose `allow` globs do not match the
//! `metering-id` gets 403. With no keys configured, `/v1/quota` is open.
//!
//! The same keys authenticate gateway uploads; a client's `partners` list limits the senders
//! it may upload for. Keys are checked once, at load: an empty key (which an empty
//! `x-api-key` would match) and a key given to two clients are refused.
//!
//! Under mTLS (`[server] tls_client_ca`) a client may be named by its certificate instead:
//! `subject = "CN=…"`. A request without `x-api-key` whose connection presented a verified
//! certificate with exactly that subject (RFC 4514 text, see [`crate::tls::subject`]) counts
//! as that client on `/v1/quota`; a certificate whose subject no client names gets 401
//! naming the subject received. An `x-api-key`, when sent, decides. A subject given to two
//! clients, or a client with neither key nor subject, is refused at load.

use axum::http::{HeaderMap, StatusCode};
use tollgate_quota::MeteringId;

use crate::config::{ClientKey, ClientSecret};
use crate::problem::Problem;
use crate::tls::PeerCertificate;
use tollgate_policy::GlobPattern;

/// The header that carries a client key.
pub const API_KEY_HEADER: &str = "x-api-key";

/// One configured client. The key is never empty and no other client has it
/// ([`ClientKeys::new`] keeps that).
#[derive(Clone)]
pub struct Client {
    key: Option<ClientSecret>,
    subject: Option<String>,
    name: String,
    allow: Option<Vec<GlobPattern>>,
    /// Partner names and normalised `QUAL:ID` sender ids; `None` means every sender.
    partners: Option<Vec<String>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("key", &"<secret>")
            .field("name", &self.name)
            .field("subject", &self.subject)
            .field("allow", &self.allow)
            .field("partners", &self.partners)
            .finish()
    }
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

    /// True when this client may upload interchanges from `sender` (`QUAL:ID`), known to the
    /// gateway as partner `partner` (the raw id for an unknown sender).
    pub fn may_upload_for(&self, partner: &str, sender: &str) -> bool {
        match &self.partners {
            None => true,
            Some(list) => {
                let sender = normalize_party(sender);
                list.iter().any(|p| p == partner || *p == sender)
            }
        }
    }
}

/// `QUAL:ID` with both parts trimmed (how the parser shows a sender); other text unchanged.
fn normalize_party(s: &str) -> String {
    match s.split_once(':') {
        Some((q, id)) => format!("{}:{}", q.trim(), id.trim()),
        None => s.trim().to_owned(),
    }
}

/// A `[[client]]` table refused at load. The message names the client by position and name
/// and never repeats the secret (only its length).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[[client]] #{position} (name {name:?}): {message}")]
pub struct ClientKeyError {
    /// 1-based position of the `[[client]]` table in the file.
    pub position: usize,
    /// The client's name.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

/// A 403 for a client uploading for a sender outside its `partners`.
pub fn partner_forbidden(client: &Client, partner: &str, sender: &str) -> Problem {
    Problem::new(StatusCode::FORBIDDEN, "partner-not-allowed", "Partner not allowed")
        .detail(format!(
            "client {:?} may not upload interchanges from sender {sender} (partner {partner:?}); \
             nothing was spooled",
            client.name()
        ))
        .with("client", client.name())
        .with("sender", sender)
        .with("partner", partner)
}

/// The configured client keys; empty means `/v1/quota` needs no key.
#[derive(Debug, Clone, Default)]
pub struct ClientKeys {
    clients: Vec<Client>,
}

impl ClientKeys {
    /// Keys from the `[[client]]` tables; refuses a key used twice (a key is never empty and
    /// a partner entry never blank: both are refused as the file is read).
    pub fn new(keys: &[ClientKey]) -> Result<Self, ClientKeyError> {
        let mut clients: Vec<Client> = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let err =
                |message: String| ClientKeyError { position: i + 1, name: k.name.clone(), message };
            if k.key.is_none() && k.subject.is_none() {
                return Err(err("needs key (sent as x-api-key) or subject (of a client \
                                certificate), or both"
                    .into()));
            }
            if let Some(key) = &k.key
                && let Some(j) = clients.iter().position(|c| c.key.as_ref() == Some(key))
            {
                return Err(err(format!(
                    "key ({} bytes, not shown) is the same as the key of [[client]] #{} \
                     (name {:?}); every client needs its own key",
                    key.len(),
                    j + 1,
                    clients[j].name
                )));
            }
            if let Some(subject) = &k.subject {
                if subject.trim().is_empty() {
                    return Err(err("subject = \"\": must name a certificate subject".into()));
                }
                if let Some(j) = clients.iter().position(|c| c.subject.as_ref() == Some(subject)) {
                    return Err(err(format!(
                        "subject = {subject:?} is already the subject of [[client]] #{} \
                         (name {:?}); every client needs its own",
                        j + 1,
                        clients[j].name
                    )));
                }
            }
            clients.push(Client {
                key: k.key.clone(),
                subject: k.subject.clone(),
                name: k.name.clone(),
                allow: k.allow.clone(),
                partners: k
                    .partners
                    .as_ref()
                    .map(|list| list.iter().map(|p| normalize_party(p)).collect()),
            });
        }
        Ok(Self { clients })
    }

    /// The index of the client whose key is `presented` (for [`ClientKeys::client`]). Every
    /// key is compared, without stopping early, so timing does not tell which prefix matched.
    pub fn find_key(&self, presented: &[u8]) -> Option<usize> {
        let mut found = None;
        for (i, c) in self.clients.iter().enumerate() {
            let Some(key) = &c.key else { continue };
            if constant_time_eq(key.as_bytes(), presented) && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    /// The client at `index` (see [`ClientKeys::find_key`]).
    pub fn client(&self, index: usize) -> Option<&Client> {
        self.clients.get(index)
    }

    /// True when keys are required.
    pub fn enabled(&self) -> bool {
        !self.clients.is_empty()
    }

    /// The client presenting `x-api-key`: `Ok(None)` when no keys are configured, 401 when
    /// the key is missing or unknown.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Option<&Client>, Problem> {
        self.authenticate_with(headers, None)
    }

    /// The client presenting `x-api-key`, or else the client whose `subject` is that of the
    /// connection's verified certificate `peer`: `Ok(None)` when no clients are configured,
    /// 401 when neither names a client.
    pub fn authenticate_with(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerCertificate>,
    ) -> Result<Option<&Client>, Problem> {
        if self.clients.is_empty() {
            return Ok(None);
        }
        if !headers.contains_key(API_KEY_HEADER)
            && let Some(peer) = peer
        {
            return match self.clients.iter().find(|c| c.subject.as_ref() == Some(&peer.subject)) {
                Some(c) => Ok(Some(c)),
                None => Err(Problem::new(
                    StatusCode::UNAUTHORIZED,
                    "unknown-certificate-subject",
                    "Client certificate not configured",
                )
                .detail(format!(
                    "the client certificate's subject {:?} is not the subject of any \
                     [[client]], and no x-api-key was sent",
                    peer.subject
                ))
                .with("subject", peer.subject.as_str())),
            };
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
        self.find_key(presented.as_bytes()).map(|i| Some(&self.clients[i])).ok_or_else(|| {
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

    fn key(key: &str, name: &str) -> ClientKey {
        ClientKey {
            key: Some(ClientSecret::new(key).unwrap()),
            subject: None,
            name: name.into(),
            allow: None,
            partners: None,
        }
    }

    fn keys() -> ClientKeys {
        ClientKeys::new(&[
            ClientKey {
                allow: Some(vec!["ShipmentStatus:*".parse().unwrap()]),
                partners: Some(vec!["CARRIERXYZ".into(), "01: 123456789 ".into()]),
                ..key("k1", "pi")
            },
            key("k2", "ops"),
        ])
        .unwrap()
    }

    #[test]
    fn empty_and_duplicate_keys_are_refused_without_the_secret() {
        assert!(ClientSecret::new("").is_err());
        assert!(!format!("{:?}", key("s3cret-value", "a")).contains("s3cret"));
        let e = ClientKeys::new(&[key("s3cret-value", "a"), key("s3cret-value", "b")]).unwrap_err();
        assert_eq!(e.position, 2);
        let msg = e.to_string();
        assert!(msg.contains("#1") && msg.contains("\"a\"") && msg.contains("\"b\""), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
    }

    #[test]
    fn an_empty_key_or_partner_is_refused_as_the_file_is_read() {
        #[derive(Debug, serde::Deserialize)]
        struct Doc {
            #[allow(dead_code)]
            client: Vec<ClientKey>,
        }
        for (src, at, needle) in [
            ("[[client]]\nkey = \"\"\nname = \"b\"\n", "2:7", "key = (hidden): must not be empty"),
            (
                "[[client]]\nkey = \"k\"\nname = \"c\"\npartners = [\"A\", \" \"]\n",
                "4:12",
                "partners = [\"A\", \" \"]: the entry \" \" is empty",
            ),
        ] {
            let e = toml::from_str::<Doc>(src).unwrap_err();
            let e = crate::config::located(std::path::Path::new("t.toml"), src, &e);
            assert!(e.starts_with(&format!("t.toml:{at}: {needle}")), "{e}");
        }
    }

    #[test]
    fn partners_limit_uploads() {
        let k = keys();
        let pi = k.authenticate(&with_key("k1")).unwrap().unwrap();
        assert!(pi.may_upload_for("CARRIERXYZ", "ZZ:XYZ"));
        assert!(pi.may_upload_for("01:123456789", "01:123456789"));
        assert!(!pi.may_upload_for("OTHER", "ZZ:OTHER"));
        assert!(!format!("{pi:?}").contains("k1"));
        let ops = k.authenticate(&with_key("k2")).unwrap().unwrap();
        assert!(ops.may_upload_for("OTHER", "ZZ:OTHER"));
    }

    fn with_key(k: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(API_KEY_HEADER, HeaderValue::from_str(k).unwrap());
        h
    }

    #[test]
    fn a_certificate_subject_names_a_client_when_no_key_is_sent() {
        let partner = ClientKey {
            key: None,
            subject: Some("CN=partner-a".into()),
            ..key("unused", "partner-a")
        };
        let k = ClientKeys::new(&[partner.clone(), key("k2", "ops")]).unwrap();
        let peer = |s: &str| PeerCertificate { subject: s.into() };
        let c = k.authenticate_with(&HeaderMap::new(), Some(&peer("CN=partner-a"))).unwrap();
        assert_eq!(c.unwrap().name(), "partner-a");
        let e = k.authenticate_with(&HeaderMap::new(), Some(&peer("CN=b"))).unwrap_err();
        assert_eq!(e.slug(), "unknown-certificate-subject");
        let c = k.authenticate_with(&with_key("k2"), Some(&peer("CN=partner-a"))).unwrap();
        assert_eq!(c.unwrap().name(), "ops", "a key decides when one is sent");
        // A subject is no key: without a certificate, a missing key is still 401.
        assert!(k.authenticate_with(&HeaderMap::new(), None).is_err());
        // Load errors: neither key nor subject, a subject used twice.
        let neither = ClientKey { key: None, ..key("x", "n") };
        let e = ClientKeys::new(&[neither]).unwrap_err().to_string();
        assert!(e.contains("needs key") && e.contains("subject"), "{e}");
        let e = ClientKeys::new(&[partner.clone(), partner]).unwrap_err().to_string();
        assert!(e.contains("subject = \"CN=partner-a\" is already"), "{e}");
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
