//! Tests that need the store's insides: which lock a step runs under.

use super::*;
use crate::spec::TimeUnit;

/// A reset drops the counters in memory only under the queue's lock (the invariant "resets are
/// ordered before later increments"): while another thread holds that lock, the counter is
/// still in memory, and once the lock is let go the reset completes.
#[test]
fn a_reset_drops_memory_only_under_the_queue_lock() {
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("c.redb"))).unwrap();
    let id = MeteringId::new("Order:Partner1").unwrap();
    let spec = QuotaSpec::new(100, 1, TimeUnit::Day).unwrap();
    runtime().block_on(store.check(&id, &spec, 3)).unwrap();
    assert_eq!(store.len(), 1);
    let held = lock(&store.shared.queue);
    std::thread::scope(|s| {
        let resetting = s.spawn(|| runtime().block_on(store.reset(&id)));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(store.len(), 1, "the reset dropped memory before it held the queue's lock");
        drop(held);
        assert_eq!(resetting.join().unwrap().unwrap(), 1);
    });
    assert_eq!(store.len(), 0);
}
