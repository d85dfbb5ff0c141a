//! Child processes shared by the binary's integration tests: a real `tollgate serve` on a free
//! loopback port ([`Server`]) and, from `tollgate-testkit`, a real `redis-server`
//! ([`RedisServer`]). Both are killed when dropped, so a failing test leaves nothing running.
//! [`rls`] holds the gRPC client side of the rate limit service tests.

#![allow(dead_code)]

pub mod rls;
pub mod usage;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `tollgate` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[allow(unused_imports)] // not every test binary uses them all
pub use tollgate_testkit::http::{HttpStub, Message};
#[allow(unused_imports)]
pub use tollgate_testkit::{RedisCluster, RedisServer, Status214, free_port};

/// A running `tollgate serve`, found through its `listening on http://ADDR` line; killed (SIGKILL)
/// when dropped.
pub struct Server {
    child: Child,
    /// The `grpc listening on ADDR` line's address, when the server prints one (behind a
    /// lock, so that threads of a test can share the server).
    grpc: std::sync::Mutex<mpsc::Receiver<String>>,
    /// `http://ADDR` (`https://ADDR` with TLS), as printed by the server.
    pub url: String,
    /// `ADDR` (`host:port`) without the scheme.
    pub addr: String,
}

impl Server {
    /// `tollgate serve ARGS`, with `--listen 127.0.0.1:0` unless ARGS choose a listener.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// Like [`Server::start`], with extra environment variables. `TOLLGATE_ADMIN_TOKEN` from the
    /// outer environment is never inherited.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::spawn(Command::new(BIN), args, envs, Stdio::null())
    }

    /// Like [`Server::start_with_env`], run through `launcher` (e.g. `sh -c '…; exec "$@"'
    /// sh tollgate`), which gets `serve ARGS` as further arguments.
    pub fn start_via(cmd: Command, args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::spawn(cmd, args, envs, Stdio::null())
    }

    fn spawn(mut cmd: Command, args: &[&str], envs: &[(&str, &str)], stderr: Stdio) -> Server {
        cmd.arg("serve");
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(args).env_remove("TOLLGATE_ADMIN_TOKEN").stdout(Stdio::piped()).stderr(stderr);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let (grpc_tx, grpc) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                } else if let Some(addr) = line.strip_prefix("grpc listening on ") {
                    let _ = grpc_tx.send(addr.to_owned());
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(20)).expect("no `listening on` line");
        let addr = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .unwrap_or(&url)
            .to_owned();
        Server { child, grpc: std::sync::Mutex::new(grpc), url, addr }
    }

    /// The gRPC listener's address (`host:port`) as the server printed it, so a test can ask
    /// for `grpc_listen = "127.0.0.1:0"`; waits 20 s at most for the line.
    pub fn grpc_addr(&self) -> String {
        let grpc = self.grpc.lock().unwrap();
        grpc.recv_timeout(Duration::from_secs(20)).expect("no `grpc listening on` line")
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (15 s at most) for the exit.
    pub fn sigterm(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        self.wait(Duration::from_secs(15))
    }

    /// SIGKILL (std's `Child::kill` sends SIGKILL on Unix) and reap.
    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the exit, failing the test after `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "tollgate serve did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// A plain `GET path` on this server (std has no HTTP client; kept tiny): the whole raw
    /// answer, status line included. A 10 s read timeout keeps a stuck server from hanging.
    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&self.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n", self.addr)
            .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    }

    /// `METHOD path` with `headers` and `body` on a new connection (`connection: close`): the
    /// answer, read with a 30 s timeout; the test fails when none comes.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Message {
        tollgate_testkit::http::send(&self.addr, method, path, headers, body)
    }

    /// Like [`Server::start`], with the server's log (stderr) written to `log`.
    pub fn start_logging(args: &[&str], log: &std::path::Path) -> Server {
        Server::start_logging_with_env(args, &[], log)
    }

    /// Like [`Server::start_logging`], with extra environment variables (`RUST_LOG`, say).
    pub fn start_logging_with_env(
        args: &[&str],
        envs: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Server {
        let file = std::fs::File::create(log).unwrap();
        Server::spawn(Command::new(BIN), args, envs, Stdio::from(file))
    }
}

/// Runs `tollgate ARGS` to its exit and returns its output; fails the test (and kills the
/// child) if it has not exited within `limit`.
pub fn exit_within(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tollgate {args:?} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A config file body: `rest` (other sections), then a `[gateway]` polling `landing` every
/// 20 ms with `extra_gateway` keys or tables, and one 214 route to `dir:out` at 1,000 a day.
pub fn gateway_toml(
    landing: &std::path::Path,
    out: &std::path::Path,
    extra_gateway: &str,
    rest: &str,
) -> String {
    format!(
        r#"{rest}
[gateway]
inbound = ["{landing}"]
poll_ms = 20
settle_ms = 50
{extra_gateway}
[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000
unit = "day"
deliver = "dir:{out}"
"#,
        landing = landing.display(),
        out = out.display()
    )
}

/// `tollgate check` against `s` with a limit of 5 a day: its exit code and the `used` it
/// printed.
pub fn check(s: &Server, id: &str, weight: u64) -> (i32, u64) {
    let o = Command::new(BIN)
        .args(["check", "--url", &s.url, "--id", id, "--limit", "5", "--unit", "day"])
        .args(["--weight", &weight.to_string()])
        .output()
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    (o.status.code().unwrap_or(-1), j["used"].as_u64().unwrap_or_else(|| panic!("{j}")))
}

/// Interchanges delivered to the directory `out`: its `.edi` files, temp files left out.
pub fn delivered(out: &std::path::Path) -> usize {
    std::fs::read_dir(out).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".edi") && !name.starts_with('.')
            })
            .count()
    })
}

/// Polls `f` every 25 ms until it holds; fails naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// `printf %s TOKEN | sha256sum`, computed the way an operator would (for `[[user]]
/// token_sha256`).
pub fn sha256_hex(token: &str) -> String {
    use std::io::Write;
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(token.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum (coreutils) runs");
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

impl Server {
    /// [`Server::request`] with a JSON `body` (`content-type: application/json`).
    pub fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Message {
        call_at(&self.addr, method, path, headers, body)
    }
}

/// [`Server::request`] against `addr` (`host:port`), usable from other threads.
pub fn request_at(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Message {
    tollgate_testkit::http::send(addr, method, path, headers, body)
}

/// [`request_at`], `None` when no answer comes (refused, or closed before answering).
pub fn try_request_at(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Message> {
    tollgate_testkit::http::try_send(addr, method, path, headers, body).ok()
}

/// `name: value` header lines (CRLF or LF separated) as pairs.
pub fn header_pairs(lines: &str) -> Vec<(&str, &str)> {
    lines.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim(), v.trim())).collect()
}

/// The value of header `name` in a [`lowercased`] answer; panics when it has none.
pub fn header_in<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in {head}"))
        .trim()
}

/// An answer as one lowercased text, head then body, for `contains` checks.
pub fn lowercased(m: &Message) -> String {
    format!("{}\n{}", m.head(), m.text()).to_ascii_lowercase()
}

/// [`Server::call`] against `addr` (`host:port`), usable from other threads.
pub fn call_at(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Message {
    let mut all = headers.to_vec();
    all.push(("content-type", "application/json"));
    tollgate_testkit::http::send(addr, method, path, &all, body.as_bytes())
}

/// A remote quota service stand-in on a free loopback port: it answers every check with 429
/// (`retry-after: 3600`, so the item is held and not retried during a test) after a delay the
/// test can change, and counts the checks it received. It keeps the gateway's pipeline busy
/// for that long, which widens the windows a race test aims at. Stops with the test process.
pub struct SlowQuota {
    /// `http://ADDR/v1/quota`, for `[gateway.quota] url`.
    pub url: String,
    hits: std::sync::Arc<std::sync::atomic::AtomicU64>,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SlowQuota {
    /// Starts answering after `delay`.
    pub fn start(delay: Duration) -> SlowQuota {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/quota", listener.local_addr().unwrap());
        let hits = std::sync::Arc::new(AtomicU64::new(0));
        let delay_ms = std::sync::Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let (h, d) = (hits.clone(), delay_ms.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (h, d) = (h.clone(), d.clone());
                std::thread::spawn(move || {
                    // Each check is a GET without a body: read up to the blank line.
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(d.load(Ordering::SeqCst)));
                    let _ = conn.write_all(
                        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3600\r\n\
                          content-length: 0\r\nconnection: close\r\n\r\n",
                    );
                });
            }
        });
        SlowQuota { url, hits, delay_ms }
    }

    /// How many checks it has received.
    pub fn hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Answers later checks after `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A pseudo-random number from the clock and `salt`, for random timing in race tests (no
/// test data depends on it).
pub fn jitter(salt: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((salt, Instant::now()))
}

/// The sum of every sample of the metric `name` (all its label sets) in a Prometheus scrape;
/// `None` when the scrape has no series of that name.
pub fn metric(scrape: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = scrape
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let rest = match rest.strip_prefix('{') {
                Some(labelled) => labelled.get(labelled.find('}')? + 1..)?,
                None => rest,
            };
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The status code of a raw HTTP answer (0 when there is none).
pub fn status(answer: &str) -> u16 {
    answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}
