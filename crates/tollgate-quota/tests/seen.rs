//! Keys seen (the gateway's transaction fingerprints) on every store: remembered once, shared
//! by every instance on one store, forgotten after their ttl, and on the embedded store still
//! known after a reopen.

use tollgate_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tollgate_quota::store::{
    EmbeddedOptions, EmbeddedStore, MemoryStore, RedisOptions, RedisStore,
};
use tollgate_quota::{AnyStore, ManualClock, Seen};

const TTL: Duration = Duration::from_secs(3600);

fn clock() -> ManualClock {
    ManualClock::new("2026-12-01T00:00:00Z".parse::<Timestamp>().unwrap())
}

/// The contract every store keeps on a clock the test moves.
async fn claims_once_until_expiry(store: &impl Seen, clock: &ManualClock) {
    assert_eq!(store.seen(&["a", "b"], "other").await.unwrap(), [false, false]);
    assert_eq!(store.claim(&["a"], "item-1", TTL).await.unwrap(), [true]);
    assert_eq!(store.claim(&["a", "b"], "item-2", TTL).await.unwrap(), [false, true]);
    assert_eq!(store.claim(&["a"], "item-1", TTL).await.unwrap(), [true], "its owner's again");
    assert_eq!(store.seen(&["a", "b", "c"], "other").await.unwrap(), [true, true, false]);
    assert_eq!(store.seen(&["a", "b"], "item-1").await.unwrap(), [false, true], "not its own");
    let named = store.holders(&["a", "b", "c"], "item-2").await.unwrap();
    assert_eq!(named, [Some("item-1".to_owned()), None, None], "a copy names its holder");
    store.release(&["a", "b"], "item-1").await.unwrap();
    assert_eq!(store.seen(&["a", "b"], "other").await.unwrap(), [false, true], "b is item-2's");
    assert_eq!(store.claim(&["a"], "item-3", TTL).await.unwrap(), [true], "a was freed");
    clock.advance(TTL);
    assert_eq!(store.seen(&["a"], "other").await.unwrap(), [false], "forgotten after the ttl");
    assert_eq!(store.claim(&["a"], "item-4", TTL).await.unwrap(), [true], "and claimable again");
    assert_eq!(store.claim(&[], "item-4", TTL).await.unwrap(), Vec::<bool>::new());
    store.release(&[], "item-4").await.unwrap();
    hands_over_once(store, clock).await;
}

/// A hand-over is a compare-and-set on the owner, with the new owner's ttl.
async fn hands_over_once(store: &impl Seen, clock: &ManualClock) {
    assert!(!store.hand_over("h", "p1", "done", TTL).await.unwrap(), "nobody holds it");
    assert_eq!(store.claim(&["h"], "p1", Duration::from_secs(10)).await.unwrap(), [true]);
    assert!(!store.hand_over("h", "p2", "done", TTL).await.unwrap(), "p2 does not hold it");
    assert!(store.hand_over("h", "p1", "done", TTL).await.unwrap());
    assert!(!store.hand_over("h", "p1", "again", TTL).await.unwrap(), "once only");
    clock.advance(Duration::from_secs(60));
    assert_eq!(store.holders(&["h"], "").await.unwrap(), [Some("done".to_owned())], "new ttl");
    clock.advance(TTL);
    assert!(!store.hand_over("h", "done", "later", TTL).await.unwrap(), "expired");
}

#[tokio::test]
async fn memory_and_embedded_claim_once_until_expiry() {
    let c = clock();
    claims_once_until_expiry(&MemoryStore::with_clock(Arc::new(c.clone())), &c).await;
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let embedded = EmbeddedStore::open_with_clock(
        EmbeddedOptions::new(dir.path().join("c.redb")),
        Arc::new(c.clone()),
    )
    .unwrap();
    claims_once_until_expiry(&embedded, &c).await;
}

#[tokio::test]
async fn an_embedded_key_is_still_known_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.redb");
    {
        let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).unwrap();
        assert_eq!(store.claim(&["fp-1"], "item-1", TTL).await.unwrap(), [true]);
    }
    let store = EmbeddedStore::open(EmbeddedOptions::new(&path)).unwrap();
    assert_eq!(store.seen(&["fp-1", "fp-2"], "item-2").await.unwrap(), [true, false]);
    assert_eq!(store.claim(&["fp-1"], "item-2", TTL).await.unwrap(), [false]);
    assert_eq!(store.claim(&["fp-1"], "item-1", TTL).await.unwrap(), [true], "still item-1's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_of_one_key_give_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        Arc::new(AnyStore::Memory(MemoryStore::new())),
        Arc::new(AnyStore::Embedded(
            EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("c.redb"))).unwrap(),
        )),
    ];
    for store in stores {
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let s = Arc::clone(&store);
                let owner = format!("item-{i}");
                tokio::spawn(async move { s.claim(&["same"], &owner, TTL).await.unwrap()[0] })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert_eq!(winners, 1, "{}", store.kind());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redis_instances_share_one_view_and_redis_expires_the_keys() {
    let Some(server) = support::RedisServer::start() else { return };
    let connect = || async {
        let mut opts = RedisOptions::new(server.url());
        opts.key_prefix = "t:".into();
        opts.timeout = Duration::from_secs(2);
        Arc::new(RedisStore::connect(opts).await.unwrap())
    };
    let (a, b) = (connect().await, connect().await);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
            let owner = format!("item-{i}");
            tokio::spawn(async move { s.claim(&["fp:{odd}%"], &owner, TTL).await.unwrap()[0] })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1, "of 200 claims over two instances, one stores the key");
    assert_eq!(b.seen(&["fp:{odd}%", "fp:other"], "item-x").await.unwrap(), [true, false]);
    b.release(&["fp:{odd}%"], "nobody").await.unwrap();
    assert_eq!(
        a.seen(&["fp:{odd}%"], "item-x").await.unwrap(),
        [true],
        "only its owner releases it"
    );
    // A 2 s life: long enough that the third claim comes before it ends on a busy machine.
    let life = Duration::from_secs(2);
    assert_eq!(a.claim(&["short"], "x", life).await.unwrap(), [true]);
    assert_eq!(b.claim(&["short"], "x", life).await.unwrap(), [true]);
    assert_eq!(b.claim(&["short"], "y", life).await.unwrap(), [false]);
    tokio::time::sleep(life + Duration::from_millis(500)).await;
    assert_eq!(b.seen(&["short"], "y").await.unwrap(), [false], "Redis expired it");
    // Of 100 hand-overs from one owner over two instances, one wins.
    assert_eq!(a.claim(&["ho{"], "pending", TTL).await.unwrap(), [true]);
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
            tokio::spawn(async move {
                s.hand_over("ho{", "pending", &format!("to-{i}"), TTL).await.unwrap()
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap());
    }
    assert_eq!(winners, 1);
}
