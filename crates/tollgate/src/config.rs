//! The config file (`tollgate serve --config FILE`): every section in one struct, read
//! strictly (unknown keys are errors) so a typo is caught at start-up, not in production.
//!
//! A parse or validation error reads `FILE:LINE:COL: message` and makes `tollgate serve` exit
//! with code 2; it never carries a secret written in the file (`secrets`). Precedence for
//! each setting: command-line flag, then this file, then the built-in default.
//!
//! Hot reload: the server re-reads the file when it changes. Each reload passes the whole
//! file through the same validation as start-up ([`ConfigFile::reload_validator`]), so a
//! typo anywhere is refused (old policies stay, error in logs, `/readyz` and
//! `tollgate_policy_reload_errors_total`) instead of being accepted now and failing the next
//! restart. Only `[[policy]]` applies live; any other change is listed as needing a restart.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tollgate_http::config::{ClientKey, ConfigError, key};
use tollgate_policy::{PolicyRule, PolicySet};
use tollgate_quota::store::{Durability, OnStoreUnavailable};
use tollgate_server::{FileCheck, FileValidator};

use crate::logging::LogFormat;

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// `[server]`: listen address, data directory, admin token.
    pub server: ServerSection,
    /// `[store]`: which counter store and how it fails.
    pub store: StoreSection,
    /// `[[policy]]`: server-side limits (hot-reloaded).
    pub policy: Vec<PolicyRule>,
    /// `[[client]]`: API keys for `/v1/quota`.
    pub client: Vec<ClientKey>,
    /// `[[user]]`: who may use the admin API, by token digest and role.
    pub user: Vec<tollgate_http::user::User>,
    /// `[gateway]`: the EDI gateway (started when present).
    pub gateway: Option<tollgate_gateway::GatewayConfig>,
    /// `[[rls.rule]]`: descriptor rules of the gRPC rate limit service.
    pub rls: tollgate_rls::RlsSection,
    /// `[notify]` and `[[notify.webhook]]`: notifications of held partners, duplicates and
    /// backlogs.
    pub notify: NotifySection,
}

/// `[server]`: where to listen and who may administer. Absent values fall back to the command
/// line, then to the defaults (`127.0.0.1:8080`, `./tollgate-data`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Listen address, e.g. `127.0.0.1:8080`.
    pub listen: Option<SocketAddr>,
    /// gRPC listen address (Envoy's rate limit service); gRPC is off when absent.
    pub grpc_listen: Option<SocketAddr>,
    /// Data directory (the embedded store's file lives inside it).
    pub data: Option<PathBuf>,
    /// Bearer token for the admin API (`TOLLGATE_ADMIN_TOKEN` overrides it).
    pub admin_token: Option<String>,
    /// `header_timeout_ms`: time to receive a request head, also the keep-alive idle time
    /// (1 ms to one day; default 20 000 ms).
    #[serde(rename = "header_timeout_ms", deserialize_with = "fields::header_timeout")]
    pub header_timeout: Option<Duration>,
    /// `body_timeout_ms`: longest silence between request body chunks before a 408, and
    /// while an answer waits for the client to take it before the connection is closed (1 ms
    /// to one day; default 30 000 ms).
    #[serde(rename = "body_timeout_ms", deserialize_with = "fields::body_timeout")]
    pub body_timeout: Option<Duration>,
    /// `body_min_rate_bytes`: bytes per second a request body must average once
    /// `body_timeout_ms` has passed since it began (1 to 4294967295; default 1024).
    #[serde(rename = "body_min_rate_bytes", deserialize_with = "fields::body_min_rate")]
    pub body_min_rate: Option<std::num::NonZeroU64>,
    /// Connections served at once (≥ 1; default 4096).
    #[serde(deserialize_with = "fields::max_connections")]
    pub max_connections: Option<NonZeroUsize>,
    /// gRPC connections served at once (≥ 1; default 1024).
    #[serde(deserialize_with = "fields::grpc_max_connections")]
    pub grpc_max_connections: Option<NonZeroUsize>,
    /// `grpc_idle_timeout_ms`: how long a gRPC connection with no call in progress is kept
    /// (1 ms to one day; default 60 000 ms).
    #[serde(rename = "grpc_idle_timeout_ms", deserialize_with = "fields::grpc_idle_timeout")]
    pub grpc_idle_timeout: Option<Duration>,
    /// `log_format`: `text` (default) or `json` (`--log-format` overrides it).
    #[serde(deserialize_with = "fields::log_format")]
    pub log_format: Option<LogFormat>,
    /// `tls_cert`: the certificate chain (PEM, leaf first); with `tls_key`, the listener
    /// speaks HTTPS only. Rotated live when the file changes.
    pub tls_cert: Option<PathBuf>,
    /// `tls_key`: the private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// `tls_client_ca`: clients must present a certificate signed by this CA (PEM); needs
    /// `tls_cert` and `tls_key`.
    pub tls_client_ca: Option<PathBuf>,
    /// `usage_history`: keep admitted, refused, held and duplicate units per metering id in
    /// 5-minute buckets for 7 days, served at `GET /v1/usage` (default true).
    #[serde(deserialize_with = "fields::usage_history")]
    pub usage_history: Option<bool>,
    /// `usage_max_ids`: the most metering ids the usage history tracks (1 to 10,000,000;
    /// default 100,000).
    #[serde(deserialize_with = "fields::usage_max_ids")]
    pub usage_max_ids: Option<usize>,
    /// `console_max_counters`: the most live counters the console's overview reads per
    /// refresh (1 to 10,000,000; default 100,000); beyond it the page says it is partial.
    #[serde(deserialize_with = "fields::console_max_counters")]
    pub console_max_counters: Option<usize>,
    /// `trusted_proxies`: reverse proxies (addresses or blocks such as `10.0.0.0/8`) whose
    /// `X-Forwarded-For` hop names the client for per-address limits (default none).
    #[serde(deserialize_with = "fields::trusted_proxies")]
    pub trusted_proxies: Vec<tollgate_http::proxy::Cidr>,
}

impl ServerSection {
    /// Whether the usage history is kept, and how.
    pub fn usage(&self) -> Option<tollgate_server::usage::UsageOptions> {
        self.usage_history.unwrap_or(true).then(|| tollgate_server::usage::UsageOptions {
            max_ids: self.usage_max_ids.unwrap_or(tollgate_server::usage::DEFAULT_MAX_IDS),
            ..Default::default()
        })
    }

    /// The listener's limits: the values set here, defaults for the rest.
    pub fn limits(&self) -> tollgate_server::ConnectionLimits {
        let d = tollgate_server::ConnectionLimits::default();
        tollgate_server::ConnectionLimits {
            header_timeout: self.header_timeout.unwrap_or(d.header_timeout),
            body_timeout: self.body_timeout.unwrap_or(d.body_timeout),
            body_min_rate: self.body_min_rate.unwrap_or(d.body_min_rate),
            body_rate_grace: self.body_timeout.unwrap_or(d.body_timeout),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            trusted_proxies: tollgate_http::proxy::TrustedProxies::new(
                self.trusted_proxies.clone(),
            ),
        }
    }

    /// The gRPC listener's limits: its own cap and idle timeout, and the HTTP listener's
    /// `header_timeout_ms` as the time to finish the TLS handshake and the HTTP/2 preface.
    pub fn grpc_limits(&self) -> tollgate_rls::ConnLimits {
        let d = tollgate_rls::ConnLimits::default();
        tollgate_rls::ConnLimits {
            max_connections: self.grpc_max_connections.unwrap_or(d.max_connections),
            handshake: self.limits().header_timeout,
            idle: self.grpc_idle_timeout.unwrap_or(d.idle),
        }
    }
}

/// Which counter store to use: the `--store` flag (`memory`, `embedded` or a `redis://`
/// URL) and `[store] kind` with its `url` both give one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process only.
    Memory,
    /// One redb file in the data directory (the default).
    Embedded,
    /// A shared Redis.
    Redis(RedisUrl),
}

impl FromStr for StoreKind {
    type Err = String;
    /// The `--store` flag: `memory`, `embedded`, or a `redis://` / `rediss://` URL.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Self::Memory),
            "embedded" => Ok(Self::Embedded),
            url => url
                .parse()
                .map(Self::Redis)
                .map_err(|_| format!("{s:?}: expected memory, embedded or a redis:// URL")),
        }
    }
}

/// A `redis://` or `rediss://` (TLS) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisUrl(String);

impl RedisUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RedisUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(Self(s.to_owned()))
        } else {
            Err("expected a redis:// or rediss:// URL".to_owned())
        }
    }
}

/// `[store]`: the counter store and how it behaves when it fails.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "StoreFields")]
pub struct StoreSection {
    /// `kind` (with `url` for redis); `None` means "not set here" (flag, then embedded).
    pub kind: Option<StoreKind>,
    /// Prefix of every Redis key.
    pub key_prefix: Option<String>,
    /// `timeout_ms`: the Redis call timeout (≥ 1 ms).
    pub timeout: Option<Duration>,
    /// Behaviour when the store fails.
    pub store_unavailable: OnStoreUnavailable,
    /// `flush_interval_ms`: group-commit period of the embedded store (≥ 1 ms, default
    /// 100 ms).
    pub flush_interval: Duration,
    /// Buffered (default) or strict.
    pub durability: Durability,
    /// `ca_file`: for a `rediss://` URL, the CA certificates (PEM) Redis' certificate must be
    /// signed by, instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// `cluster = true`: `url` names one node of a Redis Cluster (only with `kind = "redis"`).
    pub cluster: bool,
    /// `local_share_of`: with `store_unavailable = "local"`, how many instances share the
    /// limit while Redis is unreachable (1 to 10,000; default 1).
    pub local_share_of: NonZeroU32,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            kind: None,
            key_prefix: None,
            timeout: None,
            store_unavailable: OnStoreUnavailable::default(),
            flush_interval: Duration::from_millis(100),
            durability: Durability::default(),
            ca_file: None,
            cluster: false,
            local_share_of: NonZeroU32::MIN,
        }
    }
}

/// A `[store]` table as written, before `kind` and `url` are read together.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct StoreFields {
    #[serde(deserialize_with = "fields::kind")]
    kind: Option<KindName>,
    #[serde(deserialize_with = "fields::redis_url")]
    url: Option<RedisUrl>,
    key_prefix: Option<String>,
    #[serde(deserialize_with = "fields::store_timeout")]
    timeout_ms: Option<Duration>,
    store_unavailable: OnStoreUnavailable,
    #[serde(deserialize_with = "fields::flush_interval")]
    flush_interval_ms: Duration,
    durability: Durability,
    ca_file: Option<PathBuf>,
    #[serde(deserialize_with = "fields::cluster")]
    cluster: bool,
    #[serde(deserialize_with = "fields::local_share_of")]
    local_share_of: NonZeroU32,
}

impl Default for StoreFields {
    fn default() -> Self {
        let d = StoreSection::default();
        Self {
            kind: None,
            url: None,
            key_prefix: d.key_prefix,
            timeout_ms: d.timeout,
            store_unavailable: d.store_unavailable,
            flush_interval_ms: d.flush_interval,
            durability: d.durability,
            ca_file: None,
            cluster: false,
            local_share_of: d.local_share_of,
        }
    }
}

/// The words `[store] kind` takes.
#[derive(Debug, Clone, Copy)]
enum KindName {
    Memory,
    Embedded,
    Redis,
}

impl FromStr for KindName {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Self::Memory),
            "embedded" => Ok(Self::Embedded),
            "redis" => Ok(Self::Redis),
            _ => Err("expected memory, embedded or redis"),
        }
    }
}

impl TryFrom<StoreFields> for StoreSection {
    type Error = String;
    fn try_from(f: StoreFields) -> Result<Self, String> {
        let kind = match (f.kind, f.url) {
            (None, _) => None,
            (Some(KindName::Memory), _) => Some(StoreKind::Memory),
            (Some(KindName::Embedded), _) => Some(StoreKind::Embedded),
            (Some(KindName::Redis), Some(url)) => Some(StoreKind::Redis(url)),
            (Some(KindName::Redis), None) => {
                return Err("[store] kind = \"redis\" needs url = \"redis://…\"".into());
            }
        };
        if f.cluster && !matches!(kind, Some(StoreKind::Redis(_))) {
            return Err("[store] cluster = true needs kind = \"redis\" and a url".into());
        }
        Ok(Self {
            kind,
            key_prefix: f.key_prefix,
            timeout: f.timeout_ms,
            store_unavailable: f.store_unavailable,
            flush_interval: f.flush_interval_ms,
            durability: f.durability,
            ca_file: f.ca_file,
            cluster: f.cluster,
            local_share_of: f.local_share_of,
        })
    }
}

/// Reading each key into its type; a refused value is named with its key.
mod fields;

mod notify;
pub use notify::NotifySection;

impl ConfigFile {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(format!("cannot read: {e}")).locate(path, ""))?;
        Self::parse(path, &source)
    }

    /// Validates `source` (read from `path`, which only labels the errors); an error reads
    /// `FILE:LINE:COL: message`.
    /// No error carries a secret written in the file (see `secrets`).
    pub fn parse(path: &Path, source: &str) -> Result<Self, ConfigError> {
        // Redacted twice: what the parser quoted, then the value `in_context` quotes.
        let refused = |e: ConfigError| {
            let secrets = secrets::Secrets::find(source);
            secrets.redact(secrets.redact(e).in_context(source)).locate(path, source)
        };
        let mut file: Self =
            toml::from_str(source).map_err(|e| refused(ConfigError::from_toml(&e)))?;
        file.check().map_err(refused)?;
        file.notify.read_secrets().map_err(refused)?;
        Ok(file)
    }

    /// The rules over several tables, checked once every key has been read.
    fn check(&self) -> Result<(), ConfigError> {
        tollgate_http::client::ClientKeys::new(&self.client)
            .map_err(|e| ConfigError::new(e.to_string()))?;
        tollgate_http::user::Users::new(self.user.clone()).map_err(ConfigError::new)?;
        if let Some(gateway) = &self.gateway {
            gateway.plan()?;
        }
        self.rls_rules()?;
        Ok(())
    }

    /// The checked `[[rls.rule]]` tables; a refusal points at the offending value.
    pub fn rls_rules(&self) -> Result<tollgate_rls::RuleSet, ConfigError> {
        tollgate_rls::RuleSet::new(&self.rls).map_err(|e| ConfigError::at(e.span, e.message))
    }
}

impl ConfigFile {
    /// The check each hot reload runs: full validation, then the live policies and what
    /// differs from `self` (the file the process started with) that needs a restart.
    /// `flag_keys` are `[server]` keys a command-line flag overrides (their changes in the
    /// file make no difference, so they are not reported).
    pub fn reload_validator(&self, flag_keys: &[&'static str]) -> FileValidator {
        let running = self.clone();
        let flag_keys = flag_keys.to_vec();
        Arc::new(move |path: &Path, source: &str| {
            let next = ConfigFile::parse(path, source).map_err(|e| e.to_string())?;
            let restart_needed = running.restart_needed(&next, &flag_keys);
            Ok(FileCheck { policies: PolicySet::new(next.policy), restart_needed })
        })
    }

    /// What `next` changes against `self` outside `[[policy]]`, one line per setting:
    /// `"[server] listen changed: restart to apply"`. Secrets are named, never shown.
    fn restart_needed(&self, next: &ConfigFile, flag_keys: &[&str]) -> Vec<String> {
        let (a, b) = (&self.server, &next.server);
        let server = [
            ("listen", a.listen != b.listen),
            ("grpc_listen", a.grpc_listen != b.grpc_listen),
            ("data", a.data != b.data),
            ("admin_token", a.admin_token != b.admin_token),
            ("header_timeout_ms", a.header_timeout != b.header_timeout),
            ("body_timeout_ms", a.body_timeout != b.body_timeout),
            ("body_min_rate_bytes", a.body_min_rate != b.body_min_rate),
            ("max_connections", a.max_connections != b.max_connections),
            ("grpc_max_connections", a.grpc_max_connections != b.grpc_max_connections),
            ("grpc_idle_timeout_ms", a.grpc_idle_timeout != b.grpc_idle_timeout),
            ("log_format", a.log_format != b.log_format),
            ("tls_cert", a.tls_cert != b.tls_cert),
            ("tls_key", a.tls_key != b.tls_key),
            ("tls_client_ca", a.tls_client_ca != b.tls_client_ca),
            ("usage_history", a.usage_history != b.usage_history),
            ("usage_max_ids", a.usage_max_ids != b.usage_max_ids),
            ("trusted_proxies", a.trusted_proxies != b.trusted_proxies),
        ];
        let mut changes: Vec<String> = server
            .into_iter()
            .filter(|(key, changed)| *changed && !flag_keys.contains(key))
            .map(|(key, _)| format!("[server] {key} changed: restart to apply"))
            .collect();
        if self.store != next.store {
            changes.push("[store] changed: restart to apply".into());
        }
        if self.client != next.client {
            changes.push("[[client]] changed: restart to apply".into());
        }
        if self.user != next.user {
            changes.push("[[user]] changed: restart to apply".into());
        }
        if self.gateway != next.gateway {
            changes.push("[gateway] changed: restart to apply".into());
        }
        if self.rls != next.rls {
            changes.push("[[rls.rule]] changed: restart to apply".into());
        }
        if self.notify != next.notify {
            changes.push("[notify] changed: restart to apply".into());
        }
        changes
    }
}

mod secrets;
pub use secrets::redact_url;

/// Where the embedded store keeps its file inside the data directory.
pub fn embedded_file(data: &Path) -> PathBuf {
    data.join("counters.redb")
}

#[cfg(test)]
mod tests;

/// A mistake in the config (file or flags) found while starting: `tollgate serve` exits 2 with
/// it, as for a config file that does not parse, so that systemd does not restart it in a loop.
#[derive(Debug)]
pub struct ConfigMistake(pub String);

impl std::fmt::Display for ConfigMistake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigMistake {}
