//! Intake over real files and real HTTP: landing files written the way SFTP clients write them,
//! landing files over the size limit, upload credentials and partner scoping, and the memory
//! budget of uploads in flight.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;
use tollgate_http::AccessGuard;
use tollgate_http::client::ClientKeys;
use tollgate_http::config::ClientKey;

/// A gateway on `landing` that delivers 214s to `out`, with fast polling and `extra` keys.
fn config(landing: &Path, out: &Path, extra: &str) -> String {
    format!(
        r#"
inbound = ["{landing}"]
poll_ms = 20
settle_ms = 100
{extra}
[[partner]]
name = "CARRIERXYZ"
ids = ["ZZ:XYZ"]
[[route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000
unit = "day"
deliver = "dir:{out}"
"#,
        landing = landing.display(),
        out = out.display()
    )
}

/// Fails the test unless `f` holds within 10 s.
async fn until(what: &str, f: impl Fn() -> bool) {
    eventually(what, f).await
}

/// Lets the poller run for several settle periods, so that anything it would wrongly take is
/// taken by then.
async fn several_polls() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}

#[tokio::test]
async fn a_file_written_in_place_with_pauses_is_taken_whole_once() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    let gw =
        Running::start(&config(&landing, &out, ""), &dir.path().join("data"), memory_store()).await;
    let full = Status214::new("XYZ", 1).transactions(3).events(2).build();
    let (head, tail) = full.split_at(full.len() / 2);

    // An SFTP client: creates the file empty, pauses, writes half, pauses past settle_ms
    // (and past a segment boundary), writes the rest through the same handle.
    let mut f = std::fs::File::create(landing.join("in.edi")).unwrap();
    several_polls().await;
    f.write_all(head).unwrap();
    several_polls().await;
    assert!(files_in(&out).is_empty(), "nothing may be delivered from a half-written file");
    f.write_all(tail).unwrap();
    drop(f);

    until("the interchange is delivered", || files_in(&out).len() == 1).await;
    several_polls().await;
    assert_eq!(files_in(&out), vec![full], "exactly the whole interchange, once");
    assert!(!landing.join("in.edi").exists());
    assert!(gw.queue("rejected").await.is_empty());
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn an_interchange_appended_to_a_taken_file_through_an_open_handle_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    let gw =
        Running::start(&config(&landing, &out, ""), &dir.path().join("data"), memory_store()).await;
    let first = Status214::new("XYZ", 1).transactions(2).build();
    let second = Status214::new("XYZ", 2).transactions(2).build();

    // One whole interchange, then a pause past settle_ms with the file still open: it looks
    // finished and is taken. The sender then appends a second one through the same handle.
    let mut f = std::fs::File::create(landing.join("open.edi")).unwrap();
    f.write_all(&first).unwrap();
    until("the first interchange is delivered", || files_in(&out).len() == 1).await;
    assert!(!landing.join("open.edi").exists(), "taken out of the landing directory");
    f.write_all(&second).unwrap();
    drop(f);

    until("the appended interchange is delivered", || files_in(&out).len() == 2).await;
    several_polls().await;
    let mut want = vec![first, second];
    want.sort();
    assert_eq!(files_in(&out), want, "both interchanges, each once");
    assert!(gw.queue("rejected").await.is_empty());
    assert!(gw.queue("duplicate").await.is_empty());
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn an_unfinished_file_left_past_incomplete_grace_is_rejected_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    // The grace is well past `several_polls`, so the file is still waiting when looked at.
    let cfg = config(&landing, &out, "incomplete_grace_ms = 3000");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let full = Status214::new("XYZ", 1).transactions(3).events(2).build();
    let cut = &full[..full.len() - 30];
    std::fs::write(landing.join("abandoned.edi"), cut).unwrap();
    several_polls().await;
    assert!(landing.join("abandoned.edi").exists(), "waits while it may still be written");
    let rejected = gw.wait_for("rejected", 1).await;
    let reason = rejected[0]["reason"].as_str().unwrap();
    assert!(!reason.is_empty(), "{rejected:?}");
    assert!(!landing.join("abandoned.edi").exists());
    assert!(files_in(&out).is_empty());
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn temporary_names_of_sftp_clients_wait_for_the_rename() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    let gw =
        Running::start(&config(&landing, &out, ""), &dir.path().join("data"), memory_store()).await;
    let mut expected = Vec::new();
    for (i, temp) in ["a.edi.filepart", "b.edi.part", "c.edi.partial", ".d.edi"].iter().enumerate()
    {
        let full = Status214::new("XYZ", 10 + i as u32).transactions(2).build();
        let (head, tail) = full.split_at(full.len() - 20);
        let mut f = std::fs::File::create(landing.join(temp)).unwrap();
        f.write_all(head).unwrap();
        expected.push((temp, full.clone(), tail.to_vec(), f));
    }
    several_polls().await;
    assert!(files_in(&out).is_empty(), "temporary names are never taken");
    let mut want = Vec::new();
    for (i, (temp, full, tail, mut f)) in expected.into_iter().enumerate() {
        f.write_all(&tail).unwrap();
        drop(f);
        std::fs::rename(landing.join(temp), landing.join(format!("done{i}.edi"))).unwrap();
        want.push(full);
    }
    want.sort();
    until("all four are delivered", || files_in(&out).len() == 4).await;
    several_polls().await;
    assert_eq!(files_in(&out), want);
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn a_landing_file_over_max_file_bytes_is_moved_aside_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    let cfg = config(&landing, &out, "max_file_bytes = 1000");
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let big = Status214::new("XYZ", 1).transactions(20).events(5).build();
    assert!(big.len() > 1000);
    let small = Status214::new("XYZ", 2).build();
    std::fs::write(landing.join("big.edi"), &big).unwrap();
    std::fs::write(landing.join("small.edi"), &small).unwrap();

    until("the small file is delivered", || files_in(&out).len() == 1).await;
    let aside = landing.join("too-large");
    until("the big file is moved aside", || !landing.join("big.edi").exists()).await;
    let names: Vec<String> = std::fs::read_dir(&aside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let moved = names.iter().find(|n| n.ends_with("-big.edi")).expect("moved file");
    assert_eq!(std::fs::read(aside.join(moved)).unwrap(), big, "moved whole, not lost");
    let reason = std::fs::read_to_string(aside.join(format!("{moved}.reason"))).unwrap();
    assert!(reason.contains("max_file_bytes (1000)") && reason.contains("big.edi"), "{reason}");
    several_polls().await;
    assert_eq!(files_in(&out), vec![small]);
    gw.gateway.shutdown().await;
}

fn key(key: &str, name: &str, partners: Option<&[&str]>) -> ClientKey {
    ClientKey {
        key: Some(tollgate_http::config::ClientSecret::new(key).unwrap()),
        subject: None,
        name: name.into(),
        allow: None,
        partners: partners.map(|p| p.iter().map(|s| s.to_string()).collect()),
    }
}

/// POSTs `body` with the header pairs; returns the status and the problem/JSON body.
async fn post(gw: &Running, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, serde_json::Value) {
    let mut req = gw.client.post(gw.url("/v1/interchanges")).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// Every queue item, whatever its state (as the admin).
async fn all_items(gw: &Running) -> Vec<serde_json::Value> {
    let r = gw.client.get(gw.url("/v1/queue")).bearer_auth("admin-t0ken").send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn uploads_need_credentials_and_clients_upload_only_for_their_partners() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir.path().join("in"), &dir.path().join("out"), "");
    let clients = ClientKeys::new(&[
        key("xyz-key", "carrier-portal", Some(&["CARRIERXYZ", "ZZ:ALSO"])),
        key("any-key", "ops", None),
    ])
    .unwrap();
    let guard = AccessGuard::new(Some("admin-t0ken"), true);
    let gw = Running::start_guarded(&cfg, &dir.path().join("data"), guard, clients).await;
    let xyz = || Status214::new("XYZ", 1).build();
    let other = || Status214::new("OTHER", 2).build();

    // Refused: no credentials, wrong or empty key, wrong token, wrong scheme.
    for headers in [
        vec![],
        vec![("x-api-key", "nope")],
        vec![("x-api-key", "")],
        vec![("authorization", "Bearer wrong")],
        vec![("authorization", "Basic YWRtaW46eA==")],
    ] {
        let (status, body) = post(&gw, &headers, xyz()).await;
        assert_eq!(status, 401, "{headers:?}: {body}");
        assert!(body["type"].as_str().unwrap().starts_with("https://"), "{body}");
        assert!(!body["detail"].as_str().unwrap_or_default().is_empty(), "{body}");
    }
    assert!(all_items(&gw).await.is_empty(), "a refused upload spools nothing");

    // A client outside its partners: 403 naming the sender, nothing spooled, even when the
    // forbidden interchange follows an allowed one in the same body.
    let (status, body) = post(&gw, &[("x-api-key", "xyz-key")], other()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["sender"], "ZZ:OTHER");
    assert!(body["detail"].as_str().unwrap().contains("ZZ:OTHER"), "{body}");
    let mut mixed = xyz();
    mixed.extend_from_slice(b"\n");
    mixed.extend(other());
    let (status, body) = post(&gw, &[("x-api-key", "xyz-key")], mixed).await;
    assert_eq!(status, 403, "{body}");
    assert!(all_items(&gw).await.is_empty(), "a refused upload spools nothing");

    // Allowed: the client for its partner (by name, or by raw id), the open client, the admin.
    for (headers, body) in [
        (vec![("x-api-key", "xyz-key")], xyz()),
        (vec![("x-api-key", "xyz-key")], Status214::new("ALSO", 3).build()),
        (vec![("x-api-key", "any-key")], other()),
        (vec![("authorization", "Bearer admin-t0ken")], Status214::new("OTHER", 4).build()),
    ] {
        let (status, answer) = post(&gw, &headers, body).await;
        assert_eq!(status, 202, "{headers:?}: {answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while all_items(&gw).await.len() < 4 {
        assert!(Instant::now() < deadline, "the four accepted uploads are queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(all_items(&gw).await.len(), 4);
    gw.gateway.shutdown().await;
}

#[tokio::test]
async fn with_no_credentials_configured_uploads_are_open_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir.path().join("in"), &dir.path().join("out"), "");
    // A listener that is not loopback (the guard is told so): refused.
    let gw = Running::start_guarded(
        &cfg,
        &dir.path().join("data"),
        AccessGuard::new(None, false),
        ClientKeys::default(),
    )
    .await;
    let (status, body) = gw.upload(Status214::new("XYZ", 1).build()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("admin_token"), "{body}");
    gw.gateway.shutdown().await;
}

/// Starts an upload of `declared` bytes and sends only the headers and a few bytes, then
/// stalls with the connection open.
async fn stalled_upload(gw: &Running, declared: usize) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /v1/interchanges HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {declared}\r\n\r\nISA*00*"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    s
}

#[tokio::test]
async fn stalled_uploads_cannot_hold_more_than_the_upload_budget() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &dir.path().join("in"),
        &dir.path().join("out"),
        // One client's share (a quarter of the budget, at least max_upload_bytes) is the
        // whole budget here, so this one sender can fill it.
        "max_upload_bytes = 10000\nupload_budget_bytes = 10000",
    );
    let gw = Running::start(&cfg, &dir.path().join("data"), memory_store()).await;
    let first = stalled_upload(&gw, 5500).await;
    let _second = stalled_upload(&gw, 4400).await;

    // The budget now holds 9900 of 10000 bytes: a third upload of ~300 bytes is refused at
    // once with a problem naming the budget, not held in memory.
    let body = Status214::new("XYZ", 1).build();
    assert!(body.len() > 100);
    let refused = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, answer) = gw.upload(body.clone()).await;
            if status == 503 {
                return answer;
            }
            assert_eq!(status, 202, "{answer}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the budget refuses the upload within 10 s");
    assert_eq!(refused["type"], "https://tollgate.dev/problems/upload-budget-exhausted");
    assert_eq!(refused["upload_budget_bytes"], 10000);
    let r = gw.client.post(gw.url("/v1/interchanges")).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");

    // The stalled sender goes away: its reservation is given back.
    drop(first);
    let accepted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if gw.upload(body.clone()).await.0 == 202 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(accepted.is_ok(), "an upload is accepted again once the stalled one is gone");
    gw.gateway.shutdown().await;
}
