//! Order and pace of deliveries: a partner's documents reach the target in arrival order, held
//! or retried, and no target gets more deliveries at once than its `max_concurrency`.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn held_items_are_retried_automatically_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 2, "")
        .replace("unit = \"hour\"", "unit = \"second\"");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    // Two fit in the one-second window; the next ones are held, and a later arrival waits
    // behind them without overtaking.
    for c in 1..=4 {
        let (status, _) = gw.upload(Status214::new("CARRIERA", c).build()).await;
        assert_eq!(status, 202);
    }
    let (_, last) = gw.upload(Status214::new("CARRIERA", 5).build()).await;
    let held = gw.queue("held").await;
    if let Some(h) = held.iter().find(|h| h["id"] == last["id"]) {
        let reason = h["reason"].as_str().unwrap();
        assert!(reason.contains("over quota") || reason.contains("waiting behind"), "{reason}");
    }
    assert_delivered_in_order(gw, &backend, 5).await;
}

#[tokio::test]
async fn a_delivery_retry_keeps_the_partners_later_documents_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    // The first delivery attempt fails (503); it is retried after 100 ms.
    let backend = Backend::start(vec![503]).await;
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 100, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    for c in 1..=5 {
        let (status, _) = gw.upload(Status214::new("CARRIERA", c).build()).await;
        assert_eq!(status, 202);
    }
    assert_delivered_in_order(gw, &backend, 5).await;
}

#[tokio::test]
async fn deliveries_in_flight_are_capped_per_target() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n2, p2) = (now.clone(), peak.clone());
    let app = axum::Router::new().route(
        "/edi",
        axum::routing::post(move || {
            let (now, peak) = (n2.clone(), p2.clone());
            async move {
                let cur = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(cur, Ordering::SeqCst);
                // Long enough that deliveries overlap even when each upload waits for a slow
                // disk on a busy machine.
                tokio::time::sleep(Duration::from_secs(1)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                "ok"
            }
        }),
    );
    let addr = serve(app).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        config(dir.path().join("in").to_str().unwrap(), &format!("http://{addr}/edi"), 100, "")
            .replace("unit = \"hour\"", "unit = \"hour\"\nmax_concurrency = 2");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    // Three partners: each delivers one document at a time (in order), so together they
    // could have three in flight; the target's cap allows two.
    for c in 1..=6 {
        gw.upload(Status214::new(["CARRIERA", "CARRIERB", "CARRIERC"][c as usize % 3], c).build())
            .await;
    }
    gw.wait_for("delivered", 6).await;
    assert_eq!(peak.load(Ordering::SeqCst), 2, "at most max_concurrency deliveries in flight");
    gw.gateway.shutdown().await;
}

/// Waits for `n` deliveries, checks the backend got ISA13 = 1..=n in that order, and stops.
async fn assert_delivered_in_order(gw: Running, backend: &Backend, n: u32) {
    gw.wait_for("delivered", n as usize).await;
    let order: Vec<u32> = backend
        .received()
        .iter()
        .map(|r| {
            let text = String::from_utf8(r.body.clone()).unwrap();
            text.split('*').nth(13).unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(order, (1..=n).collect::<Vec<_>>(), "a partner's documents keep their order");
    gw.gateway.shutdown().await;
}
