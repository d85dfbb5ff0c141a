//! The `[gateway]` section of the config file, and its validation into a [`Plan`].
//!
//! [`GatewayConfig`] mirrors the TOML keys (serde, unknown keys refused), each read into its
//! type as it is deserialized: units, weight rules, delivery targets, URLs, partner ids,
//! names and metering-id templates are parsed there, so a bad value is a parser error with
//! the value's position, naming the key and the value (`unit = "fortnight": …`). The rules
//! that involve several keys are checked by [`GatewayConfig::plan`], whose error still
//! carries the position of the offending key. The rest of the gateway only sees the typed
//! [`Plan`].

use std::collections::HashMap;
use std::fmt;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use tollgate_edi::{PartyId, RecordRule};
pub use tollgate_http::config::ConfigError;
use tollgate_quota::{MeteringId, QuotaSpec, TimeUnit};
use toml::Spanned;

use crate::landing::PartialNames;

mod defaults;
mod delivery;
mod fields;
mod plan;
mod value;
pub use delivery::*;
pub use plan::*;
pub(crate) use value::{ApiKey, HttpUrl, MeteringTemplate, Name};

/// The `[gateway]` section, key for key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Landing directories polled for new files.
    #[serde(default)]
    pub inbound: Vec<PathBuf>,
    /// Directory scan period in milliseconds (≥ 1).
    #[serde(default = "defaults::poll_ms", deserialize_with = "fields::poll_ms")]
    pub poll_ms: NonZeroU64,
    /// A file must be unchanged this long (milliseconds) before it is taken.
    #[serde(default = "defaults::settle_ms")]
    pub settle_ms: u64,
    /// The window, in days, in which a resent (sender, receiver, control number), or on a
    /// `dedup = "transaction"` route a resent transaction, is a duplicate (a route may set its
    /// own).
    #[serde(default = "defaults::dedup_days", deserialize_with = "fields::dedup_days")]
    pub dedup_days: NonZeroU32,
    /// How long, in days, rejected, duplicate and dead items are kept (with their bytes) for
    /// operators to review, release or retry before they are purged.
    #[serde(default = "defaults::keep_days", deserialize_with = "fields::keep_days")]
    pub keep_days: NonZeroU32,
    /// Where acknowledgements (TA1/997/999/CONTRL) for rejected input are written, if anywhere.
    #[serde(default)]
    pub acks: Option<PathBuf>,
    /// The largest body `POST /v1/interchanges` accepts, in bytes (1 to 4 GiB - 1).
    #[serde(default = "defaults::max_upload_bytes", deserialize_with = "fields::max_upload_bytes")]
    pub max_upload_bytes: Spanned<NonZeroU32>,
    /// Upload bodies held in memory at once, in bytes, across all uploads (each reserves its
    /// `Content-Length`, or `max_upload_bytes` when unknown; 503 when the budget is spent).
    /// At least `max_upload_bytes`.
    #[serde(default = "defaults::upload_budget_bytes")]
    pub upload_budget_bytes: Spanned<u64>,
    /// The slowest an upload body may arrive, in bytes per second, once
    /// `upload_rate_grace_ms` has passed (on average since the upload began); a slower one
    /// is cut with 408 and its share of the budget given back.
    #[serde(
        default = "defaults::upload_min_rate_bytes",
        deserialize_with = "fields::upload_min_rate_bytes"
    )]
    pub upload_min_rate_bytes: NonZeroU64,
    /// How long (milliseconds) an upload may take before `upload_min_rate_bytes` applies.
    #[serde(
        default = "defaults::upload_rate_grace_ms",
        deserialize_with = "fields::upload_rate_grace_ms"
    )]
    pub upload_rate_grace_ms: NonZeroU64,
    /// The largest landing file taken, in bytes; a larger one is moved to `too-large/`.
    #[serde(default = "defaults::max_file_bytes", deserialize_with = "fields::max_file_bytes")]
    pub max_file_bytes: NonZeroU64,
    /// Globs over landing file names that mark a file still being written (never taken).
    #[serde(default = "defaults::partial_names")]
    pub partial_names: PartialNames,
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
    /// What becomes of an interchange whose sender is in no `[[gateway.partner]]`.
    #[serde(default)]
    pub unknown_senders: UnknownSenders,
    /// Document routes: what is metered how, and where it goes.
    #[serde(default)]
    pub route: Vec<RouteConfig>,
    /// CA certificates (PEM) that HTTPS delivery targets must be signed by, instead of the
    /// system roots.
    #[serde(default)]
    pub deliver_ca_file: Option<Spanned<PathBuf>>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            inbound: Vec::new(),
            poll_ms: defaults::poll_ms(),
            settle_ms: defaults::settle_ms(),
            dedup_days: defaults::dedup_days(),
            keep_days: defaults::keep_days(),
            acks: None,
            max_upload_bytes: defaults::max_upload_bytes(),
            upload_budget_bytes: defaults::upload_budget_bytes(),
            upload_min_rate_bytes: defaults::upload_min_rate_bytes(),
            upload_rate_grace_ms: defaults::upload_rate_grace_ms(),
            max_file_bytes: defaults::max_file_bytes(),
            partial_names: defaults::partial_names(),
            incomplete_grace_ms: defaults::incomplete_grace_ms(),
            quota: QuotaSection::default(),
            partner: Vec::new(),
            unknown_senders: UnknownSenders::default(),
            route: Vec::new(),
            deliver_ca_file: None,
        }
    }
}

/// `[gateway.quota]`: embedded engine or remote quota service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSection {
    /// `"embedded"` (the store of this process) or `"remote"` (which needs `url`).
    #[serde(default = "defaults::mode")]
    pub mode: Spanned<QuotaMode>,
    /// The remote quota endpoint, e.g. `http://quota.internal:8080/v1/quota` (remote only).
    #[serde(default, deserialize_with = "fields::quota_url")]
    pub url: Option<HttpUrl>,
    /// How long a remote check may take, in milliseconds (≥ 1; remote only).
    #[serde(default = "defaults::timeout_ms", deserialize_with = "fields::timeout_ms")]
    pub timeout_ms: NonZeroU64,
    /// What to do while the quota service is unavailable: deliver (fail-open) or hold.
    #[serde(default)]
    pub on_unavailable: OnQuotaUnavailable,
    /// The `x-api-key` sent to the remote quota service (a `[[client]]` key there); the
    /// environment variable `TOLLGATE_GATEWAY_QUOTA_API_KEY` overrides it (remote only).
    #[serde(default)]
    pub api_key: Option<ApiKey>,
    /// CA certificates (PEM) the remote quota service's certificate must be signed by,
    /// instead of the system roots (remote only).
    #[serde(default)]
    pub ca_file: Option<Spanned<PathBuf>>,
}

impl Default for QuotaSection {
    fn default() -> Self {
        Self {
            mode: defaults::mode(),
            url: None,
            timeout_ms: defaults::timeout_ms(),
            on_unavailable: OnQuotaUnavailable::default(),
            api_key: None,
            ca_file: None,
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

/// What the gateway does with an interchange while the remote quota service cannot answer
/// (`[gateway.quota] on_unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnQuotaUnavailable {
    /// Fail open: deliver, and count the decision in metrics.
    #[default]
    Deliver,
    /// Hold until the service answers again.
    Hold,
}

/// What becomes of an interchange whose sender is in no `[[gateway.partner]]`
/// (`[gateway] unknown_senders`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownSenders {
    /// Metered under its raw `QUAL:ID`, as a partner of its own.
    #[default]
    Meter,
    /// Rejected with the reason: a sender id nobody configured (a partner's bug, or a sender
    /// inventing ids to get a fresh quota each time) is never delivered unreviewed.
    Reject,
}

/// `[[gateway.partner]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartnerConfig {
    /// The name used in metering ids, metrics and headers.
    #[serde(deserialize_with = "fields::name")]
    pub name: Name,
    /// Sender ids, `QUAL:ID` (X12 ISA05:ISA06, EDIFACT UNB 0007:0004), trimmed.
    #[serde(deserialize_with = "fields::ids")]
    pub ids: Vec<Spanned<PartyId>>,
    /// Landing directories only this partner drops into (polled as `[gateway] inbound` ones):
    /// an interchange taken from one with a sender id not in `ids` is rejected.
    #[serde(default)]
    pub inbound: Vec<Spanned<PathBuf>>,
}

/// `[[gateway.route]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name (`{route}` in the metering id).
    #[serde(deserialize_with = "fields::route_name")]
    pub name: Spanned<Name>,
    /// Document types: X12 ST01 (`214`) or EDIFACT message type (`IFTSTA`); at least one.
    #[serde(deserialize_with = "fields::documents")]
    pub documents: Vec<Spanned<String>>,
    /// The metering id template; `{route}` and `{partner}` are replaced.
    #[serde(default = "defaults::metering_id", deserialize_with = "fields::metering_id")]
    pub metering_id: Spanned<MeteringTemplate>,
    /// Units per window.
    pub limit: u64,
    /// Window length in `unit`s (≥ 1, at most the unit's longest window).
    #[serde(default = "defaults::interval", deserialize_with = "fields::interval")]
    pub interval: Spanned<NonZeroU32>,
    /// second(s), minute(s), hour(s), day(s), week(s), month(s).
    #[serde(deserialize_with = "fields::unit")]
    pub unit: TimeUnit,
    /// `"transactions"` (the default) or `"segment:TAG"`.
    #[serde(default, deserialize_with = "fields::weight")]
    pub weight: RecordRule,
    /// The least an interchange consumes, whatever its weight rule counts (a 214 without AT7
    /// under `segment:AT7` still costs this). `0` lets such interchanges pass uncounted.
    #[serde(default = "defaults::min_weight")]
    pub min_weight: u64,
    /// Admit the transactions that fit and hold the rest.
    #[serde(default)]
    pub split: bool,
    /// Give back the units of an interchange the embedded store admitted when it is purged
    /// or dies before its target took it.
    #[serde(default)]
    pub refund_unsent: bool,
    /// `"dir:PATH"` or an `http://` / `https://` URL.
    #[serde(deserialize_with = "fields::deliver")]
    pub deliver: Target,
    /// Deliveries in flight to this target at most (≥ 1).
    #[serde(default = "defaults::max_concurrency", deserialize_with = "fields::max_concurrency")]
    pub max_concurrency: NonZeroUsize,
    /// What counts as a duplicate on this route: a resent interchange (the default), or also
    /// each resent transaction, whatever envelope it comes in.
    #[serde(default, deserialize_with = "fields::dedup")]
    pub dedup: Dedup,
    /// This route's dedup window in days (≥ 1); the gateway's `dedup_days` when absent.
    #[serde(default, deserialize_with = "fields::route_dedup_days")]
    pub dedup_days: Option<NonZeroU32>,
    /// `[gateway.route.delivery]`: credentials, client certificate, fixed headers and
    /// Content-Type of an HTTP target.
    #[serde(default)]
    pub delivery: Option<Spanned<DeliveryConfig>>,
}

/// What a route treats as a duplicate (`[[gateway.route]] dedup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dedup {
    /// An interchange whose (sender, receiver, control number) was received within the window.
    #[default]
    Interchange,
    /// Also a transaction whose content (fingerprinted without its control references) the
    /// same partner sent as the same document type, and that was admitted, within the
    /// window: copies are removed before metering.
    Transaction,
}

impl FromStr for Dedup {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "interchange" => Ok(Self::Interchange),
            "transaction" => Ok(Self::Transaction),
            _ => Err("expected \"interchange\" or \"transaction\""),
        }
    }
}

impl GatewayConfig {
    /// Checks the rules that involve several keys and builds the [`Plan`]. The error names
    /// the key and value, and carries the position of the offending key (a byte span of the
    /// text this config was read from).
    pub fn plan(&self) -> Result<Plan, ConfigError> {
        let max_upload_bytes = u64::from(self.max_upload_bytes.get_ref().get());
        let budget = *self.upload_budget_bytes.get_ref();
        if budget < max_upload_bytes {
            // Blame the key the operator wrote: the budget, or else the upload limit.
            let (span, key, value, why) = if self.upload_budget_bytes.span().is_empty() {
                (
                    self.max_upload_bytes.span(),
                    "max_upload_bytes",
                    max_upload_bytes,
                    format!("must be at most upload_budget_bytes ({budget})"),
                )
            } else {
                (
                    self.upload_budget_bytes.span(),
                    "upload_budget_bytes",
                    budget,
                    format!("must be at least max_upload_bytes ({max_upload_bytes})"),
                )
            };
            return Err(ConfigError::at(span, format!("gateway.{key} = {value}: {why}")));
        }
        let remote = match self.quota.mode.get_ref() {
            QuotaMode::Embedded => None,
            QuotaMode::Remote => {
                let url = self.quota.url.clone().ok_or_else(|| {
                    ConfigError::at(
                        self.quota.mode.span(),
                        "gateway.quota.mode = \"remote\": needs gateway.quota.url, the quota \
                         service's endpoint",
                    )
                })?;
                Some(RemoteQuota {
                    url,
                    timeout: Duration::from_millis(self.quota.timeout_ms.get()),
                    api_key: self.quota.api_key.clone(),
                    ca_file: checked_ca_file("gateway.quota.ca_file", &self.quota.ca_file)?,
                })
            }
        };

        let mut partners = HashMap::new();
        let mut inbound = self.inbound.clone();
        let mut landing_owners: HashMap<PathBuf, String> = HashMap::new();
        for (i, p) in self.partner.iter().enumerate() {
            for dir in &p.inbound {
                let owner = landing_owners.insert(dir.get_ref().clone(), p.name.to_string());
                if let Some(prev) = owner {
                    return Err(ConfigError::at(
                        dir.span(),
                        format!(
                            "gateway.partner[{i}].inbound = {:?}: already a landing directory of \
                             {prev}",
                            dir.get_ref().display().to_string()
                        ),
                    ));
                }
                if !inbound.contains(dir.get_ref()) {
                    inbound.push(dir.get_ref().clone());
                }
            }
            for id in &p.ids {
                if let Some(prev) = partners.insert(id.get_ref().to_string(), p.name.to_string()) {
                    return Err(ConfigError::at(
                        id.span(),
                        format!(
                            "gateway.partner[{i}].ids = {:?}: already used by {prev}",
                            id.get_ref().to_string()
                        ),
                    ));
                }
            }
        }

        let mut routes = Vec::new();
        let mut by_document = HashMap::new();
        for (i, r) in self.route.iter().enumerate() {
            let k = |f: &str| format!("gateway.route[{i}].{f}");
            let interval = r.interval.get_ref().get();
            let spec = QuotaSpec::new(r.limit, interval, r.unit).map_err(|e| {
                ConfigError::at(r.interval.span(), format!("{} = {interval}: {e}", k("interval")))
            })?;
            let template = r.metering_id.get_ref().for_route(r.name.get_ref()).map_err(|e| {
                // A default template is refused because of the name.
                let (span, key, value) = if r.metering_id.span().is_empty() {
                    (r.name.span(), k("name"), r.name.get_ref().to_string())
                } else {
                    (r.metering_id.span(), k("metering_id"), r.metering_id.get_ref().to_string())
                };
                ConfigError::at(span, format!("{key} = {value:?}: {e}"))
            })?;
            for d in &r.documents {
                if let Some(prev) = by_document.insert(d.get_ref().clone(), i) {
                    return Err(ConfigError::at(
                        d.span(),
                        format!(
                            "{} = {:?}: already routed by {}",
                            k("documents"),
                            d.get_ref(),
                            self.route[prev].name.get_ref()
                        ),
                    ));
                }
            }
            routes.push(Route {
                name: r.name.get_ref().to_string(),
                template,
                spec,
                weight: r.weight,
                min_weight: r.min_weight,
                split: r.split,
                refund_unsent: r.refund_unsent,
                target: r.deliver.clone(),
                max_concurrency: r.max_concurrency.get(),
                dedup: r.dedup,
                dedup_window: days(r.dedup_days.unwrap_or(self.dedup_days)),
                delivery: delivery::resolve(r, &k)?,
            });
        }

        let deliver_ca_file = checked_ca_file("gateway.deliver_ca_file", &self.deliver_ca_file)?;
        Ok(Plan {
            inbound,
            poll: Duration::from_millis(self.poll_ms.get()),
            settle: Duration::from_millis(self.settle_ms),
            dedup: days(self.dedup_days),
            keep: days(self.keep_days),
            acks: self.acks.clone(),
            max_upload_bytes,
            upload_budget_bytes: budget,
            upload_min_rate: self.upload_min_rate_bytes.get(),
            upload_rate_grace: Duration::from_millis(self.upload_rate_grace_ms.get()),
            max_file_bytes: self.max_file_bytes.get(),
            partial_names: self.partial_names.clone(),
            incomplete_grace: Duration::from_millis(self.incomplete_grace_ms),
            remote,
            deliver_ca_file,
            on_unavailable: self.quota.on_unavailable,
            partners,
            landing_owners,
            unknown_senders: self.unknown_senders,
            routes,
            by_document,
        })
    }
}

/// `n` days.
fn days(n: NonZeroU32) -> Duration {
    Duration::from_secs(u64::from(n.get()) * 86_400)
}

/// A `ca_file` key's path, once it reads as PEM certificates (an error points at the key).
fn checked_ca_file(
    key: &str,
    file: &Option<Spanned<PathBuf>>,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(file) = file else { return Ok(None) };
    crate::trust::ca_certificates(key, file.get_ref())
        .map_err(|e| ConfigError::at(file.span(), e))?;
    Ok(Some(file.get_ref().clone()))
}

#[cfg(test)]
mod tests;
