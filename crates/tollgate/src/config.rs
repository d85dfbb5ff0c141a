//! The config file (`tollgate serve --config FILE`): every section in one struct, read
//! strictly (unknown keys are errors) so a typo is caught at start-up, not in production.
//!
//! A parse or validation error reads `FILE:LINE:COL: message` and makes `tollgate serve` exit
//! with code 2. Precedence for each setting: command-line flag, then this file, then the
//! built-in default.
//!
//! Hot reload: the server re-reads the file when it changes. Each reload passes the whole
//! file through the same validation as start-up ([`ConfigFile::reload_validator`]), so a
//! typo anywhere is refused (old policies stay, error in logs, `/readyz` and
//! `tollgate_policy_reload_errors_total`) instead of being accepted now and failing the next
//! restart. Only `[[policy]]` applies live; any other change is listed as needing a restart.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tollgate_server::config::{ClientKey, PolicyRule, ServerSection, StoreSection, located};
use tollgate_server::policy::PolicySet;
use tollgate_server::reload::{FileCheck, FileValidator};

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
    /// `[gateway]`: the EDI gateway (started when present).
    pub gateway: Option<tollgate_gateway::GatewayConfig>,
}

/// Why the config file could not be used; `Display` is `FILE[:LINE:COL]: message`.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigFile {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: cannot read: {e}", path.display())))?;
        Self::parse(path, &source)
    }

    /// Validates `source` (read from `path`, which only labels the errors).
    pub fn parse(path: &Path, source: &str) -> Result<Self, ConfigError> {
        let file: Self =
            toml::from_str(source).map_err(|e| ConfigError(located(path, source, &e)))?;
        file.check(path, source)?;
        Ok(file)
    }

    /// Cross-field rules serde cannot express.
    fn check(&self, path: &Path, source: &str) -> Result<(), ConfigError> {
        use tollgate_server::config::StoreKind;
        if self.store.kind == Some(StoreKind::Redis) && self.store.url.is_none() {
            return Err(ConfigError(format!(
                "{}: [store] kind = \"redis\" needs url = \"redis://…\"",
                path.display()
            )));
        }
        self.server.check_limits().map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        if self.store.flush_interval_ms == 0 {
            return Err(ConfigError(format!(
                "{}: [store] flush_interval_ms must be at least 1",
                path.display()
            )));
        }
        tollgate_server::client::ClientKeys::new(&self.client)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        if let Some(gateway) = &self.gateway {
            gateway.plan().map_err(|e| ConfigError(e.locate(path, source).to_string()))?;
        }
        Ok(())
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
            ("data", a.data != b.data),
            ("admin_token", a.admin_token != b.admin_token),
            ("header_timeout_ms", a.header_timeout_ms != b.header_timeout_ms),
            ("body_timeout_ms", a.body_timeout_ms != b.body_timeout_ms),
            ("max_connections", a.max_connections != b.max_connections),
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
        if self.gateway != next.gateway {
            changes.push("[gateway] changed: restart to apply".into());
        }
        changes
    }
}

/// Where the embedded store keeps its file inside the data directory.
pub fn embedded_file(data: &Path) -> PathBuf {
    data.join("counters.redb")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = ConfigFile::parse(Path::new("t.toml"), "").unwrap();
        assert!(c.policy.is_empty());
        assert_eq!(c.store.flush_interval_ms, 100);
        assert!(c.gateway.is_none());
    }

    #[test]
    fn example_file_is_valid() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tollgate.toml"));
        let c = ConfigFile::load(path).unwrap();
        assert!(!c.policy.is_empty());
    }

    #[test]
    fn errors_carry_file_line_and_column() {
        let src = "[server]\nlisten = \"127.0.0.1:8080\"\nlisten_typo = 1\n";
        let e = ConfigFile::parse(Path::new("conf/t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with("conf/t.toml:3:1: "), "{e}");
        assert!(e.contains("listen_typo"), "{e}");
        let src = "[server]\nlisten = \"not an address\"\n";
        let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with("t.toml:2:10: "), "{e}");
    }

    #[test]
    fn acme_example_starts_a_gateway() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/acme.toml"));
        let c = ConfigFile::load(path).unwrap();
        let g = c.gateway.unwrap();
        assert_eq!(g.route.len(), 1);
        assert_eq!(g.partner.len(), 3);
    }

    #[test]
    fn gateway_errors_name_the_key() {
        let src = "[gateway]\n[[gateway.route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"fortnight\"\ndeliver = \"dir:x\"\n";
        let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with("t.toml:6:8: unit = \"fortnight\": "), "{e}");
        // A rule over several keys points at the offending key too.
        let src = "[gateway]\nmax_upload_bytes = 10\nupload_budget_bytes = 9\n";
        let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
        assert!(e.starts_with("t.toml:3:23: gateway.upload_budget_bytes = 9: "), "{e}");
    }

    #[test]
    fn listener_limits_are_read_and_zero_is_refused() {
        let src =
            "[server]\nheader_timeout_ms = 5000\nbody_timeout_ms = 7000\nmax_connections = 10\n";
        let l = ConfigFile::parse(Path::new("t.toml"), src).unwrap().server.limits();
        assert_eq!(l.header_timeout.as_millis(), 5000);
        assert_eq!(l.body_timeout.as_millis(), 7000);
        assert_eq!(l.max_connections, 10);
        let d = ConfigFile::default().server.limits();
        assert!(d.header_timeout.as_secs() <= 30);
        assert!(d.max_connections >= 1000);
        for (src, key) in [
            ("[server]\nheader_timeout_ms = 0\n", "header_timeout_ms = 0"),
            ("[server]\nbody_timeout_ms = 0\n", "body_timeout_ms = 0"),
            ("[server]\nbody_timeout_ms = 99999999999\n", "body_timeout_ms = 99999999999"),
            ("[server]\nmax_connections = 0\n", "max_connections = 0"),
        ] {
            let e = ConfigFile::parse(Path::new("t.toml"), src).unwrap_err().to_string();
            assert!(e.starts_with("t.toml: [server] ") && e.contains(key), "{e}");
        }
        let e = ConfigFile::parse(Path::new("t.toml"), "[server]\nmax_connections = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:2:"), "{e}");
    }

    #[test]
    fn redis_needs_a_url() {
        let e = ConfigFile::parse(Path::new("t.toml"), "[store]\nkind = \"redis\"\n").unwrap_err();
        assert!(e.to_string().contains("url"), "{e}");
    }
}
