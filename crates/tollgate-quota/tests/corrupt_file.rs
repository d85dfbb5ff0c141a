//! A damaged counters file is never taken for an empty one: a zero-length, truncated or
//! byte-flipped `counters.redb` makes `EmbeddedStore::open` refuse with an error naming the
//! file and what to do, without panicking, and so does a row redb reads but the store cannot
//! (it was dropped, its counter back at zero); `OnCorrupt::MoveAside` renames it to
//! `<name>.corrupt-<unix-seconds>` and starts empty.

use std::path::{Path, PathBuf};

use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore, OnCorrupt};
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit};

fn spec() -> QuotaSpec {
    QuotaSpec::new(100, 1, TimeUnit::Day).unwrap_or_else(|e| panic!("{e}"))
}

/// Writes a counters file holding 300 counters that each used 60 of 100.
async fn counted_file(dir: &Path) -> PathBuf {
    let path = dir.join("counters.redb");
    let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).unwrap();
    for i in 0..300 {
        let id = MeteringId::new(&format!("Damage:{i:04}")).unwrap();
        assert!(store.check(&id, &spec(), 60).await.unwrap().allowed());
    }
    store.flush().await.unwrap();
    drop(store);
    path
}

/// A named way to damage a file's bytes.
type Damage = (&'static str, fn(&mut Vec<u8>));

/// The ways a file gets damaged, each applied to a fresh copy.
fn damages() -> Vec<Damage> {
    vec![
        ("zero-length", |b| b.clear()),
        ("truncated to half", |b| b.truncate(b.len() / 2)),
        ("truncated to 100 bytes", |b| b.truncate(100)),
        ("header bytes flipped", |b| b[..64].iter_mut().for_each(|x| *x ^= 0xA5)),
        ("every page after the header flipped", |b| b[4096..].iter_mut().for_each(|x| *x ^= 0x5A)),
        ("not a redb file", |b| *b = b"counters, honestly\n".repeat(400)),
    ]
}

#[tokio::test]
async fn damaged_files_are_refused_with_the_file_named() {
    for (what, damage) in damages() {
        let dir = tempfile::tempdir().unwrap();
        let path = counted_file(dir.path()).await;
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        let opened = std::panic::catch_unwind(|| EmbeddedStore::open(EmbeddedOptions::new(&path)));
        let result = opened.unwrap_or_else(|_| panic!("{what}: open panicked"));
        let err = match result {
            Ok(store) => {
                // Accepting the file is only fine if nothing was forgotten.
                let id = MeteringId::new("Damage:0000").unwrap();
                let used = store.check(&id, &spec(), 0).await.map(|d| d.used);
                panic!("{what}: opened the damaged file (Damage:0000 used = {used:?})");
            }
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&path.display().to_string()), "{what}: {err}");
        assert!(err.contains("corrupt"), "{what}: {err}");
        assert!(err.contains("--move-aside-corrupt") && err.contains("Restore"), "{what}: {err}");
        // Refusing changes nothing on disk.
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{what}: the file was modified");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{what}: {names:?}");
    }
}

/// A row redb reads but the store cannot (a damaged value, or one written by a newer format,
/// here its version byte 2) makes the file refused as damage. It was dropped with a warning,
/// and its counter started again at zero.
#[tokio::test]
async fn a_row_the_store_cannot_read_is_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = counted_file(dir.path()).await;
    {
        use redb::ReadableTable;
        let table: redb::TableDefinition<'_, &[u8], &[u8]> = redb::TableDefinition::new("counters");
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(table).unwrap();
            let (key, mut value) = {
                let (k, v) = t.iter().unwrap().next().unwrap().unwrap();
                (k.value().to_vec(), v.value().to_vec())
            };
            value[0] = 2;
            t.insert(key.as_slice(), value.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = match EmbeddedStore::open(EmbeddedOptions::new(&path)) {
        Ok(_) => panic!("opened a file with a row it cannot read"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("unknown row version 2") && err.contains("corrupt"), "{err}");
    assert!(err.contains("--move-aside-corrupt"), "{err}");
    // Every row is still there, the unreadable one included.
    let table: redb::TableDefinition<'_, &[u8], &[u8]> = redb::TableDefinition::new("counters");
    let db = redb::Database::open(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let t = txn.open_table(table).unwrap();
    assert_eq!(redb::ReadableTableMetadata::len(&t).unwrap(), 300);
}

#[tokio::test]
async fn move_aside_renames_the_damaged_file_and_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = counted_file(dir.path()).await;
    std::fs::write(&path, b"").unwrap();
    let before =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let opts = EmbeddedOptions { on_corrupt: OnCorrupt::MoveAside, ..EmbeddedOptions::new(&path) };
    let store = EmbeddedStore::open(opts).unwrap();
    let id = MeteringId::new("Damage:0000").unwrap();
    assert_eq!(store.check(&id, &spec(), 1).await.unwrap().used, 1);
    store.flush().await.unwrap();
    drop(store);
    let aside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("counters.redb.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let secs: u64 = aside[0]["counters.redb.corrupt-".len()..].parse().unwrap();
    assert!(secs >= before && secs <= before + 60, "{secs}");
    assert_eq!(std::fs::metadata(dir.path().join(&aside[0])).unwrap().len(), 0);
    // The new file is a working one: it reopens with what was counted since.
    let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).unwrap();
    assert_eq!(store.check(&id, &spec(), 0).await.unwrap().used, 1);
}
