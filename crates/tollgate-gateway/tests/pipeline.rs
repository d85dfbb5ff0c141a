//! The gateway end to end in one process: real landing and outbound directories, a real HTTP
//! backend on a free port, and the quota engine's in-memory store (the same engine and
//! algorithm as the redb-backed store; the binary's tests run the gateway on redb).

mod common;

use std::time::Duration;

use common::*;
use tollgate_quota::{CounterListing, MeteringId, Store};

#[tokio::test]
async fn quota_holds_the_third_file_and_spares_other_partners() {
    let dir = tempfile::tempdir().unwrap();
    let inbound = dir.path().join("in");
    let backend = Backend::start(vec![]).await;
    let cfg = config(inbound.to_str().unwrap(), &backend.url(), 5, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;

    for c in 1..=2 {
        std::fs::write(
            inbound.join(format!("a{c}.edi")),
            Status214::new("CARRIERA", c).transactions(2).build(),
        )
        .unwrap();
        gw.wait_for("delivered", c as usize).await;
    }
    std::fs::write(inbound.join("a3.edi"), Status214::new("CARRIERA", 3).transactions(2).build())
        .unwrap();
    let held = gw.wait_for("held", 1).await;
    assert_eq!(held[0]["partner"], "CarrierA");
    assert_eq!(held[0]["route"], "ShipmentStatus");
    assert_eq!(held[0]["metering_id"], "ShipmentStatus:CarrierA");
    assert_eq!(held[0]["weight"], 2);
    assert!(held[0]["next_attempt_at"].is_string());
    assert!(held[0]["reason"].as_str().unwrap().contains("over quota"), "{held:?}");

    // Another partner is not affected.
    std::fs::write(inbound.join("b1.edi"), Status214::new("CARRIERB", 1).transactions(2).build())
        .unwrap();
    gw.wait_for("delivered", 3).await;
    let got = backend.received();
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].partner, "CarrierB");
    assert_eq!(got[0].document, "214");
    // Delivered bytes are the interchange exactly as received.
    assert_eq!(got[0].body, Status214::new("CARRIERA", 1).transactions(2).build());
    assert!(!inbound.join("a1.edi").exists(), "landing file removed once spooled");

    // Reset the counter (as an operator would through /v1/counters), then retry: delivered.
    let id = held[0]["id"].as_str().unwrap().to_owned();
    gw.store.reset(&MeteringId::new("ShipmentStatus:CarrierA").unwrap()).await.unwrap();
    let r = gw.client.post(gw.url(&format!("/v1/queue/{id}/retry"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    gw.wait_for("delivered", 4).await;
    assert!(gw.queue("held").await.is_empty());
    let last = backend.received().pop().unwrap();
    assert_eq!(last.id, id, "the Tollgate-Interchange-Id is the queue id");
    assert_eq!(last.body, Status214::new("CARRIERA", 3).transactions(2).build());
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn duplicates_junk_and_unrouted_documents_are_not_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let inbound = dir.path().join("in");
    let out = dir.path().join("out");
    let cfg = config(inbound.to_str().unwrap(), &format!("dir:{}", out.display()), 100, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;

    std::fs::write(
        inbound.join("first.edi"),
        Status214::new("CARRIERA", 7).transactions(3).build(),
    )
    .unwrap();
    gw.wait_for("delivered", 1).await;
    std::fs::write(
        inbound.join("again.edi"),
        Status214::new("CARRIERA", 7).transactions(3).build(),
    )
    .unwrap();
    let dup = gw.wait_for("duplicate", 1).await;
    assert!(dup[0]["reason"].as_str().unwrap().contains("duplicate"), "{dup:?}");
    // The duplicate consumed no quota: 3 used, not 6.
    let counters =
        gw.store.counters(&CounterListing::all("ShipmentStatus:CarrierA")).await.unwrap().counters;
    assert_eq!(counters[0].used, 3);

    std::fs::write(inbound.join("junk.edi"), b"hello, this is not EDI").unwrap();
    let rej = gw.wait_for("rejected", 1).await;
    assert!(rej[0]["reason"].as_str().unwrap().starts_with("not EDI"), "{rej:?}");

    std::fs::write(inbound.join("inv.edi"), x12_doc("CARRIERA", 8, "810")).unwrap();
    let rej = gw.wait_for("rejected", 2).await;
    assert!(rej.iter().any(|r| r["reason"] == "no route for document 810"), "{rej:?}");

    // A file still being uploaded is left alone.
    std::fs::write(inbound.join("late.edi.part"), Status214::new("CARRIERA", 9).build()).unwrap();
    std::fs::write(inbound.join(".hidden.edi"), Status214::new("CARRIERA", 10).build()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(inbound.join("late.edi.part").exists());
    assert!(inbound.join(".hidden.edi").exists());

    let files: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 1, "only the first interchange was delivered: {files:?}");
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn uploads_are_accepted_refused_or_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(
        dir.path().join("in").to_str().unwrap(),
        &format!("dir:{}", out.display()),
        100,
        "max_upload_bytes = 2000",
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let (status, body) = gw.upload(Status214::new("CARRIERA", 1).build()).await;
    assert_eq!(status, 202);
    assert_eq!(body["state"], "received");
    let id = body["id"].as_str().unwrap().to_owned();
    let delivered = gw.wait_for("delivered", 1).await;
    assert_eq!(delivered[0]["id"], id.as_str());
    assert_eq!(
        std::fs::read(out.join(format!("{id}.edi"))).unwrap(),
        Status214::new("CARRIERA", 1).build()
    );

    let r = gw.client.post(gw.url("/v1/interchanges")).body("garbage").send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["type"], "https://tollgate.dev/problems/not-edi");

    let (status, body) = gw.upload(Status214::new("CARRIERA", 2).transactions(40).build()).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["max_upload_bytes"], 2000);

    let r = gw.client.get(gw.url("/v1/queue?state=nonsense")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let r = gw.client.post(gw.url("/v1/queue/nope/retry")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn split_delivers_the_part_that_fits_and_holds_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg =
        config(dir.path().join("in").to_str().unwrap(), &format!("dir:{}", out.display()), 5, "")
            .replace("unit = \"day\"", "unit = \"day\"\nsplit = true");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let (status, _) = gw.upload(Status214::new("CARRIERA", 1).transactions(7).build()).await;
    assert_eq!(status, 202);
    let delivered = gw.wait_for("delivered", 1).await;
    assert_eq!(delivered[0]["weight"], 5);
    let held = gw.wait_for("held", 1).await;
    assert_eq!(held[0]["weight"], 2);
    let part =
        std::fs::read_to_string(out.join(format!("{}.edi", delivered[0]["id"].as_str().unwrap())))
            .unwrap();
    assert_eq!(part.matches("ST*214*").count(), 5, "{part}");
    assert_eq!(part.matches("IEA*1*").count(), 1);

    // Without split, a batch larger than the limit is dead with the reason.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg =
        config(dir2.path().join("in").to_str().unwrap(), &format!("dir:{}", out.display()), 5, "");
    let gw2 = Running::start(&cfg, &dir2.path().join("data"), memory_store()).await;
    gw2.upload(Status214::new("CARRIERA", 1).transactions(7).build()).await;
    let dead = gw2.wait_for("dead", 1).await;
    assert!(dead[0]["reason"].as_str().unwrap().contains("exceeds the limit 5"), "{dead:?}");
    gw.gateway.shutdown().await;
    gw2.gateway.shutdown().await;
}

#[tokio::test]
async fn backend_errors_are_retried_and_4xx_is_dead() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![500, 503, 500]).await;
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 100, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    gw.upload(Status214::new("CARRIERA", 1).build()).await;
    let delivered = gw.wait_for("delivered", 1).await;
    assert_eq!(delivered[0]["attempts"], 4);
    assert_eq!(*backend.hits.lock().unwrap(), 4);
    assert_eq!(backend.received().len(), 1);

    let refusing = Backend::start(vec![400; 10]).await;
    let dir2 = tempfile::tempdir().unwrap();
    let cfg = config(dir2.path().join("in").to_str().unwrap(), &refusing.url(), 100, "");
    let gw2 = Running::start(&cfg, &dir2.path().join("data"), memory_store()).await;
    gw2.upload(Status214::new("CARRIERA", 1).build()).await;
    let dead = gw2.wait_for("dead", 1).await;
    assert!(dead[0]["reason"].as_str().unwrap().contains("400"), "{dead:?}");
    assert_eq!(*refusing.hits.lock().unwrap(), 1, "a 4xx is not retried");

    // An operator releases the dead item once the backend is fixed: delivered.
    let id = dead[0]["id"].as_str().unwrap();
    *refusing.hits.lock().unwrap() = 0;
    let r = gw2.client.post(gw2.url(&format!("/v1/queue/{id}/release"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The refusing backend still answers 400 for its remaining script; purge instead.
    gw2.wait_for("dead", 1).await;
    let r = gw2.client.delete(gw2.url(&format!("/v1/queue/{id}"))).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert!(gw2.queue("dead").await.is_empty());
    gw.gateway.shutdown().await;
    gw2.gateway.shutdown().await;
}

async fn remote_case(
    status: u16,
    delay: Duration,
    on_unavailable: &str,
) -> (Running, u32, Vec<serde_json::Value>, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let out = dir.join("out");
    let (addr, hits) = if status == 0 {
        // Nothing listens: bind, take the port, close.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        (a, std::sync::Arc::new(std::sync::Mutex::new(0)))
    } else {
        quota_service(status, delay).await
    };
    let extra = format!(
        "[quota]\nmode = \"remote\"\nurl = \"http://{addr}/v1/quota\"\ntimeout_ms = 100\non_unavailable = \"{on_unavailable}\""
    );
    // [quota] must come after the top-level keys and before [[partner]].
    let cfg =
        config(dir.join("in").to_str().unwrap(), &format!("dir:{}", out.display()), 100, &extra);
    let gw = Running::start(&cfg, &dir.join("data"), memory_store()).await;
    for c in 1..=8 {
        gw.upload(Status214::new("CARRIERA", c).build()).await;
    }
    let state = if on_unavailable == "deliver" { "delivered" } else { "held" };
    let items = gw.wait_for(state, 8).await;
    let n = *hits.lock().unwrap();
    (gw, n, items, tmp)
}

#[tokio::test]
async fn remote_quota_outages_fail_open_or_hold_and_open_the_breaker() {
    for (status, delay) in
        [(500, Duration::ZERO), (200, Duration::from_secs(5)), (0, Duration::ZERO)]
    {
        let (gw, hits, delivered, _dir) = remote_case(status, delay, "deliver").await;
        assert!(
            delivered[0]["reason"].as_str().unwrap().contains("without metering"),
            "{status}: {delivered:?}"
        );
        // The breaker opened after 5 consecutive failures: later checks never reached the service.
        assert!(hits <= 5, "case {status}/{delay:?}: {hits} calls reached the quota service");
        gw.gateway.shutdown().await;

        let (gw, _, held, _dir) = remote_case(status, delay, "hold").await;
        assert!(held[0]["reason"].as_str().unwrap().contains("quota unavailable"), "{held:?}");
        gw.gateway.shutdown().await;
    }
}

#[tokio::test]
async fn remote_quota_429_holds_and_200_delivers() {
    let (addr, hits) = quota_service(429, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("[quota]\nmode = \"remote\"\nurl = \"http://{addr}/v1/quota\"");
    let out = dir.path().join("out");
    let cfg = config(
        dir.path().join("in").to_str().unwrap(),
        &format!("dir:{}", out.display()),
        100,
        &extra,
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    gw.upload(Status214::new("CARRIERA", 1).build()).await;
    gw.upload(Status214::new("CARRIERA", 2).build()).await;
    let held = gw.wait_for("held", 2).await;
    assert!(held[0]["reason"].as_str().unwrap().contains("over quota"));
    assert_eq!(*hits.lock().unwrap(), 1, "the second waits behind the first without a check");
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn malformed_interchanges_keep_the_parser_reason_and_get_an_ack() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let acks = dir.path().join("acks");
    let extra = format!("acks = \"{}\"", acks.display());
    let cfg = config(
        dir.path().join("in").to_str().unwrap(),
        &format!("dir:{}", out.display()),
        100,
        &extra,
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    // Two interchanges in one file: the first is fine, the second's IEA02 does not match ISA13.
    let mut file = Status214::new("CARRIERA", 1).build();
    let bad = String::from_utf8(Status214::new("CARRIERA", 2).build())
        .unwrap()
        .replace("IEA*1*000000002", "IEA*1*000000003");
    file.extend_from_slice(bad.as_bytes());
    let (status, body) = gw.upload(file).await;
    assert_eq!(status, 202);
    let id = body["id"].as_str().unwrap();
    let delivered = gw.wait_for("delivered", 1).await;
    assert_eq!(delivered[0]["id"], format!("{id}-1"));
    let rejected = gw.wait_for("rejected", 1).await;
    assert_eq!(rejected[0]["id"], format!("{id}-2"));
    let reason = rejected[0]["reason"].as_str().unwrap();
    assert!(reason.contains("000000003"), "the parser's reason names the value: {reason}");
    let ack = std::fs::read_to_string(acks.join(format!("{id}-2.ack"))).unwrap();
    assert!(ack.starts_with("ISA"), "{ack}");
    assert!(ack.contains("TA1") || ack.contains("ST*997") || ack.contains("ST*999"), "{ack}");
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn unknown_senders_are_metered_under_their_raw_id() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start(vec![]).await;
    let cfg = config(dir.path().join("in").to_str().unwrap(), &backend.url(), 100, "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    gw.upload(Status214::new("STRANGER", 1).transactions(3).build()).await;
    let d = gw.wait_for("delivered", 1).await;
    assert_eq!(d[0]["partner"], "ZZ:STRANGER");
    assert_eq!(d[0]["metering_id"], "ShipmentStatus:ZZ:STRANGER");
    let counters = gw
        .store
        .counters(&CounterListing::all("ShipmentStatus:ZZ:STRANGER"))
        .await
        .unwrap()
        .counters;
    assert_eq!(counters[0].used, 3);
    assert_eq!(backend.received()[0].partner, "ZZ:STRANGER");
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn the_queue_api_is_behind_the_admin_guard() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path().join("in").to_str().unwrap(), "dir:/nonexistent-unused", 100, "");
    let config: tollgate_gateway::GatewayConfig = toml::from_str(&cfg).unwrap();
    let guard = tollgate_http::AccessGuard::new(Some("s3cret"), true);
    let decider = tollgate_policy::Decider::without_policies(memory_store());
    let gw = tollgate_gateway::Gateway::builder(config, &dir.path().join("data"), decider)
        .start()
        .await
        .unwrap();
    let addr = serve(gw.router(guard, Default::default())).await;
    let client = reqwest::Client::new();
    let r = client.get(format!("http://{addr}/v1/queue")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = client.delete(format!("http://{addr}/v1/queue/x")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r =
        client.get(format!("http://{addr}/v1/queue")).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(r.status(), 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn edifact_iftsta_is_routed_weighed_and_its_error_kept() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/edi");
    let raw = std::fs::read(format!("{fixtures}/edifact/iftsta-unz-mismatch.edi")).unwrap();
    let sts = String::from_utf8_lossy(&raw).matches("\nSTS+").count() as u64;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let acks = dir.path().join("acks");
    let cfg = format!(
        r#"
acks = "{acks}"
[[partner]]
name = "RailCo"
ids = ["ZZZ:RAILCO"]
[[route]]
name = "ShipmentStatus"
documents = ["214", "IFTSTA"]
limit = 1000
unit = "day"
weight = "segment:STS"
deliver = "dir:{out}"
"#,
        acks = acks.display(),
        out = out.display()
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;

    // UNZ 0020 does not match UNB 0020: rejected with the parser's code.
    let (status, _) = gw.upload(raw.clone()).await;
    assert_eq!(status, 202);
    let rejected = gw.wait_for("rejected", 1).await;
    let reason = rejected[0]["reason"].as_str().unwrap();
    assert!(reason.contains("UCI-28") && reason.contains("4410027"), "{reason}");
    let acks_written: Vec<_> = std::fs::read_dir(&acks).unwrap().collect();
    assert_eq!(acks_written.len(), 1, "a CONTRL for the rejected interchange");

    // Repaired, it is delivered, metered for RailCo by its STS status events.
    let fixed = String::from_utf8(raw).unwrap().replace("UNZ+1+4410027", "UNZ+1+4410021");
    gw.upload(fixed.clone().into_bytes()).await;
    let delivered = gw.wait_for("delivered", 1).await;
    assert_eq!(delivered[0]["partner"], "RailCo");
    assert_eq!(delivered[0]["document"], "IFTSTA");
    assert_eq!(sts, 3);
    assert_eq!(delivered[0]["weight"], sts);
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn the_queue_is_listed_a_page_at_a_time_with_a_next_link() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg =
        config("", &format!("dir:{}", out.display()), 100, "").replace("inbound = [\"\"]", "");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    // 250 interchanges of a document without a route: 250 rejected items in one file.
    let file: Vec<u8> = (0..250)
        .flat_map(|i| x12_doc("CARRIERA", 100 + i, "810").into_iter().chain(*b"\n"))
        .collect();
    assert_eq!(gw.upload(file).await.0, 202);
    gw.wait_for("rejected", 250).await;

    let mut seen = Vec::new();
    let mut next = Some("/v1/queue?state=rejected".to_owned());
    let mut pages = Vec::new();
    while let Some(path) = next.take() {
        let r = gw.client.get(gw.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        next = r.headers().get("link").map(|l| {
            let l = l.to_str().unwrap();
            assert!(l.ends_with(">; rel=\"next\""), "{l}");
            l[1..l.find('>').unwrap()].to_owned()
        });
        let rows: Vec<serde_json::Value> = r.json().await.unwrap();
        pages.push(rows.len());
        seen.extend(rows.into_iter().map(|r| r["id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(pages, [100, 100, 50], "100 by default, the rest on later pages");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 250, "every item once");
    assert_eq!(seen, unique, "in id order");

    let r = gw.client.get(gw.url("/v1/queue?limit=1000")).send().await.unwrap();
    assert!(r.headers().get("link").is_none());
    assert_eq!(r.json::<Vec<serde_json::Value>>().await.unwrap().len(), 250);
    for bad in ["0", "1001", "ten", "-1"] {
        let r = gw.client.get(gw.url(&format!("/v1/queue?limit={bad}"))).send().await.unwrap();
        assert_eq!(r.status(), 400, "limit={bad}");
        let p: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            (p["invalid_parameter"].as_str(), p["value"].as_str()),
            (Some("limit"), Some(bad))
        );
    }
    gw.gateway.shutdown().await;
}
