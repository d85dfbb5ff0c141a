//! The spool's files and state: receive, commit, reopen.
use super::*;

fn item(id: &str, file: &str, state: State) -> Item {
    Item {
        id: id.into(),
        state,
        spool_file: file.into(),
        start: 0,
        end: 3,
        partner: "P".into(),
        sender: "ZZ:A".into(),
        receiver: "ZZ:B".into(),
        control_number: "1".into(),
        document: "214".into(),
        route: None,
        metering_id: None,
        weight: 1,
        received_at: jiff::Timestamp::now().as_millisecond(),
        next_attempt_at: None,
        attempts: 0,
        reason: None,
        layout: None,
        held_at: None,
        delivered_at: None,
        duplicate_of: None,
    }
}

#[test]
fn receive_commit_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), SpoolOptions::default()).unwrap();
    let recs = spool.receive(&[(b"abc", "x".into()), (b"def", "y".into())]).unwrap();
    assert_eq!(spool.pending_files().unwrap().len(), 2);
    assert_eq!(recs[0].spool, recs[1].spool, "one spool file per batch");
    assert_eq!((recs[1].start, recs[1].end), (3, 6));
    assert_eq!(spool.read(&recs[1].spool, 4, 6).unwrap(), b"ef");
    assert!(spool.read(&recs[1].spool, 4, 9).is_err());
    let change = Change {
        remove_files: vec![recs[0].id.clone()],
        put: vec![item(&recs[0].id, &recs[0].spool, State::Held)],
        dedup: vec![("k".into(), 5)],
        ..Change::default()
    };
    spool.commit(&change).unwrap();
    drop(spool);
    // An orphan spool file (written, never recorded) is kept aside on open, not deleted.
    fs::write(dir.path().join("spool/orphan.edi"), b"zz").unwrap();
    let spool = Spool::open(dir.path(), SpoolOptions::default()).unwrap();
    assert!(!dir.path().join("spool/orphan.edi").exists());
    assert_eq!(fs::read(dir.path().join("orphaned/orphan.edi")).unwrap(), b"zz");
    assert_eq!(spool.pending_files().unwrap().len(), 1);
    assert_eq!(spool.items(Some(State::Held)).unwrap().len(), 1);
    assert_eq!(spool.items(Some(State::Dead)).unwrap().len(), 0);
    assert_eq!(spool.seen_since("k", 0).unwrap(), Some(5));
    assert_eq!(spool.seen_since("k", 6).unwrap(), None);
    assert_eq!(spool.next_control_number().unwrap(), 1);
    assert_eq!(spool.next_control_number().unwrap(), 2);
    assert_eq!(spool.prune(10).unwrap(), 1);
    assert_eq!(spool.seen_since("k", 0).unwrap(), None);
}
