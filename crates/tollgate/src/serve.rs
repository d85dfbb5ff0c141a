//! `tollgate serve`: runs the quota service (and, when configured, the EDI gateway), with the
//! console at `/ui/` on the same listener.
//!
//! Start-up: read the config file (exit 2 with `FILE:LINE:COL: message` when it is bad),
//! resolve each setting (flag, then file, then default), load the TLS pair when one is set
//! (exit 2 with the file and why when it is broken), take the data directory's lock (a second
//! serve on the same directory waits there as a standby, see `data_lock`), open the store,
//! bind, and print
//! `listening on http://ADDR` (`https://` with TLS) once requests can be served (and
//! `READY=1` to systemd, see `crate::notify`). SIGTERM or SIGINT stop accepting,
//! let in-flight requests finish, then flush the store, so a graceful stop loses nothing.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_http::tls::TlsAcceptor;
use tollgate_policy::PolicySet;
use tollgate_quota::store::OnCorrupt;
use tollgate_quota::{AnyStore, Store, StoreHealth};
use tollgate_server::Policies;
use tollgate_server::usage::UsageHistory;
use tollgate_server::{App, AppState};

use crate::config::{ConfigFile, ConfigMistake};

mod data_lock;
mod settings;

pub use settings::ServeArgs;
use settings::{Settings, data_dir, tls_files};

/// How often the policy file (and the TLS pair) is polled in case file-system events are
/// missed.
const POLICY_POLL: Duration = Duration::from_secs(2);

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
    // Before any state file is opened: a second serve on the same directory waits here as a
    // standby, without binding its listener, until the first one stops or dies.
    let _data_lock = if owns_data_files(&settings.store, &file) {
        Some(data_lock::acquire(&settings.data).await?)
    } else {
        None
    };
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

    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener.local_addr().context("listener address")?;
    let users = tollgate_http::user::Users::new(file.user.clone())
        .map_err(|e| ConfigMistake(format!("[[user]]: {e}")))?;
    let admin = AccessGuard::new(settings.admin_token.as_deref(), addr.ip().is_loopback())
        .with_users(users)
        .with_audit(tollgate_http::audit::AuditLog::new(&settings.data));
    let _watcher = policies.watch(POLICY_POLL, admin.clone());
    if !admin.has_token() && !addr.ip().is_loopback() {
        tracing::warn!("no admin token configured: the admin API is refused on {addr}");
    }
    let clients =
        ClientKeys::new(&file.client).map_err(|e| ConfigMistake(format!("[[client]]: {e}")))?;
    let clients_for_grpc = clients.clone();
    let failures_for_grpc = Arc::clone(admin.failed_logins());
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
    let mut app = App::new(state.clone());
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

    // Notifications: the `[[notify.webhook]]`s and `[notify.smtp]` get events found in the
    // gateway's queue tally (when a gateway runs) and test events on request.
    let channels = file.notify.channels();
    let notifier = match channels.is_empty() {
        true => None,
        false => Some(
            tollgate_notify::Notifier::start(channels, file.notify.send_options())
                .map_err(ConfigMistake)?,
        ),
    };
    let watch = match (&gateway, &notifier) {
        (Some(gw), Some(n)) => {
            Some(crate::notifications::watch(gw.tally(), n.clone(), file.notify.rules()))
        }
        (None, Some(_)) => {
            tracing::warn!("[notify] channels without a [gateway]: only test events are sent");
            None
        }
        _ => None,
    };
    app = app.merge(crate::notifications::router(notifier, state.admin().clone()));

    app =
        app.route("/v1/admin/backup", axum::routing::post(crate::backup::route).with_state(backup));
    // The console at /ui/, a client of the same API (same guard, sessions and audit log).
    app = app.merge(crate::console::router(&state, &file, gateway.as_ref()));
    app = app.merge(crate::openapi::router(&crate::openapi::document(gateway.is_some())));
    // Every wrong credential, on any route, counts toward its source's failed logins.
    app = app.layer(tollgate_http::access::CredentialLimit::new(state.admin()));

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
    if let Some(gw) = &file.gateway {
        // Uploads are paced by their own rule: the listener's, as loose as it on both counts
        // and a second later, never cuts an upload that rule lets through, and leaves the cut
        // of one that falls behind to it (408 upload-too-slow, its reservation given back).
        limits.body_min_rate = limits.body_min_rate.min(gw.upload_min_rate_bytes);
        let upload_grace = std::time::Duration::from_millis(gw.upload_rate_grace_ms.get());
        let later = upload_grace.saturating_add(std::time::Duration::from_secs(1));
        limits.body_rate_grace = limits.body_rate_grace.max(later);
    }
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
        failures_for_grpc,
        tls.as_ref(),
        stopped(stop_rx.clone()),
    )
    .await?;

    let shutdown = stopped(stop_rx);
    tracing::info!(%addr, store = store.kind(), "tollgate serving");
    let scheme = if tls.is_some() { "https" } else { "http" };
    crate::output::announce(format_args!("listening on {scheme}://{addr}"));
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

    if let Some(watch) = watch {
        watch.abort();
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

/// True when this serve keeps state files in the data directory that only one process may
/// write: the embedded store (counters and usage history) or the gateway's spool. Instances
/// on a shared Redis without a gateway run side by side and take no lock.
fn owns_data_files(store: &crate::config::StoreKind, file: &ConfigFile) -> bool {
    matches!(store, crate::config::StoreKind::Embedded) || file.gateway.is_some()
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
