//! A damaged `gateway.redb` is refused, never taken as an empty spool: every spooled file
//! stays where it is, byte for byte, and the error names the file and what to do. Moving it
//! aside is an explicit option, and then the spooled files are kept in `orphaned/`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use tollgate_gateway::{Gateway, GatewayConfig, SpoolOptions};

/// Limit 1 per day: the first interchange is delivered, the others stay held in the spool.
fn config(dir: &Path) -> String {
    format!(
        r#"
inbound = ["{}"]
poll_ms = 20
settle_ms = 0

[[partner]]
name = "CarrierA"
ids = ["ZZ:CARRIERA"]

[[route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1
unit = "day"
deliver = "dir:{}"
"#,
        dir.join("in").display(),
        dir.join("out").display()
    )
}

/// Every file under `dir` (recursively), name → bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_file() {
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            );
        }
    }
    out
}

/// A data dir whose spool holds 4 interchanges over quota (and one delivered), gateway
/// stopped. Files are dropped in the landing directory (no HTTP server keeps the spool open).
async fn spooled(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let gw = start(dir, SpoolOptions::default()).await.unwrap();
    for c in 1..=5 {
        let landed = dir.join(format!("in/{c}.edi"));
        std::fs::write(&landed, Status214::new("CARRIERA", c).build()).unwrap();
        eventually("the landing file taken", || !landed.exists()).await;
    }
    eventually("one delivered", || files(&dir.join("out")).len() == 1).await;
    gw.shutdown().await;
    let spool = files(&dir.join("data/spool"));
    assert_eq!(spool.len(), 4, "one spool file per file not delivered: {:?}", spool.keys());
    spool
}

async fn start(dir: &Path, options: SpoolOptions) -> Result<Gateway, String> {
    let config: GatewayConfig = toml::from_str(&config(dir)).unwrap();
    let data = dir.join("data");
    let decider = tollgate_policy::Decider::without_policies(memory_store());
    let run = Gateway::builder(config, &data, decider).options(options).start();
    match tokio::time::timeout(std::time::Duration::from_secs(20), run).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => panic!("the gateway start hung"),
    }
}

/// Damages the state database in several ways; each is refused and loses nothing.
#[tokio::test]
async fn a_damaged_state_db_is_refused_and_the_spool_kept() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 5] = [
        ("zero-length", |p| std::fs::write(p, b"").unwrap()),
        ("missing", |p| std::fs::remove_file(p).unwrap()),
        ("truncated to half", |p| {
            let len = std::fs::metadata(p).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len / 2).unwrap();
        }),
        ("bytes flipped after the header", |p| {
            let mut b = std::fs::read(p).unwrap();
            for x in b.iter_mut().skip(4096) {
                *x ^= 0x5A;
            }
            std::fs::write(p, b).unwrap();
        }),
        ("header garbage", |p| {
            let mut b = std::fs::read(p).unwrap();
            b[..64].copy_from_slice(&[0xAB; 64]);
            std::fs::write(p, b).unwrap();
        }),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let before = spooled(dir.path()).await;
        let out_before = files(&dir.path().join("out"));
        damage(&dir.path().join("data/gateway.redb"));
        let err = match start(dir.path(), SpoolOptions::default()).await {
            Err(e) => e,
            Ok(gw) => {
                gw.shutdown().await;
                panic!("{what}: started on a damaged state database")
            }
        };
        assert!(err.contains("gateway.redb"), "{what}: the error names the file: {err}");
        assert!(err.contains("restore"), "{what}: {err}");
        assert!(err.contains("--move-aside-corrupt"), "{what}: {err}");
        assert_eq!(files(&dir.path().join("data/spool")), before, "{what}: the spool is intact");
        assert_eq!(files(&dir.path().join("out")), out_before, "{what}: nothing delivered");
        // Refusing again is the same: the refusal changed nothing.
        assert!(start(dir.path(), SpoolOptions::default()).await.is_err(), "{what}");
    }
}

#[tokio::test]
async fn moving_aside_is_explicit_and_keeps_the_spool_in_orphaned() {
    let dir = tempfile::tempdir().unwrap();
    let before = spooled(dir.path()).await;
    let out_before = files(&dir.path().join("out"));
    std::fs::write(dir.path().join("data/gateway.redb"), b"").unwrap();
    let gw = start(dir.path(), SpoolOptions { move_aside_corrupt: true, ..Default::default() })
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    gw.shutdown().await;
    let data = dir.path().join("data");
    assert_eq!(files(&data.join("orphaned")), before, "every spooled file kept, byte for byte");
    assert!(files(&data.join("spool")).is_empty());
    let aside: Vec<String> =
        files(&data).into_keys().filter(|n| n.starts_with("gateway.redb.corrupt-")).collect();
    assert_eq!(aside.len(), 1, "the damaged file is kept aside: {aside:?}");
    assert_eq!(files(&dir.path().join("out")), out_before, "nothing re-delivered");
    assert_eq!(files(&dir.path().join("in")).len(), 0, "nothing re-ingested");
    // The new state database works: the next start is clean.
    start(dir.path(), SpoolOptions::default()).await.unwrap().shutdown().await;
}

#[tokio::test]
async fn an_empty_state_db_is_refused_even_with_nothing_spooled() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/gateway.redb"), b"").unwrap();
    let err = match start(dir.path(), SpoolOptions::default()).await {
        Err(e) => e,
        Ok(gw) => {
            gw.shutdown().await;
            panic!("started on an empty gateway.redb (its dedup keys would be lost unsaid)")
        }
    };
    assert!(err.contains("gateway.redb is empty (0 bytes)"), "{err}");
    // A first start (no file at all) needs nothing.
    std::fs::remove_file(dir.path().join("data/gateway.redb")).unwrap();
    start(dir.path(), SpoolOptions::default()).await.unwrap().shutdown().await;
}
