//! `refund_unsent`: units the gateway's embedded metering counted for an interchange that dies
//! or is purged before its target takes it are given back, through the real `tollgate serve`
//! and a real HTTP target; without the setting they stay counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use common::{HttpStub, Message, Server, Status214, wait_until};

/// A gateway whose route admits 2 a day and delivers to `target`; `refund` sets
/// `refund_unsent`.
fn start(dir: &std::path::Path, target: &HttpStub, refund: bool) -> Server {
    start_with(dir, target, refund, "")
}

/// [`start`] with more keys for the route.
fn start_with(dir: &std::path::Path, target: &HttpStub, refund: bool, more: &str) -> Server {
    let landing = dir.join("in");
    std::fs::create_dir_all(&landing).unwrap();
    let cfg = dir.join("tollgate.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[gateway]
inbound = ["{landing}"]
poll_ms = 20
settle_ms = 50

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 2
unit = "day"
deliver = "{url}/in"
refund_unsent = {refund}
{more}
"#,
            landing = landing.display(),
            url = target.url(),
        ),
    )
    .unwrap();
    let data = dir.join("data");
    Server::start(&["--config", cfg.to_str().unwrap(), "--data", data.to_str().unwrap()])
}

fn land(dir: &std::path::Path, n: u32) {
    for i in 1..=n {
        let path = dir.join("in").join(format!("f{i}.edi"));
        std::fs::write(dir.join("in").join(format!(".f{i}.part")), Status214::new("A", i).build())
            .unwrap();
        std::fs::rename(dir.join("in").join(format!(".f{i}.part")), path).unwrap();
        // One at a time, so each is metered after the one before has died.
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn count(s: &Server, state: &str) -> u64 {
    let m = s.request("GET", &format!("/v1/queue?limit=1&state={state}"), &[], b"");
    m.header("x-total-count").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{m:?}"))
}

fn used(s: &Server) -> u64 {
    let m = s.request("GET", "/v1/counters", &[], b"");
    let all = m.json();
    all["counters"]
        .as_array()
        .unwrap_or_else(|| panic!("{all}"))
        .iter()
        .find(|c| c["identifier"] == "ShipmentStatus:ZZ:A")
        .map_or(0, |c| c["used"].as_u64().unwrap())
}

#[test]
fn units_of_interchanges_that_die_undelivered_are_given_back_only_when_the_route_says_so() {
    for refund in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        // The target refuses everything: each delivered item dies at once (a 4xx).
        let target = HttpStub::start(|_| Message::reply(400, "no"));
        let s = start(dir.path(), &target, refund);
        land(dir.path(), 4);
        wait_until("four items settled", Duration::from_secs(30), || {
            count(&s, "dead") + count(&s, "held") == 4
        });
        if refund {
            // Every death gave its unit back, so none had to wait.
            assert_eq!((count(&s, "dead"), count(&s, "held")), (4, 0));
            wait_until("the units given back", Duration::from_secs(10), || used(&s) == 0);
        } else {
            assert_eq!((count(&s, "dead"), count(&s, "held")), (2, 2));
            assert_eq!(used(&s), 2);
        }
    }
}

#[test]
fn purging_an_admitted_item_gives_its_units_back() {
    let dir = tempfile::tempdir().unwrap();
    // The target is down (503): items stay admitted, waiting for their next attempt.
    let status = Arc::new(AtomicU16::new(503));
    let st = status.clone();
    let target = HttpStub::start(move |_| Message::reply(st.load(Ordering::SeqCst), "later"));
    let s = start(dir.path(), &target, true);
    land(dir.path(), 3);
    wait_until("two admitted, one held", Duration::from_secs(30), || {
        count(&s, "admitted") == 2 && count(&s, "held") == 1
    });
    assert_eq!(used(&s), 2);
    let first = s.request("GET", "/v1/queue?state=admitted&limit=1", &[], b"").json()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A purge during a delivery attempt is refused (409): try until the item waits between two.
    wait_until("the purge", Duration::from_secs(30), || {
        let m = s.request("DELETE", &format!("/v1/queue/{first}"), &[], b"");
        assert!(matches!(m.status, 204 | 409), "{}", m.text());
        m.status == 204
    });
    // Its unit is given back and goes at once to the held item, admitted in its place.
    wait_until("the held item admitted", Duration::from_secs(10), || {
        count(&s, "held") == 0 && count(&s, "admitted") == 2
    });
    assert_eq!(used(&s), 2);
    // A purged held item was never counted: nothing is given back for it.
    let landing = dir.path().join("in");
    std::fs::write(landing.join(".f9.part"), Status214::new("A", 9).build()).unwrap();
    std::fs::rename(landing.join(".f9.part"), landing.join("f9.edi")).unwrap();
    wait_until("a fourth item held", Duration::from_secs(30), || count(&s, "held") == 1);
    let held = s.request("GET", "/v1/queue?state=held&limit=1", &[], b"").json()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(s.request("DELETE", &format!("/v1/queue/{held}"), &[], b"").status, 204);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(used(&s), 2);
}

/// The part split off an interchange over quota carries the charges of its transactions: when
/// it dies undelivered, they are given back like a whole interchange's, and the held rest
/// tries again at once.
#[test]
fn a_split_part_that_dies_undelivered_gives_its_units_back() {
    let dir = tempfile::tempdir().unwrap();
    let target = HttpStub::start(|_| Message::reply(400, "no"));
    let s = start_with(dir.path(), &target, true, "split = true");
    // Three transactions against a limit of 2: transactions 1-2 split off and delivered (and
    // refused at once), the third held.
    let file = dir.path().join("in").join("f.edi");
    std::fs::write(&file, Status214::new("A", 1).transactions(3).build()).unwrap();
    wait_until("the split part dead", Duration::from_secs(30), || count(&s, "dead") >= 1);
    let dead = s.request("GET", "/v1/queue?state=dead&limit=10", &[], b"").json();
    assert!(dead[0]["reason"].is_string(), "{dead}");
    // Its two units are given back, which lets the held third transaction be metered at once
    // (not at midnight, when its refusal said the window would have room): it is delivered,
    // refused and given back in turn.
    wait_until("the rest metered, dead and given back", Duration::from_secs(10), || {
        count(&s, "held") == 0 && count(&s, "dead") == 2 && used(&s) == 0
    });
}
