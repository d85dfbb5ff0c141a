//! The config file (`tollgate serve --config FILE`): every section in one struct, read
//! strictly (unknown keys are errors) so a typo is caught at start-up, not in production.
//!
//! A parse or validation error reads `FILE:LINE:COL: message` and makes `tollgate serve` exit
//! with code 2. Precedence for each setting: command-line flag, then this file, then the
//! built-in default. Only `[[policy]]` is re-read while running (hot reload, by the server).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tollgate_server::config::{ClientKey, PolicyRule, ServerSection, StoreSection, located};

/// The whole config file.
#[derive(Debug, Default, Deserialize)]
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
        file.check(path)?;
        Ok(file)
    }

    /// Cross-field rules serde cannot express.
    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        use tollgate_server::config::StoreKind;
        if self.store.kind == Some(StoreKind::Redis) && self.store.url.is_none() {
            return Err(ConfigError(format!(
                "{}: [store] kind = \"redis\" needs url = \"redis://…\"",
                path.display()
            )));
        }
        if self.store.flush_interval_ms == 0 {
            return Err(ConfigError(format!(
                "{}: [store] flush_interval_ms must be at least 1",
                path.display()
            )));
        }
        tollgate_server::client::ClientKeys::new(&self.client)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        if let Some(gateway) = &self.gateway {
            gateway.plan().map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        }
        Ok(())
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
        assert!(e.contains("gateway.route[0].unit") && e.contains("fortnight"), "{e}");
    }

    #[test]
    fn redis_needs_a_url() {
        let e = ConfigFile::parse(Path::new("t.toml"), "[store]\nkind = \"redis\"\n").unwrap_err();
        assert!(e.to_string().contains("url"), "{e}");
    }
}
