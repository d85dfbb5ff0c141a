//! The browser tests' plumbing: a chromedriver with its headless chromium, a server with a
//! gateway and users, in-page scripts and fetches, screenshots.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::{Server, free_port, gateway_toml};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// One browser at a time.
pub static TURN: Mutex<()> = Mutex::new(());

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// `printf %s TOKEN | sha256sum`.
pub fn sha256(token: &str) -> String {
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils) runs");
    c.stdin.take().unwrap().write_all(token.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

/// The `[server]` section and the users: `root-token` (admin), `vera-token` (viewer),
/// `otto-token` (operator), `lena-token` (limits).
pub fn server_section(data: &Path) -> String {
    let user = |name: &str, role: &str| {
        format!(
            "[[user]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\nrole = \"{role}\"\n\n",
            sha256(&format!("{name}-token"))
        )
    };
    format!(
        "[server]\nadmin_token = \"root-token\"\ndata = \"{}\"\n\n{}{}{}",
        data.display(),
        user("vera", "viewer"),
        user("otto", "operator"),
        user("lena", "limits"),
    )
}

/// A server with a gateway whose ShipmentStatus route admits `limit` units a day; its
/// landing and outbound directories; `policies` is appended to the config file.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub cfg: PathBuf,
    pub landing: PathBuf,
    pub out: PathBuf,
    pub server: Server,
}

pub fn setup(limit: u64, policies: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let landing = dir.path().join("in");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&landing).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let text = gateway_toml(&landing, &out, "", &server_section(&dir.path().join("data")))
        .replace("limit = 1000", &format!("limit = {limit}"));
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, format!("{text}\n{policies}")).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    Setup { dir, cfg, landing, out, server }
}

/// A chromedriver and the browser session it drives; both die with this value.
pub struct Browser {
    driver: Child,
    client: Option<Client>,
}

impl Browser {
    pub fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    pub async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver leads its own process group: the browser it started goes with it.
        use rustix::process::{Pid, Signal, kill_process_group};
        let _ = kill_process_group(Pid::from_child(&self.driver), Signal::KILL);
        let _ = self.driver.wait();
    }
}

/// A headless chromium at 1280×800, or `None` (with a notice) when it is not installed and
/// `CI` is not set.
pub async fn browser() -> Option<Browser> {
    browser_in_zone(None).await
}

/// [`browser`], its local time zone `tz` (`TZ`, e.g. `Asia/Kolkata`) when given.
pub async fn browser_in_zone(tz: Option<&str>) -> Option<Browser> {
    let missing: Vec<&str> =
        [CHROMIUM, CHROMEDRIVER].into_iter().filter(|p| !Path::new(p).exists()).collect();
    if !missing.is_empty() {
        let msg = format!(
            "the console's browser tests need {missing:?} (apt-get install chromium \
             chromium-driver)"
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!!!!! NOTICE: {msg}; NOT RUN !!!!!!!!\n");
        return None;
    }
    let port = free_port();
    let driver = {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(CHROMEDRIVER);
        if let Some(tz) = tz {
            cmd.env("TZ", tz);
        }
        cmd.arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver starts")
    };
    let mut b = Browser { driver, client: None };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,800", "--disable-gpu"],
        }),
    );
    let client = ClientBuilder::rustls()
        .unwrap()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromium session");
    b.client = Some(client);
    Some(b)
}

/// Runs `script` (a function body returning a value) in the page.
pub async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Polls `script` until it returns `true`; fails naming `what` (and the page's status line).
pub async fn wait_js(c: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if js(c, script).await == json!(true) {
            return;
        }
        if Instant::now() > deadline {
            let status = js(c, "return (document.getElementById('status')||{}).textContent").await;
            let url = c.current_url().await.map(|u| u.to_string()).unwrap_or_default();
            panic!("timed out waiting for {what} (at {url}, status {status})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The answer of an in-page `fetch` with the session's CSRF token: status and body.
pub async fn fetch(c: &Client, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let script = r#"
        const [method, path, body, done] = arguments;
        fetch('/ui/api/session').then(r => r.json()).then(s => fetch(path, {
            method, body, headers: {'X-CSRF-Token': s.csrf, 'Content-Type': 'application/json'}
        })).then(async r => done([r.status, await r.text()])).catch(e => done([0, String(e)]));
    "#;
    let args = vec![json!(method), json!(path), json!(body)];
    let v = c.execute_async(script, args).await.unwrap();
    (v[0].as_u64().unwrap() as u16, v[1].as_str().unwrap_or_default().to_owned())
}

/// Logs in through the login page with `token` and waits for the overview.
pub async fn login(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/ui/")).await.unwrap();
    let field = c.wait().for_element(Locator::Id("token")).await.unwrap();
    field.send_keys(token).await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    wait_js(
        c,
        "the overview after login",
        "return location.pathname === '/ui/' && \
        document.getElementById('who').textContent.length > 0",
    )
    .await;
}

pub fn screenshot_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
}

/// A raw HTTP request: status, headers and body.
pub fn raw(server: &Server, request: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

pub fn run(test: impl std::future::Future<Output = ()>) {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(test);
}
