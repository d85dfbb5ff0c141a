//! Child processes shared by the binary's integration tests: a real `tollgate serve` on a free
//! loopback port ([`Server`]) and a real `redis-server` in a temp dir ([`RedisServer`]). Both are
//! killed when dropped, so a failing test leaves nothing running.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `tollgate` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A free loopback port (free when asked; the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `tollgate serve`, found through its `listening on http://ADDR` line; killed (SIGKILL)
/// when dropped.
pub struct Server {
    child: Child,
    /// `http://ADDR`, as printed by the server.
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
        let mut cmd = Command::new(BIN);
        cmd.arg("serve");
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(args)
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(20)).expect("no `listening on` line");
        let addr = url.strip_prefix("http://").unwrap_or(&url).to_owned();
        Server { child, url, addr }
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

/// A real `redis-server` on a free loopback port, its files in a temp dir; killed when dropped.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
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
                "\n*** SKIPPED: redis-server not found on PATH; Redis tests of the tollgate \
                 binary did not run. Install it (apt-get install -y redis-server) or set \
                 TOLLGATE_REQUIRE_REDIS=1 to make this a failure. ***\n"
            );
            return None;
        };
        let mut server =
            RedisServer { port: free_port(), dir: tempfile::tempdir().unwrap(), child: None };
        server.spawn(&bin);
        Some(server)
    }

    fn spawn(&mut self, bin: &PathBuf) {
        let child = Command::new(bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
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

    /// `redis://127.0.0.1:PORT/0`, for `--store`.
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
