//! The ledger of a Redis store: one hash per id and UTC day,
//! `<prefix>usage:{<id>}:<day>` (hash-tagged by the id, so an id's days share a Cluster slot),
//! with fields `<bucket>a` (admitted), `<bucket>r` (refused), `<bucket>h` (held) and
//! `<bucket>d` (duplicate), each incremented by `HINCRBY` and written only when not zero.
//!
//! Invariants:
//! - **No round trip per decision**: a flush is one pipeline (split every
//!   [`MAX_PIPELINE`] commands) on a connection of its own, so it never queues with decisions.
//!   On a Redis Cluster a pipeline must stay on one slot, so a flush sends one small pipeline
//!   per id and day, [`CLUSTER_IN_FLIGHT`] at a time.
//! - **Bounded by expiry**: each day's hash expires 7 days after the day ends (`EXPIREAT`, set
//!   with every write), so Redis holds at most 8 days per id; reads keep only the range asked.
//! - **Shared**: every instance on the same Redis adds to the same hashes, so the history is
//!   the sum over instances (what each has flushed).
//! - **Bounded waits**: every call is bounded by the store's timeout (at least 1 s).

use std::time::Duration;

use futures_util::future::join_all;
use tollgate_quota::MeteringId;
use tollgate_quota::store::RedisStore;
use tollgate_quota::store::redis::Conn;
use tollgate_quota::store::redis::tagged_key;

use crate::usage::aggregate::Delta;
use crate::usage::{BUCKET_SECONDS, RETENTION_BUCKETS};

/// Buckets in a day.
const DAY_BUCKETS: i64 = 86_400 / BUCKET_SECONDS;

/// The most commands sent in one pipeline.
pub const MAX_PIPELINE: usize = 10_000;

/// The most commands one delta adds to a pipeline: four `HINCRBY` and one `EXPIREAT`.
const COMMANDS_PER_DELTA: usize = 5;

/// The per-key pipelines a flush keeps in flight at once on a Redis Cluster.
pub const CLUSTER_IN_FLIGHT: usize = 64;

/// See the module docs.
pub struct RedisLedger {
    conn: Conn,
    /// The store's key prefix.
    prefix: String,
    timeout: Duration,
}

impl RedisLedger {
    /// A ledger on `store`'s Redis, over a connection of its own.
    pub fn new(store: &RedisStore) -> Result<Self, String> {
        let conn = store.side_connection().map_err(|e| e.to_string())?;
        Ok(Self {
            conn,
            prefix: store.key_prefix().to_owned(),
            timeout: store.timeout().max(Duration::from_secs(1)),
        })
    }

    fn key(&self, id: &MeteringId, day: i64) -> String {
        tagged_key(&self.prefix, "usage", id.as_str(), &day.to_string())
    }

    /// See [`super::Ledger::write`]. Buckets older than the retention are left to expiry.
    pub async fn write(&self, batch: &[(MeteringId, Delta)]) -> Result<(), String> {
        if self.conn.is_cluster() {
            for chunk in batch.chunks(CLUSTER_IN_FLIGHT) {
                let sent = join_all(chunk.iter().map(|(id, d)| {
                    let mut pipe = redis::pipe();
                    self.add(&mut pipe, id, d);
                    let mut conn = self.conn.clone();
                    async move { pipe.query_async::<()>(&mut conn).await }
                }));
                for result in self.bounded(sent).await? {
                    result.map_err(|e| format!("redis: {e}"))?;
                }
            }
            return Ok(());
        }
        let mut conn = self.conn.clone();
        for chunk in batch.chunks(MAX_PIPELINE / COMMANDS_PER_DELTA) {
            let mut pipe = redis::pipe();
            for (id, d) in chunk {
                self.add(&mut pipe, id, d);
            }
            self.bounded(pipe.query_async::<()>(&mut conn))
                .await?
                .map_err(|e| format!("redis: {e}"))?;
        }
        Ok(())
    }

    /// Adds one delta's increments and its day's expiry to `pipe`.
    fn add(&self, pipe: &mut redis::Pipeline, id: &MeteringId, d: &Delta) {
        let day = d.bucket.div_euclid(DAY_BUCKETS);
        let key = self.key(id, day);
        for (kind, n) in [('a', d.admitted), ('r', d.refused), ('h', d.held), ('d', d.duplicate)] {
            if n > 0 {
                pipe.cmd("HINCRBY").arg(&key).arg(format!("{}{kind}", d.bucket)).arg(n).ignore();
            }
        }
        let expire_at = (day + 1) * 86_400 + RETENTION_BUCKETS * BUCKET_SECONDS;
        pipe.cmd("EXPIREAT").arg(&key).arg(expire_at).ignore();
    }

    /// `work` within the ledger's timeout.
    async fn bounded<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, String> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| format!("redis: no answer within {:?}", self.timeout))
    }

    /// See [`super::Ledger::read`]: one `HGETALL` per day of the range, in one pipeline.
    pub async fn read(&self, id: &MeteringId, from: i64, to: i64) -> Result<Vec<Delta>, String> {
        if from >= to {
            return Ok(Vec::new());
        }
        let days: Vec<i64> =
            (from.div_euclid(DAY_BUCKETS)..=(to - 1).div_euclid(DAY_BUCKETS)).collect();
        let mut pipe = redis::pipe();
        for day in &days {
            pipe.cmd("HGETALL").arg(self.key(id, *day));
        }
        let mut conn = self.conn.clone();
        let asked = pipe.query_async::<Vec<Vec<(String, u64)>>>(&mut conn);
        let hashes = self.bounded(asked).await?.map_err(|e| format!("redis: {e}"))?;
        let mut rows = std::collections::BTreeMap::<i64, Delta>::new();
        for (field, n) in hashes.into_iter().flatten() {
            // Fields are `<bucket><kind>`; anything else (written by hand, say) is skipped.
            let Some((at, kind)) = field.char_indices().next_back() else { continue };
            let Ok(bucket) = field[..at].parse::<i64>() else { continue };
            if !(from..to).contains(&bucket) {
                continue;
            }
            let row = rows.entry(bucket).or_insert_with(|| Delta::empty(bucket));
            match kind {
                'a' => row.admitted = n,
                'r' => row.refused = n,
                'h' => row.held = n,
                'd' => row.duplicate = n,
                _ => {}
            }
        }
        Ok(rows.into_values().collect())
    }
}
