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
        charge: None,
        part_charges: Vec::new(),
    }
}

#[test]
fn a_change_then_a_later_one_puts_each_item_once_as_the_later_has_it() {
    let first = Change {
        remove_files: vec!["f1".into()],
        put: vec![item("a", "s", State::Received), item("b", "s", State::Held)],
        delete: vec!["x".into()],
        dedup: vec![("k1".into(), 1)],
    };
    let later = Change {
        put: vec![item("a", "s", State::Delivered), item("c", "s", State::Held)],
        dedup: vec![("k2".into(), 2)],
        ..Change::default()
    };
    let both = first.then(later);
    let put: Vec<_> = both.put.iter().map(|i| (i.id.as_str(), i.state)).collect();
    assert_eq!(put, [("b", State::Held), ("a", State::Delivered), ("c", State::Held)]);
    assert_eq!((both.remove_files, both.delete), (vec!["f1".to_owned()], vec!["x".to_owned()]));
    assert_eq!(both.dedup, [("k1".to_owned(), 1), ("k2".to_owned(), 2)]);
}

#[test]
fn parts_are_stored_both_or_neither() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), SpoolOptions::default()).unwrap();
    let files = || std::fs::read_dir(dir.path().join("spool")).unwrap().count();
    let before = files();
    hooks::fail_part_after(dir.path(), 1);
    assert!(spool.store_parts(b"first", b"second").is_err());
    assert_eq!(files(), before, "the first part is taken away again");
    let (a, b) = spool.store_parts(b"first", b"second").unwrap();
    assert_eq!(
        (spool.read(&a, 0, 5).unwrap(), spool.read(&b, 0, 6).unwrap()),
        (b"first".to_vec(), b"second".to_vec())
    );
}

#[test]
fn files_changed_after_they_were_read_get_no_row_nor_a_file_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), SpoolOptions::default()).unwrap();
    let files = || std::fs::read_dir(dir.path().join("spool")).unwrap().count();
    let before = files();
    let batch = [(&b"abc"[..], "x".to_owned()), (&b"def"[..], "y".to_owned())];
    let kept = spool.receive_unchanged(&batch, |i| i == 1).unwrap();
    assert_eq!(kept.iter().map(|(i, r)| (*i, r.origin.as_str())).collect::<Vec<_>>(), [(1, "y")]);
    let pending: Vec<_> = spool.pending_files().unwrap().into_iter().map(|r| r.origin).collect();
    assert_eq!(pending, ["y"]);
    assert_eq!(files(), before + 1);
    // Every file changed: no row, and the spool file goes too.
    assert!(spool.receive_unchanged(&batch, |_| false).unwrap().is_empty());
    assert_eq!(spool.pending_files().unwrap().len(), 1);
    assert_eq!(files(), before + 1, "a spool file no row names is removed");
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

/// An ephemeral spool keeps its files in memory under the same contract as on disk: read by
/// range, a read past the end or of a deleted file is an error, a file copies out. It keeps
/// no `files` rows and no state database on disk, so a backup of it is refused.
#[test]
fn an_ephemeral_spool_keeps_its_files_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions { ephemeral: true, ..Default::default() };
    let spool = Spool::open(dir.path(), options).unwrap();
    let recs = spool.receive(&[(b"abc", "x".into()), (b"defg", "y".into())]).unwrap();
    let part = spool.store_part(b"part").unwrap();
    assert_eq!(fs::read_dir(dir.path().join("spool")).unwrap().count(), 0, "nothing on disk");
    assert!(!dir.path().join(crate::statedb::STATE_DB).exists(), "no state database on disk");
    assert_eq!(
        (spool.next_control_number().unwrap(), spool.next_control_number().unwrap()),
        (1, 2)
    );
    assert!(spool.pending_files().unwrap().is_empty(), "no `files` rows: no restart reads them");
    assert_eq!(spool.read(&recs[1].spool, recs[1].start, recs[1].end).unwrap(), b"defg");
    assert_eq!(spool.read(&part, 1, 3).unwrap(), b"ar");
    let past = spool.read(&part, 2, 9).unwrap_err().to_string();
    assert!(past.contains("range 2..9"), "{past}");
    let backup = tempfile::tempdir().unwrap();
    spool.copy_file(&part, &backup.path().join("p.edi")).unwrap();
    assert_eq!(fs::read(backup.path().join("p.edi")).unwrap(), b"part");
    spool.remove_file(&part);
    assert!(spool.read(&part, 0, 1).is_err(), "a deleted file cannot be read");
    assert_eq!(spool.read(&recs[0].spool, 0, 3).unwrap(), b"abc", "other files stay");
    let refused = spool.backup_to(backup.path()).unwrap_err().to_string();
    assert!(refused.contains("in memory"), "{refused}");
}

/// On a full disk (a real tmpfs, filled) a receive fails without leaving a spool file and the
/// spool reports failing; the probe fails too, and once space is freed it succeeds, clears
/// the failure, and the next receive is recorded.
#[test]
fn a_failed_receive_leaves_nothing_and_the_probe_finds_space_again() {
    let Some(disk) = tollgate_testkit::SmallDisk::mount("4m") else { return };
    let data = disk.path().join("data");
    let spool = Spool::open(&data, SpoolOptions::default()).unwrap();
    let filler = disk.fill();
    assert!(spool.receive(&[(&[b'x'; 8192], "a".into())]).is_err());
    assert_eq!(fs::read_dir(data.join("spool")).unwrap().count(), 0, "a failed write left a file");
    assert!(spool.health().failure().is_some_and(|e| e.contains("No space left")));
    assert!(spool.store_part(&[b'y'; 8192]).is_err());
    assert_eq!(fs::read_dir(data.join("spool")).unwrap().count(), 0);
    assert!(spool.probe().is_err());
    assert!(!data.join(super::health::PROBE_FILE).exists());
    // A state change too large for the pages the database has fails too; redb then refuses
    // every later operation on that handle, so the spool must reopen it.
    let many = Change {
        dedup: (0..20_000).map(|i| (format!("key-{i:08}-{}", "k".repeat(40)), i)).collect(),
        ..Change::default()
    };
    assert!(spool.commit(&many).is_err());

    fs::remove_file(filler).unwrap();
    spool.probe().unwrap();
    assert_eq!(spool.health().failure(), None);
    let recs = spool.receive(&[(b"abc", "a".into())]).unwrap();
    assert_eq!(spool.pending_files().unwrap(), recs);
    spool.commit(&many).unwrap();
    assert_eq!(
        spool.seen_since("key-00000007-kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", 0).unwrap(),
        Some(7)
    );
}

/// Counts the stored rows per tally group, as the tally should have them.
fn counted(spool: &Spool) -> Vec<(crate::tally::TallyKey, [u64; 7], [u64; 7])> {
    let mut groups: std::collections::BTreeMap<crate::tally::TallyKey, ([u64; 7], [u64; 7])> =
        Default::default();
    for i in spool.items(None).unwrap() {
        let key = crate::tally::TallyKey {
            partner: i.partner.clone(),
            route: i.route.clone(),
            metering_id: i.metering_id.as_ref().map(|m| m.as_str().to_owned()),
        };
        let s = State::ALL.iter().position(|s| *s == i.state).unwrap();
        let g = groups.entry(key).or_default();
        g.0[s] += 1;
        g.1[s] += i.weight;
    }
    groups.into_iter().map(|(k, (n, u))| (k, n, u)).collect()
}

fn tallied(spool: &Spool) -> Vec<(crate::tally::TallyKey, [u64; 7], [u64; 7])> {
    spool.tally().snapshot().into_iter().map(|(k, c)| (k, c.items, c.units)).collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever commits put, replace, delete and prune, the tally counts exactly the stored
    /// rows, and the filtered pages and counts agree with a filter over every row: in the
    /// state database and in an ephemeral spool's memory rows alike.
    #[test]
    fn the_tally_and_the_filtered_reads_follow_the_rows(
        steps in proptest::collection::vec(
            proptest::collection::vec((0u8..12, 0u8..7, 0u8..3, 1u64..5, proptest::bool::ANY), 1..8),
            1..12,
        ),
        ephemeral in proptest::bool::ANY,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions { ephemeral, ..Default::default() };
        let spool = Spool::open(dir.path(), options).unwrap();
        // What the rows should be: a change's last put of an item wins, and its deletes last.
        let mut model: std::collections::BTreeMap<String, (State, u64)> = Default::default();
        for step in &steps {
            let mut change = Change::default();
            for &(n, state, partner, weight, delete) in step {
                // Ids start with their receive time; `received_at` may be a little earlier.
                let id = format!("{:013}-000000-{n}", 100_000 + i64::from(n) * 40_000);
                if delete {
                    change.delete.push(id);
                    continue;
                }
                let mut it = item(&id, "F", State::ALL[usize::from(state)]);
                it.partner = format!("P{partner}");
                it.route = (partner != 2).then(|| "R".to_owned());
                it.weight = weight;
                it.received_at = 70_000 + i64::from(n) * 40_000;
                change.put.push(it);
            }
            spool.commit(&change).unwrap();
            model.extend(change.put.iter().map(|i| (i.id.clone(), (i.state, i.weight))));
            for id in &change.delete {
                model.remove(id);
            }
            let rows: Vec<(String, (State, u64))> =
                spool.items(None).unwrap().into_iter().map(|i| (i.id, (i.state, i.weight))).collect();
            proptest::prop_assert_eq!(rows, model.clone().into_iter().collect::<Vec<_>>());
            proptest::prop_assert_eq!(tallied(&spool), counted(&spool));
        }
        // The prune drops exactly the delivered items received before its bound (it reads
        // only the ids up to a little after it).
        let kept: Vec<String> = spool
            .items(None)
            .unwrap()
            .into_iter()
            .filter(|i| !(i.state == State::Delivered && i.received_at < 300_000))
            .map(|i| i.id)
            .collect();
        spool.prune(300_000).unwrap();
        let after: Vec<String> = spool.items(None).unwrap().into_iter().map(|i| i.id).collect();
        proptest::prop_assert_eq!(after, kept);
        proptest::prop_assert_eq!(tallied(&spool), counted(&spool));
        let filter = crate::filter::QueueFilter {
            partner: Some("P1".into()),
            from_ms: Some(250_000),
            to_ms: Some(450_000),
            ..Default::default()
        };
        let all: Vec<String> = spool
            .items(None)
            .unwrap()
            .into_iter()
            .filter(|i| filter.matches(i))
            .map(|i| i.id)
            .collect();
        let mut paged = Vec::new();
        let mut cursor = None;
        loop {
            let (items, next) = spool.page(&filter, cursor.as_deref(), 2).unwrap();
            paged.extend(items.into_iter().map(|i| i.id));
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        proptest::prop_assert_eq!(&paged, &all);
        proptest::prop_assert_eq!(spool.count(&filter).unwrap(), all.len() as u64);
        let held = spool.items(Some(State::Held)).unwrap().iter().filter(|i| i.partner == "P0").count();
        proptest::prop_assert_eq!(spool.tally().count(Some("P0"), None, Some(State::Held)), held as u64);
        if !ephemeral {
            drop(spool);
            let spool = Spool::open(dir.path(), options).unwrap();
            proptest::prop_assert_eq!(tallied(&spool), counted(&spool));
        }
    }
}

/// A spool file id issued again (a restart in a millisecond already used, a clock stepped
/// back) fails its write and leaves the file it names alone: it was created truncating, and a
/// failed write then removed the other write's file.
#[test]
fn a_spool_file_id_issued_again_never_touches_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), SpoolOptions::default()).unwrap();
    let recs = spool.receive(&[(b"abc", "x".into())]).unwrap();
    let file = recs[0].spool.clone();
    let err = spool.write_file(&file, [&b"zzz"[..]]).unwrap_err();
    let err = spool.discard(&file, err);
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(spool.read(&file, 0, 3).unwrap(), b"abc");
    // Two spools opened one after the other draw their sequences from different points.
    drop(spool);
    let first = Spool::open(dir.path(), SpoolOptions::default()).unwrap().new_file_id();
    let second = Spool::open(dir.path(), SpoolOptions::default()).unwrap().new_file_id();
    assert_ne!(first[14..], second[14..], "{first} {second}");
}
