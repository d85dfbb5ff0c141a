//! Resent transactions on a `dedup = "transaction"` route, on the embedded store in a temp
//! dir: a buggy carrier's burst of copies under fresh envelopes consumes the quota of its first
//! copy only; an interchange with some resent transactions is delivered rebuilt with the new
//! ones, the others kept as a releasable `duplicate` item; a held transaction is not yet seen;
//! and a store outage never turns a genuine transaction into a duplicate. (Restarts and two
//! instances on one Redis: `crates/tollgate/tests/gateway_duplicates.rs`.)

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore};
use tollgate_quota::{AnyStore, CounterListing, Store};

/// The common config with its route removing resent transactions, and `route_extra` keys.
fn transaction_config(
    inbound: &Path,
    out: &Path,
    limit: u64,
    top: &str,
    route_extra: &str,
) -> String {
    let base = config(inbound.to_str().unwrap(), &format!("dir:{}", out.display()), limit, top);
    format!("{base}dedup = \"transaction\"\n{route_extra}\n")
}

fn embedded(path: &Path) -> Arc<AnyStore> {
    Arc::new(AnyStore::Embedded(EmbeddedStore::open(EmbeddedOptions::new(path)).unwrap()))
}

/// A 214 interchange from CARRIERA with ISA13/GS06 `control` whose transactions report
/// `shipments` in order, with ST02 counting from `st`.
fn update(control: u32, st: u32, shipments: &[u32]) -> Vec<u8> {
    let mut s = Status214::new("CARRIERA", control).st_from(st).transactions(shipments.len());
    s = s.shipment(0);
    let mut text = String::from_utf8(s.build()).unwrap();
    for (i, n) in shipments.iter().enumerate() {
        text = text.replacen(&format!("B10*REF{i}*SHIP{i}*"), &format!("B10*REF#{n}*SHIP#{n}*"), 1);
    }
    text.replace("REF#", "REF").replace("SHIP#", "SHIP").into_bytes()
}

/// The shipments (B10 references) of every transaction in `bytes`, in order; panics unless the
/// bytes are well-formed interchanges.
fn shipments(bytes: &[u8]) -> Vec<u32> {
    let parsed = tollgate_edi::parse(bytes);
    assert!(
        !parsed.has_errors(),
        "not well-formed: {parsed:?}\n{}",
        String::from_utf8_lossy(bytes)
    );
    let text = String::from_utf8_lossy(bytes);
    text.split('~')
        .filter_map(|seg| seg.trim().strip_prefix("B10*REF"))
        .map(|rest| rest.split('*').next().unwrap().parse().unwrap())
        .collect()
}

async fn used(gw: &Running) -> u64 {
    let counters =
        gw.store.counters(&CounterListing::all("ShipmentStatus:CarrierA")).await.unwrap().counters;
    counters.iter().map(|c| c.used).sum()
}

/// Polls until the queue holds `n` items in `state` (up to 60 s: a burst of a thousand).
async fn settle(gw: &Running, state: &str, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let have = gw.queue(state).await.len();
        if have >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{have} {state}, waiting for {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_resent_copies_consumes_the_quota_of_the_first_only() {
    let dir = tempfile::tempdir().unwrap();
    let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
    let cfg = transaction_config(&inbound, &out, 100, "", "");
    let gw =
        Running::start(&cfg, &dir.path().join("data"), embedded(&dir.path().join("c.redb"))).await;

    // 1,000 copies of one update (shipment 1) under fresh ISA13/GS06/ST02, with 20 genuine
    // different updates (shipments 100..119) interleaved, sent as 10 uploads.
    let mut offered = Vec::new();
    let mut genuine = 0;
    for i in 0..1000u32 {
        offered.push(update(10_000 + i, 1 + i, &[1]));
        if i % 50 == 25 {
            offered.push(update(50_000 + genuine, 7, &[100 + genuine]));
            genuine += 1;
        }
    }
    assert_eq!((offered.len(), genuine), (1020, 20));
    for chunk in offered.chunks(102) {
        let (status, body) = gw.upload(chunk.join(&b"\n"[..])).await;
        assert_eq!(status, 202, "{body}");
    }
    settle(&gw, "delivered", 21).await;
    settle(&gw, "duplicate", 999).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let delivered = gw.queue("delivered").await;
    let duplicates = gw.queue("duplicate").await;
    assert_eq!(delivered.len(), 21, "{delivered:?}");
    assert_eq!(duplicates.len(), 999);
    for state in ["received", "held", "rejected", "dead"] {
        assert_eq!(gw.queue(state).await, Vec::<serde_json::Value>::new(), "{state}");
    }
    assert_eq!(
        delivered.len() + duplicates.len(),
        offered.len(),
        "offered = delivered + duplicate"
    );
    assert_eq!(used(&gw).await, 21, "only the genuine updates count against the quota");
    assert!(
        duplicates[0]["reason"].as_str().unwrap().contains("all 1 transactions were sent before"),
        "{}",
        duplicates[0]
    );

    // The ERP got each update once, and the copy it got is the first one sent.
    let files = files_in(&out);
    let mut got: Vec<u32> = files.iter().flat_map(|f| shipments(f)).collect();
    got.sort_unstable();
    let mut want: Vec<u32> = (100..120).collect();
    want.insert(0, 1);
    assert_eq!(got, want);
    let first = files.iter().find(|f| shipments(f) == [1]).unwrap();
    assert!(String::from_utf8_lossy(first).contains("*000010000*"), "not the first copy");
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interchange_with_resent_transactions_goes_on_with_the_new_ones_only() {
    let dir = tempfile::tempdir().unwrap();
    let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
    let cfg = transaction_config(&inbound, &out, 100, "", "");
    let data = dir.path().join("data");
    let gw = Running::start(&cfg, &data, embedded(&dir.path().join("c.redb"))).await;

    assert_eq!(gw.upload(update(1, 1, &[1, 2, 3, 4])).await.0, 202);
    settle(&gw, "delivered", 1).await;
    // Ten transactions, of which the 2nd, 5th, 7th and 9th were sent before.
    let mixed = [11, 1, 12, 13, 2, 14, 3, 15, 4, 16];
    assert_eq!(gw.upload(update(2, 500, &mixed)).await.0, 202);
    settle(&gw, "delivered", 2).await;
    settle(&gw, "duplicate", 1).await;

    let delivered = gw.queue("delivered").await;
    let rebuilt = delivered.iter().find(|i| i["weight"] == 6).expect("a delivery weighing 6");
    let original = rebuilt["id"].as_str().unwrap();
    let mut got: Vec<Vec<u32>> = files_in(&out).iter().map(|f| shipments(f)).collect();
    got.sort();
    assert_eq!(got, [vec![1, 2, 3, 4], vec![11, 12, 13, 14, 15, 16]], "well-formed, 6 new");
    assert_eq!(used(&gw).await, 4 + 6);

    let dup = &gw.queue("duplicate").await[0];
    let reason = dup["reason"].as_str().unwrap();
    assert!(reason.contains("transactions 2, 5, 7, 9 of 10"), "{reason}");
    assert!(reason.contains(&format!("of item {original}")), "{reason}");
    assert_eq!(shipments(&spooled_bytes(&data, dup)), [1, 2, 3, 4]);
    assert_eq!(dup["weight"], 4);

    // An operator releases the copies: delivered as they are, without metering.
    let id = dup["id"].as_str().unwrap();
    let r = gw.client.post(gw.url(&format!("/v1/queue/{id}/release"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    settle(&gw, "delivered", 3).await;
    assert_eq!(files_in(&out).len(), 3);
    assert_eq!(used(&gw).await, 10);
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_transaction_is_not_yet_seen() {
    let dir = tempfile::tempdir().unwrap();
    let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
    let cfg = transaction_config(&inbound, &out, 1, "", "");
    let gw =
        Running::start(&cfg, &dir.path().join("data"), embedded(&dir.path().join("c.redb"))).await;
    assert_eq!(gw.upload(update(1, 1, &[50])).await.0, 202);
    settle(&gw, "delivered", 1).await;
    // Over quota: held, and its copy is held behind it rather than called a duplicate.
    assert_eq!(gw.upload(update(2, 2, &[60])).await.0, 202);
    assert_eq!(gw.upload(update(3, 3, &[60])).await.0, 202);
    settle(&gw, "held", 2).await;
    assert!(gw.queue("duplicate").await.is_empty());

    // Once the first is admitted (released), the copy is found a duplicate when re-metered.
    let held = gw.queue("held").await;
    let ids: Vec<&str> = held.iter().map(|i| i["id"].as_str().unwrap()).collect();
    let (first, copy) = if ids[0] < ids[1] { (ids[0], ids[1]) } else { (ids[1], ids[0]) };
    let r = gw.client.post(gw.url(&format!("/v1/queue/{first}/release"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    settle(&gw, "delivered", 2).await;
    let r = gw.client.post(gw.url(&format!("/v1/queue/{copy}/retry"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["state"], "duplicate", "{body}");
    assert_eq!(files_in(&out).len(), 2);
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_never_makes_a_duplicate() {
    use tollgate_quota::store::{OnStoreUnavailable, RedisOptions, RedisStore};
    let Some(redis) = tollgate_testkit::RedisServer::start() else { return };
    for (choice, state) in [("hold", "held"), ("deliver", "delivered")] {
        let dir = tempfile::tempdir().unwrap();
        let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
        let top = format!("[quota]\non_unavailable = \"{choice}\"\n");
        let cfg = transaction_config(&inbound, &out, 100, &top, "");
        let mut opts = RedisOptions::new(redis.url());
        opts.key_prefix = format!("{choice}:");
        opts.timeout = Duration::from_millis(200);
        opts.on_unavailable = OnStoreUnavailable::Local;
        let store = Arc::new(AnyStore::Redis(RedisStore::connect(opts).await.unwrap()));
        let gw = Running::start(&cfg, &dir.path().join("data"), store).await;
        assert_eq!(gw.upload(update(1, 1, &[1])).await.0, 202);
        settle(&gw, "delivered", 1).await;

        redis.pause();
        assert_eq!(gw.upload(update(2, 2, &[1])).await.0, 202);
        settle(&gw, state, 1 + usize::from(state == "delivered")).await;
        let items = gw.queue(state).await;
        if choice == "hold" {
            let reason = items[0]["reason"].as_str().unwrap();
            assert!(reason.starts_with("fingerprint store unavailable"), "{reason}");
        }
        assert!(gw.queue("duplicate").await.is_empty(), "an outage made a duplicate");
        redis.resume();
        gw.gateway.shutdown().await;
    }
}

/// An EDIFACT IFTSTA interchange from RAILCO with UNB 0020 `control` and one message per
/// consignment in `consignments`, UNH 0062 counting from `unh`.
fn iftsta(control: u32, unh: u32, consignments: &[u32]) -> Vec<u8> {
    let mut s = format!("UNA:+.? 'UNB+UNOA:3+RAILCO:ZZZ+ERP:ZZZ+240101:1200+{control}'\n");
    for (i, c) in consignments.iter().enumerate() {
        let r = unh + i as u32;
        s.push_str(&format!("UNH+{r}+IFTSTA:D:01B:UN'\nBGM+23+CN{c}+9'\nSTS+1+21'\nUNT+4+{r}'\n"));
    }
    s.push_str(&format!("UNZ+{}+{control}'\n", consignments.len()));
    s.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edifact_messages_resent_under_new_references_are_removed_too() {
    let dir = tempfile::tempdir().unwrap();
    let (inbound, out) = (dir.path().join("in"), dir.path().join("out"));
    let cfg = transaction_config(&inbound, &out, 100, "", "");
    let cfg = cfg.replace(
        "[[route]]",
        "[[partner]]\nname = \"RailCo\"\nids = [\"ZZZ:RAILCO\"]\n\n[[route]]",
    );
    let data = dir.path().join("data");
    let gw = Running::start(&cfg, &data, embedded(&dir.path().join("c.redb"))).await;
    assert_eq!(gw.upload(iftsta(41, 1, &[1, 2])).await.0, 202);
    settle(&gw, "delivered", 1).await;
    // Messages 1 and 3 of this one were sent before (other UNH 0062, other UNB 0020).
    assert_eq!(gw.upload(iftsta(42, 70, &[1, 3, 2])).await.0, 202);
    settle(&gw, "duplicate", 1).await;
    settle(&gw, "delivered", 2).await;
    let dup = &gw.queue("duplicate").await[0];
    assert!(dup["reason"].as_str().unwrap().contains("transactions 1, 3 of 3"), "{dup}");
    let copies = String::from_utf8(spooled_bytes(&data, dup)).unwrap();
    assert!(!tollgate_edi::parse(copies.as_bytes()).has_errors(), "{copies}");
    assert_eq!(copies.matches("UNH+").count(), 2, "{copies}");
    let files = files_in(&out);
    let rebuilt = files
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .find(|f| f.contains("CN3"))
        .unwrap();
    assert!(!tollgate_edi::parse(rebuilt.as_bytes()).has_errors(), "{rebuilt}");
    assert_eq!(rebuilt.matches("UNH+").count(), 1, "{rebuilt}");
    gw.gateway.shutdown().await;
}
