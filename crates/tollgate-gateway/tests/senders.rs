//! Who may send what where: a sender id no partner lists, and a landing directory bound to
//! one partner, end to end in one process with real landing and outbound directories and the
//! in-memory store.

mod common;

use common::*;
use tollgate_quota::{CounterListing, Store};

/// With `unknown_senders = "reject"` a sender id no partner lists is rejected, whatever ids it
/// invents, and counts nothing; a known partner's interchange in the same file is delivered.
/// (By default each invented id was metered as a partner of its own, with a fresh quota.)
#[tokio::test]
async fn unknown_senders_can_be_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let inbound = dir.path().join("in");
    let out = dir.path().join("out");
    let extra = "unknown_senders = \"reject\"";
    let cfg = config(inbound.to_str().unwrap(), &format!("dir:{}", out.display()), 100, extra);
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let mut file = Status214::new("CARRIERA", 1).build();
    for (n, invented) in ["CARRIERX1", "CARRIERX2"].into_iter().enumerate() {
        file.extend(Status214::new(invented, 2 + n as u32).build());
    }
    std::fs::write(inbound.join("mixed.edi"), file).unwrap();
    gw.wait_for("delivered", 1).await;
    let rejected = gw.wait_for("rejected", 2).await;
    for r in &rejected {
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("is in no [[gateway.partner]] ids"), "{r}");
        assert!(reason.contains("ZZ:CARRIERX"), "{r}");
    }
    let listed = gw.store.counters(&CounterListing::all("")).await.unwrap().counters;
    let ids: Vec<String> = listed.iter().map(|c| c.identifier.to_string()).collect();
    assert_eq!(ids, ["ShipmentStatus:CarrierA"], "only the known partner counted");
    gw.gateway.shutdown().await;
}

/// A landing directory bound to a partner takes only that partner's sender ids: another
/// partner's (spending its quota) or an invented one is rejected there, and counts nothing;
/// the shared landing directory takes any.
#[tokio::test]
async fn a_partners_landing_directory_takes_only_its_sender_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, own) = (dir.path().join("in"), dir.path().join("carrier-a"));
    let out = dir.path().join("out");
    let cfg = config(shared.to_str().unwrap(), &format!("dir:{}", out.display()), 100, "").replace(
        "ids = [\"ZZ:CARRIERA\"]",
        &format!("ids = [\"ZZ:CARRIERA\"]\ninbound = [\"{}\"]", own.display()),
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    std::fs::write(own.join("a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
    gw.wait_for("delivered", 1).await;
    std::fs::write(own.join("b.edi"), Status214::new("CARRIERB", 2).build()).unwrap();
    std::fs::write(own.join("x.edi"), Status214::new("CARRIERX", 3).build()).unwrap();
    let rejected = gw.wait_for("rejected", 2).await;
    for r in &rejected {
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("a landing directory of partner CarrierA"), "{r}");
    }
    std::fs::write(shared.join("b.edi"), Status214::new("CARRIERB", 4).build()).unwrap();
    gw.wait_for("delivered", 2).await;
    let listed = gw.store.counters(&CounterListing::all("")).await.unwrap().counters;
    let mut ids: Vec<String> = listed.iter().map(|c| c.identifier.to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["ShipmentStatus:CarrierA", "ShipmentStatus:CarrierB"]);
    assert!(listed.iter().all(|c| c.used == 1), "{listed:?}");
    gw.gateway.shutdown().await;
}
