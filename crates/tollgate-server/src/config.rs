//! The config file sections the quota service reads: `[[policy]]` and `[[client]]`, as serde
//! structs, and what every section's reader shares: [`ConfigError`] and the [`key`] helpers.
//!
//! The top-level file (`[server]`, `[store]`, `[gateway]`) is assembled by the binary. Every
//! struct refuses unknown keys, and values are validated while they are deserialized (globs
//! compile, units and windows are known, intervals are ≥ 1), so a TOML error carries the line
//! and column of the bad value; [`ConfigError::locate`] turns it into `FILE:LINE:COL: message`.

use std::fmt::{self, Display};
use std::num::NonZeroU32;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tollgate_quota::{TimeUnit, WindowKind};

mod error;
pub mod key;

pub use error::{ConfigError, line_col, located};

/// Enforce (answer 429) or shadow (count and report, always answer 200).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Over-limit requests get 429.
    #[default]
    Enforce,
    /// Over-limit requests get 200 plus `Tollgate-Shadow: would-reject`.
    Shadow,
}

/// A glob over metering ids (`ShipmentStatus:*`), compiled when it is read. `*` also matches
/// `:` and `/`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct GlobPattern {
    text: String,
    matcher: globset::GlobMatcher,
}

impl GlobPattern {
    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when `id` matches the pattern.
    pub fn is_match(&self, id: &str) -> bool {
        self.matcher.is_match(id)
    }
}

impl PartialEq for GlobPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for GlobPattern {}

impl TryFrom<String> for GlobPattern {
    type Error = String;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        if text.is_empty() {
            return Err("a glob pattern must not be empty".into());
        }
        let glob = globset::Glob::new(&text).map_err(|e| format!("invalid glob {text:?}: {e}"))?;
        Ok(Self { matcher: glob.compile_matcher(), text })
    }
}

impl FromStr for GlobPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_owned())
    }
}

impl From<GlobPattern> for String {
    fn from(g: GlobPattern) -> Self {
        g.text
    }
}

/// `[[policy]]`: limits owned by the server for ids matching a glob. The first matching
/// policy wins. Without `override` it only fills what the request headers omit; with it, it
/// beats the headers.
///
/// Invariant: every `PolicyRule` passed [`crate::policy::check_rule`] (it is only made through
/// `PolicyFields`), so a set of rules needs no further validation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "PolicyFields")]
pub struct PolicyRule {
    /// Glob over `metering-id`.
    #[serde(rename = "match")]
    pub pattern: GlobPattern,
    /// Units per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Window length in units (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<NonZeroU32>,
    /// second … month.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub unit: Option<TimeUnit>,
    /// calendar, flexi or rolling.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "text")]
    pub window: Option<WindowKind>,
    /// The policy beats the headers instead of filling gaps.
    #[serde(rename = "override", default)]
    pub override_headers: bool,
    /// enforce (default) or shadow.
    #[serde(default)]
    pub mode: PolicyMode,
}

/// A `[[policy]]` table as written, before its keys are checked together.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFields {
    /// Glob over `metering-id`.
    #[serde(rename = "match")]
    pattern: GlobPattern,
    /// Units per window.
    #[serde(default)]
    limit: Option<u64>,
    /// Window length in units (≥ 1).
    #[serde(default)]
    interval: Option<NonZeroU32>,
    /// second … month.
    #[serde(default, with = "text")]
    unit: Option<TimeUnit>,
    /// calendar, flexi or rolling.
    #[serde(default, with = "text")]
    window: Option<WindowKind>,
    /// The policy beats the headers instead of filling gaps.
    #[serde(rename = "override", default)]
    override_headers: bool,
    /// enforce (default) or shadow.
    #[serde(default)]
    mode: PolicyMode,
}

impl TryFrom<PolicyFields> for PolicyRule {
    type Error = String;
    fn try_from(f: PolicyFields) -> Result<Self, String> {
        let rule = PolicyRule {
            pattern: f.pattern,
            limit: f.limit,
            interval: f.interval,
            unit: f.unit,
            window: f.window,
            override_headers: f.override_headers,
            mode: f.mode,
        };
        crate::policy::check_rule(&rule)?;
        Ok(rule)
    }
}

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

/// Reads `T` through its `FromStr` and writes it through `Display` (units, windows).
mod text {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let s = String::deserialize(d)?;
        s.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
