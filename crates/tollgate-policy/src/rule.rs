//! `[[policy]]`: limits that functional teams own in the config file. A [`PolicyRule`] matches
//! metering ids by glob and supplies, or with `override` imposes, the limit and window.
//!
//! Invariant: every `PolicyRule` passed [`check_rule`] (it is only made through
//! `PolicyFields`), so a set of rules needs no further validation.

use std::num::NonZeroU32;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tollgate_quota::{QuotaSpec, TimeUnit, WindowKind};

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
/// Invariant: every `PolicyRule` passed [`check_rule`] (it is only made through
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<TimeUnit>,
    /// calendar, flexi or rolling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// second … month (a string: `null` is refused, as the schema says).
    #[serde(default, deserialize_with = "present")]
    unit: Option<TimeUnit>,
    /// calendar, flexi or rolling (a string: `null` is refused).
    #[serde(default, deserialize_with = "present")]
    window: Option<WindowKind>,
    /// The policy beats the headers instead of filling gaps.
    #[serde(rename = "override", default)]
    override_headers: bool,
    /// enforce (default) or shadow.
    #[serde(default)]
    mode: PolicyMode,
}

/// A key that, when given, holds a value: `null` is refused like any other wrong type.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
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
        check_rule(&rule)?;
        Ok(rule)
    }
}

/// The largest `limit` a policy may hold: `i64::MAX`, the largest integer a TOML file can
/// store, so a set accepted through the admin API can always be written back to the file.
pub const MAX_POLICY_LIMIT: u64 = i64::MAX as u64;

/// Checks the keys of one `[[policy]]` together: `limit` at most [`MAX_POLICY_LIMIT`],
/// `interval × unit` no longer than the engine's longest window (an `interval` without `unit`
/// must fit the finest unit, seconds). The message names the policy and the key.
pub fn check_rule(rule: &PolicyRule) -> Result<(), String> {
    let glob = rule.pattern.as_str();
    if let Some(limit) = rule.limit.filter(|&l| l > MAX_POLICY_LIMIT) {
        return Err(format!(
            "policy {glob:?}: limit {limit} is too large: the largest limit is {MAX_POLICY_LIMIT}"
        ));
    }
    if let Some(interval) = rule.interval.map(|n| n.get()) {
        let unit = rule.unit.unwrap_or(TimeUnit::Second);
        if let Err(e) = QuotaSpec::new(0, interval, unit) {
            let hint = if rule.unit.is_none() { " (with no unit given, in seconds)" } else { "" };
            return Err(format!("policy {glob:?}: interval: {e}{hint}"));
        }
    }
    Ok(())
}
