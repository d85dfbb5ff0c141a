//! Shared test parts: X12 214 builders, a gateway on a free port, a recording HTTP backend.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{any, post};
use tollgate_gateway::{Gateway, GatewayConfig};
use tollgate_http::AccessGuard;
use tollgate_policy::Decider;
use tollgate_quota::AnyStore;
use tollgate_quota::store::MemoryStore;

pub use tollgate_testkit::Status214;

/// A one-transaction 214 from `ZZ:<sender>` with its document type replaced (e.g. an 810).
pub fn x12_doc(sender: &str, control: u32, doc: &str) -> Vec<u8> {
    let s = String::from_utf8(Status214::new(sender, control).build()).unwrap();
    s.replace("ST*214*", &format!("ST*{doc}*")).into_bytes()
}

/// A `[gateway]` body: landing dir `inbound`, partners CarrierA and CarrierB, one route for
/// 214 and IFTSTA to `deliver` at `limit` per day (a calendar day: no window ends inside a
/// test but at midnight UTC), and `extra` top-level keys or tables.
pub fn config(inbound: &str, deliver: &str, limit: u64, extra: &str) -> String {
    format!(
        r#"
inbound = ["{inbound}"]
poll_ms = 20
settle_ms = 0
{extra}

[[partner]]
name = "CarrierA"
ids = ["ZZ:CARRIERA"]

[[partner]]
name = "CarrierB"
ids = ["ZZ:CARRIERB"]

[[route]]
name = "ShipmentStatus"
documents = ["214", "IFTSTA"]
limit = {limit}
interval = 1
unit = "day"
deliver = "{deliver}"
"#
    )
}

/// What the backend saw.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub partner: String,
    pub document: String,
    pub body: Vec<u8>,
}

/// An HTTP backend on a free port that answers with the statuses in `script`, then 200.
pub struct Backend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Received>>>,
    pub hits: Arc<Mutex<u32>>,
}

impl Backend {
    pub async fn start(script: Vec<u16>) -> Backend {
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let hits: Arc<Mutex<u32>> = Arc::default();
        let script = Arc::new(Mutex::new(script.into_iter()));
        let (s2, h2) = (seen.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/edi",
            post(move |headers: HeaderMap, body: Bytes| {
                let (seen, hits, script) = (s2.clone(), h2.clone(), script.clone());
                async move {
                    *hits.lock().unwrap() += 1;
                    let status = script.lock().unwrap().next().unwrap_or(200);
                    if status == 200 {
                        let h = |n: &str| {
                            headers
                                .get(n)
                                .map(|v| v.to_str().unwrap().to_owned())
                                .unwrap_or_default()
                        };
                        seen.lock().unwrap().push(Received {
                            id: h("tollgate-interchange-id"),
                            partner: h("tollgate-partner"),
                            document: h("tollgate-document"),
                            body: body.to_vec(),
                        });
                    }
                    StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let addr = serve(app).await;
        Backend { addr, seen, hits }
    }

    pub fn url(&self) -> String {
        format!("http://{}/edi", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }
}

/// A quota service stand-in answering every check with `status` after `delay`, counting hits.
pub async fn quota_service(status: u16, delay: Duration) -> (SocketAddr, Arc<Mutex<u32>>) {
    let hits: Arc<Mutex<u32>> = Arc::default();
    let h2 = hits.clone();
    let app = axum::Router::new().route(
        "/v1/quota",
        any(move || {
            let hits = h2.clone();
            async move {
                *hits.lock().unwrap() += 1;
                tokio::time::sleep(delay).await;
                StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    (serve(app).await, hits)
}

/// Serves `app` on a free loopback port for the rest of the test.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

/// A server started by [`serve_until_stopped`]: sending on `stop` ends it once its
/// connections are closed, and `task` ends with it.
pub struct Served {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Serves `app` on a free loopback port until the returned [`Served`] is stopped.
pub async fn serve_until_stopped(app: axum::Router) -> (SocketAddr, Served) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let stopped = async move {
            let _ = stopped.await;
        };
        axum::serve(listener, app).with_graceful_shutdown(stopped).await.unwrap();
    });
    (addr, Served { stop, task })
}

/// A gateway with its admin/upload API on a free port.
pub struct Running {
    pub gateway: Gateway,
    pub addr: SocketAddr,
    pub store: Arc<AnyStore>,
    pub client: reqwest::Client,
    served: Served,
}

impl Running {
    pub async fn start(toml_text: &str, data: &Path, store: Arc<AnyStore>) -> Running {
        let config: GatewayConfig = toml::from_str(toml_text).unwrap();
        let decider = Decider::without_policies(store.clone());
        let gateway = Gateway::builder(config, data, decider).start().await.unwrap();
        let router = gateway.router(AccessGuard::new(None, true), Default::default());
        let (addr, served) = serve_until_stopped(router).await;
        Running { gateway, addr, store, client: reqwest::Client::new(), served }
    }

    /// Stops the gateway and its API, and waits until both have let go of the data dir (so
    /// that a gateway can start on it again).
    pub async fn stop(self) {
        let Running { gateway, client, served, .. } = self;
        drop(client);
        gateway.shutdown().await;
        let _ = served.stop.send(());
        served.task.await.unwrap();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn upload(&self, body: Vec<u8>) -> (u16, serde_json::Value) {
        let r = self.client.post(self.url("/v1/interchanges")).body(body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Every item in `state`, following the pages' `Link: rel="next"` headers.
    pub async fn queue(&self, state: &str) -> Vec<serde_json::Value> {
        let mut all = Vec::new();
        let mut next = Some(format!("/v1/queue?state={state}&limit=1000"));
        while let Some(path) = next.take() {
            let r = self.client.get(self.url(&path)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            next = r.headers().get("link").map(|l| {
                let l = l.to_str().unwrap();
                l[1..l.find('>').unwrap()].to_owned()
            });
            all.extend(r.json::<Vec<serde_json::Value>>().await.unwrap());
        }
        all
    }

    /// Polls the queue until `n` items are in `state` (or fails after 10 s).
    pub async fn wait_for(&self, state: &str, n: usize) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let items = self.queue(state).await;
            if items.len() >= n {
                return items;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {n} {state}: have {items:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The quota engine over its in-memory store, shared by the gateway (embedded metering).
pub fn memory_store() -> Arc<AnyStore> {
    Arc::new(AnyStore::Memory(MemoryStore::new()))
}

/// Polls until `f` is true (or fails after 10 s).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Running {
    /// Like [`Running::start`], with the server's admin guard and `[[client]]` keys.
    pub async fn start_guarded(
        toml_text: &str,
        data: &Path,
        guard: AccessGuard,
        clients: tollgate_http::client::ClientKeys,
    ) -> Running {
        let config: GatewayConfig = toml::from_str(toml_text).unwrap();
        let store = memory_store();
        let decider = Decider::without_policies(store.clone());
        let gateway = Gateway::builder(config, data, decider).start().await.unwrap();
        let (addr, served) = serve_until_stopped(gateway.router(guard, clients)).await;
        Running { gateway, addr, store, client: reqwest::Client::new(), served }
    }
}

/// The contents of every finished file in `dir` (not dot files; none when `dir` does not
/// exist), sorted.
pub fn files_in(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut all: Vec<Vec<u8>> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    all.sort();
    all
}

/// Every item whose id is `file_id` or starts with `file_id-`, in any state, sorted by id.
pub async fn items_of(gw: &Running, file_id: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for state in ["received", "held", "delivered", "rejected", "duplicate", "dead"] {
        out.extend(gw.queue(state).await.into_iter().filter(|i| {
            let id = i["id"].as_str().unwrap_or_default();
            id == file_id || id.starts_with(&format!("{file_id}-"))
        }));
    }
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    out
}

/// The bytes an item's `spool` field points at, read from the data dir.
pub fn spooled_bytes(data: &Path, item: &serde_json::Value) -> Vec<u8> {
    let spool = &item["spool"];
    let bytes = std::fs::read(data.join(spool["file"].as_str().unwrap())).unwrap();
    let (start, end) = (spool["start"].as_u64().unwrap(), spool["end"].as_u64().unwrap());
    bytes[start as usize..end as usize].to_vec()
}
