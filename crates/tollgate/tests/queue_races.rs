//! Operators and the pipeline acting on the same items at once, through the real `tollgate
//! serve`, repeated with random timing: a slow remote quota service keeps the pipeline busy
//! while operators purge and release, and a slow delivery target keeps deliveries in flight.
//! Each action has exactly one outcome, no other item's bytes change, a purged item is never
//! delivered, and a metering id never has two deliveries in flight.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{HttpStub, Message, Server, Status214, wait_until};
use tollgate_testkit::Jitter;

/// A remote quota service that answers after 100–600 ms: 429 (`Retry-After: 3600`, so what it
/// refuses stays held) while `refuse` is set, else 200.
fn slow_quota(refuse: bool) -> HttpStub {
    let jitter = Mutex::new(Jitter::new("slow quota service"));
    HttpStub::start(move |_req| {
        let wait = jitter.lock().unwrap().millis(500) + Duration::from_millis(100);
        std::thread::sleep(wait);
        if refuse {
            Message::reply(429, "{}").with("retry-after", "3600")
        } else {
            Message::reply(200, "{}")
        }
    })
}

/// `serve` with a `[gateway]` whose route meters against `quota` and delivers to `deliver`.
fn start(dir: &Path, quota: &HttpStub, deliver: &str) -> Server {
    let cfg = dir.join("tollgate.toml");
    let text = format!(
        r#"
[gateway]
inbound = ["{inbound}"]
poll_ms = 20
settle_ms = 50

[gateway.quota]
mode = "remote"
url = "{quota}/v1/quota"
timeout_ms = 5000

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000
unit = "day"
deliver = "{deliver}"
"#,
        inbound = dir.join("in").display(),
        quota = quota.url(),
    );
    std::fs::write(&cfg, text).unwrap();
    let data = dir.join("data");
    Server::start(&["--config", cfg.to_str().unwrap(), "--data", data.to_str().unwrap()])
}

/// Uploads `body`; the file id.
fn upload(server: &Server, body: &[u8]) -> String {
    let answer = server.request("POST", "/v1/interchanges", &[], body);
    assert_eq!(answer.status, 202, "{}", answer.text());
    answer.json()["id"].as_str().unwrap().to_owned()
}

/// The ids of the items in `state`.
fn ids_in(server: &Server, state: &str) -> Vec<String> {
    let answer = server.request("GET", &format!("/v1/queue?state={state}&limit=1000"), &[], b"");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let items = answer.json();
    items.as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect()
}

fn wait_held(server: &Server, ids: &[&str]) {
    wait_until("items held", Duration::from_secs(30), || {
        let held = ids_in(server, "held");
        ids.iter().all(|id| held.iter().any(|h| h == id))
    });
}

/// `GET /v1/queue/{id}/payload`: status and bytes.
fn payload(server: &Server, id: &str) -> (u16, Vec<u8>) {
    let answer = server.request("GET", &format!("/v1/queue/{id}/payload"), &[], b"");
    (answer.status, answer.body)
}

/// How many audit records name `action` on `target`.
fn audited(server: &Server, action: &str, target: &str) -> usize {
    let answer = server.request("GET", "/v1/audit?limit=1000", &[], b"");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let records = answer.json();
    let records = records.as_array().unwrap();
    records.iter().filter(|r| r["action"] == action && r["target"] == target).count()
}

/// `METHOD path` from `n` threads at once; the statuses.
fn at_once(server: &Server, method: &str, path: &str, n: usize) -> Vec<u16> {
    std::thread::scope(|s| {
        let calls: Vec<_> =
            (0..n).map(|_| s.spawn(|| server.request(method, path, &[], b"").status)).collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    })
}

#[test]
fn repeated_purges_of_one_item_leave_the_items_sharing_its_spool_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let quota = slow_quota(true);
    let out = dir.path().join("out");
    let server = start(dir.path(), &quota, &format!("dir:{}", out.display()));
    let mut jitter = Jitter::new("purge race");
    let mut kept = Vec::new();
    for round in 0..20u32 {
        // Two partners' interchanges in one upload: items F-1 and F-2 share one spool file.
        let body = [
            Status214::new("CARRIERA", 100 + round).build(),
            Status214::new("CARRIERB", 200 + round).build(),
        ]
        .concat();
        let file = upload(&server, &body);
        let (first, second) = (format!("{file}-1"), format!("{file}-2"));
        wait_held(&server, &[&first, &second]);
        let (status, bytes) = payload(&server, &second);
        assert_eq!(status, 200);
        // The pipeline is busy metering another file on the slow service while the purges
        // arrive, so they queue up and are applied together.
        upload(&server, &Status214::new("CARRIERC", 300 + round).build());
        std::thread::sleep(jitter.millis(300));
        let mut statuses = at_once(&server, "DELETE", &format!("/v1/queue/{first}"), 10);
        statuses.sort_unstable();
        assert_eq!(statuses, [204, 404, 404, 404, 404, 404, 404, 404, 404, 404], "round {round}");
        assert_eq!(payload(&server, &second), (200, bytes.clone()), "round {round}: {second}");
        assert_eq!(audited(&server, "queue.purge", &first), 1, "round {round}");
        kept.push((second, bytes));
    }
    // Every other item is still whole: released, each is delivered byte for byte.
    for (id, _) in &kept {
        let answer = server.request("POST", &format!("/v1/queue/{id}/release"), &[], b"");
        assert_eq!(answer.status, 200, "{id}: {}", answer.text());
    }
    for (id, bytes) in &kept {
        let file = out.join(format!("{id}.edi"));
        wait_until(&format!("{id} delivered"), Duration::from_secs(30), || file.exists());
        assert_eq!(&std::fs::read(&file).unwrap(), bytes, "{id} delivered as received");
    }
}

/// A delivery target that takes 100–400 ms per delivery, and records the ids it received and
/// the most deliveries it had in flight at once per partner.
struct SlowTarget {
    stub: HttpStub,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    in_flight: HashMap<String, usize>,
    most: usize,
    received: Vec<String>,
}

impl SlowTarget {
    fn start() -> SlowTarget {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let jitter = Mutex::new(Jitter::new("slow delivery target"));
        let state = seen.clone();
        let stub = HttpStub::start(move |req| {
            let partner = req.header("tollgate-partner").unwrap_or_default().to_owned();
            let id = req.header("tollgate-interchange-id").unwrap_or_default().to_owned();
            {
                let mut s = state.lock().unwrap();
                let n = s.in_flight.entry(partner.clone()).or_default();
                *n += 1;
                let n = *n;
                s.most = s.most.max(n);
            }
            let wait = jitter.lock().unwrap().millis(300) + Duration::from_millis(100);
            std::thread::sleep(wait);
            let mut s = state.lock().unwrap();
            *s.in_flight.entry(partner).or_default() -= 1;
            s.received.push(id);
            Message::reply(200, "")
        });
        SlowTarget { stub, seen }
    }

    fn received(&self, id: &str) -> usize {
        self.seen.lock().unwrap().received.iter().filter(|r| *r == id).count()
    }
}

#[test]
fn purges_and_releases_race_deliveries_with_one_outcome_each_and_one_delivery_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let quota = slow_quota(true);
    let target = SlowTarget::start();
    let server = start(dir.path(), &quota, &format!("{}/in", target.stub.url()));
    let mut jitter = Jitter::new("purge and release race");
    for round in 0..20u32 {
        let body: Vec<u8> =
            (0..3).flat_map(|i| Status214::new("CARRIERA", round * 10 + i + 1).build()).collect();
        let file = upload(&server, &body);
        let ids: Vec<String> = (1..=3).map(|n| format!("{file}-{n}")).collect();
        wait_held(&server, &ids.iter().map(String::as_str).collect::<Vec<_>>());
        // Every item is released and two of them purged, each after a random pause.
        let mut actions: Vec<(&str, String, Duration)> =
            ids.iter().map(|id| ("release", id.clone(), jitter.millis(400))).collect();
        let skip = jitter.below(3) as usize;
        for (_, id) in ids.iter().enumerate().filter(|(n, _)| *n != skip) {
            actions.push(("purge", id.clone(), jitter.millis(600)));
        }
        let outcomes: Vec<(&str, String, u16)> = std::thread::scope(|s| {
            let calls: Vec<_> = actions
                .iter()
                .map(|(what, id, pause)| {
                    let server = &server;
                    s.spawn(move || {
                        std::thread::sleep(*pause);
                        let (method, path) = match *what {
                            "release" => ("POST", format!("/v1/queue/{id}/release")),
                            _ => ("DELETE", format!("/v1/queue/{id}")),
                        };
                        (*what, id.clone(), server.request(method, &path, &[], b"").status)
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        wait_until("no delivery left", Duration::from_secs(60), || {
            let admitted = ids_in(&server, "admitted");
            !ids.iter().any(|id| admitted.contains(id))
        });
        for id in &ids {
            let of = |what: &str| {
                outcomes.iter().find(|(w, i, _)| *w == what && i == id).map(|(_, _, s)| *s)
            };
            let (release, purge) = (of("release"), of("purge"));
            let release = release.unwrap();
            assert!(matches!(release, 200 | 404), "round {round}: release {id} answered {release}");
            match purge {
                Some(204) => {
                    assert_eq!(target.received(id), 0, "round {round}: {id} purged yet delivered")
                }
                // 409: under way, or already delivered.
                Some(409) | None => {
                    assert_eq!(release, 200, "round {round}: {id}");
                    assert!(target.received(id) >= 1, "round {round}: {id} never delivered");
                }
                Some(other) => panic!("round {round}: purge of {id} answered {other}"),
            }
            if release == 404 {
                assert_eq!(purge, Some(204), "round {round}: {id} released 404 but not purged");
            }
            let purged = usize::from(purge == Some(204));
            assert_eq!(audited(&server, "queue.purge", id), purged, "round {round}: {id}");
            let released = usize::from(release == 200);
            assert_eq!(audited(&server, "queue.release", id), released, "round {round}: {id}");
        }
    }
    let most = target.seen.lock().unwrap().most;
    assert_eq!(most, 1, "one metering id had {most} deliveries in flight at once");
}
