//! The EDI gateway inside the real `tollgate serve`, killed with SIGKILL: nothing spooled is
//! lost. Files dropped in the landing directory during and around the crash are all delivered
//! after the restart, and uploads answered 202 survive the kill. `tollgate queue` reads the
//! result through the admin API. A damaged state database is refused without losing a spooled
//! file, and the gateway's metric labels stay bounded whatever senders upload.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, Server, Status214};

fn start(config: &Path) -> Server {
    Server::start(&["--config", config.to_str().unwrap()])
}

fn config(dir: &Path, deliver: &str) -> PathBuf {
    let file = dir.join("tollgate.toml");
    let text = format!(
        r#"
[server]
data = "{data}"

[gateway]
inbound = ["{inbound}"]
poll_ms = 20
settle_ms = 0

[[gateway.partner]]
name = "CarrierXYZ"
ids = ["ZZ:CARRIERXYZ"]

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 100000
interval = 1
unit = "day"
deliver = "{deliver}"
"#,
        data = dir.join("data").display(),
        inbound = dir.join("in").display(),
    );
    std::fs::write(&file, text).unwrap();
    file
}

/// Drops a file the way an SFTP server does: a temporary name, then a rename.
fn drop_file(inbound: &Path, name: &str, bytes: &[u8]) {
    let tmp = inbound.join(format!("{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, inbound.join(name)).unwrap();
}

/// Control numbers (ISA13) of the interchanges in the outbound directory.
fn delivered_controls(out: &Path) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    for e in std::fs::read_dir(out).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let fields: Vec<&str> = text.split('*').collect();
        set.insert(fields[13].parse().unwrap());
    }
    set
}

#[test]
fn forty_files_dropped_across_a_sigkill_are_all_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let inbound = dir.path().join("in");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&inbound).unwrap();
    let cfg = config(dir.path(), &format!("dir:{}", out.display()));

    let serve = start(&cfg);
    for c in 1..=25u32 {
        drop_file(
            &inbound,
            &format!("f{c:02}.edi"),
            &Status214::new("CARRIERXYZ", c).receiver("ACME").transactions(2).build(),
        );
        std::thread::sleep(Duration::from_millis(3));
    }
    // Mid-burst: some files are spooled, some being delivered, some not yet taken.
    serve.sigkill();
    for c in 26..=40u32 {
        drop_file(
            &inbound,
            &format!("f{c:02}.edi"),
            &Status214::new("CARRIERXYZ", c).receiver("ACME").transactions(2).build(),
        );
    }

    let serve = start(&cfg);
    let want: BTreeSet<u32> = (1..=40).collect();
    common::wait_until("all 40 interchanges delivered", Duration::from_secs(30), || {
        delivered_controls(&out) == want
    });
    common::wait_until("the landing directory emptied", Duration::from_secs(10), || {
        // Taken files wait in the hidden `.tollgate-taken/` folder for late appends.
        std::fs::read_dir(&inbound)
            .unwrap()
            .flatten()
            .all(|e| e.file_name().to_string_lossy().starts_with('.'))
    });

    // The queue, through the CLI: 40 delivered, nothing else left behind.
    let o = Command::new(BIN)
        .args(["queue", "list", "--state", "delivered", "--json", "--url", &serve.url])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 40, "{rows:?}");
    assert!(rows.iter().all(|r| r["partner"] == "CarrierXYZ" && r["weight"] == 2));
    let o = Command::new(BIN)
        .args(["queue", "list", "--state", "held", "--json", "--url", &serve.url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
    let o = Command::new(BIN)
        .args(["queue", "retry", "no-such-item", "--url", &serve.url])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("404"), "{o:?}");

    // The gateway's metrics are on the server's /metrics.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let metrics = rt.block_on(async {
        reqwest::get(format!("{}/metrics", serve.url)).await.unwrap().text().await.unwrap()
    });
    assert!(
        metrics.lines().any(|l| l.starts_with("tollgate_gateway_delivered_total")
            && l.contains("partner=\"CarrierXYZ\"")
            && l.contains("route=\"ShipmentStatus\"")),
        "{metrics}"
    );
}

#[test]
fn sigterm_stops_serve_and_gateway_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &format!("dir:{}", dir.path().join("out").display()));
    let serve = start(&cfg);
    let status = serve.sigterm();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn uploads_answered_202_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // First run: the backend is down (nothing listens), so nothing can be delivered yet.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_backend = format!("http://{}/edi", closed.local_addr().unwrap());
    drop(closed);
    let cfg = config(dir.path(), &dead_backend);
    let serve = start(&cfg);
    let client = reqwest::Client::new();
    let mut ids = BTreeSet::new();
    for c in 1..=10u32 {
        let r = client
            .post(format!("{}/v1/interchanges", serve.url))
            .body(Status214::new("CARRIERXYZ", c).receiver("ACME").build())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["state"], "received");
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    serve.sigkill();

    // Second run: the target is now a directory; every accepted upload arrives there, under
    // the id it was answered with.
    let cfg = config(dir.path(), &format!("dir:{}", out.display()));
    let _serve = start(&cfg);
    let want: BTreeSet<u32> = (1..=10).collect();
    common::wait_until("all 10 uploads delivered", Duration::from_secs(30), || {
        delivered_controls(&out) == want
    });
    let names: BTreeSet<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".edi").to_owned())
        .collect();
    assert_eq!(names, ids);
}

/// `tollgate serve ARGS` that must exit by itself within 20 s: its exit code and stderr.
fn serve_expecting_exit(args: &[&str]) -> (Option<i32>, String) {
    use std::io::Read;
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tollgate serve neither started nor exited in 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code(), stderr)
}

/// Spool file name → bytes.
fn spool_files(data: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(data.join("spool"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_zero_length_state_db_after_a_sigkill_is_refused_and_a_restored_one_delivers_all() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_backend = format!("http://{}/edi", closed.local_addr().unwrap());
    drop(closed);
    let cfg = config(dir.path(), &dead_backend);
    let serve = start(&cfg);
    let client = reqwest::Client::new();
    for c in 1..=3u32 {
        let r = client
            .post(format!("{}/v1/interchanges", serve.url))
            .body(Status214::new("CARRIERXYZ", c).receiver("ACME").build())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    serve.sigkill();
    let spooled = spool_files(&data);
    assert!(!spooled.is_empty());
    let db = data.join("gateway.redb");
    let backup = std::fs::read(&db).unwrap();
    std::fs::write(&db, b"").unwrap();

    let cfg = config(dir.path(), &format!("dir:{}", out.display()));
    let (code, stderr) = serve_expecting_exit(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&db.display().to_string()), "names the file: {stderr}");
    assert!(stderr.contains("is empty (0 bytes)"), "{stderr}");
    assert!(stderr.contains("restore") && stderr.contains("--move-aside-corrupt"), "{stderr}");
    assert_eq!(spool_files(&data), spooled, "no spooled file deleted or changed");
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());

    // Restored (a copy taken after the kill -9): redb recovers it on open, and every upload
    // answered 202 is delivered.
    std::fs::write(&db, backup).unwrap();
    let _serve = start(&cfg);
    let want: BTreeSet<u32> = (1..=3).collect();
    common::wait_until("all 3 uploads delivered", Duration::from_secs(30), || {
        delivered_controls(&out) == want
    });
}

#[tokio::test]
async fn metric_labels_stay_bounded_while_senders_and_document_types_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &format!("dir:{}", dir.path().join("out").display()));
    let serve = start(&cfg);
    let client = reqwest::Client::new();
    let upload = |body: Vec<u8>| {
        let r = client.post(format!("{}/v1/interchanges", serve.url)).body(body).send();
        async move { r.await.unwrap().status().as_u16() }
    };
    // 500 made-up senders, 50 made-up document types, the known partner, and garbage.
    for i in 0..500u32 {
        let mut body = Status214::new(&format!("ROT{i:05}"), i + 1).receiver("ACME").build();
        if i % 10 == 0 {
            body = String::from_utf8(body)
                .unwrap()
                .replace("ST*214*", &format!("ST*9{:02}*", i / 10))
                .into_bytes();
        }
        assert_eq!(upload(body).await, 202);
    }
    assert_eq!(upload(Status214::new("CARRIERXYZ", 1).receiver("ACME").build()).await, 202);
    let mut junk = Status214::new("ROTJUNK", 9).receiver("ACME").build();
    junk.extend_from_slice(b"trailing junk");
    assert_eq!(upload(junk).await, 202);

    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let m = client.get(format!("{}/metrics", serve.url)).send().await.unwrap();
        let text = m.text().await.unwrap();
        let received: f64 = text
            .lines()
            .filter(|l| l.starts_with("tollgate_gateway_received_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if received >= 502.0 {
            break text;
        }
        assert!(Instant::now() < deadline, "not all uploads counted: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut partners = BTreeSet::new();
    let mut routes = BTreeSet::new();
    let mut series = 0;
    for line in metrics.lines().filter(|l| l.starts_with("tollgate_gateway_")) {
        series += 1;
        for (label, set) in [("partner=\"", &mut partners), ("route=\"", &mut routes)] {
            if let Some(rest) = line.split(label).nth(1) {
                set.insert(rest.split('"').next().unwrap().to_owned());
            }
        }
    }
    let want: BTreeSet<String> = ["CarrierXYZ", "unknown"].map(String::from).into();
    assert_eq!(partners, want, "{metrics}");
    assert!(routes.iter().all(|r| r.is_empty() || r == "ShipmentStatus"), "{routes:?}");
    assert!(series < 100, "{series} gateway series for 502 uploads: {metrics}");
}
