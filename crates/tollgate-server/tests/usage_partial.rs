//! The usage history on a real `redis-server`, a batch Redis took in part: while the batch is
//! held and sent again, a read counts each of its units once, and so does Redis once the
//! batch is taken whole.

use jiff::Timestamp;
use tollgate_quota::MeteringId;
use tollgate_quota::store::{AnyStore, RedisOptions, RedisStore};
use tollgate_server::usage::{UsageHistory, UsageOptions};
use tollgate_testkit::RedisServer;

/// Admitted and refused units of `id` over the retained week.
async fn totals(h: &UsageHistory, id: &MeteringId) -> (u64, u64) {
    let now = Timestamp::now();
    let week = jiff::SignedDuration::from_hours(7 * 24);
    let all = h.series(id.as_str(), now - week, now + week).await.unwrap();
    all.iter().fold((0, 0), |(a, r), b| (a + b.admitted, r + b.refused))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_redis_took_in_part_is_read_once_while_it_is_held() {
    let Some(redis) = RedisServer::start() else { return };
    // A user who may not touch the usage keys of ids starting `Usage:Z`: the script call that
    // holds such a key is refused whole (NOPERM), the other calls of the batch are taken.
    let barring = "ACL SETUSER tg on >pw ~tollgate:[^u]* ~tollgate:usage:{Usage:[^Z]* +@all";
    assert_eq!(redis.command(barring).as_deref(), Some("+OK"));
    let mut opts = RedisOptions::new(format!("redis://tg:pw@127.0.0.1:{}/0", redis.port));
    opts.timeout = std::time::Duration::from_secs(2);
    let store = AnyStore::Redis(RedisStore::connect(opts).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let h = UsageHistory::open(&store, dir.path(), UsageOptions::default()).unwrap();

    // 300 ids and the barred one: three script calls of at most 128 keys.
    let ids: Vec<MeteringId> =
        (0..300).map(|i| MeteringId::new(&format!("Usage:P{i}")).unwrap()).collect();
    let barred = MeteringId::new("Usage:Z1").unwrap();
    let now = Timestamp::now();
    for id in ids.iter().chain([&barred]) {
        h.record(id, now, 3, 1);
    }
    assert!(h.flush().await.is_err(), "the barred key's call fails the flush");
    assert!(h.flush().await.is_err(), "and the held batch's next sending");
    let day = now.as_second().div_euclid(86_400);
    let in_redis = |id: &MeteringId| {
        let reply = redis.command(&format!("HLEN tollgate:usage:{{{id}}}:{day}"));
        reply.is_some_and(|r| r != ":0")
    };
    let taken = ids.iter().filter(|id| in_redis(id)).count();
    assert!(taken > 0 && taken < ids.len(), "Redis took {taken} of {} ids", ids.len());
    // Held: Redis's part is not added again.
    for id in &ids {
        assert_eq!(totals(&h, id).await, (3, 1), "{id}");
    }

    // The bar lifted: the held batch is taken whole, each unit once.
    let lifting = "ACL SETUSER tg resetkeys ~* +@all";
    assert_eq!(redis.command(lifting).as_deref(), Some("+OK"));
    h.flush().await.unwrap();
    for id in ids.iter().chain([&barred]) {
        assert_eq!(totals(&h, id).await, (3, 1), "{id}");
        let key = format!("tollgate:usage:{{{id}}}:{day}");
        // An increment by 0 answers the field's value on one line.
        let bucket = now.as_second().div_euclid(300);
        for (kind, units) in [("a", ":3"), ("r", ":1")] {
            let got = redis.command(&format!("HINCRBY {key} {bucket}{kind} 0"));
            assert_eq!(got.as_deref(), Some(units), "{id} {kind}");
        }
    }
}
