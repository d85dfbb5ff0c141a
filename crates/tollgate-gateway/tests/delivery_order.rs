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
        .replace("unit = \"day\"", "unit = \"second\"");
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

/// Uploads documents 1..=5 of one partner while the target refuses the first one for the
/// moment (three 503s, 700 ms of backoff): 2..=5 wait behind it and are then taken as one run.
async fn five_behind_a_retry(script: Vec<u16>) -> (Running, Backend, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start([vec![503, 503, 503, 200], script].concat()).await;
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 100, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    for c in 1..=5 {
        let (status, _) = gw.upload(Status214::new("CARRIERA", c).build()).await;
        assert_eq!(status, 202);
    }
    (gw, backend, dir)
}

/// ISA13 of every document the backend accepted, in the order it got them.
fn control_numbers(backend: &Backend) -> Vec<u32> {
    let body = |r: &Received| String::from_utf8(r.body.clone()).unwrap();
    backend
        .received()
        .iter()
        .map(|r| body(r).split('*').nth(13).unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn a_refused_document_lets_the_rest_of_its_run_go_on() {
    // Document 2 heads the run 2..=5 and is refused (400): dead; 3, 4 and 5 follow in order.
    let (gw, backend, _dir) = five_behind_a_retry(vec![400]).await;
    let dead = gw.wait_for("dead", 1).await;
    assert!(dead[0]["reason"].as_str().unwrap().contains("400"), "{dead:?}");
    gw.wait_for("delivered", 4).await;
    assert_eq!(control_numbers(&backend), [1, 3, 4, 5]);
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn a_document_purged_while_its_run_waits_is_never_delivered() {
    // Document 2 heads the run 2..=5 and is retried four times (1.5 s of backoff); meanwhile
    // an operator purges 4, which waits in that run.
    let (gw, backend, _dir) = five_behind_a_retry(vec![503, 503, 503, 503]).await;
    eventually("document 2's first attempt", || *backend.hits.lock().unwrap() >= 5).await;
    let four = |q: &[serde_json::Value]| {
        q.iter()
            .find(|i| i["control_number"] == "000000004")
            .and_then(|i| i["id"].as_str())
            .map(str::to_owned)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let id = loop {
        if let Some(id) = four(&gw.queue("admitted").await) {
            break id;
        }
        assert!(std::time::Instant::now() < deadline, "document 4 is never admitted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let r = gw.client.delete(gw.url(&format!("/v1/queue/{id}"))).send().await.unwrap();
    assert_eq!(r.status(), 204, "a document that waits in a run can be purged");
    gw.wait_for("delivered", 4).await;
    assert_eq!(control_numbers(&backend), [1, 2, 3, 5]);
    assert_eq!(*backend.hits.lock().unwrap(), 4 + 5 + 2, "4 was never sent");
    gw.gateway.shutdown().await;
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
            .replace("unit = \"day\"", "unit = \"day\"\nmax_concurrency = 2");
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
    let order = control_numbers(backend);
    assert_eq!(order, (1..=n).collect::<Vec<_>>(), "a partner's documents keep their order");
    gw.gateway.shutdown().await;
}

/// Blocks the pipeline in its metering of CarrierB's documents while `stalled` is set, and
/// says when it is blocked there.
#[derive(Default)]
struct Stall {
    stalled: std::sync::Mutex<bool>,
    released: std::sync::Condvar,
    blocked: std::sync::atomic::AtomicBool,
}

impl Stall {
    /// Lets the pipeline go on (again and again: it stays released).
    fn release(&self) {
        *self.stalled.lock().unwrap() = false;
        self.released.notify_all();
    }
}

/// Releases the stall however the test ends: a panic must not leave a worker blocked, which
/// would hang the runtime's shutdown instead of failing the test.
struct ReleaseOnDrop(std::sync::Arc<Stall>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl tollgate_quota::store::DecisionObserver for Stall {
    fn decided(&self, id: &tollgate_quota::MeteringId, _: &tollgate_quota::Decision) {
        if !id.as_str().contains("CarrierB") {
            return;
        }
        let mut stalled = self.stalled.lock().unwrap();
        while *stalled {
            self.blocked.store(true, std::sync::atomic::Ordering::SeqCst);
            stalled = self.released.wait(stalled).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_goes_no_further_than_one_delivery_past_what_is_recorded() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The target counts deliveries and holds each until `open`.
    let hits = Arc::new(AtomicUsize::new(0));
    let (open, opened) = tokio::sync::watch::channel(false);
    let h2 = hits.clone();
    let app = axum::Router::new().route(
        "/edi",
        axum::routing::post(move || {
            let (hits, mut opened) = (h2.clone(), opened.clone());
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                let _ = opened.wait_for(|o| *o).await;
                "ok"
            }
        }),
    );
    let addr = serve(app).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        config(dir.path().join("in").to_str().unwrap(), &format!("http://{addr}/edi"), 100, "");
    let store = memory_store();
    let stall = Arc::new(Stall { stalled: std::sync::Mutex::new(true), ..Default::default() });
    assert!(store.observe(stall.clone()));
    let _release = ReleaseOnDrop(stall.clone());
    let gw = Running::start(&cfg, &dir.path().join("data"), store).await;
    // One file of six documents: admitted together, delivered as one run.
    let six: Vec<u8> = (1..=6).flat_map(|c| Status214::new("CARRIERA", c).build()).collect();
    assert_eq!(gw.upload(six).await.0, 202);
    eventually("the run's first delivery at the target", || hits.load(Ordering::SeqCst) >= 1).await;
    // The pipeline now stops in CarrierB's metering: it records nothing until released.
    assert_eq!(gw.upload(Status214::new("CARRIERB", 7).build()).await.0, 202);
    eventually("the pipeline stalled", || stall.blocked.load(Ordering::SeqCst)).await;
    open.send(true).unwrap();
    eventually("the run's second delivery", || hits.load(Ordering::SeqCst) >= 2).await;
    // Room for the third, had the run not waited.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let while_stalled = hits.load(Ordering::SeqCst);
    stall.release();
    assert_eq!(
        while_stalled, 2,
        "with nothing recorded, the run delivers the one under way and one more, then waits"
    );
    gw.wait_for("delivered", 7).await;
    assert_eq!(hits.load(Ordering::SeqCst), 7, "each document delivered once");
    gw.gateway.shutdown().await;
}

/// The held items of `gw`, by control number: (id, reason, attempts).
async fn held_by_control(gw: &Running) -> std::collections::BTreeMap<u32, (String, String, u64)> {
    gw.queue("held")
        .await
        .iter()
        .map(|i| {
            let control = i["control_number"].as_str().unwrap().parse().unwrap();
            let id = i["id"].as_str().unwrap().to_owned();
            let reason = i["reason"].as_str().unwrap_or_default().to_owned();
            (control, (id, reason, i["attempts"].as_u64().unwrap()))
        })
        .collect()
}

/// `POST /v1/queue/{id}/{op}` on `gw`.
async fn post(gw: &Running, id: &str, op: &str) -> reqwest::Response {
    gw.client.post(gw.url(&format!("/v1/queue/{id}/{op}"))).send().await.unwrap()
}

/// Items held behind their group's head are kept as rows only: an operator releases, purges
/// and retries them as any other, a restart keeps them, and the one that becomes the head
/// waits for its own time instead of being metered at once.
#[tokio::test]
async fn items_held_behind_the_head_rest_and_are_acted_on_as_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let data = dir.path().join("data");
    // One a day: nothing is re-metered by itself (Retry-After is hours away).
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 1, "");
    let gw = Running::start(&cfg, &data, memory_store()).await;
    for c in 1..=6 {
        assert_eq!(gw.upload(Status214::new("CARRIERA", c).build()).await.0, 202);
    }
    gw.wait_for("held", 5).await;
    let held = held_by_control(&gw).await;
    assert!(held[&2].1.contains("over quota"), "{held:?}");
    for c in 3..=6 {
        assert!(held[&c].1.contains("waiting behind"), "{c}: {held:?}");
    }
    let r = post(&gw, &held[&4].0, "release").await;
    assert_eq!(r.status(), 200, "a held item behind the head is released");
    let r = gw.client.delete(gw.url(&format!("/v1/queue/{}", held[&5].0))).send().await.unwrap();
    assert_eq!(r.status(), 204, "a held item behind the head is purged");
    let r = post(&gw, &held[&3].0, "retry").await;
    assert_eq!(r.status(), 200);
    let retried: serde_json::Value = r.json().await.unwrap();
    assert_eq!(retried["state"], "held", "{retried}");
    assert!(retried["reason"].as_str().unwrap().contains("over quota"), "{retried}");
    gw.wait_for("delivered", 2).await;
    assert_eq!(control_numbers(&backend), [1, 4]);
    gw.stop().await;

    // A restart on a fresh quota counter: 2 heads the group, 3 and 6 wait behind it.
    let gw = Running::start(&cfg, &data, memory_store()).await;
    let held = held_by_control(&gw).await;
    assert_eq!(held.keys().copied().collect::<Vec<_>>(), [2, 3, 6], "{held:?}");
    let r = post(&gw, &held[&2].0, "retry").await;
    assert_eq!(r.status(), 200);
    gw.wait_for("delivered", 3).await;
    assert_eq!(control_numbers(&backend), [1, 4, 2]);
    // 3 heads the group now; it keeps its own retry time (hours away), so it is not metered
    // at once, and 6 stays behind it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = held_by_control(&gw).await;
    assert_eq!(held.keys().copied().collect::<Vec<_>>(), [3, 6], "{held:?}");
    assert_eq!(held[&3].2, 0, "3 was not metered again: {held:?}");
    let r = post(&gw, &held[&6].0, "release").await;
    assert_eq!(r.status(), 200);
    gw.wait_for("delivered", 4).await;
    assert_eq!(control_numbers(&backend), [1, 4, 2, 6]);
    assert_eq!(held_by_control(&gw).await.keys().copied().collect::<Vec<_>>(), [3]);
    gw.gateway.shutdown().await;
}

/// When an operator purges the head of a group, the item behind it (at rest in the spool) is
/// metered once its time has come, and the one behind that keeps waiting.
#[tokio::test]
async fn the_item_behind_a_purged_head_is_metered_when_its_time_comes() {
    // Every check is refused (429 without Retry-After: held for a second).
    let (addr, hits) = quota_service(429, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let extra = format!("[quota]\nmode = \"remote\"\nurl = \"http://{addr}/v1/quota\"");
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 100, &extra);
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    for c in 1..=3 {
        assert_eq!(gw.upload(Status214::new("CARRIERA", c).build()).await.0, 202);
    }
    gw.wait_for("held", 3).await;
    // The head was checked again (its second passed): the time 2 and 3 were given is over.
    eventually("the head's second check", || *hits.lock().unwrap() >= 2).await;
    let held = held_by_control(&gw).await;
    assert!(held[&2].1.contains("waiting behind") && held[&3].1.contains("waiting behind"));
    let r = gw.client.delete(gw.url(&format!("/v1/queue/{}", held[&1].0))).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let held = loop {
        let held = held_by_control(&gw).await;
        if held[&2].1.contains("over quota") {
            break held;
        }
        assert!(std::time::Instant::now() < deadline, "2 is never metered: {held:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(held[&3].1.contains("waiting behind"), "{held:?}");
    assert!(backend.received().is_empty());
    gw.gateway.shutdown().await;
}
