//! The decision script (`decide.lua`) as one call: its arguments from a spec, and its reply
//! read back into a [`Decision`]. A reply the script never sends is an error, never a guess.

use std::pin::Pin;
use std::sync::Arc;

use crate::clock::Clock;
use crate::counter::Tally;
use crate::decision::{Counted, Decision, Outcome};
use crate::metering_id::MeteringId;
use crate::spec::{QuotaSpec, TimeUnit, WindowKind};
use crate::store::StoreError;
use crate::window::{self, RollingLayout};

use super::conn::Conn;
use super::key;

/// A script's reply still to come, owned.
pub(super) type Reply = Pin<Box<dyn Future<Output = redis::RedisResult<Vec<i64>>> + Send>>;

/// The decision script.
const DECIDE_LUA: &str = include_str!("../decide.lua");
/// The give-back script.
const GIVE_BACK_LUA: &str = include_str!("../give_back.lua");

/// Runs the decision script on a connection; cheap to clone.
#[derive(Clone)]
pub(super) struct Caller {
    conn: Conn,
    script: Arc<redis::Script>,
    give_back: Arc<redis::Script>,
    prefix: Arc<str>,
    /// When set, the script uses this clock instead of Redis' `TIME` (tests only).
    clock: Option<Arc<dyn Clock>>,
}

impl Caller {
    pub(super) fn new(conn: Conn, prefix: &str, clock: Option<Arc<dyn Clock>>) -> Self {
        Self {
            conn,
            script: Arc::new(redis::Script::new(DECIDE_LUA)),
            give_back: Arc::new(redis::Script::new(GIVE_BACK_LUA)),
            prefix: prefix.into(),
            clock,
        }
    }

    /// Loads both scripts on every node that lacks them. A check that finds its script missing
    /// loads it and runs again, two round trips later, behind checks sent after it; with the
    /// scripts loaded ahead, each check runs in the order it was sent.
    pub(super) async fn load(&self) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        for target in conn.scan_targets().await? {
            let mut exists = redis::cmd("SCRIPT");
            exists.arg("EXISTS").arg(self.script.get_hash()).arg(self.give_back.get_hash());
            let loaded: Vec<bool> = conn.query_on(&exists, &target).await?;
            if loaded.contains(&false) {
                for code in [DECIDE_LUA, GIVE_BACK_LUA] {
                    let _: String =
                        conn.query_on(redis::cmd("SCRIPT").arg("LOAD").arg(code), &target).await?;
                }
            }
        }
        Ok(())
    }

    /// The give-back script's reply (not bounded in time: the caller bounds it): the units
    /// given back, or -1 when their window has ended.
    pub(super) async fn give_back(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        counted: &Counted,
        units: u64,
    ) -> redis::RedisResult<i64> {
        let shape = spec.counter_shape();
        let (start, end) = counted.window.unwrap_or((0, 0));
        let layout = RollingLayout::of(&shape);
        let bucket = layout.bucket_of(counted.at_us);
        let now = self.clock.as_ref().map_or(-1, |c| c.now().as_microsecond());
        let mut invocation = self.give_back.key(key::base_key(&self.prefix, id, &shape));
        invocation
            .arg(kind_of(shape.window))
            .arg(units)
            .arg(start)
            .arg(end)
            .arg(bucket)
            .arg(layout.leaves_at(bucket))
            .arg(now);
        let mut conn = self.conn.clone();
        invocation.invoke_async(&mut conn).await
    }

    /// [`Caller::call`] for a check, owning what it needs, so that it can be awaited after
    /// the request that made it has given up on it.
    pub(super) fn check_owned(&self, id: &MeteringId, spec: &QuotaSpec, weight: u64) -> Reply {
        let (caller, id, spec) = (self.clone(), id.clone(), *spec);
        Box::pin(async move { caller.call(&id, &spec, weight, false).await })
    }

    /// The script's reply for one decision (not bounded in time: the caller bounds it); with
    /// `force`, `weight` is added whatever the limit.
    pub(super) async fn call(
        &self,
        id: &MeteringId,
        spec: &QuotaSpec,
        weight: u64,
        force: bool,
    ) -> redis::RedisResult<Vec<i64>> {
        let shape = spec.counter_shape();
        let unit_us = shape.unit.fixed_seconds().map_or(0, |s| s * 1_000_000);
        let anchor_us = match (shape.start, shape.unit) {
            (Some(s), _) => s.saturating_mul(1_000_000),
            (None, TimeUnit::Week) => 4 * 86_400 * 1_000_000,
            (None, _) => 0,
        };
        let now = self.clock.as_ref().map_or(-1, |c| c.now().as_microsecond());
        let mut invocation = self.script.key(key::base_key(&self.prefix, id, &shape));
        invocation
            .arg(kind_of(shape.window))
            .arg(spec.limit)
            .arg(weight)
            .arg(shape.interval.max(1))
            .arg(unit_us)
            .arg(anchor_us)
            .arg(now)
            .arg(if force { "1" } else { "0" });
        let mut conn = self.conn.clone();
        invocation.invoke_async(&mut conn).await
    }
}

/// The script's number for a window kind.
fn kind_of(window: WindowKind) -> i64 {
    match window {
        WindowKind::Calendar => 0,
        WindowKind::Flexi => 1,
        WindowKind::Rolling => 2,
    }
}

/// A time from a script reply, within the range a [`Decision`] holds.
fn instant(us: i64) -> i64 {
    us.clamp(window::MIN_US, window::MAX_US)
}

/// The decision a script reply stands for.
pub(super) fn decision(
    reply: &[i64],
    spec: &QuotaSpec,
    weight: u64,
) -> Result<Decision, StoreError> {
    let [outcome, used, exceed, total, start, end, retry, reset, now] = reply[..] else {
        return Err(StoreError::Unavailable(format!("unexpected script reply {reply:?}")));
    };
    let outcome = match outcome {
        0 => Outcome::Allowed,
        1 => Outcome::Exceeded,
        2 => Outcome::WeightExceedsLimit,
        other => return Err(bad_reply("outcome", other)),
    };
    let count = |name: &'static str, v: i64| u64::try_from(v).map_err(|_| bad_reply(name, v));
    let verdict = Tally {
        outcome,
        used: count("used", used)?,
        exceed: count("exceed count", exceed)?,
        total_exceed: count("total exceed count", total)?,
        window: (spec.window != WindowKind::Rolling).then_some((instant(start), instant(end))),
        retry_at: (retry >= 0).then_some(instant(retry)),
        reset_at: instant(reset),
    };
    Ok(verdict.decision(spec, weight, instant(now)))
}

/// A script reply field that the script never sends: Redis answered with something else.
fn bad_reply(field: &str, value: i64) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected {field} {value} in the script reply"))
}
