//! Every byte of a received file is accounted for: each interchange becomes an item, and each
//! run of bytes outside every interchange becomes a `rejected` item whose reason names its byte
//! range, with the bytes kept in the spool. And every routed interchange is counted: at least
//! the route's `min_weight` (default 1), even when its weight rule finds nothing.

mod common;

use std::time::Duration;

use common::*;
use tollgate_quota::{CounterListing, Store};

fn config(inbound: &str, deliver: &str, route_extra: &str) -> String {
    format!(
        r#"
inbound = ["{inbound}"]
poll_ms = 20
settle_ms = 0

[[partner]]
name = "CarrierA"
ids = ["ZZ:CARRIERA"]

[[route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 2
interval = 1
unit = "day"
deliver = "{deliver}"
{route_extra}
"#
    )
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Checks that the items cover every byte of `file` that is not whitespace, that the items at
/// `stray` are rejected with a reason naming their byte range, and that their spooled bytes
/// are exactly the stray bytes. Returns the items.
async fn assert_accounted(
    gw: &Running,
    data: &std::path::Path,
    id: &str,
    file: &[u8],
    want: usize,
) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let items = loop {
        let items = items_of(gw, id).await;
        let settled = items.iter().all(|i| i["state"] != "received");
        if items.len() >= want && settled {
            break items;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "file {id}: want {want} items, have {items:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(items.len(), want, "{items:#?}");
    let base = items[0]["spool"]["start"].as_u64().unwrap() as usize;
    let mut covered = vec![false; file.len()];
    for item in &items {
        let (s, e) = (
            item["spool"]["start"].as_u64().unwrap() as usize - base,
            item["spool"]["end"].as_u64().unwrap() as usize - base,
        );
        // Delivered bytes are in the outbound directory (their spool file may be gone); the
        // others are kept in the spool.
        let kept = if item["state"] == "delivered" {
            std::fs::read(data.join("../out").join(format!("{}.edi", item["id"].as_str().unwrap())))
                .unwrap()
        } else {
            spooled_bytes(data, item)
        };
        assert_eq!(kept, file[s..e], "item {item}");
        covered[s..e].iter_mut().for_each(|c| *c = true);
        if item["document"] == "" {
            assert_eq!(item["state"], "rejected", "{item}");
            let reason = item["reason"].as_str().unwrap();
            assert!(
                reason.contains(&format!("bytes {s}..{e}")),
                "reason names the range: {reason}"
            );
        }
    }
    for (at, (&c, b)) in covered.iter().zip(file).enumerate() {
        assert!(
            c || b.is_ascii_whitespace(),
            "byte {at} ({:?}) of file {id} is in no item",
            *b as char
        );
    }
    items
}

#[tokio::test]
async fn garbage_and_cut_interchanges_around_valid_ones_become_rejected_items() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let cfg =
        config(dir.path().join("in").to_str().unwrap(), &format!("dir:{}", out.display()), "")
            .replace("limit = 2", "limit = 1000");
    let gw = Running::start(&cfg, &data, memory_store()).await;
    // Each case has its own control numbers, so that no case is a duplicate of another.
    let ic = |c: u32| Status214::new("CARRIERA", c).build();
    let cut = |c: u32| {
        let full = Status214::new("CARRIERA", c).transactions(2).build();
        full[..full.len() / 2].to_vec()
    };
    // (file, items expected, delivered among them)
    let cases: Vec<(Vec<u8>, usize, usize)> = vec![
        (cat(&[&ic(1), b"\r\n", b"trailing garbage\x00\xff"]), 2, 1),
        (cat(&[b"leading junk\n", &ic(2)]), 2, 1),
        (cat(&[&ic(3), b"\n-- between --\n", &ic(4)]), 3, 2),
        (cat(&[&ic(5), &cut(6)]), 2, 1),
        (cat(&[&ic(7), b"ISA*00*  "]), 2, 1),
        (cat(&[&ic(8), b"\n", &ic(9), b"GS*QM*X*Y~ST*214*0001~SE*2*0001~"]), 3, 2),
        (cat(&[&ic(10), b"\n\n  \r\n"]), 1, 1),
    ];
    let mut delivered = 0;
    for (n, (file, want, ok)) in cases.iter().enumerate() {
        let (status, body) = gw.upload(file.clone()).await;
        assert_eq!(status, 202, "case {n}: {body}");
        let id = body["id"].as_str().unwrap().to_owned();
        let items = assert_accounted(&gw, &data, &id, file, *want).await;
        let d = items.iter().filter(|i| i["state"] == "delivered").count();
        assert_eq!(d, *ok, "case {n}: {items:#?}");
        delivered += d;
    }
    // The same through the landing directory.
    let file = cat(&[&Status214::new("CARRIERA", 900).build(), b"\nGARBAGE AFTER\n"]);
    std::fs::write(dir.path().join("in/landed.edi"), &file).unwrap();
    let rejected = gw.wait_for("rejected", 7).await;
    let stray = rejected
        .iter()
        .find(|r| {
            r["reason"].as_str().unwrap_or_default().contains("outside every interchange")
                && spooled_bytes(&data, r) == b"GARBAGE AFTER"
        })
        .unwrap_or_else(|| panic!("no rejected item holds the landed garbage: {rejected:#?}"));
    assert_eq!(stray["weight"], 0);
    gw.wait_for("delivered", delivered + 1).await;
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn interchanges_weighing_nothing_still_cost_min_weight() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let inbound = dir.path().join("in");
    // Default min_weight (1): 214s without AT7 under segment:AT7 are counted, the third held.
    let cfg = config(inbound.to_str().unwrap(), &backend.url(), "weight = \"segment:AT7\"");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    for c in 1..=3 {
        let (status, _) =
            gw.upload(Status214::new("CARRIERA", c).transactions(2).events(0).build()).await;
        assert_eq!(status, 202);
    }
    let held = gw.wait_for("held", 1).await;
    assert_eq!(held[0]["weight"], 1);
    assert_eq!(gw.wait_for("delivered", 2).await.len(), 2);
    let counters =
        gw.store.counters(&CounterListing::all("ShipmentStatus:CarrierA")).await.unwrap().counters;
    assert_eq!(counters[0].used, 2);
    // With AT7s the rule's count is used as before.
    let (_, _) = gw.upload(Status214::new("CARRIERB", 1).events(2).build()).await;
    let d = gw.wait_for("delivered", 3).await;
    assert!(d.iter().any(|i| i["weight"] == 2), "{d:#?}");
    gw.gateway.shutdown().await;

    // min_weight = 0 on the route says such interchanges pass uncounted.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path().join("in").to_str().unwrap(),
        &backend.url(),
        "weight = \"segment:AT7\"\nmin_weight = 0",
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    for c in 11..=13 {
        gw.upload(Status214::new("CARRIERA", c).events(0).build()).await;
    }
    let d = gw.wait_for("delivered", 3).await;
    assert!(d.iter().all(|i| i["weight"] == 0), "{d:#?}");
    assert!(gw.queue("held").await.is_empty());
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn split_parts_together_still_cost_min_weight() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let cfg = config(
        dir.path().join("in").to_str().unwrap(),
        &backend.url(),
        "weight = \"segment:AT7\"\nmin_weight = 2\nsplit = true",
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    // Limit 2: the first interchange (two AT7s) uses it up. The second has two transactions
    // and no AT7, so it costs min_weight 2: over quota, so it is split, and splitting must not
    // let its transactions through for nothing.
    gw.upload(Status214::new("CARRIERA", 1).events(2).build()).await;
    gw.wait_for("delivered", 1).await;
    gw.upload(Status214::new("CARRIERA", 2).transactions(2).events(0).build()).await;
    let held = gw.wait_for("held", 1).await;
    assert_eq!(held[0]["weight"], 2, "{held:#?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gw.queue("delivered").await.len(), 1, "nothing of the second went through");
    let counters =
        gw.store.counters(&CounterListing::all("ShipmentStatus:CarrierA")).await.unwrap().counters;
    assert_eq!(counters[0].used, 2, "{counters:?}");
    gw.gateway.shutdown().await;
}
