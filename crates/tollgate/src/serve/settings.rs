//! What `tollgate serve` runs with: its flags ([`ServeArgs`]) and every setting resolved from
//! flag, then config file, then default ([`Settings`]), including the TLS files and the data
//! directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use tollgate_http::tls::TlsFiles;
use tollgate_quota::store::OnCorrupt;

use crate::config::{ConfigFile, StoreKind, StoreSection};
use crate::logging::LogFormat;

/// The address used when neither a flag nor the file gives one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The data directory used when neither a flag nor the file gives one.
pub const DEFAULT_DATA: &str = "./tollgate-data";

/// Arguments of `tollgate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Config file (TOML); re-validated whole when it changes, its `[[policy]]` tables applied.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    pub(super) listen: Option<SocketAddr>,
    /// Data directory; the embedded store's file lives inside it [default: ./tollgate-data].
    #[arg(long, value_name = "DIR")]
    pub(super) data: Option<PathBuf>,
    /// Counter store: memory, embedded or a redis:// URL [default: embedded].
    #[arg(long, value_name = "STORE", value_parser = StoreKind::from_str)]
    pub(super) store: Option<StoreKind>,
    /// The Redis URL (of `--store`, else of `[store] url`) names one node of a Redis Cluster.
    #[arg(long)]
    pub(super) store_cluster: bool,
    /// A state file that cannot be read (counters.redb, gateway.redb) is renamed to
    /// `<name>.corrupt-<time>` and replaced by an empty one, instead of refusing to start
    /// (the gateway's spooled files then go to `<data>/orphaned/`).
    #[arg(long)]
    pub(super) move_aside_corrupt: bool,
    /// Log records as `text` lines or one `json` object per line [default: text].
    #[arg(long, value_name = "FORMAT", value_parser = LogFormat::from_str)]
    pub(super) log_format: Option<LogFormat>,
    /// Certificate chain (PEM); with --tls-key the listener speaks HTTPS only.
    #[arg(long, value_name = "FILE")]
    pub(super) tls_cert: Option<PathBuf>,
    /// Private key of the certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub(super) tls_key: Option<PathBuf>,
}

impl ServeArgs {
    /// What to do with a corrupt state file, as chosen by `--move-aside-corrupt`; meant for
    /// every state file `serve` opens.
    pub fn on_corrupt(&self) -> OnCorrupt {
        if self.move_aside_corrupt { OnCorrupt::MoveAside } else { OnCorrupt::Refuse }
    }
}

impl ServeArgs {
    /// The `[server]` keys set by a flag here (a change to them in the file changes nothing).
    pub(super) fn flag_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.listen.is_some() {
            keys.push("listen");
        }
        if self.data.is_some() {
            keys.push("data");
        }
        if self.log_format.is_some() {
            keys.push("log_format");
        }
        if self.tls_cert.is_some() {
            keys.push("tls_cert");
        }
        if self.tls_key.is_some() {
            keys.push("tls_key");
        }
        keys
    }
}

/// Every setting resolved from flags, file and defaults.
#[derive(Debug)]
pub(super) struct Settings {
    pub(super) listen: SocketAddr,
    pub(super) data: PathBuf,
    pub(super) store: StoreKind,
    pub(super) store_section: StoreSection,
    pub(super) admin_token: Option<String>,
    pub(super) on_corrupt: OnCorrupt,
}

impl Settings {
    pub(super) fn resolve(args: &ServeArgs, file: &ConfigFile) -> anyhow::Result<Self> {
        let listen = match args.listen.or(file.server.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().context("default listen address")?,
        };
        let data = data_dir(args, file);
        let store =
            args.store.clone().or_else(|| file.store.kind.clone()).unwrap_or(StoreKind::Embedded);
        // `cluster` goes with the URL it was written beside: the flag with `--store`, the
        // file's key with the file's url.
        let cluster = args.store_cluster || (args.store.is_none() && file.store.cluster);
        let plain = match store {
            StoreKind::Memory => Some("memory"),
            StoreKind::Embedded => Some("embedded"),
            StoreKind::Redis(_) => None,
        };
        if let (true, Some(plain)) = (cluster, plain) {
            anyhow::bail!(
                "--store-cluster needs a redis:// or rediss:// store (--store or [store] url); \
                 the store is {plain}"
            );
        }
        let store_section = StoreSection { cluster, ..file.store.clone() };
        let admin_token = std::env::var("TOLLGATE_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| file.server.admin_token.clone());
        Ok(Self { listen, data, store, store_section, admin_token, on_corrupt: args.on_corrupt() })
    }
}

/// The TLS files from the flags, then the file; `None` without a certificate. Half a pair
/// is an error naming what is missing.
pub(super) fn tls_files(args: &ServeArgs, file: &ConfigFile) -> Result<Option<TlsFiles>, String> {
    let cert = args.tls_cert.clone().or_else(|| file.server.tls_cert.clone());
    let key = args.tls_key.clone().or_else(|| file.server.tls_key.clone());
    let client_ca = file.server.tls_client_ca.clone();
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key, client_ca })),
        (Some(_), None) => Err("a TLS certificate is set but no key (--tls-key or [server] \
                                tls_key)"
            .into()),
        (None, Some(_)) => Err("a TLS key is set but no certificate (--tls-cert or [server] \
                                tls_cert)"
            .into()),
        (None, None) if client_ca.is_some() => Err("[server] tls_client_ca needs a TLS \
                                                     certificate and key (client certificates \
                                                     are asked for in the TLS handshake)"
            .into()),
        (None, None) => Ok(None),
    }
}

/// The data directory: `--data`, else `[server] data`, else [`DEFAULT_DATA`].
pub(super) fn data_dir(args: &ServeArgs, file: &ConfigFile) -> PathBuf {
    args.data.clone().or_else(|| file.server.data.clone()).unwrap_or(DEFAULT_DATA.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn args(listen: Option<&str>, store: Option<&str>) -> ServeArgs {
        ServeArgs {
            config: None,
            listen: listen.map(|l| l.parse().unwrap()),
            data: None,
            store: store.map(|s| s.parse().unwrap()),
            store_cluster: false,
            move_aside_corrupt: false,
            log_format: None,
            tls_cert: None,
            tls_key: None,
        }
    }

    #[test]
    fn tls_files_come_from_flags_then_file_and_half_a_pair_is_an_error() {
        let file = ConfigFile::parse(
            Path::new("t.toml"),
            "[server]\ntls_cert = \"f.crt\"\ntls_key = \"f.key\"\ntls_client_ca = \"ca.crt\"\n",
        )
        .unwrap();
        let t = tls_files(&args(None, None), &file).unwrap().unwrap();
        assert_eq!((t.cert, t.key), (PathBuf::from("f.crt"), PathBuf::from("f.key")));
        assert_eq!(t.client_ca, Some(PathBuf::from("ca.crt")));
        let mut a = args(None, None);
        a.tls_cert = Some("flag.crt".into());
        assert_eq!(tls_files(&a, &file).unwrap().unwrap().cert, PathBuf::from("flag.crt"));
        assert!(tls_files(&a, &ConfigFile::default()).unwrap_err().contains("no key"));
        assert!(tls_files(&args(None, None), &ConfigFile::default()).unwrap().is_none());
        let ca_only = ConfigFile::parse(Path::new("t.toml"), "[server]\ntls_client_ca = \"c\"\n");
        let e = tls_files(&args(None, None), &ca_only.unwrap()).unwrap_err();
        assert!(e.contains("tls_client_ca needs"), "{e}");
    }

    #[test]
    fn flags_beat_file_which_beats_defaults() {
        let file = ConfigFile::parse(
            Path::new("t.toml"),
            "[server]\nlisten = \"127.0.0.1:9001\"\ndata = \"/var/x\"\n[store]\nkind = \"memory\"\n",
        )
        .unwrap();
        let s = Settings::resolve(&args(None, None), &file).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:9001");
        assert_eq!(s.data, PathBuf::from("/var/x"));
        assert_eq!(s.store, StoreKind::Memory);
        let s = Settings::resolve(&args(Some("127.0.0.1:9002"), Some("embedded")), &file).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:9002");
        assert_eq!(s.store, StoreKind::Embedded);
        let s = Settings::resolve(&args(None, None), &ConfigFile::default()).unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.data, PathBuf::from(DEFAULT_DATA));
        assert_eq!(s.store, StoreKind::Embedded);
    }

    #[test]
    fn cluster_goes_with_the_url_it_was_given_beside() {
        let src = "[store]\nkind = \"redis\"\nurl = \"redis://f:7000/0\"\ncluster = true\n";
        let file = ConfigFile::parse(Path::new("t.toml"), src).unwrap();
        // The file's url with the file's `cluster`.
        assert!(Settings::resolve(&args(None, None), &file).unwrap().store_section.cluster);
        // A --store URL without --store-cluster is one server, whatever the file says.
        let one = Settings::resolve(&args(None, Some("redis://g:6379/0")), &file).unwrap();
        assert!(!one.store_section.cluster);
        let mut flagged = args(None, Some("redis://g:7000/0"));
        flagged.store_cluster = true;
        let s = Settings::resolve(&flagged, &ConfigFile::default()).unwrap();
        assert_eq!((s.store, s.store_section.cluster), ("redis://g:7000/0".parse().unwrap(), true));
        let mut memory = args(None, Some("memory"));
        memory.store_cluster = true;
        let e = Settings::resolve(&memory, &file).unwrap_err().to_string();
        assert!(e.contains("--store-cluster needs a redis://") && e.ends_with("memory"), "{e}");
    }
}
