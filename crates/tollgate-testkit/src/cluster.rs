//! A real Redis Cluster for tests: `masters` `redis-server --cluster-enabled yes` nodes (and
//! `replicas` replicas each) on free loopback ports, joined by `redis-cli --cluster create`,
//! files in one temp dir; every node is killed when the cluster is dropped.
//!
//! Nodes time out after [`NODE_TIMEOUT_MS`], so a replica is promoted about two seconds after
//! its master is killed. Replies are read with a small RESP reader ([`query`]), so keys with
//! spaces or braces are sent as they are.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `cluster-node-timeout`: how long a silent master is given before its replica takes over.
pub const NODE_TIMEOUT_MS: u64 = 1_000;

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+…`
    Status(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…` (text; lossy for non-UTF-8)
    Bulk(String),
    /// `*…`
    Array(Vec<Reply>),
    /// `$-1` or `*-1`
    Nil,
}

impl Reply {
    /// The text of a status or bulk reply ("" otherwise).
    pub fn text(&self) -> &str {
        match self {
            Reply::Status(s) | Reply::Bulk(s) => s,
            _ => "",
        }
    }
}

/// Sends `args` as one RESP command to `127.0.0.1:port`; `None` when the node is unreachable.
pub fn query(port: u16, args: &[&str]) -> Option<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(out.as_bytes()).ok()?;
    read_reply(&mut BufReader::new(s))
}

fn read_reply(r: &mut impl BufRead) -> Option<Reply> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1)?;
    Some(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(rest.parse().ok()?),
        "$" => {
            let Ok(len) = usize::try_from(rest.parse::<i64>().ok()?) else {
                return Some(Reply::Nil);
            };
            let mut buf = vec![0; len + 2];
            r.read_exact(&mut buf).ok()?;
            buf.truncate(len);
            Reply::Bulk(String::from_utf8_lossy(&buf).into_owned())
        }
        "*" => {
            let Ok(n) = usize::try_from(rest.parse::<i64>().ok()?) else { return Some(Reply::Nil) };
            Reply::Array((0..n).map(|_| read_reply(r)).collect::<Option<_>>()?)
        }
        _ => return None,
    })
}

/// A node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its node id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// A master (else a replica).
    pub master: bool,
    /// Flagged `fail` by the cluster.
    pub failed: bool,
    /// For a replica, its master's id.
    pub master_id: Option<String>,
    /// The slot ranges it serves (masters).
    pub slots: Vec<(u16, u16)>,
}

/// A running Redis Cluster; all its nodes are killed when it is dropped.
pub struct RedisCluster {
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    /// Each node's files, in `<dir>/<port>/`; removed when dropped.
    dir: tempfile::TempDir,
}

fn binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `count` distinct free loopback ports whose cluster-bus ports (`port + 10000`) are free too.
///
/// Every candidate stays bound until all are chosen, so no port is handed out twice; a port
/// whose bus port would pass 65535, or is taken, is skipped.
fn node_ports(count: usize) -> Vec<u16> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..10_000 {
        if ports.len() == count {
            break;
        }
        let Ok(listener) = TcpListener::bind("127.0.0.1:0") else { continue };
        let Ok(port) = listener.local_addr().map(|a| a.port()) else { continue };
        held.push(listener);
        let Some(bus) = port.checked_add(10_000) else { continue };
        let Ok(bus_listener) = TcpListener::bind(("127.0.0.1", bus)) else { continue };
        held.push(bus_listener);
        ports.push(port);
    }
    assert_eq!(ports.len(), count, "could not find {count} free port pairs for a Redis Cluster");
    ports
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each and waits for `cluster_state:ok`
    /// on every node (and every replica in sync). `None` after a loud message when
    /// `redis-server` or `redis-cli` is not installed; a failure under
    /// `TOLLGATE_REQUIRE_REDIS=1`.
    pub fn start(masters: usize, replicas: usize) -> Option<RedisCluster> {
        let (Some(server), Some(cli)) = (binary("redis-server"), binary("redis-cli")) else {
            if std::env::var("TOLLGATE_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("redis-server or redis-cli is not installed but TOLLGATE_REQUIRE_REDIS=1");
            }
            eprintln!(
                "\n*** SKIPPED: redis-server or redis-cli not found on PATH; the Redis Cluster \
                 tests did not run. Install them (apt-get install -y redis-server) or set \
                 TOLLGATE_REQUIRE_REDIS=1 to make this a failure. ***\n"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let count = masters * (1 + replicas);
        let ports = node_ports(count);
        let mut cluster = RedisCluster { ports: ports.clone(), children: Vec::new(), dir };
        for &port in &ports {
            let node_dir = cluster.dir.path().join(port.to_string());
            std::fs::create_dir(&node_dir).unwrap();
            let child = Command::new(&server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
                .args(["--cluster-replica-validity-factor", "0"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            cluster.children.push(Some(child));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for &port in &ports {
            while query(port, &["PING"]).as_ref().map(Reply::text) != Some("PONG") {
                assert!(Instant::now() < deadline, "redis-server did not start on {port}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let out = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok(Duration::from_secs(20));
        Some(cluster)
    }

    /// `redis://127.0.0.1:PORT/0` of a live node (any node will do for a cluster client).
    pub fn url(&self) -> String {
        let port = self.alive().next().expect("no node of the cluster is running");
        format!("redis://127.0.0.1:{port}/0")
    }

    /// The ports of every node started, dead or alive.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    fn alive(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports.iter().zip(&self.children).filter(|(_, c)| c.is_some()).map(|(p, _)| *p)
    }

    /// The nodes as a live node's `CLUSTER NODES` describes them.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let port = self.alive().next().expect("no node of the cluster is running");
        let reply = query(port, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
        reply.text().lines().filter_map(parse_node).collect()
    }

    /// The ports of the live masters.
    pub fn masters(&self) -> Vec<u16> {
        let nodes = self.nodes();
        let live = nodes.iter().filter(|n| n.master && !n.failed);
        live.map(|n| n.port).filter(|p| self.alive().any(|a| a == *p)).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        let port = self.alive().next().expect("no node of the cluster is running");
        match query(port, &["CLUSTER", "KEYSLOT", key]) {
            Some(Reply::Int(slot)) => u16::try_from(slot).unwrap(),
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// The port of the live master serving `slot`.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.serving(slot).unwrap_or_else(|| panic!("no live master serves slot {slot}"))
    }

    /// `kill -9` the node on `port`.
    pub fn kill(&mut self, port: u16) {
        let i = self.ports.iter().position(|&p| p == port).expect("not a node of this cluster");
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether every live node says `cluster_state:ok` and every live replica's link to its
    /// master is up.
    pub fn is_ok(&self) -> bool {
        self.alive().all(|port| {
            let info = query(port, &["CLUSTER", "INFO"]);
            let state_ok = info.as_ref().is_some_and(|r| r.text().contains("cluster_state:ok"));
            let repl = query(port, &["INFO", "replication"]);
            let repl = repl.as_ref().map_or("", Reply::text);
            let synced = !repl.contains("role:slave") || repl.contains("master_link_status:up");
            state_ok && synced
        })
    }

    /// Waits until [`RedisCluster::is_ok`].
    pub fn wait_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The port of the live master serving `slot`, if one does (without waiting: a test
    /// polls this between its own requests while a replica is being promoted).
    pub fn serving(&self, slot: u16) -> Option<u16> {
        self.nodes()
            .into_iter()
            .find(|n| {
                n.master
                    && !n.failed
                    && self.alive().any(|p| p == n.port)
                    && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .map(|n| n.port)
    }

    /// Waits until every replica of the master on `port` has acknowledged all its writes
    /// (each `slaveN:…offset=` equals `master_repl_offset` in its `INFO replication`).
    pub fn wait_replicated(&self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info = self.info(port, "replication");
            let field = |line: &str, key: &str| -> Option<i64> {
                line.split([',', ':']).find_map(|kv| kv.strip_prefix(key)?.trim().parse().ok())
            };
            let master: Option<i64> = info
                .lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:")?.trim().parse().ok());
            let replicas: Vec<Option<i64>> = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .map(|l| field(l, "offset="))
                .collect();
            if master.is_some() && !replicas.is_empty() && replicas.iter().all(|r| *r == master) {
                return;
            }
            assert!(Instant::now() < deadline, "the replicas of {port} did not catch up: {info}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The full `INFO section` of the node on `port`.
    pub fn info(&self, port: u16, section: &str) -> String {
        query(port, &["INFO", section]).map(|r| r.text().to_owned()).unwrap_or_default()
    }
}

/// One line of `CLUSTER NODES`:
/// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>…`.
fn parse_node(line: &str) -> Option<NodeInfo> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let port = f.get(1)?.split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
    let flags = f.get(2)?;
    let slots = f
        .iter()
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(NodeInfo {
        id: f.first()?.to_string(),
        port,
        master: flags.contains("master"),
        failed: flags.split(',').any(|x| x == "fail"),
        master_id: f.get(3).filter(|m| **m != "-").map(|m| m.to_string()),
        slots,
    })
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
