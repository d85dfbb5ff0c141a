//! A full disk under the embedded store, for real: a small tmpfs mounted for the test, filled
//! with a filler file until writes fail, then freed. Meanwhile buffered checks are refused (not
//! answered as if saved); once space is back the store writes again without a restart, and what
//! it admitted is on disk.
//!
//! Mounting needs root (CAP_SYS_ADMIN). Without it the test says so loudly, and fails when `CI`
//! is set.

use std::time::{Duration, Instant};

use tollgate_testkit::SmallDisk;

use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore};
use tollgate_quota::{MeteringId, QuotaSpec, Store, TimeUnit, WindowKind};

fn spec() -> QuotaSpec {
    QuotaSpec::new(1_000, 1, TimeUnit::Day).unwrap().with_window(WindowKind::Rolling)
}

fn id(i: usize) -> MeteringId {
    MeteringId::new(&format!("DiskFull:{i:06}:{}", "x".repeat(200))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_buffered_checks_and_recovers_once_space_is_freed() {
    let Some(disk) = SmallDisk::mount("4m") else { return };
    let path = disk.path().join("counters.redb");
    let opts = EmbeddedOptions {
        flush_interval: Duration::from_millis(20),
        ..EmbeddedOptions::new(&path)
    };
    let store = EmbeddedStore::open(opts.clone()).unwrap();
    assert!(store.check(&id(0), &spec(), 7).await.unwrap().allowed());
    store.flush().await.unwrap();

    let filler = disk.fill();
    // Grow the file until a commit fails: distinct ids with long keys need new pages.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 1;
    loop {
        assert!(Instant::now() < deadline, "no commit failed on a full disk");
        match store.check(&id(i), &spec(), 1).await {
            Ok(_) => {}
            Err(_) => break,
        }
        i += 1;
        if i % 200 == 0 && store.flush().await.is_err() {
            break;
        }
    }
    assert!(store.last_error().is_some());
    // While the disk is full, a buffered check is refused rather than answered as saved, and
    // counts nothing.
    let before = store.len();
    let refused = store.check(&id(0), &spec(), 1).await;
    let err = refused.expect_err("a buffered check answered while nothing can be saved");
    assert!(err.to_string().contains("cannot be written"), "{err}");
    assert_eq!(store.len(), before);

    // Space comes back: the store writes again by itself, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.last_error().is_some() {
        assert!(
            Instant::now() < deadline,
            "still failing 10 s after space was freed: {:?}",
            store.last_error()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = store.check(&id(0), &spec(), 1).await.unwrap();
    assert_eq!(d.used, 8);
    store.flush().await.unwrap();
    let admitted = store.len();
    drop(store);

    // Everything admitted is on disk.
    let store = EmbeddedStore::open(opts).unwrap();
    assert_eq!(store.len(), admitted);
    assert_eq!(store.check(&id(0), &spec(), 0).await.unwrap().used, 8);
}
