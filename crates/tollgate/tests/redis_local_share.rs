//! `store_unavailable = "local"` on three real `tollgate serve` instances sharing one real
//! `redis-server`, with `local_share_of = 3`: whatever Redis does, the fleet admits at most the
//! limit + 5 %, and Redis holds every admitted unit afterwards.
//! - On a loaded machine (CPU burners, a 50 ms store timeout) with a Redis that stalls for
//!   80 ms at a time (SIGSTOP pulses), many checks time out and are answered locally while
//!   their script still runs in Redis once it wakes.
//! - With Redis frozen (SIGSTOP) for the first 0.5 s of the race, every instance answers from
//!   its share, then adds what it admitted to Redis once Redis answers again.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{RedisServer, Server};

const LIMIT: u64 = 200;
/// The limit + 5 %.
const BOUND: usize = 210;

/// Three instances with `local_share_of = 3` and a 50 ms store timeout.
fn three(dir: &std::path::Path, redis: &RedisServer) -> (Vec<Server>, Vec<String>) {
    let file = dir.join("local.toml");
    std::fs::write(
        &file,
        "[store]\nstore_unavailable = \"local\"\ntimeout_ms = 50\nlocal_share_of = 3\n",
    )
    .unwrap();
    let servers: Vec<Server> = (0..3)
        .map(|_| Server::start(&["--store", &redis.url(), "--config", file.to_str().unwrap()]))
        .collect();
    let addrs = servers.iter().map(|s| s.addr.clone()).collect();
    (servers, addrs)
}

/// `GET /v1/quota` of `weight` for `id` (limit 200 a day, flexi) on `addr`.
async fn quota(client: &reqwest::Client, addr: &str, id: &str, weight: u64) -> reqwest::Response {
    client
        .get(format!("http://{addr}/v1/quota"))
        .header("metering-id", id)
        .header("quota-limit", LIMIT.to_string())
        .header("quota-timeunit", "day")
        .header("quota-window", "flexi")
        .header("message-weight", weight.to_string())
        .send()
        .await
        .unwrap()
}

/// [`quota`]: the status, and whether the answer was local (`Tollgate-Degraded: local`).
async fn ask(client: &reqwest::Client, addr: &str, id: &str, weight: u64) -> (u16, bool) {
    let r = quota(client, addr, id, weight).await;
    (r.status().as_u16(), r.headers().get("tollgate-degraded").is_some())
}

/// 600 concurrent checks of weight 1 for `id`, round-robin over `addrs`: how many got 200, and
/// how many were answered locally.
async fn race(addrs: &[String], id: &str) -> (usize, usize) {
    let client = reqwest::Client::new();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..600 {
        let (client, addr, id) = (client.clone(), addrs[i % 3].clone(), id.to_owned());
        set.spawn(async move { ask(&client, &addr, &id, 1).await });
    }
    let answers = set.join_all().await;
    assert!(answers.iter().all(|(s, _)| *s == 200 || *s == 429), "{answers:?}");
    let admitted = answers.iter().filter(|(s, _)| *s == 200).count();
    let admitted_locally = answers.iter().filter(|(s, local)| *s == 200 && *local).count();
    println!("{id}: {admitted_locally} admitted locally");
    (admitted, answers.iter().filter(|(_, local)| *local).count())
}

/// What Redis holds for `id` once every instance has made a shared decision again (each adds
/// its local units before its next shared decision): the `used` of a weight-0 check, read
/// from Redis, not from a local answer.
async fn held_in_redis(addrs: &[String], id: &str) -> u64 {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut shared = 0;
        let mut used = None;
        for addr in addrs {
            let r = quota(&client, addr, id, 0).await;
            if r.headers().get("tollgate-degraded").is_none() {
                shared += 1;
            }
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            used = body["used"].as_u64();
        }
        if shared == addrs.len() {
            return used.expect("a used count");
        }
        assert!(std::time::Instant::now() < deadline, "the instances did not reach Redis again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Threads spinning on every core until dropped: the busy machine of the report.
struct Burners(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Burners {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        Self(stop, threads)
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_frozen_redis_admits_at_most_the_limit_plus_5_percent() {
    let dir = tempfile::tempdir().unwrap();
    let Some(redis) = RedisServer::start() else { return };
    let (_servers, addrs) = three(dir.path(), &redis);
    let redis = Arc::new(redis);

    let burners = Burners::start();
    let stalls = Arc::new(AtomicBool::new(true));
    let pulses = std::thread::spawn({
        let (stalls, redis) = (stalls.clone(), redis.clone());
        move || {
            while stalls.load(Ordering::Relaxed) {
                redis.pause();
                std::thread::sleep(Duration::from_millis(80));
                redis.resume();
                std::thread::sleep(Duration::from_millis(40));
            }
        }
    });
    let (admitted, local) = race(&addrs, "Loaded:race").await;
    stalls.store(false, Ordering::Relaxed);
    pulses.join().unwrap();
    drop(burners);
    let held = held_in_redis(&addrs, "Loaded:race").await;
    println!("loaded machine: {admitted} admitted ({local} answered locally), {held} in Redis");
    assert!(local > 0, "no answer was local: Redis never stalled past the timeout");
    assert!(admitted <= BOUND, "{admitted} admitted on a loaded machine, limit {LIMIT}");
    assert!(held >= admitted as u64, "Redis holds {held} of {admitted} admitted units");

    redis.pause();
    let frozen = tokio::spawn({
        let addrs = addrs.clone();
        async move { race(&addrs, "Frozen:race").await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.resume();
    let (admitted, local) = frozen.await.unwrap();
    let held = held_in_redis(&addrs, "Frozen:race").await;
    println!("Redis frozen for 0.5 s: {admitted} admitted ({local} locally), {held} in Redis");
    assert!(local > 0, "no answer was local: Redis was not frozen during the race");
    assert!(admitted <= BOUND, "{admitted} admitted around a frozen Redis, limit {LIMIT}");
    assert!(admitted >= 190, "only {admitted} admitted: the shares were not used");
    assert!(held >= admitted as u64, "Redis holds {held} of {admitted} admitted units");
}
