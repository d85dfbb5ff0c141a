//! What every handler shares: the store, the policies, the client keys, the admin guard, the
//! metrics handle, the readiness checks and the listener's TLS acceptor. Cheap to clone (one `Arc`).

use std::sync::{Arc, RwLock};

use metrics_exporter_prometheus::PrometheusHandle;
use tollgate_policy::Decider;
use tollgate_quota::AnyStore;
use tollgate_quota::store::OnStoreUnavailable;

use crate::policy::Policies;
use crate::usage::UsageHistory;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_http::tls::TlsAcceptor;

/// A readiness check registered by another part of the process (e.g. the gateway):
/// `Err(reason)` makes `/readyz` answer 503.
pub type ReadinessCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

struct Inner {
    store: Arc<AnyStore>,
    decider: Decider,
    policies: Arc<Policies>,
    clients: ClientKeys,
    admin: AccessGuard,
    on_store_unavailable: OnStoreUnavailable,
    metrics: PrometheusHandle,
    readiness: RwLock<Vec<(String, ReadinessCheck)>>,
    tls: Option<TlsAcceptor>,
    usage: Option<UsageHistory>,
}

/// The shared state of the HTTP service.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

/// Builds an [`AppState`]; see [`AppState::builder`].
pub struct AppStateBuilder {
    store: Arc<AnyStore>,
    policies: Arc<Policies>,
    admin: AccessGuard,
    clients: ClientKeys,
    on_store_unavailable: OnStoreUnavailable,
    tls: Option<TlsAcceptor>,
    usage: Option<UsageHistory>,
}

impl AppStateBuilder {
    /// The usage history behind `GET /v1/usage` (none: that route answers 404). The caller
    /// attaches it to the store ([`UsageHistory::attach`]) and starts its flusher.
    pub fn usage(mut self, usage: UsageHistory) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The listener's TLS acceptor, so `/readyz` shows the certificate's reload status.
    pub fn tls(mut self, tls: TlsAcceptor) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Requires `x-api-key` client keys on `/v1/quota` (none: open).
    pub fn clients(mut self, clients: ClientKeys) -> Self {
        self.clients = clients;
        self
    }

    /// What to answer when the store fails (default `local`: 503 if the store still fails).
    pub fn on_store_unavailable(mut self, mode: OnStoreUnavailable) -> Self {
        self.on_store_unavailable = mode;
        self
    }

    /// The finished state; installs the metrics recorder if needed.
    pub fn build(self) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                decider: Decider::new(
                    self.store.clone(),
                    self.policies.handle().clone(),
                    self.on_store_unavailable,
                ),
                store: self.store,
                policies: self.policies,
                clients: self.clients,
                admin: self.admin,
                on_store_unavailable: self.on_store_unavailable,
                metrics: {
                    let handle = crate::metrics::install();
                    crate::metrics::register();
                    handle
                },
                readiness: RwLock::new(Vec::new()),
                tls: self.tls,
                usage: self.usage,
            }),
        }
    }
}

impl AppState {
    /// Starts a state from the parts every server needs.
    pub fn builder(
        store: Arc<AnyStore>,
        policies: Arc<Policies>,
        admin: AccessGuard,
    ) -> AppStateBuilder {
        AppStateBuilder {
            store,
            policies,
            admin,
            clients: ClientKeys::default(),
            on_store_unavailable: OnStoreUnavailable::default(),
            tls: None,
            usage: None,
        }
    }

    /// The usage history, when it is kept (`[server] usage_history`, on by default).
    pub fn usage(&self) -> Option<&UsageHistory> {
        self.inner.usage.as_ref()
    }

    /// The listener's TLS acceptor, when it serves HTTPS.
    pub fn tls(&self) -> Option<&TlsAcceptor> {
        self.inner.tls.as_ref()
    }

    /// The one decision path: this server's store, its policies in force and its
    /// `store_unavailable`.
    pub fn decider(&self) -> &Decider {
        &self.inner.decider
    }

    /// The counter store.
    pub fn store(&self) -> &Arc<AnyStore> {
        &self.inner.store
    }

    /// The policies in force and their reloader.
    pub fn policies(&self) -> &Arc<Policies> {
        &self.inner.policies
    }

    /// The client keys for `/v1/quota`.
    pub fn clients(&self) -> &ClientKeys {
        &self.inner.clients
    }

    /// The admin guard (also handed to the gateway for its admin routes).
    pub fn admin(&self) -> &AccessGuard {
        &self.inner.admin
    }

    /// What to answer when the store fails.
    pub fn on_store_unavailable(&self) -> OnStoreUnavailable {
        self.inner.on_store_unavailable
    }

    /// The Prometheus handle that renders `/metrics`.
    pub fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }

    /// Registers a readiness check shown (and enforced) by `/readyz`.
    pub fn add_readiness_check(&self, name: impl Into<String>, check: ReadinessCheck) {
        let mut checks = match self.inner.readiness.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        checks.push((name.into(), check));
    }

    /// Runs the registered readiness checks.
    pub fn readiness(&self) -> Vec<(String, Result<(), String>)> {
        let checks = match self.inner.readiness.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        checks.iter().map(|(n, c)| (n.clone(), c())).collect()
    }
}
