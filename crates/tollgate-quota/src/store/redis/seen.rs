//! The Redis store's keys seen: each key is `<prefix>seen:{<key>}` (its own hash tag) holding
//! its owner, with a `PX` expiry; claims, hand-overs and releases are one script run per key,
//! pipelined in one round trip (see `store::seen` for the contract). On a cluster the keys of one call lie
//! on different slots, so each key's command is sent on its own, all at once.

use std::time::Duration;

use super::{RedisStore, key};
use crate::store::StoreError;
use crate::store::seen::Seen;

impl Seen for RedisStore {
    async fn holders(&self, keys: &[&str], owner: &str) -> Result<Vec<Option<String>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let gets = keys.iter().map(|k| {
            let mut get = redis::cmd("GET");
            get.arg(key::seen_key(&self.opts.key_prefix, k));
            get
        });
        let owners = self.per_key::<Option<String>>(gets.collect()).await?;
        Ok(owners.into_iter().map(|who| who.filter(|w| w != owner)).collect())
    }

    async fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        // One script run per key (each key is its own hash tag, so this also holds on a
        // cluster): of two instances claiming one key at once, exactly one gets 1.
        let answers = self.each_key(CLAIM_SCRIPT, keys, owner, Some(ttl_ms)).await?;
        Ok(answers.iter().map(|&a| a == 1).collect())
    }

    async fn release(&self, keys: &[&str], owner: &str) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.each_key(RELEASE_SCRIPT, keys, owner, None).await.map(drop)
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut call = redis::cmd("EVAL");
        call.arg(HAND_OVER_SCRIPT)
            .arg(1)
            .arg(key::seen_key(&self.opts.key_prefix, key))
            .arg(from)
            .arg(to)
            .arg(ttl_ms);
        let answers = self.per_key::<i64>(vec![call]).await?;
        Ok(answers.first() == Some(&1))
    }
}

impl RedisStore {
    /// Runs `script` once per key (as `KEYS[1]`, with `ARGV` the owner and `extra`), in one
    /// round trip (see [`RedisStore::per_key`]); the scripts' integer answers in key order.
    async fn each_key(
        &self,
        script: &str,
        keys: &[&str],
        owner: &str,
        extra: Option<u64>,
    ) -> Result<Vec<i64>, StoreError> {
        let calls = keys.iter().map(|k| {
            let mut call = redis::cmd("EVAL");
            call.arg(script).arg(1).arg(key::seen_key(&self.opts.key_prefix, k)).arg(owner);
            if let Some(x) = extra {
                call.arg(x);
            }
            call
        });
        self.per_key::<i64>(calls.collect()).await
    }

    /// Runs commands of one key each and returns their answers in order: pipelined in one
    /// round trip on one server; on a cluster (where a pipeline must stay on one slot) sent
    /// each to its key's master, all at once. Bounded by the timeout either way.
    async fn per_key<T: redis::FromRedisValue>(
        &self,
        cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<T>, StoreError> {
        if !self.conn.is_cluster() {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c);
            }
            let mut conn = self.conn.clone();
            return self.bounded(pipe.query_async::<Vec<T>>(&mut conn)).await;
        }
        let calls = cmds.iter().map(|c| {
            let mut conn = self.conn.clone();
            async move { c.query_async::<T>(&mut conn).await }
        });
        self.bounded(futures_util::future::try_join_all(calls)).await
    }
}

/// Claims `KEYS[1]` for the owner `ARGV[1]` for `ARGV[2]` ms unless another owner holds it.
const CLAIM_SCRIPT: &str = "local v = redis.call('GET', KEYS[1]) \
if (not v) or v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end \
return 0";

/// Hands `KEYS[1]` over from the owner `ARGV[1]` to `ARGV[2]` for `ARGV[3]` ms, only while
/// `ARGV[1]` holds it (one key, so one script run: atomic on a cluster too).
const HAND_OVER_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0";

/// Deletes `KEYS[1]` if the owner `ARGV[1]` holds it.
const RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
return redis.call('DEL', KEYS[1]) end return 0";
