//! Delivery credentials (`[gateway.route.delivery]`) against real peers: an OAuth 2.0
//! authorization server and a target that checks its tokens (both small HTTP servers of this
//! test), a target that records what it receives, and a `tollgate serve` over HTTPS that
//! requires a client certificate. Every gateway is a real `tollgate serve`.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tollgate_testkit::tls::TestCa;

const CLIENT_ID: &str = "tollgate-gw";
const CLIENT_SECRET: &str = "cl13nt-s3cret-Xy7";
/// Every token issued ends with this, so a log can be searched for tokens.
const TOKEN_MARK: &str = "q7Zt";
const SENDERS: [&str; 4] = ["CARRIERA", "CARRIERB", "CARRIERC", "CARRIERD"];

/// Standard base64 (RFC 4648) with padding, for the expected `Authorization: Basic` values.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = byte(0) << 16 | byte(1) << 8 | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What the authorization server and the target share: the tokens issued and what was asked.
#[derive(Default)]
struct Auth {
    /// Token → (serial, expiry).
    issued: Mutex<HashMap<String, (u64, Instant)>>,
    /// Tokens issued.
    serial: AtomicU64,
    /// Calls to the token endpoint, answered or not.
    calls: AtomicU64,
    /// Token requests being answered now, and the most at once.
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Token requests that were not what RFC 6749 §4.4 says (with what was wrong).
    malformed: Mutex<Vec<String>>,
    /// The `expires_in` of the next tokens (and their real lifetime), in seconds.
    expires_in: AtomicU64,
    /// Tokens with a serial up to this one are refused by the target (revoked).
    revoked_upto: AtomicU64,
    /// The token endpoint answers 503 while set.
    failing: AtomicBool,
    /// 401s the target answered.
    unauthorized: AtomicU64,
    /// Interchange ids the target accepted, with the Content-Type each came with.
    accepted: Mutex<Vec<(String, String)>>,
}

impl Auth {
    fn token_endpoint(&self, req: &Message) -> Message {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Message::reply(503, r#"{"error":"temporarily_unavailable"}"#);
        }
        let basic = format!("Basic {}", base64(format!("{CLIENT_ID}:{CLIENT_SECRET}").as_bytes()));
        let checks = [
            (req.method == "POST", "method"),
            (req.path == "/oauth/token", "path"),
            (req.header("authorization") == Some(basic.as_str()), "client credentials"),
            (req.header("content-type") == Some("application/x-www-form-urlencoded"), "type"),
            (req.text() == "grant_type=client_credentials&scope=edi.write", "form"),
        ];
        if let Some((_, what)) = checks.iter().find(|(ok, _)| !ok) {
            self.malformed.lock().unwrap().push(format!("{what}: {req:?}"));
            return Message::reply(400, r#"{"error":"invalid_request"}"#);
        }
        let serial = self.serial.fetch_add(1, Ordering::SeqCst) + 1;
        let expires_in = self.expires_in.load(Ordering::SeqCst);
        let token = format!("at{serial}{TOKEN_MARK}");
        let expiry = Instant::now() + Duration::from_secs(expires_in);
        self.issued.lock().unwrap().insert(token.clone(), (serial, expiry));
        Message::reply(
            200,
            format!(
                r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":{expires_in}}}"#
            ),
        )
        .with("content-type", "application/json")
    }

    fn target(&self, req: &Message) -> Message {
        let token = req.header("authorization").and_then(|a| a.strip_prefix("Bearer "));
        let issued = self.issued.lock().unwrap();
        let valid = token.and_then(|t| issued.get(t)).is_some_and(|(serial, expiry)| {
            *serial > self.revoked_upto.load(Ordering::SeqCst) && Instant::now() < *expiry
        });
        if !valid {
            self.unauthorized.fetch_add(1, Ordering::SeqCst);
            return Message::reply(401, "invalid_token").with("www-authenticate", "Bearer");
        }
        let id = req.header("tollgate-interchange-id").unwrap_or_default().to_owned();
        let kind = req.header("content-type").unwrap_or_default().to_owned();
        self.accepted.lock().unwrap().push((id, kind));
        Message::reply(200, "")
    }

    fn accepted(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}

/// The authorization server and the target it issues tokens for, with their shared state.
fn oauth_peers() -> (Arc<Auth>, HttpStub, HttpStub) {
    let auth = Arc::new(Auth::default());
    auth.expires_in.store(2, Ordering::SeqCst);
    let a = auth.clone();
    let token = HttpStub::start(move |req| {
        let now = a.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        a.most_in_flight.fetch_max(now, Ordering::SeqCst);
        // A slow endpoint: deliveries that need a token meanwhile must wait for this one.
        std::thread::sleep(Duration::from_millis(150));
        let answer = a.token_endpoint(req);
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer
    });
    let a = auth.clone();
    let target = HttpStub::start(move |req| a.target(req));
    (auth, token, target)
}

/// A gateway config in `dir` whose one route delivers to `deliver` with the `[delivery]`
/// table `delivery`; returns the config file and the landing directory.
fn config(dir: &Path, deliver: &str, delivery: &str, extra_gateway: &str) -> (PathBuf, PathBuf) {
    let landing = dir.join("in");
    std::fs::create_dir_all(&landing).unwrap();
    let out = dir.join("out");
    let toml = gateway_toml(&landing, &out, extra_gateway, "").replace(
        &format!("deliver = \"dir:{}\"", out.display()),
        &format!("deliver = \"{deliver}\"\n{delivery}"),
    );
    assert!(toml.contains(deliver), "{toml}");
    let file = dir.join("gateway.toml");
    std::fs::write(&file, toml).unwrap();
    (file, landing)
}

fn oauth2_table(token: &HttpStub, secret: &Path) -> String {
    format!(
        "[gateway.route.delivery]\noauth2 = {{ token_url = \"{}/oauth/token\", client_id = \
         \"{CLIENT_ID}\", client_secret_file = {secret:?}, scope = \"edi.write\" }}\n",
        token.url()
    )
}

/// Lands interchange `control` from `sender` (its own file).
fn land(landing: &Path, sender: &str, control: u32) {
    let name = landing.join(format!("{sender}-{control}.edi"));
    std::fs::write(name, Status214::new(sender, control).build()).unwrap();
}

fn serve_logging(config: &Path, data: &Path, log: &Path) -> Server {
    Server::start_logging_with_env(
        &[
            "--config",
            config.to_str().unwrap(),
            "--store",
            "memory",
            "--data",
            data.to_str().unwrap(),
        ],
        &[("RUST_LOG", "debug")],
        log,
    )
}

#[test]
fn every_delivery_carries_a_valid_token_across_expiries_and_a_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, token, target) = oauth_peers();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, format!("{CLIENT_SECRET}\n")).unwrap();
    let deliver = format!("{}/in", target.url());
    let (cfg, landing) = config(dir.path(), &deliver, &oauth2_table(&token, &secret), "");
    let (data, log) = (dir.path().join("data"), dir.path().join("log"));
    let gw = serve_logging(&cfg, &data, &log);

    // Tokens live 2 s: 40 interchanges over about 4 s, from four senders (four lanes deliver
    // at once), the first four landed together so that they need the first token together.
    let started = Instant::now();
    let mut n = 0;
    for round in 0..10u32 {
        for sender in SENDERS {
            n += 1;
            land(&landing, sender, round + 1);
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    wait_until("40 deliveries", Duration::from_secs(60), || auth.accepted() == n);
    let elapsed = started.elapsed();
    let fetched = auth.serial.load(Ordering::SeqCst);
    assert!(auth.malformed.lock().unwrap().is_empty(), "{:?}", auth.malformed.lock().unwrap());
    assert_eq!(auth.most_in_flight.load(Ordering::SeqCst), 1, "one token request at a time");
    assert!(fetched >= 2, "the token expired during the run and was fetched again: {fetched}");
    assert!(
        fetched <= elapsed.as_secs() + 4,
        "{fetched} tokens in {elapsed:?}: about one a second, not one per delivery"
    );
    assert!(
        auth.accepted.lock().unwrap().iter().all(|(_, kind)| kind == "application/edi-x12"),
        "the default Content-Type"
    );

    // Long-lived tokens, then revoked at the authorization server: the kept token is refused
    // with 401, one new token is fetched for all the deliveries refused, and each is retried.
    auth.expires_in.store(3600, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1200)); // the 2 s token is no longer used
    land(&landing, "CARRIERA", 100);
    n += 1;
    wait_until("a delivery with a long-lived token", Duration::from_secs(20), || {
        auth.accepted() == n
    });
    let before = auth.serial.load(Ordering::SeqCst);
    auth.revoked_upto.store(before, Ordering::SeqCst);
    let refused = auth.unauthorized.load(Ordering::SeqCst);
    for sender in SENDERS {
        for control in [101, 102] {
            land(&landing, sender, control);
            n += 1;
        }
    }
    wait_until("the deliveries after the revocation", Duration::from_secs(30), || {
        auth.accepted() == n
    });
    assert!(auth.unauthorized.load(Ordering::SeqCst) > refused, "the revoked token was sent");
    assert_eq!(auth.serial.load(Ordering::SeqCst), before + 1, "one renewal, shared");
    let ids: std::collections::HashSet<String> =
        auth.accepted.lock().unwrap().iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids.len(), n, "every interchange arrived with a valid token");
    let dead = gw.get("/v1/queue?state=dead");
    assert!(dead.ends_with("[]"), "{dead}");

    // Neither the client secret nor a token shows anywhere, even at debug level.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("oauth2 token fetched"), "the log is at debug level: {logged}");
    let shown =
        [logged, gw.get("/v1/queue"), gw.get("/readyz"), gw.get("/metrics"), gw.get("/v1/audit")];
    for text in shown.iter().chain(&files_under(&data)) {
        assert!(!text.contains(CLIENT_SECRET), "the client secret shows: {text}");
        assert!(!text.contains(TOKEN_MARK), "a token shows: {text}");
    }
}

/// The text (lossy) of every file under `dir`.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    out
}

#[test]
fn a_failing_token_endpoint_is_retried_with_a_reason_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, token, target) = oauth_peers();
    auth.failing.store(true, Ordering::SeqCst);
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, CLIENT_SECRET).unwrap();
    let deliver = format!("{}/in", target.url());
    let (cfg, landing) = config(dir.path(), &deliver, &oauth2_table(&token, &secret), "");
    let gw = serve_logging(&cfg, &dir.path().join("data"), &dir.path().join("log"));
    land(&landing, "CARRIERA", 1);
    let reason = format!("oauth2 token_url {}/oauth/token answered 503", token.url());
    wait_until("a retry naming the token endpoint", Duration::from_secs(20), || {
        gw.get("/v1/queue?state=admitted").contains(&reason)
    });
    assert_eq!(auth.accepted(), 0);
    assert_eq!(auth.unauthorized.load(Ordering::SeqCst), 0, "the target was not called");
    auth.failing.store(false, Ordering::SeqCst);
    wait_until("the delivery once the endpoint answers", Duration::from_secs(30), || {
        auth.accepted() == 1
    });
}

#[test]
fn basic_credentials_fixed_headers_and_the_content_type_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let received: Arc<Mutex<Vec<Message>>> = Arc::default();
    let r = received.clone();
    let target = HttpStub::start(move |req| {
        r.lock().unwrap().push(req.clone());
        Message::reply(202, "")
    });
    let password = dir.path().join("password");
    std::fs::write(&password, "pa55-w0rd-Q1\n").unwrap();
    let delivery = format!(
        "[gateway.route.delivery]\nbasic = {{ user = \"edi-inbound\", password_file = {password:?} }}\n\
         headers = {{ \"X-Api-Key\" = \"k3y-v4lue-77\", \"SAP-Client\" = \"100\" }}\n\
         content_type = \"application/EDIFACT\"\n"
    );
    let deliver = format!("{}/edi", target.url());
    let (cfg, landing) = config(dir.path(), &deliver, &delivery, "");
    let log = dir.path().join("log");
    let gw = serve_logging(&cfg, &dir.path().join("data"), &log);
    land(&landing, "CARRIERA", 1);
    wait_until("the delivery", Duration::from_secs(20), || !received.lock().unwrap().is_empty());
    let got = received.lock().unwrap()[0].clone();
    assert_eq!(base64(b"edi:pw"), "ZWRpOnB3");
    let basic = format!("Basic {}", base64(b"edi-inbound:pa55-w0rd-Q1"));
    assert_eq!(got.header("authorization"), Some(basic.as_str()), "{got:?}");
    assert_eq!(got.header("x-api-key"), Some("k3y-v4lue-77"));
    assert_eq!(got.header("sap-client"), Some("100"));
    assert_eq!(got.header("content-type"), Some("application/EDIFACT"));
    assert_eq!(got.header("tollgate-document"), Some("214"));
    assert_eq!(got.body, Status214::new("CARRIERA", 1).build(), "the bytes as received");
    wait_until("the item delivered", Duration::from_secs(10), || {
        gw.get("/v1/queue?state=delivered").contains("\"delivered\"")
    });
    let logged = std::fs::read_to_string(&log).unwrap();
    for secret in ["pa55-w0rd-Q1", "k3y-v4lue-77", &base64(b"edi-inbound:pa55-w0rd-Q1")] {
        assert!(!logged.contains(secret), "{secret} shows in the log");
    }
}

#[test]
fn a_deliver_url_with_a_password_or_a_missing_secret_file_exits_2_naming_the_route() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = config(dir.path(), "http://edi:pw-Zq81@127.0.0.1:9/in", "", "");
    let args = ["serve", "--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0"];
    let o = exit_within(&args, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("[[gateway.route]] #1 (name = \"ShipmentStatus\") deliver = "), "{err}");
    assert!(err.contains("basic = { user, password_file }") && !err.contains("pw-Zq81"), "{err}");

    let delivery = "[gateway.route.delivery]\nbasic = { user = \"edi\", password_file = \"/nonexistent/pw\" }\n";
    config(dir.path(), "http://127.0.0.1:9/in", delivery, "");
    let o = exit_within(&args, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("(name = \"ShipmentStatus\") gateway.route[0].delivery.basic.password_file = \"/nonexistent/pw\": cannot read"),
        "{err}"
    );
}

#[test]
fn a_target_that_requires_a_client_certificate_gets_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = TestCa::new("Target CA");
    let client_ca = TestCa::new("Partner client CA");
    let trusted = server_ca.write(dir.path(), "target-ca");
    let (cert, key) = server_ca.server("target").write(dir.path(), "target");
    let client_ca_file = client_ca.write(dir.path(), "client-ca");

    // The target: a tollgate gateway over HTTPS whose handshake needs a client certificate
    // from the client CA; what it receives on /v1/interchanges it delivers to `target/out`.
    let t = dir.path().join("target");
    let server = format!("[server]\ntls_client_ca = {:?}\n", client_ca_file.to_str().unwrap());
    std::fs::create_dir_all(t.join("in")).unwrap();
    std::fs::write(t.join("t.toml"), gateway_toml(&t.join("in"), &t.join("out"), "", &server))
        .unwrap();
    let target = Server::start(&[
        "--config",
        t.join("t.toml").to_str().unwrap(),
        "--store",
        "memory",
        "--data",
        t.join("data").to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert!(target.url.starts_with("https://"), "{}", target.url);
    let deliver = format!("{}/v1/interchanges", target.url);
    let ca = format!("deliver_ca_file = {:?}\n", trusted.to_str().unwrap());

    // Without a client certificate the handshake fails: retried, never delivered.
    let bare = dir.path().join("bare");
    let (cfg, landing) = config(&bare, &deliver, "", &ca);
    let gw = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--store",
        "memory",
        "--data",
        bare.join("data").to_str().unwrap(),
    ]);
    land(&landing, "CARRIERA", 1);
    wait_until("a failed attempt", Duration::from_secs(20), || {
        gw.get("/v1/queue?state=admitted").contains("\"reason\":\"")
    });
    assert_eq!(delivered(&t.join("out")), 0);

    // With the route's client certificate: delivered through the target's gateway.
    let (client_cert, client_key) = client_ca.client("gateway-out").write(dir.path(), "client");
    let with = dir.path().join("with");
    let delivery = format!(
        "[gateway.route.delivery]\nclient_cert = {:?}\nclient_key = {:?}\n",
        client_cert.to_str().unwrap(),
        client_key.to_str().unwrap()
    );
    let (cfg, landing) = config(&with, &deliver, &delivery, &ca);
    let _gw = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--store",
        "memory",
        "--data",
        with.join("data").to_str().unwrap(),
    ]);
    land(&landing, "CARRIERB", 1);
    wait_until("the delivery over mTLS", Duration::from_secs(30), || {
        delivered(&t.join("out")) == 1
    });
    let queue = gw.get("/v1/queue?state=admitted");
    assert!(queue.contains("CARRIERA"), "the route without a certificate still fails: {queue}");
}
