//! Settling, taking and retiring landing files, on real files in temp dirs.

use super::*;
use crate::batch::Candidate;
use crate::landing::Stamp;

fn landing(dir: &Path, settle_ms: u64) -> Landing {
    let config = crate::config::GatewayConfig {
        inbound: vec![dir.to_path_buf()],
        settle_ms,
        ..Default::default()
    };
    Landing::new(&config.plan().unwrap())
}

#[test]
fn files_settle_before_they_are_taken_and_empty_ones_wait() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.edi"), b"x").unwrap();
    std::fs::write(dir.path().join("b.part"), b"x").unwrap();
    std::fs::write(dir.path().join("c.edi.filepart"), b"x").unwrap();
    std::fs::write(dir.path().join("empty.edi"), b"").unwrap();
    let l = landing(dir.path(), 50);
    let mut mem = Memory::default();
    assert!(scan(&l, &mut mem).0.is_empty());
    std::thread::sleep(Duration::from_millis(60));
    let ready: Vec<PathBuf> = scan(&l, &mut mem).0.into_iter().map(|c| c.path).collect();
    assert_eq!(ready, vec![dir.path().join("a.edi")]);
}

#[test]
fn a_file_changed_since_it_settled_is_neither_spooled_nor_removed() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("data"), crate::SpoolOptions::default()).unwrap();
    let path = dir.path().join("a.edi");
    std::fs::write(&path, b"ISA*first half").unwrap();
    let settled = Stamp::at(&path).unwrap();
    std::fs::write(&path, b"ISA*first half, and more").unwrap();
    let c =
        Candidate { path: path.clone(), sender: String::new(), stamp: settled, grace_passed: true };
    let plan = crate::config::GatewayConfig::default().plan().unwrap();
    let took = take(&spool, &plan, vec![c]).unwrap();
    assert!(took.records.is_empty() && took.spooled.is_empty() && took.failed.is_empty());
    assert!(spool.pending_files().unwrap().is_empty());
    assert!(path.exists());
    // Gone before it was read: not an error to report.
    let gone = Candidate {
        path: dir.path().join("gone.edi"),
        sender: String::new(),
        stamp: settled,
        grace_passed: true,
    };
    assert!(take(&spool, &plan, vec![gone]).unwrap().failed.is_empty());
}

#[test]
fn an_inbound_path_that_is_a_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("landing");
    std::fs::write(&file, b"").unwrap();
    let (path, e) = ensure_dirs(std::slice::from_ref(&file)).unwrap_err();
    assert_eq!(path, file);
    assert!(e.to_string().contains("not a directory"), "{e}");
}
