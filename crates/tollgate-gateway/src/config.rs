//! The `[gateway]` section of the config file, and its validation into a [`Plan`].
//!
//! [`GatewayConfig`] mirrors the TOML keys exactly (serde, unknown keys refused). It is checked
//! once, at the edge, by [`GatewayConfig::plan`]: every route's quota, weight rule, metering-id
//! template and delivery target is parsed there, and every error names the key and the value it
//! received. The rest of the gateway only sees the typed [`Plan`].

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit};

mod plan;
pub use plan::*;

/// The `[gateway]` section, key for key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Landing directories polled for new files.
    #[serde(default)]
    pub inbound: Vec<PathBuf>,
    /// Directory scan period in milliseconds.
    #[serde(default = "defaults::poll_ms")]
    pub poll_ms: u64,
    /// A file must be unchanged this long (milliseconds) before it is taken.
    #[serde(default = "defaults::settle_ms")]
    pub settle_ms: u64,
    /// The window, in days, in which a resent (sender, receiver, control number) is a duplicate.
    #[serde(default = "defaults::dedup_days")]
    pub dedup_days: u32,
    /// Where acknowledgements (TA1/997/999/CONTRL) for rejected input are written, if anywhere.
    #[serde(default)]
    pub acks: Option<PathBuf>,
    /// The largest body `POST /v1/interchanges` accepts, in bytes.
    #[serde(default = "defaults::max_upload_bytes")]
    pub max_upload_bytes: u64,
    /// Upload bodies held in memory at once, in bytes, across all uploads (each reserves its
    /// `Content-Length`, or `max_upload_bytes` when unknown; 503 when the budget is spent).
    #[serde(default = "defaults::upload_budget_bytes")]
    pub upload_budget_bytes: u64,
    /// The largest landing file taken, in bytes; a larger one is moved to `too-large/`.
    #[serde(default = "defaults::max_file_bytes")]
    pub max_file_bytes: u64,
    /// Globs over landing file names that mark a file still being written (never taken).
    #[serde(default = "defaults::partial_names")]
    pub partial_names: Vec<String>,
    /// How long (milliseconds) a landing file whose last interchange has no trailer yet must
    /// stay unchanged before it is taken as it is (and rejected by the parser).
    #[serde(default = "defaults::incomplete_grace_ms")]
    pub incomplete_grace_ms: u64,
    /// How interchanges are metered.
    #[serde(default)]
    pub quota: QuotaSection,
    /// Trading partners: sender ids to names.
    #[serde(default)]
    pub partner: Vec<PartnerConfig>,
    /// Document routes: what is metered how, and where it goes.
    #[serde(default)]
    pub route: Vec<RouteConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            inbound: Vec::new(),
            poll_ms: defaults::poll_ms(),
            settle_ms: defaults::settle_ms(),
            dedup_days: defaults::dedup_days(),
            acks: None,
            max_upload_bytes: defaults::max_upload_bytes(),
            upload_budget_bytes: defaults::upload_budget_bytes(),
            max_file_bytes: defaults::max_file_bytes(),
            partial_names: defaults::partial_names(),
            incomplete_grace_ms: defaults::incomplete_grace_ms(),
            quota: QuotaSection::default(),
            partner: Vec::new(),
            route: Vec::new(),
        }
    }
}

/// `[gateway.quota]`: embedded engine or remote quota service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSection {
    /// `"embedded"` (the store of this process) or `"remote"`.
    #[serde(default)]
    pub mode: QuotaMode,
    /// The remote quota endpoint, e.g. `http://quota.internal:8080/v1/quota` (remote only).
    #[serde(default)]
    pub url: Option<String>,
    /// How long a remote check may take, in milliseconds (remote only).
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// What to do while the quota service is unavailable: deliver (fail-open) or hold.
    #[serde(default)]
    pub on_unavailable: OnUnavailable,
    /// The `x-api-key` sent to the remote quota service (a `[[client]]` key there); the
    /// environment variable `TOLLGATE_GATEWAY_QUOTA_API_KEY` overrides it (remote only).
    #[serde(default)]
    pub api_key: Option<String>,
}

impl Default for QuotaSection {
    fn default() -> Self {
        Self {
            mode: QuotaMode::default(),
            url: None,
            timeout_ms: defaults::timeout_ms(),
            on_unavailable: OnUnavailable::default(),
            api_key: None,
        }
    }
}

/// Where counters are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaMode {
    /// The store shared with this server's `/v1/quota`.
    #[default]
    Embedded,
    /// A quota service over HTTP, called with the seed headers.
    Remote,
}

/// The decision taken while the remote quota service cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnavailable {
    /// Fail open: deliver, and count the decision in metrics.
    #[default]
    Deliver,
    /// Hold until the service answers again.
    Hold,
}

/// `[[gateway.partner]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartnerConfig {
    /// The name used in metering ids, metrics and headers.
    pub name: String,
    /// Sender ids, `QUAL:ID` (X12 ISA05:ISA06, EDIFACT UNB 0007:0004).
    pub ids: Vec<String>,
}

/// `[[gateway.route]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name (`{route}` in the metering id).
    pub name: String,
    /// Document types: X12 ST01 (`214`) or EDIFACT message type (`IFTSTA`).
    pub documents: Vec<String>,
    /// The metering id template; `{route}` and `{partner}` are replaced.
    #[serde(default = "defaults::metering_id")]
    pub metering_id: String,
    /// Units per window.
    pub limit: u64,
    /// Window length in `unit`s.
    #[serde(default = "defaults::interval")]
    pub interval: u32,
    /// second(s), minute(s), hour(s), day(s), week(s), month(s).
    pub unit: String,
    /// `"transactions"` or `"segment:TAG"`.
    #[serde(default = "defaults::weight")]
    pub weight: String,
    /// The least an interchange consumes, whatever its weight rule counts (a 214 without AT7
    /// under `segment:AT7` still costs this). `0` lets such interchanges pass uncounted.
    #[serde(default = "defaults::min_weight")]
    pub min_weight: u64,
    /// Admit the transactions that fit and hold the rest.
    #[serde(default)]
    pub split: bool,
    /// `"dir:PATH"` or an `http://` / `https://` URL.
    pub deliver: String,
    /// Deliveries in flight to this target at most.
    #[serde(default = "defaults::max_concurrency")]
    pub max_concurrency: usize,
}

mod defaults {
    pub fn poll_ms() -> u64 {
        500
    }
    pub fn settle_ms() -> u64 {
        200
    }
    pub fn dedup_days() -> u32 {
        30
    }
    pub fn max_upload_bytes() -> u64 {
        52_428_800
    }
    pub fn upload_budget_bytes() -> u64 {
        268_435_456
    }
    pub fn max_file_bytes() -> u64 {
        52_428_800
    }
    /// Temporary names of common transfer clients: dot files (OpenSSH sftp/rsync temp files,
    /// editors), WinSCP `.filepart`, FileZilla/Cyberduck/curl `.part`, `.partial`, `.tmp`,
    /// `.crdownload`, `.inprogress`, and `~` backups.
    pub fn partial_names() -> Vec<String> {
        [".*", "*.filepart", "*.part", "*.partial", "*.tmp", "*.crdownload", "*.inprogress", "*~"]
            .map(str::to_owned)
            .to_vec()
    }
    pub fn incomplete_grace_ms() -> u64 {
        300_000
    }
    pub fn timeout_ms() -> u64 {
        200
    }
    pub fn metering_id() -> String {
        "{route}:{partner}".to_owned()
    }
    pub fn interval() -> u32 {
        1
    }
    pub fn weight() -> String {
        "transactions".to_owned()
    }
    pub fn min_weight() -> u64 {
        1
    }
    pub fn max_concurrency() -> usize {
        4
    }
}

/// A config value that was refused: the key, the value received, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value:?}: {message}")]
pub struct ConfigError {
    /// The full key, e.g. `gateway.route[0].unit`.
    pub key: String,
    /// The value as received.
    pub value: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, value: impl Into<String>, message: impl fmt::Display) -> Self {
        Self { key: key.into(), value: value.into(), message: message.to_string() }
    }
}

impl GatewayConfig {
    /// Checks every key and builds the [`Plan`]; the error names the first bad key and value.
    pub fn plan(&self) -> Result<Plan, ConfigError> {
        if self.poll_ms == 0 {
            return Err(ConfigError::new("gateway.poll_ms", "0", "must be at least 1"));
        }
        if self.max_upload_bytes == 0 {
            return Err(ConfigError::new("gateway.max_upload_bytes", "0", "must be at least 1"));
        }
        if self.max_upload_bytes > u64::from(u32::MAX) {
            return Err(ConfigError::new(
                "gateway.max_upload_bytes",
                self.max_upload_bytes.to_string(),
                format!("must be at most {} (4 GiB - 1)", u32::MAX),
            ));
        }
        if self.upload_budget_bytes < self.max_upload_bytes {
            return Err(ConfigError::new(
                "gateway.upload_budget_bytes",
                self.upload_budget_bytes.to_string(),
                format!("must be at least max_upload_bytes ({})", self.max_upload_bytes),
            ));
        }
        if self.max_file_bytes == 0 {
            return Err(ConfigError::new("gateway.max_file_bytes", "0", "must be at least 1"));
        }
        let partial_names =
            crate::landing::PartialNames::new(&self.partial_names).map_err(|(i, value, m)| {
                ConfigError::new(format!("gateway.partial_names[{i}]"), value, m)
            })?;
        if self.dedup_days == 0 {
            return Err(ConfigError::new("gateway.dedup_days", "0", "must be at least 1"));
        }
        let remote = match self.quota.mode {
            QuotaMode::Embedded => None,
            QuotaMode::Remote => {
                let url = self.quota.url.clone().ok_or_else(|| {
                    ConfigError::new("gateway.quota.url", "", "required when mode = \"remote\"")
                })?;
                check_http_url(&url).map_err(|m| ConfigError::new("gateway.quota.url", &url, m))?;
                if self.quota.timeout_ms == 0 {
                    return Err(ConfigError::new("gateway.quota.timeout_ms", "0", "must be > 0"));
                }
                let api_key = match &self.quota.api_key {
                    Some(k) => Some(
                        reqwest::header::HeaderValue::from_str(k)
                            .ok()
                            .filter(|_| !k.is_empty())
                            .map(|mut v| {
                                v.set_sensitive(true);
                                v
                            })
                            .ok_or_else(|| {
                                ConfigError::new(
                                    "gateway.quota.api_key",
                                    "(hidden)",
                                    "must be non-empty visible ASCII",
                                )
                            })?,
                    ),
                    None => None,
                };
                Some(RemoteQuota {
                    url,
                    timeout: Duration::from_millis(self.quota.timeout_ms),
                    api_key,
                })
            }
        };

        let mut partners = HashMap::new();
        for (i, p) in self.partner.iter().enumerate() {
            if p.name.is_empty() || !p.name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::new(
                    format!("gateway.partner[{i}].name"),
                    &p.name,
                    "must be non-empty visible ASCII (it goes into metering ids and headers)",
                ));
            }
            for id in &p.ids {
                let key = format!("gateway.partner[{i}].ids");
                if !id.contains(':') {
                    return Err(ConfigError::new(key, id, "expected QUALIFIER:ID, e.g. ZZ:ACME"));
                }
                if let Some(prev) = partners.insert(normalize_party(id), p.name.clone()) {
                    return Err(ConfigError::new(key, id, format!("already used by {prev}")));
                }
            }
        }

        let mut routes = Vec::new();
        let mut by_document = HashMap::new();
        for (i, r) in self.route.iter().enumerate() {
            let k = |f: &str| format!("gateway.route[{i}].{f}");
            if r.name.is_empty() || !r.name.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::new(
                    k("name"),
                    &r.name,
                    "must be non-empty visible ASCII",
                ));
            }
            let unit: TimeUnit =
                r.unit.parse().map_err(|e| ConfigError::new(k("unit"), &r.unit, e))?;
            let spec = QuotaSpec::new(r.limit, r.interval, unit)
                .map_err(|e| ConfigError::new(k("interval"), r.interval.to_string(), e))?;
            let weight: WeightRule =
                r.weight.parse().map_err(|e| ConfigError::new(k("weight"), &r.weight, e))?;
            crate::envelope::record_rule(&weight)
                .map_err(|e| ConfigError::new(k("weight"), &r.weight, e))?;
            let target = parse_target(&r.deliver)
                .map_err(|m| ConfigError::new(k("deliver"), &r.deliver, m))?;
            let template = check_template(&r.metering_id, &r.name)
                .map_err(|m| ConfigError::new(k("metering_id"), &r.metering_id, m))?;
            if r.max_concurrency == 0 {
                return Err(ConfigError::new(k("max_concurrency"), "0", "must be at least 1"));
            }
            if r.documents.is_empty() {
                return Err(ConfigError::new(k("documents"), "[]", "list at least one document"));
            }
            for d in &r.documents {
                if let Some(prev) = by_document.insert(d.clone(), i) {
                    return Err(ConfigError::new(
                        k("documents"),
                        d,
                        format!("already routed by {}", self.route[prev].name),
                    ));
                }
            }
            routes.push(Route {
                name: r.name.clone(),
                template,
                spec,
                weight,
                min_weight: r.min_weight,
                split: r.split,
                target,
                max_concurrency: r.max_concurrency,
            });
        }

        Ok(Plan {
            inbound: self.inbound.clone(),
            poll: Duration::from_millis(self.poll_ms),
            settle: Duration::from_millis(self.settle_ms),
            dedup: Duration::from_secs(u64::from(self.dedup_days) * 86_400),
            acks: self.acks.clone(),
            max_upload_bytes: self.max_upload_bytes,
            upload_budget_bytes: self.upload_budget_bytes,
            max_file_bytes: self.max_file_bytes,
            partial_names,
            incomplete_grace: Duration::from_millis(self.incomplete_grace_ms),
            remote,
            on_unavailable: self.quota.on_unavailable,
            partners,
            routes,
            by_document,
        })
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    match parsed.scheme() {
        "http" | "https" if parsed.host().is_some() => Ok(()),
        "http" | "https" => Err("the URL has no host".to_owned()),
        other => Err(format!("scheme {other:?} is not http or https")),
    }
}

fn parse_target(s: &str) -> Result<Target, String> {
    if let Some(path) = s.strip_prefix("dir:") {
        if path.is_empty() {
            return Err("dir: needs a path, e.g. dir:./outbound/214".to_owned());
        }
        return Ok(Target::Dir(PathBuf::from(path)));
    }
    if s.starts_with("http://") || s.starts_with("https://") {
        check_http_url(s)?;
        return Ok(Target::Http(s.to_owned()));
    }
    Err("expected \"dir:PATH\" or an http:// or https:// URL".to_owned())
}

/// Checks the placeholders and substitutes `{route}`; `{partner}` stays for later.
fn check_template(template: &str, route: &str) -> Result<String, String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or("unclosed '{'")?;
        let name = &after[..close];
        if name != "route" && name != "partner" {
            return Err(format!("unknown placeholder {{{name}}}: use {{route}} and {{partner}}"));
        }
        rest = &after[close + 1..];
    }
    let with_route = template.replace("{route}", route);
    let probe = with_route.replace("{partner}", "P");
    MeteringId::new(&probe).map_err(|e| e.to_string())?;
    Ok(with_route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<GatewayConfig, toml::de::Error> {
        toml::from_str(s)
    }

    const ROUTE: &str = r#"
        [[route]]
        name = "ShipmentStatus"
        documents = ["214", "IFTSTA"]
        limit = 1000
        interval = 24
        unit = "hours"
        deliver = "dir:./out"
    "#;

    #[test]
    fn defaults_and_route_plan() {
        let c = parse(ROUTE).unwrap();
        assert_eq!(c.poll_ms, 500);
        assert_eq!(c.settle_ms, 200);
        assert_eq!(c.max_upload_bytes, 52_428_800);
        assert_eq!(c.upload_budget_bytes, 268_435_456);
        assert_eq!(c.max_file_bytes, 52_428_800);
        assert_eq!(c.incomplete_grace_ms, 300_000);
        let p = c.plan().unwrap();
        let r = p.route_for("IFTSTA").unwrap();
        assert_eq!(r.spec.limit, 1000);
        assert_eq!(r.spec.unit, TimeUnit::Hour);
        assert_eq!(r.weight, WeightRule::Transactions);
        assert_eq!(r.metering_id("ZZ:ACME CO").as_str(), "ShipmentStatus:ZZ:ACME_CO");
        assert!(p.route_for("810").is_none());
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = parse("polll_ms = 3").unwrap_err();
        assert!(e.to_string().contains("polll_ms"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_value() {
        let cases = [
            ("unit = \"hours\"", "unit = \"fortnight\"", "gateway.route[0].unit", "fortnight"),
            ("limit = 1000", "limit = 1000\nweight = \"segs\"", "gateway.route[0].weight", "segs"),
            ("dir:./out", "ftp://x", "gateway.route[0].deliver", "ftp://x"),
            ("limit = 1000", "limit = 1000\nmetering_id = \"{x}\"", "route[0].metering_id", "{x}"),
        ];
        for (from, to, key, value) in cases {
            let c = parse(&ROUTE.replace(from, to)).unwrap();
            let e = c.plan().unwrap_err();
            assert!(e.key.ends_with(key), "{e}");
            assert_eq!(e.value, value);
            assert!(e.to_string().contains(value));
        }
    }

    #[test]
    fn intake_limits_are_checked() {
        for (text, key) in [
            ("max_upload_bytes = 0", "gateway.max_upload_bytes"),
            ("max_upload_bytes = 4294967296", "gateway.max_upload_bytes"),
            ("max_upload_bytes = 10\nupload_budget_bytes = 9", "gateway.upload_budget_bytes"),
            ("max_file_bytes = 0", "gateway.max_file_bytes"),
            ("partial_names = [\"*.part\", \"a[\"]", "gateway.partial_names[1]"),
            ("partial_names = [\"\"]", "gateway.partial_names[0]"),
        ] {
            let e = parse(text).unwrap().plan().unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }

    #[test]
    fn weight_rules_parse() {
        assert_eq!("segment:AT7".parse(), Ok(WeightRule::Segment("AT7".into())));
        assert!("segment:".parse::<WeightRule>().is_err());
        assert!("segment:at7".parse::<WeightRule>().is_err());
    }

    #[test]
    fn remote_needs_a_url_and_partners_map_ids() {
        let c = parse("[quota]\nmode = \"remote\"").unwrap();
        assert_eq!(c.plan().unwrap_err().key, "gateway.quota.url");
        let c = parse("[[partner]]\nname = \"X\"\nids = [\"ZZ:X  \"]").unwrap();
        let p = c.plan().unwrap();
        assert_eq!(p.partner_name("ZZ:X"), "X");
        assert_eq!(p.partner_name("01:Y"), "01:Y");
    }
}
