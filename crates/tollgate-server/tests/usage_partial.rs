//! The usage history on a real `redis-server`, a batch Redis took in part: while the batch is
//! held and sent again, a read counts each of its units once, and so does Redis once the
//! batch is taken whole; a field Redis refuses is counted as dropped once, however often its
//! batch is sent.

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
async fn a_batch_redis_took_in_part_is_read_once_and_its_drops_counted_once() {
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
    let metrics = tollgate_server::metrics::install();
    let dropped = || {
        let text = metrics.render();
        let line = text.lines().find(|l| l.starts_with("tollgate_usage_dropped_total "));
        line.and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
    };

    // 300 ids and the barred one, in three script calls of at most 128 keys (by id: the
    // barred id's is the last). Before them, in the first call, a key of another type (two
    // fields refused) and a refusal Redis can hold only in part (one cut).
    let ids: Vec<MeteringId> =
        (0..300).map(|i| MeteringId::new(&format!("Usage:P{i}")).unwrap()).collect();
    let barred = MeteringId::new("Usage:Z1").unwrap();
    let (other_type, huge) =
        (MeteringId::new("Usage:A1").unwrap(), MeteringId::new("Usage:B1").unwrap());
    let now = Timestamp::now();
    let day = now.as_second().div_euclid(86_400);
    let set = format!("SET tollgate:usage:{{{other_type}}}:{day} not-a-hash");
    assert_eq!(redis.command(&set).as_deref(), Some("+OK"));
    for id in ids.iter().chain([&barred, &other_type]) {
        h.record(id, now, 3, 1);
    }
    h.record(&huge, now, 0, u64::MAX);
    assert!(h.flush().await.is_err(), "the barred key's call fails the flush");
    assert!(h.flush().await.is_err(), "and the held batch's next sending");
    assert_eq!(dropped(), 3.0, "two fields of another type's key, one cut, each once");
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
    assert_eq!(dropped(), 3.0);
    assert_eq!(totals(&h, &huge).await, (0, i64::MAX as u64));
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
