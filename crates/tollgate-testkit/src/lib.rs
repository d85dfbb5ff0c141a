//! Real processes for Tollgate's tests, shared by every crate's test suite (a dev-dependency
//! only: no crate depends on it at run time).
//!
//! [`RedisServer`] starts a real `redis-server` on a free loopback port with its files in a
//! temp dir and kills it when dropped, so a failing test leaves nothing running. Without the
//! binary the Redis tests say so loudly and return, unless `TOLLGATE_REQUIRE_REDIS=1` (as in
//! CI), in which case they fail. [`RedisCluster`] does the same for a Redis Cluster of several
//! masters and their replicas. [`SmallDisk`] mounts a small tmpfs that a test can fill up.
//! [`Status214`] builds the X12 214 interchanges the gateway's tests and benches send.
//! [`SftpServer`] runs OpenSSH's `sshd` for SFTP uploads into a directory.
//! [`tls::TestCa`] makes certificates at test time. [`http`] speaks plain HTTP/1.1: a peer
//! server answering with a closure, and a one-shot client.
#![forbid(unsafe_code)]
// Test support: a broken environment should stop the test at once, with the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![warn(unreachable_pub)]

pub mod cluster;
mod disk;
mod edi;
pub mod http;
#[cfg(unix)]
mod sftp;
pub mod tls;

pub use cluster::RedisCluster;
pub use disk::SmallDisk;
pub use edi::Status214;
#[cfg(unix)]
pub use sftp::SftpServer;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// This process's resident set size in bytes (`VmRSS`), or 0 where `/proc` is not available:
/// what the memory examples measure growth with.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A free loopback port (free when asked; the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A real `redis-server` on a free loopback port, its files in a temp dir; killed when dropped.
pub struct RedisServer {
    /// The port it listens on (kept across [`RedisServer::restart`]).
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The TLS port, when started with [`RedisServer::start_tls`].
    pub tls_port: Option<u16>,
    extra_args: Vec<String>,
}

fn redis_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("redis-server")).find(|p| p.is_file())
}

impl RedisServer {
    /// Starts a server, or returns `None` after a loud skip message when none is installed.
    /// With `TOLLGATE_REQUIRE_REDIS=1` a missing binary fails the test instead.
    pub fn start() -> Option<RedisServer> {
        let Some(bin) = redis_binary() else {
            if std::env::var("TOLLGATE_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("redis-server is not installed but TOLLGATE_REQUIRE_REDIS=1");
            }
            eprintln!(
                "\n*** SKIPPED: redis-server not found on PATH; the Redis tests did not run. \
                 Install it (apt-get install -y redis-server) or set TOLLGATE_REQUIRE_REDIS=1 \
                 to make this a failure. ***\n"
            );
            return None;
        };
        let mut server = RedisServer {
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
            tls_port: None,
            extra_args: Vec::new(),
        };
        server.spawn(&bin);
        Some(server)
    }

    /// Like [`RedisServer::start`], also listening with TLS on [`RedisServer::tls_port`] with
    /// the PEM `cert` and `key` (no client certificates asked for). `None` (after a loud
    /// message, or a failure under `TOLLGATE_REQUIRE_REDIS=1`) when the binary is missing.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Option<RedisServer> {
        let bin = redis_binary();
        let mut server = RedisServer::start()?;
        server.kill();
        // The plain port was just freed, so a fresh pick may hand it out again.
        let port = std::iter::repeat_with(free_port).find(|&p| p != server.port).unwrap_or(0);
        server.tls_port = Some(port);
        server.extra_args = vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            cert.display().to_string(),
            "--tls-key-file".into(),
            key.display().to_string(),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        server.spawn(&bin?);
        Some(server)
    }

    /// `rediss://localhost:TLS_PORT/0` (`localhost`: a name the test certificates carry).
    pub fn rediss_url(&self) -> String {
        format!("rediss://localhost:{}/0", self.tls_port.unwrap_or(0))
    }

    fn spawn(&mut self, bin: &PathBuf) {
        let child = Command::new(bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.command("PING").as_deref() != Some("+PONG") {
            assert!(Instant::now() < deadline, "redis-server did not start on {}", self.port);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Sends one inline command; returns the first reply line, `None` when unreachable.
    pub fn command(&self, cmd: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        Some(text.lines().next().unwrap_or("").to_owned())
    }

    /// The full reply of `INFO <section>`.
    pub fn info(&self, section: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(format!("INFO {section}\r\n").as_bytes()).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = s.read(&mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&out);
            if let Some(rest) = text.strip_prefix('$') {
                let (len, body) = rest.split_once("\r\n").unwrap_or(("0", ""));
                if body.len() >= len.parse::<usize>().unwrap_or(0) {
                    return body.to_owned();
                }
            }
            if n == 0 {
                return text.to_string();
            }
        }
    }

    /// `kill -9` the server.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered, the way a
    /// hung or overloaded Redis looks to its clients.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("redis-server is not running").id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        let bin = redis_binary().unwrap();
        self.spawn(&bin);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A small seeded random source for tests that repeat a race with random timing. The seed is
/// `TOLLGATE_TEST_SEED` when set, else the clock's nanoseconds; it is printed, so a failing
/// round can be replayed.
#[derive(Debug, Clone)]
pub struct Jitter(u64);

impl Jitter {
    /// Seeded as described above; prints the seed with `what`.
    pub fn new(what: &str) -> Jitter {
        let seed = std::env::var("TOLLGATE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: TOLLGATE_TEST_SEED={seed}");
        Jitter(seed | 1)
    }

    /// A number in `0..n` (0 when `n` is 0); xorshift64*.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        if n == 0 { 0 } else { x % n }
    }

    /// A duration of `0..max_ms` milliseconds.
    pub fn millis(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.below(max_ms))
    }
}
