//! Load run: Envoy's `ShouldRateLimit` over gRPC against `GET /v1/quota` over HTTP/1.1, side
//! by side, on one in-process memory store, with the same clients count and calls.
//!
//! Each protocol gets its own listener on loopback; `CLIENTS` workers each hold one
//! connection and send `CALLS` checks one after another on distinct ids (limit high enough
//! that every check is admitted, so both sides do the same store work). It prints throughput,
//! p50 and p99 of the call latency seen by the client. Bounded in count; stops by itself.
//!
//! `cargo bench -p tollgate --bench grpc_vs_http` (env `CLIENTS`, `CALLS` override the size;
//! `GRPC_CONNS` how many connections the gRPC workers share, one per worker by default).
//!
//! `SERVER_THREADS=n` serves both listeners from a runtime of their own with `n` workers
//! instead of the clients' runtime, and adds the servers' CPU time per call to each line (read
//! from `/proc/self/task`): the servers' own cost, apart from the clients', which the calls per
//! second mix in and which a machine whose speed changes moves from round to round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_http::AccessGuard;
use tollgate_policy::PolicySet;
use tollgate_quota::AnyStore;
use tollgate_quota::store::MemoryStore;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_rls::rls::RateLimitRequest;
use tollgate_rls::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::{RateLimiter, RlsSection, RuleSet};
use tollgate_server::Policies;
use tollgate_server::{App, AppState};

const RULES: &str = r#"
[[rls.rule]]
domain = "bench"
descriptor = ["id"]
metering_id = "Bench:{id}"
limit = 1000000000
unit = "hour"
"#;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Figures {
    calls: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// CPU time the servers' own threads spent over the run, when they have threads of their own.
    server_cpu: Option<Duration>,
}

/// The name of the servers' threads with `SERVER_THREADS`.
const SERVER_THREAD: &str = "tg-server";

/// Time on a CPU of this process's threads named `name`, from `/proc/self/task`.
fn threads_cpu(name: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let ns: u64 = tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Runs `run`, with the servers' CPU time over it when they have threads of their own.
async fn measured(split: bool, run: impl std::future::Future<Output = Figures>) -> Figures {
    let before = split.then(|| threads_cpu(SERVER_THREAD));
    let mut figures = run.await;
    figures.server_cpu = before.map(|b| threads_cpu(SERVER_THREAD).saturating_sub(b));
    figures
}

impl Figures {
    fn print(&mut self, name: &str) {
        self.latencies.sort();
        let at = |q: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
            self.latencies[i].as_secs_f64() * 1e6
        };
        let server = self.server_cpu.map_or(String::new(), |cpu| {
            format!("   server CPU {:.2} µs/call", cpu.as_secs_f64() * 1e6 / self.calls as f64)
        });
        println!(
            "{name:<28} {:>9.0} calls/s   p50 {:>7.1} µs   p99 {:>7.1} µs   ({} calls in {:.2} s){server}",
            self.calls as f64 / self.elapsed.as_secs_f64(),
            at(0.50),
            at(0.99),
            self.calls,
            self.elapsed.as_secs_f64()
        );
    }
}

/// `clients` workers on `conns` HTTP/2 connections (workers share them round-robin, their calls
/// multiplexed as Envoy's worker threads multiplex theirs on one connection each).
async fn grpc_run(addr: String, clients: usize, conns: usize, calls: usize) -> Figures {
    let mut channels = Vec::new();
    for _ in 0..conns.clamp(1, clients) {
        let endpoint = tonic::transport::Endpoint::from_shared(addr.clone()).expect("grpc url");
        channels.push(endpoint.connect().await.expect("grpc connect"));
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..clients {
        let channel = channels[w % channels.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut c = RateLimitServiceClient::new(channel);
            let mut lat = Vec::with_capacity(calls);
            for i in 0..calls {
                let req = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "id".into(),
                            value: format!("g{w}-{}", i % 64),
                        }],
                        hits_addend: None,
                    }],
                    hits_addend: 1,
                };
                let t = Instant::now();
                let r = c.should_rate_limit(req).await.expect("grpc call").into_inner();
                lat.push(t.elapsed());
                assert_eq!(r.overall_code, 1, "every bench check is admitted");
            }
            lat
        }));
    }
    let mut latencies = Vec::with_capacity(clients * calls);
    for t in tasks {
        latencies.extend(t.await.expect("grpc worker"));
    }
    Figures { calls: clients * calls, elapsed: start.elapsed(), latencies, server_cpu: None }
}

async fn http_run(addr: String, clients: usize, calls: usize) -> Figures {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..clients {
        let url = format!("{addr}/v1/quota");
        tasks.push(tokio::spawn(async move {
            // One client per worker, one kept-alive connection each.
            let c = reqwest::Client::builder().pool_max_idle_per_host(1).build().expect("client");
            let mut lat = Vec::with_capacity(calls);
            for i in 0..calls {
                let t = Instant::now();
                let r = c
                    .get(&url)
                    .header("metering-id", format!("Bench:h{w}-{}", i % 64))
                    .header("quota-limit", "1000000000")
                    .header("quota-timeunit", "hour")
                    .send()
                    .await
                    .expect("http call");
                let status = r.status();
                let _ = r.bytes().await.expect("http body");
                lat.push(t.elapsed());
                assert_eq!(status, 200, "every bench check is admitted");
            }
            lat
        }));
    }
    let mut latencies = Vec::with_capacity(clients * calls);
    for t in tasks {
        latencies.extend(t.await.expect("http worker"));
    }
    Figures { calls: clients * calls, elapsed: start.elapsed(), latencies, server_cpu: None }
}

fn main() {
    let clients = env("CLIENTS", 16);
    let calls = env("CALLS", 5_000);
    let conns = env("GRPC_CONNS", clients);
    let server_threads = env("SERVER_THREADS", 0);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    // With SERVER_THREADS the listeners are bound and served on a runtime of their own, so
    // that their I/O and tasks stay on its threads.
    let server_rt = (server_threads > 0).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(server_threads)
            .thread_name(SERVER_THREAD)
            .enable_all()
            .build()
            .expect("server runtime")
    });
    let (http_addr, grpc_addr) = server_rt.as_ref().unwrap_or(&rt).block_on(start_servers());
    let split = server_rt.is_some();
    rt.block_on(async {
        println!(
            "{clients} clients × {calls} calls each, memory store; HTTP: one connection per \
             client; gRPC: {conns} connection(s); servers on {}",
            if split {
                format!("{server_threads} thread(s) of their own")
            } else {
                "the clients' runtime".into()
            }
        );
        // A short warm-up of each, then the measured runs, alternated.
        http_run(http_addr.clone(), clients, calls / 10).await;
        grpc_run(grpc_addr.clone(), clients, conns, calls / 10).await;
        for round in 1..=2 {
            println!("round {round}");
            measured(split, http_run(http_addr.clone(), clients, calls))
                .await
                .print("GET /v1/quota (HTTP/1.1)");
            measured(split, grpc_run(grpc_addr.clone(), clients, conns, calls))
                .await
                .print("ShouldRateLimit (gRPC)");
        }
    });
}

/// Both listeners on one memory store, served on the current runtime; their base URLs.
async fn start_servers() -> (String, String) {
    let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
    let state = AppState::builder(
        Arc::clone(&store),
        Policies::fixed(PolicySet::default()),
        AccessGuard::new(None, true),
    )
    .build();
    let decider = state.decider().clone();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind http");
    let http_addr = format!("http://{}", http.local_addr().expect("addr"));
    tokio::spawn(tollgate_server::serve(http, App::new(state), std::future::pending()));

    let section: RlsSection = toml::from_str::<Doc>(RULES).expect("rules").rls;
    let rules = RuleSet::new(&section).expect("rules");
    let limiter = RateLimiter::new(decider, rules);
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind grpc");
    let grpc_addr = format!("http://{}", grpc.local_addr().expect("addr"));
    let limits = tollgate_rls::ConnLimits::default();
    tokio::spawn(tollgate_rls::serve(grpc, limits, limiter, std::future::pending()));
    (http_addr, grpc_addr)
}

#[derive(serde::Deserialize)]
struct Doc {
    rls: RlsSection,
}
