//! The config file section the quota service reads, `[[client]]`, as serde structs, and what
//! every section's reader shares: [`ConfigError`] and the [`key`] helpers. `[[policy]]` is
//! read by `tollgate-policy`.
//!
//! The top-level file (`[server]`, `[store]`, `[gateway]`) is assembled by the binary. Every
//! struct refuses unknown keys, and values are validated while they are deserialized (globs
//! compile, units and windows are known, intervals are ≥ 1), so a TOML error carries the line
//! and column of the bad value; [`ConfigError::locate`] turns it into `FILE:LINE:COL: message`.

use std::fmt;

use serde::{Deserialize, Serialize};
use tollgate_policy::GlobPattern;

mod error;
pub mod key;

pub use error::{ConfigError, line_col, located};

/// `[[client]]`: an API key (sent as `x-api-key`) or a client certificate subject (under
/// mTLS) allowed to call `/v1/quota`, for ids matching `allow` (every id when `allow` is
/// absent), and to upload interchanges to the gateway for the senders in `partners` (every
/// sender when `partners` is absent). At least one of `key` and `subject` is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientKey {
    /// The secret the client sends in `x-api-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<ClientSecret>,
    /// The subject of the client certificate that identifies this client, as RFC 4514 text
    /// (`CN=edi.acme.example,O=Acme`: most specific first, as `openssl x509 -noout -subject
    /// -nameopt RFC2253` prints it); needs `[server] tls_client_ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A name for logs.
    pub name: String,
    /// Globs over `metering-id`; absent means every id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<GlobPattern>>,
    /// Senders this client may upload interchanges for: `[gateway.partner]` names, or raw
    /// `QUAL:ID` sender ids (no entry empty); absent means every sender.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "partners")]
    pub partners: Option<Vec<String>>,
}

/// `[[client]] partners`: a list without empty entries.
fn partners<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let list = Vec::<String>::deserialize(d)?;
    match list.iter().find(|p| p.trim().is_empty()) {
        Some(bad) => Err(serde::de::Error::custom(format!(
            "partners = {list:?}: the entry {bad:?} is empty"
        ))),
        None => Ok(Some(list)),
    }
}

/// A client's secret, `[[client]] key`: never empty (an empty `x-api-key` would match it)
/// and never shown (`Debug` and errors give its length only).
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct ClientSecret(String);

impl ClientSecret {
    /// The secret; refused when empty.
    pub fn new(secret: impl Into<String>) -> Result<Self, &'static str> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err("must not be empty; an empty x-api-key would match it");
        }
        Ok(Self(secret))
    }

    /// The secret's bytes, to compare with what a client presents.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Its length in bytes (what errors may say about it).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a secret is never empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientSecret(<{} bytes>)", self.0.len())
    }
}

impl From<ClientSecret> for String {
    fn from(s: ClientSecret) -> Self {
        s.0
    }
}

impl<'de> Deserialize<'de> for ClientSecret {
    /// The error names the key, never the value.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ClientSecret::new(s).map_err(|e| serde::de::Error::custom(format!("key = (hidden): {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;
    use std::path::Path;
    use tollgate_policy::{PolicyMode, PolicyRule};
    use tollgate_quota::TimeUnit;

    #[derive(Debug, Deserialize)]
    struct Doc {
        #[serde(default)]
        policy: Vec<PolicyRule>,
    }

    #[test]
    fn policy_reads_and_round_trips() {
        let src = r#"
[[policy]]
match = "ShipmentStatus:*"
limit = 1000
interval = 24
unit = "hours"
override = true
mode = "shadow"
"#;
        let doc: Doc = toml::from_str(src).unwrap();
        let p = &doc.policy[0];
        assert_eq!(p.pattern.as_str(), "ShipmentStatus:*");
        assert_eq!(p.limit, Some(1000));
        assert_eq!(p.interval.map(NonZeroU32::get), Some(24));
        assert_eq!(p.unit, Some(TimeUnit::Hour));
        assert!(p.override_headers);
        assert_eq!(p.mode, PolicyMode::Shadow);
        assert!(p.pattern.is_match("ShipmentStatus:Carrier/1"));
        let json = serde_json::to_value(p).unwrap();
        assert_eq!(json["unit"], "hour");
        assert_eq!(json["match"], "ShipmentStatus:*");
        assert!(json.get("window").is_none());
        let back: PolicyRule = serde_json::from_value(json).unwrap();
        assert_eq!(&back, p);
    }

    #[test]
    fn bad_values_are_located() {
        for (src, want_line, needle) in [
            ("[[policy]]\nmatch = \"a\"\nunit = \"fortnight\"\n", 3, "fortnight"),
            ("[[policy]]\nmatch = \"a\"\ninterval = 0\n", 3, "nonzero"),
            ("[[policy]]\nmatch = \"a[\"\n", 2, "glob"),
            ("[[policy]]\nmatch = \"a\"\nlimit = -1\n", 3, "-1"),
            ("[[policy]]\nmatch = \"a\"\ncolour = 1\n", 3, "colour"),
        ] {
            let err = toml::from_str::<Doc>(src).unwrap_err();
            let msg = located(Path::new("t.toml"), src, &err);
            assert!(msg.starts_with(&format!("t.toml:{want_line}:")), "{msg}");
            assert!(msg.to_lowercase().contains(needle), "{msg}");
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}
