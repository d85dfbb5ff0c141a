//! The connection to Redis: one server, or a Redis Cluster (`cluster = true`). Both speak
//! `ConnectionLike`, so the same scripts run unchanged: a cluster routes each `EVALSHA` by its
//! one declared key, whose hash tag `{id}` puts every key of one id on one slot.
//!
//! What differs is only where a command that names no key goes: `SCAN` sees one node's keys,
//! so on a cluster it is sent to each master in turn ([`Conn::scan_targets`]) or to the master
//! holding one id's slot ([`Conn::target_of`]); and pipelines must stay on one slot, so the
//! keys-seen commands are sent per key on a cluster.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

/// One Redis server (reconnecting manager), or a cluster (slot-routing connection). Cheap to
/// clone: both are handles to one multiplexed connection.
#[derive(Clone)]
pub enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster: commands go to the master of their key's slot.
    Cluster(ClusterConnection),
}

/// Where a keyless command is sent: the one server, or one master of a cluster by address.
///
/// By address, not by slot: a client whose slot map is stale (just after a failover) would
/// send a slot-routed keyless command to some other node, which answers SCAN with its own keys
/// and no redirection. By address the command reaches that node or fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// The one server (single mode).
    Server,
    /// A master of the cluster, as `CLUSTER SLOTS` names it.
    Node {
        /// Its host, as the cluster announces it.
        host: String,
        /// Its port.
        port: u16,
    },
}

impl Conn {
    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs `cmd` on `target`.
    pub(super) async fn query_on<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        target: &Target,
    ) -> RedisResult<T> {
        match (self, target) {
            (Conn::Cluster(c), Target::Node { host, port }) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let value = c.route_command(cmd.clone(), routing).await?;
                redis::from_redis_value(value).map_err(Into::into)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }

    /// Where a SCAN must go to see every key: the one server, or each master once (as the
    /// cluster itself says in `CLUSTER SLOTS`).
    pub(super) async fn scan_targets(&mut self) -> RedisResult<Vec<Target>> {
        let Conn::Cluster(c) = self else { return Ok(vec![Target::Server]) };
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        Ok(masters(&slots).into_iter().map(|m| m.target).collect())
    }

    /// The node holding `key` (and every key with its hash tag): the one server, or the master
    /// the cluster says serves `CLUSTER KEYSLOT key`.
    pub(super) async fn target_of(&mut self, key: &str) -> RedisResult<Target> {
        let Conn::Cluster(c) = self else { return Ok(Target::Server) };
        let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(c).await?;
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        masters(&slots)
            .into_iter()
            .find(|m| m.ranges.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|m| m.target)
            .ok_or_else(|| {
                let msg = "no master serves the slot";
                redis::RedisError::from((redis::ErrorKind::Io, msg, format!("slot {slot}")))
            })
    }
}

/// A master in a `CLUSTER SLOTS` reply, with the slot ranges it serves.
#[derive(Debug, PartialEq, Eq)]
struct Master {
    target: Target,
    ranges: Vec<(i64, i64)>,
}

/// The masters of a `CLUSTER SLOTS` reply (`[[start, end, [host, port, id…], replicas…]…]`),
/// each once with all its ranges; entries of another shape are skipped.
fn masters(reply: &Value) -> Vec<Master> {
    let Value::Array(ranges) = reply else { return Vec::new() };
    let mut out: Vec<Master> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let host = match node.first() {
            Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
            Some(Value::SimpleString(h)) => h.clone(),
            _ => continue,
        };
        let Some(Ok(port)) = node.get(1).map(|p| match p {
            Value::Int(p) => u16::try_from(*p).map_err(drop),
            _ => Err(()),
        }) else {
            continue;
        };
        let target = Target::Node { host, port };
        match out.iter_mut().find(|m| m.target == target) {
            Some(m) => m.ranges.push((*start, *end)),
            None => out.push(Master { target, ranges: vec![(*start, *end)] }),
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
        let node = |port| Target::Node { host: "127.0.0.1".into(), port };
        let found = masters(&reply);
        assert_eq!(
            found,
            vec![
                Master { target: node(7000), ranges: vec![(0, 5460)] },
                Master { target: node(7001), ranges: vec![(5461, 10922)] },
                Master { target: node(7002), ranges: vec![(10923, 12000), (12001, 16383)] },
            ]
        );
        assert_eq!(masters(&Value::Nil), Vec::new());
    }
}
