//! The ledger of a Redis store: one hash per id and UTC day,
//! `<prefix>usage:{<id>}:<day>` (hash-tagged by the id, so an id's days share a Cluster slot),
//! with fields `<bucket>a` (admitted), `<bucket>r` (refused), `<bucket>h` (held) and
//! `<bucket>d` (duplicate), each incremented and written only when not zero, and one field
//! `w:<writer>` per process that has written the hash.
//!
//! Invariants:
//! - **A batch counts once.** `write.lua` adds a batch's units to an id's day only when the
//!   writer's field there holds a lower batch number than this batch's, then stores the
//!   number; a script runs atomically. The history sends a failed batch again as it was, never
//!   merged with newer units, and numbers its batches in rising order (see [`crate::usage`]),
//!   so a batch sent twice — its reply lost after Redis ran it, its pipeline failed part way —
//!   adds its units once. The writer is a random number drawn at start-up: a restarted process
//!   is a new writer.
//! - **A key that cannot take the batch does not block the rest.** A key of another type
//!   (written by hand) loses that id's units for the day, and a count that would pass
//!   2^63 - 1 loses its increment; the script goes on with the other keys and names the key,
//!   and each field refused counts one in `tollgate_usage_dropped_total` (the key is logged),
//!   once per batch however often the batch is sent.
//!   The batch's number is stored before its units, so such a key is not added to again when
//!   the batch is sent again. A call Redis refuses as a whole (out of memory, a replica, a
//!   timeout) fails the flush, and the batch is sent again.
//! - **No round trip per decision**: a flush is one pipeline of script calls of up to
//!   [`KEYS_PER_CALL`] keys each (split every [`MAX_PIPELINE`] calls, each pipeline led by a
//!   `SCRIPT LOAD` so a restarted Redis knows the script) on a connection of its own, so it
//!   never queues with decisions. On a Redis Cluster keys of one call must share a slot, so a
//!   flush makes one call per id and day, [`CLUSTER_IN_FLIGHT`] at a time.
//! - **Bounded by expiry**: each day's hash expires 7 days after the day ends (`EXPIREAT`, set
//!   with each writer's first write to it, in the same script call as the units), so Redis
//!   holds at most 8 days per id; reads keep only the range asked.
//! - **Shared**: every instance on the same Redis adds to the same hashes, so the history is
//!   the sum over instances (what each has flushed).
//! - **Bounded waits**: every call is bounded by the store's timeout (at least 1 s).

use std::time::Duration;

use futures_util::future::join_all;
use redis::RedisResult;
use tollgate_quota::MeteringId;
use tollgate_quota::store::RedisStore;
use tollgate_quota::store::redis::Conn;
use tollgate_quota::store::redis::tagged_key;

use crate::usage::aggregate::Delta;
use crate::usage::ledger::Stored;
use crate::usage::{BUCKET_SECONDS, DROPPED, RETENTION_BUCKETS};

/// Buckets in a day.
const DAY_BUCKETS: i64 = 86_400 / BUCKET_SECONDS;

/// The most script calls sent in one pipeline.
pub const MAX_PIPELINE: usize = 1_000;

/// The most keys one script call writes (on one Redis; one on a Cluster): a call blocks Redis
/// for its duration, about 1.5 µs a key.
pub const KEYS_PER_CALL: usize = 128;

/// The per-key script calls a flush keeps in flight at once on a Redis Cluster.
pub const CLUSTER_IN_FLIGHT: usize = 64;

/// Adds one batch's units to one hash, once (see the module docs).
const WRITE_LUA: &str = include_str!("write.lua");

/// See the module docs.
pub struct RedisLedger {
    conn: Conn,
    /// The store's key prefix.
    prefix: String,
    timeout: Duration,
    /// This process's field in each hash it writes: `w:<random number>`.
    writer: String,
    script: redis::Script,
    /// The fields counted as dropped while sending the current batch: a batch sent again
    /// (another key's call failed) finds the same key of another type, and counts it once.
    dropped: std::sync::Mutex<Dropped>,
}

/// See [`RedisLedger::dropped`].
#[derive(Default)]
struct Dropped {
    /// The batch the fields belong to.
    number: u64,
    /// `<key> <field>` of each field counted.
    fields: std::collections::HashSet<String>,
}

/// One id's units for one day of a batch: one key of a script call.
struct DayWrite {
    key: String,
    expire_at: i64,
    /// `<bucket><kind>` fields and what to add to them.
    fields: Vec<(String, u64)>,
}

impl RedisLedger {
    /// A ledger on `store`'s Redis, over a connection of its own.
    pub fn new(store: &RedisStore) -> Result<Self, String> {
        let conn = store.side_connection().map_err(|e| e.to_string())?;
        Ok(Self {
            conn,
            prefix: store.key_prefix().to_owned(),
            timeout: store.timeout().max(Duration::from_secs(1)),
            writer: format!("w:{}", rand::random::<u64>()),
            script: redis::Script::new(WRITE_LUA),
            dropped: std::sync::Mutex::default(),
        })
    }

    fn key(&self, id: &MeteringId, day: i64) -> String {
        tagged_key(&self.prefix, "usage", id.as_str(), &day.to_string())
    }

    /// See [`super::Ledger::write`]: batch `number` (rising) adds its units once, however
    /// often it is sent. Buckets older than the retention are left to expiry.
    pub async fn write(&self, batch: &[(MeteringId, Delta)], number: u64) -> Result<(), String> {
        let writes = self.day_writes(batch, number);
        if self.conn.is_cluster() {
            for chunk in writes.chunks(CLUSTER_IN_FLIGHT) {
                let sent = join_all(chunk.iter().map(|w| {
                    let mut call = self.script.key(&w.key);
                    call.arg(self.argv(std::slice::from_ref(w), number));
                    let mut conn = self.conn.clone();
                    async move { call.invoke_async::<Vec<usize>>(&mut conn).await }
                }));
                let calls = chunk.chunks(1);
                self.settle(calls, self.bounded(sent).await?, number)?;
            }
            return Ok(());
        }
        let mut conn = self.conn.clone();
        for chunk in writes.chunks(MAX_PIPELINE * KEYS_PER_CALL) {
            let mut pipe = redis::pipe();
            pipe.cmd("SCRIPT").arg("LOAD").arg(WRITE_LUA).ignore();
            for call in chunk.chunks(KEYS_PER_CALL) {
                pipe.cmd("EVALSHA").arg(self.script.get_hash()).arg(call.len());
                pipe.arg(call.iter().map(|w| w.key.as_str()).collect::<Vec<_>>());
                pipe.arg(self.argv(call, number));
            }
            let replies = self
                .bounded(
                    pipe.ignore_errors().query_async::<Vec<RedisResult<Vec<usize>>>>(&mut conn),
                )
                .await?
                .map_err(|e| format!("redis: {e}"))?;
            self.settle(chunk.chunks(KEYS_PER_CALL), replies, number)?;
        }
        Ok(())
    }

    /// The batch's deltas grouped by id and day, one key each: a second write of the
    /// same key and batch would add nothing (see the module docs).
    fn day_writes(&self, batch: &[(MeteringId, Delta)], number: u64) -> Vec<DayWrite> {
        let day = |d: &Delta| d.bucket.div_euclid(DAY_BUCKETS);
        let mut order: Vec<&(MeteringId, Delta)> = batch.iter().collect();
        order.sort_by(|(a, x), (b, y)| (a, day(x)).cmp(&(b, day(y))));
        let mut writes: Vec<DayWrite> = Vec::new();
        let mut last: Option<(&MeteringId, i64)> = None;
        for (id, d) in order {
            if last != Some((id, day(d))) {
                last = Some((id, day(d)));
                writes.push(DayWrite {
                    key: self.key(id, day(d)),
                    expire_at: (day(d) + 1) * 86_400 + RETENTION_BUCKETS * BUCKET_SECONDS,
                    fields: Vec::new(),
                });
            }
            let Some(w) = writes.last_mut() else { continue };
            for (kind, n) in
                [('a', d.admitted), ('r', d.refused), ('h', d.held), ('d', d.duplicate)]
            {
                if n > 0 {
                    // Redis counts in i64: a larger sum (weights near 2^64) is cut to the most
                    // it holds, and counted as one entry dropped.
                    let field = format!("{}{kind}", d.bucket);
                    if n > i64::MAX as u64 {
                        self.count_dropped(number, format!("{} {field}", w.key));
                    }
                    w.fields.push((field, n.min(i64::MAX as u64)));
                }
            }
        }
        writes
    }

    /// `write.lua`'s arguments for the keys of `call` in batch `number`.
    fn argv(&self, call: &[DayWrite], number: u64) -> Vec<String> {
        let mut argv = vec![self.writer.clone(), number.to_string()];
        for w in call {
            argv.push(w.expire_at.to_string());
            argv.push(w.fields.len().to_string());
            for (field, n) in &w.fields {
                argv.push(field.clone());
                argv.push(n.to_string());
            }
        }
        argv
    }

    /// Reads the replies to `calls`: the keys that refused their units lose them (counted and
    /// logged); a call Redis refused fails the flush, to be sent again.
    fn settle<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a [DayWrite]>,
        replies: Vec<RedisResult<Vec<usize>>>,
        number: u64,
    ) -> Result<(), String> {
        if replies.len() != calls.len() {
            return Err(format!("redis: {} replies to {} calls", replies.len(), calls.len()));
        }
        let mut failed = None;
        for (call, reply) in calls.zip(replies) {
            match reply {
                Ok(refused) => {
                    // One position per refused field, a key's side by side.
                    let mut nth = 0;
                    for (i, &k) in refused.iter().enumerate() {
                        nth = if i > 0 && refused[i - 1] == k { nth + 1 } else { 0 };
                        let Some(w) = k.checked_sub(1).and_then(|k| call.get(k)) else { continue };
                        if self.count_dropped(number, format!("{} #{nth}", w.key)) && nth == 0 {
                            tracing::warn!(key = %w.key, "a usage key refused units (another type, or a count out of range); they are dropped");
                        }
                    }
                }
                Err(e) => {
                    failed.get_or_insert_with(|| format!("redis: {e}"));
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Counts one dropped field in `tollgate_usage_dropped_total`, once per batch `number`;
    /// whether it was counted now.
    fn count_dropped(&self, number: u64, field: String) -> bool {
        let mut dropped = self.dropped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if dropped.number != number {
            *dropped = Dropped { number, fields: Default::default() };
        }
        let new = dropped.fields.insert(field);
        if new {
            metrics::counter!(DROPPED).increment(1);
        }
        new
    }

    /// `work` within the ledger's timeout.
    async fn bounded<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, String> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| format!("redis: no answer within {:?}", self.timeout))
    }

    /// See [`super::Ledger::read`]: one `HGETALL` per day of the range, in one pipeline; this
    /// writer's field in each day says which batch it wrote there last.
    pub async fn read(&self, id: &MeteringId, from: i64, to: i64) -> Result<Stored, String> {
        let mut stored = Stored { buckets: Vec::new(), taken: Vec::new() };
        if from >= to {
            return Ok(stored);
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
        for (day, hash) in days.iter().zip(hashes) {
            let day_buckets = day * DAY_BUCKETS..(day + 1) * DAY_BUCKETS;
            if let Some((_, last)) = hash.iter().find(|(field, _)| *field == self.writer) {
                stored.taken.push((day_buckets, *last));
            }
            for (field, n) in hash {
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
        }
        stored.buckets = rows.into_values().collect();
        Ok(stored)
    }
}
