//! The embedded store keeps the limit across restarts: graceful ones, and a real `kill -9` of a
//! child process after the flush interval (buffered) or right after an answer (strict).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_quota::store::{Durability, EmbeddedOptions, EmbeddedStore};
use tollgate_quota::{
    CounterListing, ManualClock, MeteringId, Outcome, QuotaSpec, Store, TimeUnit, WindowKind,
};

const CHILD_ENV: &str = "TOLLGATE_QUOTA_CRASH_CHILD";

fn spec() -> QuotaSpec {
    QuotaSpec::new(100, 1, TimeUnit::Day).unwrap()
}

fn key() -> MeteringId {
    MeteringId::new("ShipmentStatus:CarrierXYZ").unwrap()
}

fn opts(path: &Path, durability: Durability, flush_ms: u64) -> EmbeddedOptions {
    EmbeddedOptions {
        flush_interval: Duration::from_millis(flush_ms),
        durability,
        ..EmbeddedOptions::new(path)
    }
}

async fn used(store: &EmbeddedStore) -> u64 {
    store.check(&key(), &spec(), 0).await.unwrap().used
}

#[tokio::test]
async fn survives_a_graceful_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    {
        let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 10_000)).unwrap();
        for _ in 0..30 {
            assert!(store.check(&key(), &spec(), 3).await.unwrap().allowed());
        }
        store.check(&key(), &spec(), 20).await.unwrap();
        // The flush interval is 10 s: only the explicit flush (graceful shutdown) writes.
        store.flush().await.unwrap();
    }
    let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 10_000)).unwrap();
    assert_eq!(used(&store).await, 90);
    let d = store.check(&key(), &spec(), 20).await.unwrap();
    assert_eq!(
        (d.outcome, d.used, d.exceed_count, d.total_exceed_count),
        (Outcome::Exceeded, 90, 2, 2)
    );
    assert!(store.check(&key(), &spec(), 10).await.unwrap().allowed());
    assert_eq!(store.check(&key(), &spec(), 1).await.unwrap().outcome, Outcome::Exceeded);
}

#[tokio::test]
async fn dropping_the_store_flushes_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/counters.redb");
    {
        let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 10_000)).unwrap();
        store.check(&key(), &spec(), 7).await.unwrap();
    }
    let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 10_000)).unwrap();
    assert_eq!(used(&store).await, 7);
}

#[tokio::test]
async fn resets_and_expiry_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    let clock = ManualClock::new("2026-11-30T10:00:00Z".parse().unwrap());
    let minute = QuotaSpec::new(5, 1, TimeUnit::Minute).unwrap();
    let rolling = QuotaSpec::new(5, 1, TimeUnit::Hour).unwrap().with_window(WindowKind::Rolling);
    let other = MeteringId::new("Invoice:ACME").unwrap();
    {
        let store = EmbeddedStore::open_with_clock(
            opts(&path, Durability::Strict, 10_000),
            Arc::new(clock.clone()),
        )
        .unwrap();
        store.check(&key(), &spec(), 4).await.unwrap();
        store.check(&key(), &minute, 4).await.unwrap();
        store.check(&other, &rolling, 2).await.unwrap();
        assert_eq!(store.reset(&key()).await.unwrap(), 2);
        store.check(&other, &spec(), 1).await.unwrap();
    }
    // Reopened two minutes later: the reset stays; the rolling counter still counts.
    clock.advance(Duration::from_secs(120));
    {
        let store = EmbeddedStore::open_with_clock(
            opts(&path, Durability::Strict, 10_000),
            Arc::new(clock.clone()),
        )
        .unwrap();
        assert_eq!(store.len(), 2, "only Invoice:ACME's two counters are live");
        assert_eq!(used(&store).await, 0);
        assert_eq!(store.check(&other, &rolling, 0).await.unwrap().used, 2);
        assert_eq!(store.check(&other, &spec(), 0).await.unwrap().used, 1);
    }
    // Two days later everything has expired: nothing loads, and the rows are gone.
    clock.advance(Duration::from_secs(2 * 86_400));
    let store = EmbeddedStore::open_with_clock(
        opts(&path, Durability::Strict, 10_000),
        Arc::new(clock.clone()),
    )
    .unwrap();
    assert_eq!(store.len(), 0);
    assert!(store.counters(&CounterListing::all("")).await.unwrap().counters.is_empty());
}

/// Runs in the child process: counts, reports in `<path>.counted`, then waits to be killed.
fn crash_child(path: &str, durability: &str) -> ! {
    let (durability, flush_ms) = match durability {
        "strict" => (Durability::Strict, 60_000),
        _ => (Durability::Buffered, 50),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(opts(Path::new(path), durability, flush_ms)).unwrap();
        let mut admitted = 0;
        for _ in 0..37 {
            if store.check(&key(), &spec(), 2).await.unwrap().allowed() {
                admitted += 2;
            }
        }
        let report = format!("{path}.counted");
        std::fs::write(format!("{report}.tmp"), admitted.to_string()).unwrap();
        std::fs::rename(format!("{report}.tmp"), report).unwrap();
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    })
}

/// Starts this test binary again as a child that counts into `path`; returns its count once it
/// has been killed with SIGKILL, `wait` after it reported.
fn count_in_child_then_kill(test: &str, path: &Path, durability: &str, wait: Duration) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{durability}:{}", path.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let report = format!("{}.counted", path.display());
    let deadline = Instant::now() + Duration::from_secs(60);
    let counted = loop {
        if let Ok(text) = std::fs::read_to_string(&report) {
            break text.trim().parse::<u64>().unwrap();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited before reporting: {status}");
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the child did not report within a minute");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(wait);
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush.
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed, not finished: {status}");
    counted
}

fn child_role() -> Option<(String, String)> {
    let v = std::env::var(CHILD_ENV).ok()?;
    let (mode, path) = v.split_once(':')?;
    Some((mode.to_owned(), path.to_owned()))
}

#[test]
fn survives_sigkill_after_the_flush_interval() {
    if let Some((mode, path)) = child_role() {
        crash_child(&path, &mode);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    // The child flushes every 50 ms; wait many intervals (a busy machine may delay its flusher
    // thread), then kill it.
    let counted = count_in_child_then_kill(
        "survives_sigkill_after_the_flush_interval",
        &path,
        "buffered",
        Duration::from_millis(1_000),
    );
    assert_eq!(counted, 74);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 50)).unwrap();
        assert_eq!(used(&store).await, 74);
        // The limit holds across the crash: 26 more units, then no more.
        assert!(store.check(&key(), &spec(), 26).await.unwrap().allowed());
        assert_eq!(store.check(&key(), &spec(), 1).await.unwrap().outcome, Outcome::Exceeded);
    });
}

#[test]
fn strict_answers_survive_an_immediate_sigkill() {
    if let Some((mode, path)) = child_role() {
        crash_child(&path, &mode);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    // The child's flush interval is one minute: only strict group commits can have written.
    let counted = count_in_child_then_kill(
        "strict_answers_survive_an_immediate_sigkill",
        &path,
        "strict",
        Duration::ZERO,
    );
    assert_eq!(counted, 74);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(opts(&path, Durability::Strict, 50)).unwrap();
        assert_eq!(used(&store).await, 74);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_concurrent_checks_share_group_commits_and_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    let store = Arc::new(EmbeddedStore::open(opts(&path, Durability::Strict, 100)).unwrap());
    let limit = QuotaSpec::new(150, 1, TimeUnit::Day).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut n = 0;
                for _ in 0..40 {
                    if store.check(&key(), &limit, 1).await.unwrap().allowed() {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, 150);
    drop(store);
    let store = EmbeddedStore::open(opts(&path, Durability::Strict, 100)).unwrap();
    let d = store.check(&key(), &limit, 0).await.unwrap();
    assert_eq!((d.used, d.exceed_count), (150, 320 - 150 + 1));
}

/// Buffered checks on three threads (each queuing on its own lane) race resets of the same ids
/// on a fourth, with a commit every millisecond; after a flush, the file must hold exactly what
/// memory holds, round after round.
#[test]
fn resets_racing_buffered_checks_leave_the_file_as_memory() {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};

    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.redb");
    let limit = QuotaSpec::new(1_000_000, 1, TimeUnit::Day).unwrap();
    let ids: Vec<MeteringId> =
        (0..4).map(|i| MeteringId::new(&format!("Order:Partner{i}")).unwrap()).collect();
    let held = |store: &EmbeddedStore| -> BTreeMap<String, u64> {
        let counters = rt.block_on(store.counters(&CounterListing::all(""))).unwrap().counters;
        counters.into_iter().map(|c| (c.identifier.as_str().to_owned(), c.used)).collect()
    };
    for round in 0..5 {
        let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 1)).unwrap();
        let resetting = AtomicBool::new(true);
        std::thread::scope(|s| {
            for t in 0..3 {
                let (store, ids, limit, resetting) = (&store, &ids, &limit, &resetting);
                s.spawn(move || {
                    let rt = runtime();
                    let mut n = t;
                    while resetting.load(Ordering::Relaxed) {
                        rt.block_on(store.check(&ids[n % ids.len()], limit, 1)).unwrap();
                        n += 1;
                    }
                });
            }
            let rt = runtime();
            for n in 0..40 {
                rt.block_on(store.reset(&ids[n % ids.len()])).unwrap();
            }
            resetting.store(false, Ordering::Relaxed);
        });
        rt.block_on(store.flush()).unwrap();
        let memory = held(&store);
        assert!(!memory.is_empty(), "round {round}: the checks counted");
        drop(store);
        let store = EmbeddedStore::open(opts(&path, Durability::Buffered, 1)).unwrap();
        assert_eq!(held(&store), memory, "round {round}: the file holds what memory held");
    }
}
