//! Resent transactions through the real `tollgate serve` (`dedup = "transaction"`): a copy sent
//! after a `kill -9` and a restart is still a duplicate (the embedded store's fingerprints are
//! durable), counted in `/metrics`; and two instances on one real `redis-server`, or on a real
//! three-master Redis Cluster, fed copies of the same transactions at once, deliver each
//! transaction once between them. The key holds the receiver (one update to two receivers is
//! two transactions), and a purge of an item the target never took gives its claim back.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{HttpStub, Message, RedisCluster, RedisServer, Server, Status214, gateway_toml};

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

#[test]
fn a_copy_sent_after_a_kill_and_a_restart_is_still_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let args = ["--config", cfg.to_str().unwrap()];
    let server = Server::start(&args);
    drop_file(dir.path(), "first.edi", &update(1001, 7));
    common::wait_until("the first copy delivered", Duration::from_secs(30), || {
        delivered(dir.path()) == [7]
    });
    server.sigkill();

    let server = Server::start(&args);
    drop_file(dir.path(), "again.edi", &update(1002, 7));
    drop_file(dir.path(), "other.edi", &update(1003, 8));
    common::wait_until("the copy quarantined", Duration::from_secs(30), || {
        count(&server, "duplicate") == 1
    });
    common::wait_until("the new update delivered", Duration::from_secs(30), || {
        delivered(dir.path()) == [7, 8]
    });
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
    common::wait_until("all 40 copies settled", Duration::from_secs(30), || {
        servers.iter().map(|s| count(s, "delivered") + count(s, "duplicate")).sum::<usize>() == 40
    });
    let mut got = delivered(a.path());
    got.extend(delivered(b.path()));
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<u32>>(), "each update delivered once");
    let duplicates: usize = servers.iter().map(|s| count(s, "duplicate")).sum();
    assert_eq!(duplicates, 20);
}

#[test]
fn the_same_update_to_two_receivers_is_two_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let to = |receiver: &str, control: u32| {
        Status214::new("CARRIERA", control).shipment(7).st_from(1).receiver(receiver).build()
    };
    drop_file(dir.path(), "eu.edi", &to("ACMEEU", 1001));
    common::wait_until("the update to ACME-EU delivered", Duration::from_secs(30), || {
        delivered(dir.path()) == [7]
    });
    drop_file(dir.path(), "us.edi", &to("ACMEUS", 1002));
    common::wait_until("the update to ACME-US delivered", Duration::from_secs(30), || {
        delivered(dir.path()) == [7, 7]
    });
    assert_eq!(count(&server, "duplicate"), 0);
    // The same update to ACME-US once more is a copy, and names the item it copies.
    drop_file(dir.path(), "us-again.edi", &to("ACMEUS", 1003));
    common::wait_until("the copy quarantined", Duration::from_secs(30), || {
        count(&server, "duplicate") == 1
    });
    let answer = server.request("GET", "/v1/queue?state=delivered", &[], b"");
    let delivered_items = answer.json();
    let to_us = delivered_items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["receiver"] == "ZZ:ACMEUS")
        .unwrap_or_else(|| panic!("{delivered_items}"));
    let answer = server.request("GET", "/v1/queue?state=duplicate", &[], b"");
    let copy = &answer.json()[0];
    assert_eq!(copy["duplicate_of"], to_us["id"], "{copy}");
}

#[test]
fn a_resend_after_purging_an_item_the_target_never_took_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shipments = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let target = {
        let (up, shipments) = (up.clone(), shipments.clone());
        HttpStub::start(move |req| {
            if !up.load(std::sync::atomic::Ordering::SeqCst) {
                return Message::reply(503, "down");
            }
            let text = req.text();
            let b10 = text.split('~').find_map(|s| s.trim().strip_prefix("B10*REF"));
            let shipment = b10.and_then(|r| r.split('*').next()).unwrap_or_default();
            shipments.lock().unwrap().push(shipment.to_owned());
            Message::reply(200, "")
        })
    };
    let cfg = config(dir.path(), "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let out = format!("deliver = \"dir:{}\"", dir.path().join("out").display());
    let text = text.replace(&out, &format!("deliver = \"{}/in\"", target.url()));
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);

    drop_file(dir.path(), "first.edi", &update(1001, 7));
    let mut id = String::new();
    common::wait_until("a failed delivery", Duration::from_secs(30), || {
        let answer = server.request("GET", "/v1/queue?state=admitted", &[], b"");
        let items = answer.json();
        let failed = items.as_array().unwrap().iter().find(|i| i["attempts"].as_u64() >= Some(1));
        failed.map(|i| id = i["id"].as_str().unwrap().to_owned()).is_some()
    });
    // Purged between two attempts (409 while an attempt is under way).
    common::wait_until("the purge", Duration::from_secs(30), || {
        let status = server.request("DELETE", &format!("/v1/queue/{id}"), &[], b"").status;
        assert!(matches!(status, 204 | 409), "purge answered {status}");
        status == 204
    });
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    drop_file(dir.path(), "resent.edi", &update(1002, 7));
    common::wait_until("the resend delivered", Duration::from_secs(30), || {
        shipments.lock().unwrap().len() == 1
    });
    assert_eq!(*shipments.lock().unwrap(), ["7"], "only the resend, once");
    assert_eq!(count(&server, "duplicate"), 0);
}
