//! `tollgate serve --store redis://…` against a real `redis-server` child process: counters are
//! shared exactly by several service instances (three instances, 600 concurrent requests, limit
//! 200: exactly 200 admitted, weighted too), and a Redis outage is answered per
//! `store_unavailable` (`local`: 200 + `Tollgate-Degraded: local`; `allow`: 200 +
//! `Tollgate-Degraded: store-unavailable`; `deny`: 503 + `Retry-After`) until Redis is back on
//! the same port, when exact counting resumes without a restart. A frozen (SIGSTOP) Redis is
//! answered the same way, within the store timeout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{RedisServer, Server, free_port};

fn serve(store: &str, config: &std::path::Path) -> Server {
    Server::start(&["--store", store, "--config", config.to_str().unwrap()])
}

/// One `GET /v1/quota`; returns the status line and the raw head + body.
fn quota(addr: &str, id: &str) -> (u16, String) {
    let headers = [("metering-id", id), ("quota-limit", "3"), ("quota-timeunit", "day")];
    let m = common::request_at(addr, "GET", "/v1/quota", &headers, b"");
    (m.status, common::lowercased(&m))
}

fn config(dir: &std::path::Path, unavailable: &str) -> std::path::PathBuf {
    let f = dir.join(format!("{unavailable}.toml"));
    std::fs::write(
        &f,
        format!("[store]\nstore_unavailable = \"{unavailable}\"\ntimeout_ms = 1000\n"),
    )
    .unwrap();
    f
}

#[test]
fn two_instances_share_exact_counters_and_survive_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut redis) = RedisServer::start() else { return };
    let url = redis.url();
    let id = format!("Shared:{}", free_port());
    let a = serve(&url, &config(dir.path(), "local"));
    let a = &a.addr;
    let b = serve(&url, &config(dir.path(), "deny"));
    let b = &b.addr;
    assert_eq!(quota(a, &id).0, 200);
    assert_eq!(quota(b, &id).0, 200);
    assert_eq!(quota(a, &id).0, 200);
    assert_eq!(quota(b, &id).0, 429, "the fourth of 3 is refused, whichever instance asks");

    redis.kill();
    // local: answered from this instance's memory, marked degraded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, text) = loop {
        let r = quota(a, "Outage:1");
        if r.1.contains("tollgate-degraded: local") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("tollgate-degraded: local"), "{text}");
    // deny: 503 with Retry-After.
    let (status, text) = quota(b, "Outage:2");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("retry-after:"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    // Both report the outage in /readyz, still as 200 (the answers go on per the mode).
    let ready = get(a, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("\"status\":\"degraded\""), "{ready}");
    assert!(ready.contains("\"store\":\"redis\""), "{ready}");
}

fn get(addr: &str, path: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}

/// One answer of `GET /v1/quota`, as far as these tests look at it.
#[derive(Debug)]
struct Answer {
    instance: usize,
    status: u16,
    degraded: Option<String>,
    retry_after: bool,
    used: Option<u64>,
    elapsed: Duration,
}

/// `GET /v1/quota` for `id` (flexi window of one hour, so no calendar boundary can fall inside
/// the test) on the instance at `addr`.
async fn ask(
    client: &reqwest::Client,
    instance: usize,
    addr: &str,
    id: &str,
    limit: u64,
    weight: u64,
) -> Answer {
    let started = Instant::now();
    let r = client
        .get(format!("http://{addr}/v1/quota"))
        .header("metering-id", id)
        .header("quota-limit", limit.to_string())
        .header("quota-timeunit", "hour")
        .header("quota-window", "flexi")
        .header("message-weight", weight.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let header = |name: &str| r.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let degraded = header("tollgate-degraded");
    let retry_after = header("retry-after").is_some();
    let body: serde_json::Value = r.json().await.unwrap_or(serde_json::Value::Null);
    let elapsed = started.elapsed();
    Answer { instance, status, degraded, retry_after, used: body["used"].as_u64(), elapsed }
}

/// Fires `n` concurrent requests of `weight` for `id`, round-robin over `addrs`.
async fn burst(addrs: &[String], id: &str, limit: u64, weight: u64, n: usize) -> Vec<Answer> {
    let client = reqwest::Client::new();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (client, addr, id) = (client.clone(), addrs[i % addrs.len()].clone(), id.to_owned());
        set.spawn(async move { ask(&client, i % 3, &addr, &id, limit, weight).await });
    }
    set.join_all().await
}

/// Counts of (200 answers, 429 answers); fails on any other status or any degraded answer.
fn tally(answers: &[Answer]) -> (usize, usize) {
    for a in answers {
        assert!(a.degraded.is_none(), "Redis is up, yet a degraded answer: {a:?}");
        assert!(a.status == 200 || a.status == 429, "unexpected answer: {a:?}");
    }
    let admitted = answers.iter().filter(|a| a.status == 200).count();
    (admitted, answers.len() - admitted)
}

/// Three instances on one Redis, one per `store_unavailable` mode.
const MODES: [&str; 3] = ["local", "allow", "deny"];

fn three_instances(dir: &std::path::Path, redis: &RedisServer) -> (Vec<Server>, Vec<String>) {
    let servers: Vec<Server> = MODES
        .iter()
        .map(|mode| {
            let file = dir.join(format!("three-{mode}.toml"));
            std::fs::write(
                &file,
                format!("[store]\nstore_unavailable = \"{mode}\"\ntimeout_ms = {TIMEOUT_MS}\n"),
            )
            .unwrap();
            serve(&redis.url(), &file)
        })
        .collect();
    let addrs = servers.iter().map(|s| s.addr.clone()).collect();
    (servers, addrs)
}

/// The store timeout of the three instances. Short enough that a hung store is noticed, long
/// enough that a debug build under 600 concurrent requests on a busy machine does not fall back
/// while Redis is up.
const TIMEOUT_MS: u64 = 500;
/// How long an answer may take while Redis is down or hung: the timeout plus a margin for a
/// busy machine.
const ANSWER_BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 2_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_admit_exactly_the_limit_through_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut redis) = RedisServer::start() else { return };
    let (_servers, addrs) = three_instances(dir.path(), &redis);

    // 600 concurrent requests, limit 200: exactly 200 admitted, whichever instance answers.
    let answers = burst(&addrs, "Exact:unit", 200, 1, 600).await;
    assert_eq!(tally(&answers), (200, 400));
    // Each instance saw 200 of them, so separate counters would have admitted up to 600.
    for (i, mode) in MODES.iter().enumerate() {
        let asked = answers.iter().filter(|a| a.instance == i).count();
        assert_eq!(asked, 200, "the {mode} instance");
    }

    // Weighted: 150 requests of weight 3, limit 200: 66 admitted (198), 84 refused.
    let answers = burst(&addrs, "Exact:weighted", 200, 3, 150).await;
    assert_eq!(tally(&answers), (66, 84));
    let client = reqwest::Client::new();
    for (i, addr) in addrs.iter().enumerate() {
        let probe = ask(&client, i, addr, "Exact:weighted", 200, 0).await;
        assert_eq!((probe.status, probe.used), (200, Some(198)), "{probe:?}");
    }

    // Outage mid-run: Redis is killed while 30 clients keep asking. Every answer comes within
    // the timeout plus a generous margin, and is either a normal one or the mode's degraded one;
    // every instance gives both kinds.
    let answers = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..30 {
        let (addrs, answers, stop) = (addrs.clone(), answers.clone(), stop.clone());
        let client = client.clone();
        clients.spawn(async move {
            let mut n = c;
            while !stop.load(Ordering::Relaxed) {
                let a = ask(&client, n % 3, &addrs[n % 3], "Outage:mid-run", 1_000_000, 1).await;
                answers.lock().unwrap().push(a);
                n += 1;
            }
        });
    }
    let count =
        |pred: &dyn Fn(&Answer) -> bool| answers.lock().unwrap().iter().filter(|a| pred(a)).count();
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&|_| true) < 150 {
        assert!(Instant::now() < deadline, "the load did not get going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    redis.kill();
    while (0..3).any(|i| count(&|a| a.instance == i && is_mode_answer(MODES[i], a)) < 20) {
        assert!(Instant::now() < deadline, "not every instance answered per its mode");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    clients.join_all().await;
    for a in answers.lock().unwrap().iter() {
        assert!(a.elapsed < ANSWER_BOUND, "slow answer during the outage: {a:?}");
        let normal = a.status == 200 && a.degraded.is_none();
        assert!(normal || is_mode_answer(MODES[a.instance], a), "{a:?}");
    }
    for (i, mode) in MODES.iter().enumerate() {
        let normal = count(&|a| a.instance == i && a.status == 200 && a.degraded.is_none());
        assert!(normal > 0, "the {mode} instance answered nothing before the kill");
    }
    // With Redis down, each instance answers per its mode, within the timeout plus a margin.
    assert_answers_per_mode(&client, &addrs, "Outage:after", 5).await;

    // Redis back on the same port: every instance leaves the degraded state without a restart,
    // and counting over the three is exact again.
    redis.restart();
    wait_until_recovered(&client, &addrs).await;
    let answers = burst(&addrs, "Exact:after-recovery", 200, 1, 600).await;
    assert_eq!(tally(&answers), (200, 400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_is_answered_per_mode_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let Some(redis) = RedisServer::start() else { return };
    let (_servers, addrs) = three_instances(dir.path(), &redis);
    let client = reqwest::Client::new();
    for (i, addr) in addrs.iter().enumerate() {
        let a = ask(&client, i, addr, "Hung:before", 100, 1).await;
        assert_eq!((a.status, a.degraded.as_deref()), (200, None), "{a:?}");
    }

    // A frozen Redis accepts nothing and answers nothing: only the store timeout ends the wait.
    redis.pause();
    assert_answers_per_mode(&client, &addrs, "Hung:during", 3).await;

    redis.resume();
    wait_until_recovered(&client, &addrs).await;
}

/// With the store unreachable, `n` requests to each instance are answered per its mode, within
/// the timeout plus a generous margin.
async fn assert_answers_per_mode(client: &reqwest::Client, addrs: &[String], id: &str, n: usize) {
    for (i, addr) in addrs.iter().enumerate() {
        for k in 0..n {
            let a = ask(client, i, addr, id, 100, 1).await;
            assert!(a.elapsed < ANSWER_BOUND, "waited past the timeout: {a:?}");
            assert!(
                is_mode_answer(MODES[i], &a),
                "request {k} to the {} instance: {a:?}",
                MODES[i]
            );
        }
    }
}

/// Polls every instance (15 s at most) until it answers from Redis again, not degraded.
async fn wait_until_recovered(client: &reqwest::Client, addrs: &[String]) {
    for (i, addr) in addrs.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let a = ask(client, i, addr, "Recovery:probe", 100, 0).await;
            if a.status == 200 && a.degraded.is_none() {
                break;
            }
            assert!(Instant::now() < deadline, "{} instance still degraded: {a:?}", MODES[i]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether `a` is what `mode` answers while the store is unreachable.
fn is_mode_answer(mode: &str, a: &Answer) -> bool {
    match mode {
        "local" => a.status == 200 && a.degraded.as_deref() == Some("local"),
        "allow" => a.status == 200 && a.degraded.as_deref() == Some("store-unavailable"),
        "deny" => a.status == 503 && a.retry_after,
        _ => unreachable!("no such mode: {mode}"),
    }
}
