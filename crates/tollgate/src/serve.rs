//! `tollgate serve`: runs the quota service (and, when configured, the EDI gateway), with the
//! console at `/ui/` on the same listener.
//!
//! Start-up: read the config file (exit 2 with `FILE:LINE:COL: message` when it is bad),
//! resolve each setting (flag, then file, then default), load the TLS pair when one is set
//! (exit 2 with the file and why when it is broken), open the store, bind, and print
//! `listening on http://ADDR` (`https://` with TLS) once requests can be served (and
//! `READY=1` to systemd, see `crate::notify`). SIGTERM or SIGINT stop accepting,
//! let in-flight requests finish, then flush the store, so a graceful stop loses nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_http::tls::{TlsAcceptor, TlsFiles};
use tollgate_policy::PolicySet;
use tollgate_quota::store::OnCorrupt;
use tollgate_quota::{AnyStore, Store, StoreHealth};
use tollgate_server::Policies;
use tollgate_server::usage::UsageHistory;
use tollgate_server::{AppState, router};

use crate::config::{ConfigFile, ConfigMistake, StoreKind, StoreSection};
use crate::logging::LogFormat;

/// The address used when neither a flag nor the file gives one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The data directory used when neither a flag nor the file gives one.
pub const DEFAULT_DATA: &str = "./tollgate-data";
/// How often the policy file (and the TLS pair) is polled in case file-system events are
/// missed.
const POLICY_POLL: Duration = Duration::from_secs(2);

/// Arguments of `tollgate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Config file (TOML); re-validated whole when it changes, its `[[policy]]` tables applied.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Data directory; the embedded store's file lives inside it [default: ./tollgate-data].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Counter store: memory, embedded or a redis:// URL [default: embedded].
    #[arg(long, value_name = "STORE", value_parser = StoreKind::from_str)]
    store: Option<StoreKind>,
    /// The Redis URL (of `--store`, else of `[store] url`) names one node of a Redis Cluster.
    #[arg(long)]
    store_cluster: bool,
    /// A state file that cannot be read (counters.redb, gateway.redb) is renamed to
    /// `<name>.corrupt-<time>` and replaced by an empty one, instead of refusing to start
    /// (the gateway's spooled files then go to `<data>/orphaned/`).
    #[arg(long)]
    move_aside_corrupt: bool,
    /// Log records as `text` lines or one `json` object per line [default: text].
    #[arg(long, value_name = "FORMAT", value_parser = LogFormat::from_str)]
    log_format: Option<LogFormat>,
    /// Certificate chain (PEM); with --tls-key the listener speaks HTTPS only.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// Private key of the certificate (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
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
    fn flag_keys(&self) -> Vec<&'static str> {
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
struct Settings {
    listen: SocketAddr,
    data: PathBuf,
    store: StoreKind,
    store_section: StoreSection,
    admin_token: Option<String>,
    on_corrupt: OnCorrupt,
}

impl Settings {
    fn resolve(args: &ServeArgs, file: &ConfigFile) -> anyhow::Result<Self> {
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
fn tls_files(args: &ServeArgs, file: &ConfigFile) -> Result<Option<TlsFiles>, String> {
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
fn data_dir(args: &ServeArgs, file: &ConfigFile) -> PathBuf {
    args.data.clone().or_else(|| file.server.data.clone()).unwrap_or(DEFAULT_DATA.into())
}

/// Runs `tollgate serve` to completion and returns the process exit code.
pub fn run(args: ServeArgs) -> ExitCode {
    let file = match &args.config {
        Some(path) => match ConfigFile::load(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => ConfigFile::default(),
    };
    crate::logging::init(args.log_format.or(file.server.log_format).unwrap_or_default());
    // A directory left by an unfinished backup would start with whatever part was copied.
    if let Err(e) = crate::backup::check_data_dir(&data_dir(&args, &file)) {
        eprintln!("error: data directory {e}");
        return ExitCode::from(2);
    }
    // A broken pair is a start-up error, like a bad config value: the file and why.
    let tls = match tls_files(&args, &file).and_then(|files| {
        files.map(|f| TlsAcceptor::load(f).map_err(|e| format!("[server] {e}"))).transpose()
    }) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(args, file, tls)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            let mistake = e.chain().any(|c| c.downcast_ref::<ConfigMistake>().is_some());
            ExitCode::from(if mistake { 2 } else { 1 })
        }
    }
}

async fn serve(args: ServeArgs, file: ConfigFile, tls: Option<TlsAcceptor>) -> anyhow::Result<()> {
    let settings = Settings::resolve(&args, &file)?;
    let store = Arc::new(
        crate::store::open(
            &settings.store,
            &settings.data,
            &settings.store_section,
            settings.on_corrupt,
        )
        .await?,
    );

    let policies = match &args.config {
        Some(path) => {
            let validator = file.reload_validator(&args.flag_keys());
            Policies::with_checked_file(PolicySet::new(file.policy.clone()), path, validator)
        }
        None => Policies::fixed(PolicySet::default()),
    };
    let _watcher = policies.watch(POLICY_POLL);

    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener.local_addr().context("listener address")?;
    let users = tollgate_http::user::Users::new(file.user.clone())
        .map_err(|e| ConfigMistake(format!("[[user]]: {e}")))?;
    let admin = AccessGuard::new(settings.admin_token.as_deref(), addr.ip().is_loopback())
        .with_users(users)
        .with_audit(tollgate_http::audit::AuditLog::new(&settings.data));
    if !admin.has_token() && !addr.ip().is_loopback() {
        tracing::warn!("no admin token configured: the admin API is refused on {addr}");
    }
    let clients =
        ClientKeys::new(&file.client).map_err(|e| ConfigMistake(format!("[[client]]: {e}")))?;
    let clients_for_grpc = clients.clone();
    let mut state = AppState::builder(Arc::clone(&store), policies, admin.clone())
        .clients(clients.clone())
        .on_store_unavailable(settings.store_section.store_unavailable);
    // The usage history sees every decision of the store, whichever transport asked.
    let usage = match file.server.usage() {
        Some(mut options) => {
            options.on_corrupt = settings.on_corrupt;
            let usage = UsageHistory::open(&store, &settings.data, options)
                .context("cannot open the usage history")?;
            usage.attach(&store);
            usage.spawn_flusher();
            state = state.usage(usage.clone());
            Some(usage)
        }
        None => None,
    };
    if let Some(tls) = &tls {
        state = state.tls(tls.clone());
    }
    let state = state.build();
    let _tls_watcher = tls.as_ref().map(|t| t.watch(POLICY_POLL));
    if let AnyStore::Embedded(_) = store.as_ref() {
        // A counters file that cannot be written (a full disk, say) is not ready: /readyz
        // answers 503 until a commit succeeds again (checks meanwhile get store_unavailable).
        let s = Arc::clone(&store);
        state.add_readiness_check(
            "counters_file",
            Arc::new(move || match s.health() {
                StoreHealth::Ok => Ok(()),
                StoreHealth::Degraded(e) => Err(e),
            }),
        );
    }
    let mut app = router(state.clone());
    let mut backup = crate::backup::BackupApi {
        store: Arc::clone(&store),
        gateway: None,
        guard: admin.clone(),
        usage: usage.clone(),
        running: Arc::default(),
    };

    // The EDI gateway, when configured: same store, same admin guard, routes merged.
    let gateway = match file.gateway.clone() {
        Some(mut config) => {
            if let Some(key) =
                std::env::var("TOLLGATE_GATEWAY_QUOTA_API_KEY").ok().filter(|k| !k.is_empty())
            {
                let key = key
                    .parse()
                    .map_err(|e| anyhow::anyhow!("TOLLGATE_GATEWAY_QUOTA_API_KEY: {e}"))?;
                config.quota.api_key = Some(key);
            }
            let spool = tollgate_gateway::SpoolOptions {
                move_aside_corrupt: settings.on_corrupt == OnCorrupt::MoveAside,
                ephemeral: false,
            };
            let gw =
                tollgate_gateway::Gateway::builder(config, &settings.data, state.decider().clone())
                    .options(spool)
                    .start()
                    .await
                    .context("cannot start the gateway")?;
            state.add_readiness_check("gateway_quota", Arc::new(gw.quota_readiness()));
            state.add_readiness_check("gateway_spool", Arc::new(gw.spool_readiness()));
            app = app.merge(gw.router(admin, clients));
            backup.gateway = Some(gw.backup());
            Some(gw)
        }
        None => None,
    };

    app =
        app.route("/v1/admin/backup", axum::routing::post(crate::backup::route).with_state(backup));
    // The console at /ui/, a client of the same API (same guard, sessions and audit log).
    app = app.merge(crate::console::router(&state, &file));
    app = app.merge(crate::openapi::router(&crate::openapi::document(gateway.is_some())));
    // Every wrong credential, on any route, counts toward its source's failed logins.
    app = app.layer(axum::middleware::from_fn_with_state(
        state.admin().clone(),
        tollgate_http::access::limit_credentials,
    ));

    // One signal stops both listeners.
    let signal = shutdown_signal()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // The descriptors left after a reserve are shared by the listeners (see `fd_limit`).
    let mut limits = file.server.limits();
    let mut grpc_limits = file.server.grpc_limits();
    let grpc_wanted = file.server.grpc_listen.map(|_| grpc_limits.max_connections);
    let (http_cap, grpc_cap) =
        crate::fd_limit::fit_connections(limits.max_connections, grpc_wanted);
    limits.max_connections = http_cap;
    grpc_limits.max_connections = grpc_cap.unwrap_or(grpc_limits.max_connections);

    // Envoy's rate limit service, when `[server] grpc_listen` is set: same store, same policies.
    let grpc = crate::rls::start(
        &file,
        grpc_limits,
        state.decider().clone(),
        clients_for_grpc,
        tls.as_ref(),
        stopped(stop_rx.clone()),
    )
    .await?;

    let shutdown = stopped(stop_rx);
    tracing::info!(%addr, store = store.kind(), "tollgate serving");
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    crate::notify::ready();

    let shutdown = async {
        shutdown.await;
        crate::notify::stopping();
    };
    tollgate_server::serve_tls(listener, app, shutdown, limits, tls)
        .await
        .context("serving HTTP")?;
    if let Some(grpc) = grpc {
        grpc.finished().await?;
    }

    if let Some(gw) = gateway {
        tracing::info!("shutting down: stopping the gateway");
        gw.shutdown().await;
    }

    if let Some(usage) = usage
        && let Err(e) = usage.flush().await
    {
        tracing::warn!(error = %e, "shutting down: the last usage history flush failed");
    }
    tracing::info!("shutting down: flushing the store");
    store.flush().await.context("flushing the store")?;
    tracing::info!("stopped");
    Ok(())
}

/// A future completing on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this
/// returns, before `listening on` is printed, so a signal sent right after start-up is never
/// met by the default action (immediate death, no flush).
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

/// A future completing on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
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
