//! Starts a real server on a free loopback port for the HTTP tests.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::oneshot;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_http::config::ClientKey;
use tollgate_policy::PolicySet;
use tollgate_quota::store::MemoryStore;
use tollgate_quota::{AnyStore, ManualClock};
use tollgate_server::{App, AppState, ConnectionLimits, serve_with};
use tollgate_server::{Policies, parse_policies};

/// 2026-11-30T10:00:00Z: 14 hours before the end of the calendar day.
pub const NOW: &str = "2026-11-30T10:00:00Z";

pub struct Server {
    pub addr: SocketAddr,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

pub struct Options {
    pub policies: Arc<Policies>,
    pub token: Option<&'static str>,
    pub loopback: bool,
    pub clients: Vec<ClientKey>,
    pub limits: ConnectionLimits,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policies: Policies::fixed(PolicySet::default()),
            token: None,
            loopback: true,
            clients: Vec::new(),
            limits: ConnectionLimits::default(),
        }
    }
}

pub fn policies(toml: &str) -> Arc<Policies> {
    Policies::fixed(parse_policies(std::path::Path::new("test.toml"), toml).unwrap())
}

impl Server {
    pub async fn start() -> Self {
        Self::with(Options::default()).await
    }

    pub async fn with(opts: Options) -> Self {
        let limits = opts.limits.clone();
        let (state, clock) = Self::state(opts);
        Self::serving(App::new(state.clone()), state, clock, limits).await
    }

    /// The state a server of `opts` runs on, its store on a manual clock standing at [`NOW`].
    pub fn state(opts: Options) -> (AppState, ManualClock) {
        let clock = ManualClock::new(NOW.parse::<Timestamp>().unwrap());
        let store = Arc::new(AnyStore::Memory(MemoryStore::with_clock(Arc::new(clock.clone()))));
        let state =
            AppState::builder(store, opts.policies, AccessGuard::new(opts.token, opts.loopback))
                .clients(ClientKeys::new(&opts.clients).unwrap())
                .build();
        (state, clock)
    }

    /// Serves `app`, built on `state` (whose store runs on `clock`), on a free loopback port.
    pub async fn serving(
        app: impl Into<App>,
        state: AppState,
        clock: ManualClock,
        limits: ConnectionLimits,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let stop = async {
            let _ = rx.await;
        };
        let task = tokio::spawn(serve_with(listener, app.into(), stop, limits));
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        Self { addr, clock, http, state, stop: Some(tx), task: Some(task) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET /v1/quota` with the given headers.
    pub async fn quota(&self, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.http.get(self.url("/v1/quota"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// The live counters, via the admin API (open on loopback without a token).
    pub async fn counters(&self, token: Option<&str>) -> serde_json::Value {
        let mut req = self.http.get(self.url("/v1/counters"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}
