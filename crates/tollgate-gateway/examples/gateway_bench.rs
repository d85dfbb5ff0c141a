//! Load runs for the gateway, end to end: landing directory → spool → parse → meter → outbound
//! directory, every step with fsync, on the in-process engine.
//!
//! ```text
//! cargo run --release -p tollgate-gateway --example gateway_bench -- throughput 1024 5000
//! cargo run --release -p tollgate-gateway --example gateway_bench -- throughput 102400 1000
//! cargo run --release -p tollgate-gateway --example gateway_bench -- burst
//! ```
//! `throughput SIZE COUNT`: COUNT interchanges of about SIZE bytes are renamed into the landing
//! directory at once; the rate is COUNT over the time until the last one is in the outbound
//! directory. `burst`: one carrier drops 1,000 files × 100 status updates while two others drop
//! one file every 20 ms each; prints how much of the burst went through (its quota is 10,000
//! per hour) and the others' drop-to-delivery latency, with and without the burst.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_gateway::{Gateway, GatewayConfig};
use tollgate_quota::AnyStore;
use tollgate_quota::store::MemoryStore;
use tollgate_testkit::Status214;

fn config(root: &Path, limit: u64) -> GatewayConfig {
    let text = format!(
        r#"
inbound = ["{inbound}"]
poll_ms = 10
settle_ms = 0

[[partner]]
name = "Burster"
ids = ["ZZ:BURSTER"]

[[route]]
name = "ShipmentStatus"
documents = ["214"]
limit = {limit}
interval = 1
unit = "hour"
deliver = "dir:{out}"
max_concurrency = 32
"#,
        inbound = root.join("in").display(),
        out = root.join("out").display(),
    );
    toml::from_str(&text).unwrap()
}

async fn start(root: &Path, limit: u64) -> Gateway {
    let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
    let decider = tollgate_policy::Decider::without_policies(store);
    Gateway::builder(config(root, limit), &root.join("data"), decider).start().await.unwrap()
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count())
        .unwrap_or(0)
}

async fn throughput(size: usize, n: usize) {
    let root = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
    let stage = root.path().join("stage");
    std::fs::create_dir_all(&stage).unwrap();
    for i in 0..n {
        let sender = format!("P{:03}", i % 50);
        std::fs::write(
            stage.join(format!("{i:06}.edi")),
            Status214::new(&sender, i as u32 + 1).receiver("ACME").padded_to(size).build(),
        )
        .unwrap();
    }
    let actual = std::fs::metadata(stage.join("000000.edi")).unwrap().len();
    let gw = start(root.path(), 1_000_000_000_000).await;
    let inbound = root.path().join("in");
    let out = root.path().join("out");
    let t0 = Instant::now();
    for i in 0..n {
        let name = format!("{i:06}.edi");
        std::fs::rename(stage.join(&name), inbound.join(&name)).unwrap();
    }
    loop {
        if count(&out) >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "throughput: {n} interchanges of {actual} bytes in {secs:.2} s = {:.0} interchanges/s ({:.1} MB/s)",
        n as f64 / secs,
        (n as f64 * actual as f64) / secs / 1e6
    );
    gw.shutdown().await;
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Drops files for the two normal carriers every 20 ms for `secs`; returns latencies in ms.
/// Runs on its own thread, so that its file-system polling does not occupy a runtime worker.
fn normal_traffic(root: &Path, secs: u64, with_burst: bool) -> (Vec<f64>, usize) {
    let inbound = root.join("in");
    let out = root.join("out");
    let stage = root.join("stage");
    std::fs::create_dir_all(&stage).unwrap();
    let mut dropped: HashMap<(String, String), Instant> = HashMap::new();
    let mut latencies = Vec::new();
    let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut burst_delivered = 0usize;
    let start = Instant::now();
    if with_burst {
        for i in 0..1000u32 {
            let name = format!("burst{i:04}.edi");
            std::fs::write(
                stage.join(&name),
                Status214::new("BURSTER", i + 1).receiver("ACME").transactions(100).build(),
            )
            .unwrap();
        }
        for i in 0..1000u32 {
            let name = format!("burst{i:04}.edi");
            std::fs::rename(stage.join(&name), inbound.join(&name)).unwrap();
        }
    }
    let mut next_drop = Instant::now();
    let mut control = 0u32;
    let end = start + Duration::from_secs(secs);
    while Instant::now() < end + Duration::from_secs(2) {
        if Instant::now() >= next_drop && Instant::now() < end {
            control += 1;
            for sender in ["FASTFREIGHT", "ROADRUNNER"] {
                let name = format!("{sender}-{control}.edi");
                std::fs::write(
                    stage.join(&name),
                    Status214::new(sender, control).receiver("ACME").padded_to(1024).build(),
                )
                .unwrap();
                std::fs::rename(stage.join(&name), inbound.join(&name)).unwrap();
                dropped.insert((sender.to_owned(), format!("{control:09}")), Instant::now());
            }
            next_drop += Duration::from_millis(20);
        }
        for e in std::fs::read_dir(&out).into_iter().flatten().flatten() {
            let p = e.path();
            if p.file_name().unwrap().to_string_lossy().starts_with('.') || !seen.insert(p.clone())
            {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let f: Vec<&str> = text.split('*').collect();
            if f.len() > 13 {
                let key = (f[6].trim().to_owned(), f[13].trim().to_owned());
                if key.0 == "BURSTER" {
                    burst_delivered += text.matches("ST*214*").count();
                } else if let Some(t) = dropped.get(&key) {
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(latencies.len(), dropped.len(), "every normal file was delivered");
    (latencies, burst_delivered)
}

async fn burst() {
    for with_burst in [false, true] {
        let root = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
        let gw = start(root.path(), 10_000).await;
        let path = root.path().to_path_buf();
        let (mut lat, burst_delivered) =
            tokio::task::spawn_blocking(move || normal_traffic(&path, 5, with_burst))
                .await
                .unwrap();
        let n = lat.len();
        let (p50, p99, max) =
            (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99), percentile(&mut lat, 1.0));
        println!(
            "{}: others' drop-to-delivery over {n} files: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms{}",
            if with_burst { "with burst   " } else { "without burst" },
            if with_burst {
                format!(
                    "; burster delivered {burst_delivered} of 100000 status updates (quota 10000/hour)"
                )
            } else {
                String::new()
            }
        );
        gw.shutdown().await;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("throughput") => {
            let size = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
            let n = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5000);
            throughput(size, n).await;
        }
        Some("burst") => burst().await,
        _ => eprintln!("usage: gateway_bench throughput SIZE COUNT | burst"),
    }
}
