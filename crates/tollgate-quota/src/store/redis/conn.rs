//! The connection to Redis: one server, or a Redis Cluster (`cluster = true`). Both speak
//! `ConnectionLike`, so the same scripts run unchanged: a cluster routes each `EVALSHA` by its
//! one declared key, whose hash tag `{id}` puts every key of one id on one slot.
//!
//! What differs is only where a command that names no key goes: `SCAN` sees one node's keys,
//! so on a cluster it is sent to each master in turn ([`Conn::scan_targets`]), and pipelines
//! must stay on one slot, so the keys-seen commands are sent per key on a cluster.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

/// One Redis server (reconnecting manager), or a cluster (slot-routing connection). Cheap to
/// clone: both are handles to one multiplexed connection.
#[derive(Clone)]
pub(super) enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster: commands go to the master of their key's slot.
    Cluster(ClusterConnection),
}

/// Where a keyless command is sent: the one server, or the master serving a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// The one server (single mode).
    Server,
    /// The master serving this route's slot (cluster mode).
    Master(Route),
}

impl Conn {
    /// Whether this is a cluster connection.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs `cmd` on `target`.
    pub(super) async fn query_on<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        target: Target,
    ) -> RedisResult<T> {
        match (self, target) {
            (Conn::Cluster(c), Target::Master(route)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = c.route_command(cmd.clone(), routing).await?;
                redis::from_redis_value(value).map_err(Into::into)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }

    /// Where a SCAN must go to see every key: the one server, or one slot of each master
    /// (from `CLUSTER SLOTS`, so each master is scanned once).
    pub(super) async fn scan_targets(&mut self) -> RedisResult<Vec<Target>> {
        let Conn::Cluster(c) = self else { return Ok(vec![Target::Server]) };
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        Ok(masters(&slots).into_iter().map(|s| Target::Master(Route::new(s, SlotAddr::Master))).collect())
    }

    /// The master serving the slot of `key` (single mode: the server).
    pub(super) fn target_of(&self, key: &str) -> Target {
        match self {
            Conn::Single(_) => Target::Server,
            Conn::Cluster(_) => Target::Master(Route::with_key(key, SlotAddr::Master)),
        }
    }
}

/// The first slot of each distinct master in a `CLUSTER SLOTS` reply
/// (`[[start, end, [host, port, id…], replicas…]…]`); entries of another shape are skipped.
fn masters(reply: &Value) -> Vec<u16> {
    let Value::Array(ranges) = reply else { return Vec::new() };
    let mut seen: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut out = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else { continue };
        let (Some(Value::Int(start)), Some(Value::Array(master))) = (fields.first(), fields.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) => h.clone(),
            Some(Value::SimpleString(h)) => h.clone().into_bytes(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else { continue };
        let Ok(start) = u16::try_from(*start) else { continue };
        if !seen.iter().any(|(h, p)| *h == host && p == port) {
            seen.push((host, *port));
            out.push(start);
        }
    }
    out
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![Value::BulkString(host.into()), Value::Int(port), Value::Nil])
    }

    #[test]
    fn each_master_is_scanned_once() {
        let range = |s, e, master| Value::Array(vec![Value::Int(s), Value::Int(e), master]);
        let reply = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7000)),
            range(5461, 10922, node("127.0.0.1", 7001)),
            range(10923, 12000, node("127.0.0.1", 7002)),
            range(12001, 16383, node("127.0.0.1", 7002)),
            Value::Int(3),
        ]);
        assert_eq!(masters(&reply), vec![0, 5461, 10923]);
        assert_eq!(masters(&Value::Nil), Vec::<u16>::new());
    }
}
