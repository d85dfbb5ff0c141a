//! `tollgate serve` on a real three-master Redis Cluster: three instances (two given
//! `--store redis://… --store-cluster`, one `[store] cluster = true`) share exact counters
//! under 600 concurrent requests; `--store-cluster` without a Redis store is refused with the
//! reason.

mod common;

use std::time::{Duration, Instant};

use common::{RedisCluster, Server, exit_within};

/// `GET /v1/quota` for `id`, limit `limit` an hour (flexi window: no boundary inside the test);
/// the status, with any `Tollgate-Degraded` header.
async fn ask(client: &reqwest::Client, addr: &str, id: &str, limit: u64) -> (u16, Option<String>) {
    let r = client
        .get(format!("http://{addr}/v1/quota"))
        .header("metering-id", id)
        .header("quota-limit", limit.to_string())
        .header("quota-timeunit", "hour")
        .header("quota-window", "flexi")
        .send()
        .await
        .unwrap();
    let degraded = r.headers().get("tollgate-degraded").map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), degraded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_a_cluster_admit_exactly_the_limit() {
    let Some(cluster) = RedisCluster::start(3, 0) else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url();
    // `deny`: a request Redis did not answer is a 503, never a silent local decision.
    let flags = dir.path().join("flags.toml");
    std::fs::write(&flags, "[store]\nstore_unavailable = \"deny\"\ntimeout_ms = 2000\n").unwrap();
    let file = dir.path().join("file.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\nkind = \"redis\"\nurl = \"{url}\"\ncluster = true\n\
             store_unavailable = \"deny\"\ntimeout_ms = 2000\n"
        ),
    )
    .unwrap();
    let flags = flags.to_str().unwrap();
    let servers = [
        Server::start(&["--store", &url, "--store-cluster", "--config", flags]),
        Server::start(&["--store", &url, "--store-cluster", "--config", flags]),
        Server::start(&["--config", file.to_str().unwrap()]),
    ];
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let client = reqwest::Client::new();

    // Each instance reaches the cluster (it connects lazily).
    let deadline = Instant::now() + Duration::from_secs(15);
    for addr in &addrs {
        while ask(&client, addr, "Warm:up", 1_000_000).await != (200, None) {
            assert!(Instant::now() < deadline, "{addr} did not reach the cluster");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // 600 concurrent requests over three instances, limit 200, for ids on different masters.
    for id in ["Exact:CarrierA", "Exact:CarrierB", "Exact:CarrierC"] {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..600 {
            let (client, addr) = (client.clone(), addrs[i % 3].clone());
            set.spawn(async move { ask(&client, &addr, id, 200).await });
        }
        let answers = set.join_all().await;
        for a in &answers {
            assert!(a.0 == 200 || a.0 == 429, "{id}: {a:?}");
            assert_eq!(a.1, None, "{id}: degraded while the cluster is up");
        }
        let admitted = answers.iter().filter(|a| a.0 == 200).count();
        assert_eq!(admitted, 200, "{id}");
    }
}

#[test]
fn store_cluster_needs_a_redis_store() {
    let out =
        exit_within(&["serve", "--store", "memory", "--store-cluster"], Duration::from_secs(10));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--store-cluster needs a redis:// or rediss:// store"), "{stderr}");
    assert!(stderr.contains("the store is memory"), "{stderr}");
}
