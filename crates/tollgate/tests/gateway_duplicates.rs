//! Resent transactions through the real `tollgate serve` (`dedup = "transaction"`): a copy sent
//! after a `kill -9` and a restart is still a duplicate (the embedded store's fingerprints are
//! durable), counted in `/metrics`; and two instances on one real `redis-server`, or on a real
//! three-master Redis Cluster, fed copies of the same transactions at once, deliver each
//! transaction once between them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{RedisCluster, RedisServer, Server, Status214, gateway_toml};

/// A 214 from CARRIERA reporting `shipment`, under ISA13/GS06 `control` and ST02 `control`.
fn update(control: u32, shipment: u32) -> Vec<u8> {
    Status214::new("CARRIERA", control).shipment(shipment).st_from(control % 10_000).build()
}

/// A config file in `dir` with a landing dir `in`, deliveries to `out`, data in `data` and a
/// route that removes resent transactions; `rest` is put before the `[gateway]` section.
fn config(dir: &Path, rest: &str) -> PathBuf {
    let text = gateway_toml(&dir.join("in"), &dir.join("out"), "", rest);
    let text = format!(
        "[server]\ndata = \"{}\"\n{text}dedup = \"transaction\"\n",
        dir.join("data").display()
    );
    let file = dir.join("tollgate.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let inbound = dir.join("in");
    std::fs::create_dir_all(&inbound).unwrap();
    let tmp = inbound.join(format!("{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, inbound.join(name)).unwrap();
}

/// The shipments (B10 references) of every interchange delivered to `dir/out`.
fn delivered(dir: &Path) -> Vec<u32> {
    let mut got = Vec::new();
    for e in std::fs::read_dir(dir.join("out")).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        got.extend(
            text.split('~')
                .filter_map(|s| s.trim().strip_prefix("B10*REF"))
                .map(|r| r.split('*').next().unwrap().parse::<u32>().unwrap()),
        );
    }
    got.sort_unstable();
    got
}

/// How many queue items the server lists in `state`.
fn count(server: &Server, state: &str) -> usize {
    let answer = server.get(&format!("/v1/queue?state={state}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let items: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    items.as_array().map_or(0, Vec::len)
}

/// Polls until `f` holds (30 s at most).
fn wait_until(what: &str, f: impl FnMut() -> bool) {
    common::wait_until(what, Duration::from_secs(30), f);
}

#[test]
fn a_copy_sent_after_a_kill_and_a_restart_is_still_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let args = ["--config", cfg.to_str().unwrap()];
    let server = Server::start(&args);
    drop_file(dir.path(), "first.edi", &update(1001, 7));
    wait_until("the first copy delivered", || delivered(dir.path()) == [7]);
    server.sigkill();

    let server = Server::start(&args);
    drop_file(dir.path(), "again.edi", &update(1002, 7));
    drop_file(dir.path(), "other.edi", &update(1003, 8));
    wait_until("the copy quarantined", || count(&server, "duplicate") == 1);
    wait_until("the new update delivered", || delivered(dir.path()) == [7, 8]);
    let metrics = server.get("/metrics");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_gateway_duplicate_transactions_total{"))
        .unwrap_or_else(|| panic!("no duplicate transactions counted:\n{metrics}"));
    assert!(line.contains("route=\"ShipmentStatus\"") && line.ends_with(" 1"), "{line}");
}

#[test]
fn two_instances_on_one_redis_deliver_each_transaction_once() {
    let Some(redis) = RedisServer::start() else { return };
    // A generous store timeout: a slow lookup on a busy machine must not let a copy through.
    let store =
        format!("[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 2000\n", redis.url());
    two_instances_deliver_each_transaction_once(&store);
}

/// The same on a Redis Cluster: a transaction's fingerprints lie on several masters.
#[test]
fn two_instances_on_a_redis_cluster_deliver_each_transaction_once() {
    let Some(cluster) = RedisCluster::start(3, 0) else { return };
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ncluster = true\ntimeout_ms = 2000\n",
        cluster.url()
    );
    two_instances_deliver_each_transaction_once(&store);
}

/// Two instances sharing the store of the `[store]` table `store`.
fn two_instances_deliver_each_transaction_once(store: &str) {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let servers: Vec<Server> = [&a, &b]
        .iter()
        .map(|d| Server::start(&["--config", config(d.path(), store).to_str().unwrap()]))
        .collect();
    // Each of 20 updates is sent to both instances, in fresh envelopes, at about the same time.
    for shipment in 0..20 {
        drop_file(a.path(), &format!("a{shipment}.edi"), &update(2000 + shipment, shipment));
        drop_file(b.path(), &format!("b{shipment}.edi"), &update(3000 + shipment, shipment));
    }
    wait_until("all 40 copies settled", || {
        servers.iter().map(|s| count(s, "delivered") + count(s, "duplicate")).sum::<usize>() == 40
    });
    let mut got = delivered(a.path());
    got.extend(delivered(b.path()));
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<u32>>(), "each update delivered once");
    let duplicates: usize = servers.iter().map(|s| count(s, "duplicate")).sum();
    assert_eq!(duplicates, 20);
}
