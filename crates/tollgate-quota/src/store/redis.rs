//! Counters in Redis, shared exactly by every instance that points at the same server, or at
//! the same Redis Cluster (`RedisOptions::cluster`; see `conn`).
//!
//! One decision is one round trip: `EVALSHA` of `decide.lua` (re-loaded on `NOSCRIPT`), which
//! reads Redis' own `TIME`, applies the admission rule and updates the counter atomically. The
//! script is a port of the Rust core; `tests/conformance.rs` runs the same sequences through both.
//!
//! # Invariants
//!
//! * **Exactness across instances** comes from Redis running each script alone: no two
//!   decisions on one counter interleave, whichever instance sent them.
//! * **Every key of one identifier shares the hash tag `{id}`**, and the script is routed by its
//!   one declared key, so all keys it touches live in one Redis Cluster slot: on a cluster a
//!   decision is still one `EVALSHA`, on the master of that slot. The id is encoded
//!   in the tag so that it never holds `}` (see `key`): no id's SCAN pattern matches another
//!   id's keys, so a reset deletes that id's counters only.
//! * **No request waits longer than the timeout.** Every call to Redis is bounded by
//!   `RedisOptions::timeout`; what happens then is `OnStoreUnavailable`'s choice.
//! * **Local answers never pretend to be shared.** In `Local` mode a decision made in this
//!   process's memory during an outage carries `degraded = true`.
//! * **What was admitted locally ends up in Redis** (`fallback`). Units admitted locally are
//!   sent to Redis at once (whatever its limit) and again until Redis takes them, unless their
//!   window has ended meanwhile: a Redis that stalls runs them right after it wakes, before
//!   most checks other instances send it then.
//!   During an outage one instance admits at most its share of what Redis last said was left
//!   (`(limit - used) / local_share_of` per window, `used` as of this instance's latest shared
//!   decision on that counter, kept for at most [`MAX_LAST_SEEN`] counters; see `fallback`), so
//!   `local_share_of` instances together admit at most what was left.
//! * **Counts are exact up to 2^53.** The script computes in Lua numbers (doubles): limits,
//!   weights and counts up to 2^53 units, and times until the year 2255 (2^53 µs), are exact;
//!   beyond that Redis applies the admission rule approximately. A reply the script never sends
//!   (an unknown outcome, a negative count) is an error, never a guessed decision.
//! * **A timeout is not a rollback.** A script that Redis runs after `bounded` gave up still
//!   counted; the caller got an error (or, in `Local` mode, a degraded local answer).
//! * Expiry is garbage collection only: lapses are also checked against times stored in the
//!   keys, so an answer never depends on when Redis got round to expiring a key.

use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::{Counted, Decision, GivenBack};
use crate::metering_id::MeteringId;
use crate::spec::QuotaSpec;
use crate::store::observer::ObserverSlot;
use crate::store::{CounterListing, CounterPage, Store, StoreError};

mod client;
mod conn;
mod fallback;
mod key;
mod listing;
mod script;
mod seen;
pub use conn::Conn;
use conn::Target;
use fallback::Fallback;
pub use fallback::MAX_LAST_SEEN;
use script::Caller;

/// How often the background probe pings Redis (and so reconnects while idle).
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// What to do when Redis does not answer in time (`[store] store_unavailable` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreUnavailable {
    /// Count in this instance's memory and mark the answer degraded.
    #[default]
    Local,
    /// Return the error; the server admits the request (`Tollgate-Degraded: store-unavailable`).
    Allow,
    /// Return the error; the server answers 503 with `Retry-After`.
    Deny,
}

impl FromStr for OnStoreUnavailable {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Ok(Self::Local),
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            _ => Err(format!("unknown store_unavailable {s:?}: expected local, allow or deny")),
        }
    }
}

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://[user:password@]host:port/db` or `rediss://…` for TLS.
    pub url: String,
    /// Prepended to every key (default `tollgate:`).
    pub key_prefix: String,
    /// The longest any request waits for Redis (default 50 ms).
    pub timeout: Duration,
    /// What a check does when Redis does not answer within `timeout`.
    pub on_unavailable: OnStoreUnavailable,
    /// For `rediss://`: the CA certificates (PEM) the server's certificate must be signed by,
    /// instead of the system roots. The certificate is always verified: a URL asking to skip
    /// that (`#insecure`) is refused.
    pub ca_file: Option<std::path::PathBuf>,
    /// `url` names one node of a Redis Cluster: the other nodes and the slot map are learnt
    /// from it, and each decision goes to the master of its id's slot.
    pub cluster: bool,
    /// In `Local` mode, the number of instances the limit is shared among while Redis is
    /// unreachable: each admits at most `limit / local_share_of` per window on its own.
    pub local_share_of: NonZeroU32,
}

impl RedisOptions {
    /// Options for `url` with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key_prefix: "tollgate:".into(),
            timeout: Duration::from_millis(50),
            on_unavailable: OnStoreUnavailable::Local,
            ca_file: None,
            cluster: false,
            local_share_of: NonZeroU32::MIN,
        }
    }
}

/// Whether the store answers from where it should.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    /// Answering from where it should.
    Ok,
    /// The shared store is not answering, with the last error.
    Degraded(String),
}

/// Counters in Redis (one server or a cluster). Cheap to share behind an `Arc`; the connection
/// is multiplexed.
pub struct RedisStore {
    conn: Conn,
    /// The decision script on `conn`, with the test clock when there is one.
    caller: Caller,
    opts: RedisOptions,
    /// When set, the script uses this clock instead of Redis' `TIME` (tests only).
    clock: Option<Arc<dyn Clock>>,
    /// Decisions while Redis is unreachable (`Local` mode), and what they admitted.
    local: Arc<Fallback>,
    /// Adds what `local` admitted to Redis as soon as Redis takes it.
    pusher: tokio::task::JoinHandle<()>,
    health: Arc<Mutex<Option<String>>>,
    probe: tokio::task::JoinHandle<()>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.probe.abort();
        self.pusher.abort();
    }
}

/// The key `<prefix><kind>:{<id>}:<suffix>` for data kept beside the counters: hash-tagged by
/// `id` (encoded as the counters' keys are, so the tag is the whole id), and outside every
/// counter key pattern as long as `kind` is not empty, so a counter reset or listing never
/// touches it.
pub fn tagged_key(prefix: &str, kind: &str, id: &str, suffix: &str) -> String {
    format!("{prefix}{kind}:{{{}}}:{suffix}", key::encode_id(id))
}

impl RedisStore {
    /// Connects lazily: fails only for a bad URL, and starts while Redis is down (must be called
    /// within a tokio runtime).
    pub async fn connect(opts: RedisOptions) -> Result<RedisStore, StoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Unavailable(
                "the redis store must be started inside a tokio runtime".into(),
            ));
        }
        let conn = client::open_conn(&opts)?;
        let health = Arc::new(Mutex::new(Some("not connected yet".to_owned())));
        let caller = Caller::new(conn.clone(), &opts.key_prefix, None);
        let probe = {
            let (mut conn, caller) = (conn.clone(), caller.clone());
            let health = Arc::downgrade(&health);
            let timeout = opts.timeout;
            tokio::spawn(async move {
                loop {
                    let cmd = redis::cmd("PING");
                    let ping = cmd.query_async::<String>(&mut conn);
                    let bound = timeout.max(PROBE_EVERY / 2);
                    let result = tokio::time::timeout(bound, ping).await;
                    if matches!(result, Ok(Ok(_))) {
                        // Best effort: a check still loads a missing script itself.
                        let _ = tokio::time::timeout(bound, caller.load()).await;
                    }
                    let Some(health) = health.upgrade() else { return };
                    *health.lock().unwrap_or_else(PoisonError::into_inner) = match result {
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => Some(format!("redis: {e}")),
                        Err(_) => Some("redis: ping timed out".to_owned()),
                    };
                    drop(health);
                    tokio::time::sleep(PROBE_EVERY).await;
                }
            })
        };
        let local = Arc::new(Fallback::new(opts.local_share_of, opts.timeout, None));
        let pusher = tokio::spawn(fallback::push_owed(local.clone(), caller.clone()));
        Ok(RedisStore { conn, caller, clock: None, local, pusher, opts, health, probe })
    }

    /// Where this store's decision observer is kept: in the local fallback's slot (that store
    /// is only ever asked from here, never through `AnyStore`, so nothing is reported twice).
    pub(crate) fn observer_slot(&self) -> &ObserverSlot {
        self.local.store().observer_slot()
    }

    /// A second connection to the same Redis or cluster (same URL, TLS and timeouts), for work
    /// that must not queue behind or ahead of decisions on the store's own connection; connects
    /// lazily.
    pub fn side_connection(&self) -> Result<Conn, StoreError> {
        client::open_conn(&self.opts)
    }

    /// The prefix of every key this store writes.
    pub fn key_prefix(&self) -> &str {
        &self.opts.key_prefix
    }

    /// The per-call timeout this store was configured with.
    pub fn timeout(&self) -> Duration {
        self.opts.timeout
    }

    /// Uses `clock` instead of Redis' `TIME`, in the script and for the local fallback. For
    /// tests that must place checks at chosen instants; production leaves time to Redis.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.local = Arc::new(Fallback::new(
            self.opts.local_share_of,
            self.opts.timeout,
            Some(Arc::clone(&clock)),
        ));
        self.caller = Caller::new(self.conn.clone(), &self.opts.key_prefix, Some(clock.clone()));
        self.pusher.abort();
        self.pusher = tokio::spawn(fallback::push_owed(self.local.clone(), self.caller.clone()));
        self.clock = Some(clock);
        self
    }

    /// Units this instance admitted on its own while Redis did not answer and has not yet
    /// added to Redis (0 once Redis took them all; see `fallback`).
    pub fn owed_units(&self) -> u64 {
        self.local.owed_units()
    }

    /// Ok while Redis answers; degraded (with the last error) while it does not.
    pub fn health(&self) -> StoreHealth {
        match self.health.lock().unwrap_or_else(PoisonError::into_inner).clone() {
            None => StoreHealth::Ok,
            Some(e) => StoreHealth::Degraded(e),
        }
    }

    fn set_health(&self, error: Option<String>) {
        *self.health.lock().unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// Runs one bounded Redis call.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.opts.timeout, call).await {
            Ok(Ok(v)) => {
                self.set_health(None);
                Ok(v)
            }
            Ok(Err(e)) => {
                let msg = format!("redis: {e}");
                self.set_health(Some(msg.clone()));
                Err(StoreError::Unavailable(msg))
            }
            Err(_) => {
                self.set_health(Some(format!("redis: no answer within {:?}", self.opts.timeout)));
                Err(StoreError::Timeout(self.opts.timeout))
            }
        }
    }

    /// One decision in Redis, within the store's timeout.
    async fn check_shared(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> Result<Decision, StoreError> {
        let reply = self.bounded(self.caller.call(id, spec, weight, false)).await?;
        script::decision(&reply, spec, weight)
    }

    /// Keys of this store matching `pattern`, by SCAN (never KEYS) on each of `targets` (the
    /// server, or every master of a cluster), bounded in time overall.
    async fn scan(&self, pattern: &str, targets: &[Target]) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        self.scan_each(pattern, targets, |mut batch| keys.append(&mut batch)).await?;
        Ok(keys)
    }

    /// Hands every key matching `pattern` on `targets` to `each`, a SCAN batch at a time,
    /// within one deadline.
    async fn scan_each(
        &self,
        pattern: &str,
        targets: &[Target],
        mut each: impl FnMut(Vec<String>),
    ) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let deadline = tokio::time::Instant::now() + self.opts.timeout.max(Duration::from_secs(2));
        for target in targets {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
                let step = conn.query_on::<(u64, Vec<String>)>(&cmd, target);
                let (next, batch) = match tokio::time::timeout_at(deadline, step).await {
                    Ok(r) => r.map_err(|e| StoreError::Unavailable(format!("redis: {e}")))?,
                    Err(_) => return Err(StoreError::Timeout(self.opts.timeout)),
                };
                each(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }

    /// Redis' clock (or the test clock).
    async fn redis_now(&self) -> Result<i64, StoreError> {
        if let Some(c) = &self.clock {
            return Ok(c.now().as_microsecond());
        }
        let mut conn = self.conn.clone();
        let (s, us): (i64, i64) = self.bounded(redis::cmd("TIME").query_async(&mut conn)).await?;
        s.checked_mul(1_000_000)
            .and_then(|s| s.checked_add(us))
            .ok_or_else(|| StoreError::Unavailable(format!("redis: TIME answered {s} s {us} µs")))
    }

    async fn reset_shared(&self, id: &MeteringId) -> Result<u64, StoreError> {
        // Every key of one id is on the slot of its hash tag: one node holds them all.
        let mut conn = self.conn.clone();
        let tag = key::tag_key(&self.opts.key_prefix, id);
        let target = self.bounded(conn.target_of(&tag)).await?;
        let mut keys = self.scan(&key::id_pattern(&self.opts.key_prefix, id), &[target]).await?;
        // The pattern already matches this id's keys only (see `key`); checking each key's id
        // again means no other id's counter is ever deleted, whatever the pattern matched.
        keys.retain(|k| key::id_of(&self.opts.key_prefix, k).is_some_and(|(kid, _)| kid == *id));
        let counters: std::collections::HashSet<_> = keys
            .iter()
            .filter_map(|k| key::parse_key(&self.opts.key_prefix, k).map(|(_, shape, _)| shape))
            .collect();
        let mut conn = self.conn.clone();
        for chunk in keys.chunks(500) {
            let _: u64 =
                self.bounded(redis::cmd("UNLINK").arg(chunk).query_async(&mut conn)).await?;
        }
        Ok(counters.len() as u64)
    }
}

impl Store for RedisStore {
    async fn check(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
    ) -> Result<Decision, StoreError> {
        if self.opts.on_unavailable != OnStoreUnavailable::Local {
            return self.check_shared(id, spec, weight).await;
        }
        if !self.local.send(id, spec) {
            return Ok(self.local.check(id, spec, weight));
        }
        let mut reply = self.caller.check_owned(id, spec, weight);
        let shared = self.bounded(&mut reply).await;
        match shared.and_then(|r| script::decision(&r, spec, weight)) {
            Ok(d) if self.local.answered(id, spec, Some(&d)) => Ok(d),
            // Answered while the counter is down: Redis counted it, and the local rule decides.
            Ok(_) => Ok(self.local.check(id, spec, weight)),
            Err(e) => {
                tracing::debug!(error = %e, "redis unavailable, deciding locally");
                if matches!(e, StoreError::Timeout(_)) {
                    self.local.went_down(id, spec, self.opts.timeout);
                    fallback::hear_late(&self.local, reply, id, spec, weight);
                } else {
                    self.local.answered(id, spec, None);
                }
                Ok(self.local.check(id, spec, weight))
            }
        }
    }

    async fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> Result<GivenBack, StoreError> {
        // In Redis only: units admitted locally during an outage are added to Redis later, and
        // a give-back cannot wait for them; a failure is an error, never a guess.
        let given = self.bounded(self.caller.give_back(id, spec, counted, units)).await?;
        Ok(u64::try_from(given).map_or(GivenBack::WindowGone, GivenBack::Units))
    }

    async fn counters(&self, listing: &CounterListing<'_>) -> Result<CounterPage, StoreError> {
        self.counters_shared(listing).await
    }

    async fn reset(&self, id: &MeteringId) -> Result<u64, StoreError> {
        let local = self.local.store().counters_core().reset(id);
        let shared = self.reset_shared(id).await?;
        Ok(shared.max(local))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
