//! The queue's server-side filters and bulk actions through the real `tollgate serve`: totals
//! of a filter in `X-Total-Count`, bad filters named (for a bulk action, also a parameter it
//! does not take or an empty one), and a bulk purge racing operators who
//! purge the same items one by one — every item is purged exactly once, and the job's count
//! and the operators' answers add up to the filter's total.

mod common;

use std::time::Duration;

use common::{Server, Status214, gateway_toml, wait_until};
use serde_json::Value;

/// A gateway admitting 5 a day, with `held` held items for each of partners A and B.
fn start(dir: &std::path::Path, held: u32) -> Server {
    let (landing, out) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let text = gateway_toml(&landing, &out, "", "").replace("limit = 1000", "limit = 5");
    let cfg = dir.join("tollgate.toml");
    std::fs::write(&cfg, text).unwrap();
    let data = dir.join("data");
    let server =
        Server::start(&["--config", cfg.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    for sender in ["A", "B"] {
        let mut body = Vec::new();
        for n in 1..=held + 5 {
            body.extend_from_slice(&Status214::new(sender, n).build());
        }
        std::fs::write(landing.join(format!(".{sender}.part")), body).unwrap();
        std::fs::rename(
            landing.join(format!(".{sender}.part")),
            landing.join(format!("{sender}.edi")),
        )
        .unwrap();
    }
    wait_until("the held items", Duration::from_secs(120), || {
        total(&server, "state=held") == u64::from(held) * 2
    });
    server
}

fn total(s: &Server, query: &str) -> u64 {
    let m = s.request("GET", &format!("/v1/queue?limit=1&{query}"), &[], b"");
    assert_eq!(m.status, 200, "{query}: {}", m.text());
    m.header("x-total-count").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{m:?}"))
}

#[test]
fn filters_count_on_the_server_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), 40);
    assert_eq!(total(&s, "partner=ZZ:A&state=held"), 40);
    assert_eq!(total(&s, "partner=ZZ:B"), 45);
    assert_eq!(total(&s, "route=ShipmentStatus&state=held"), 80);
    assert_eq!(total(&s, "route=Other"), 0);
    // Time bounds are counted row by row, and agree.
    assert_eq!(total(&s, "state=held&from=2000-01-01T00:00:00Z"), 80);
    assert_eq!(total(&s, "state=held&to=2000-01-01T00:00:00Z"), 0);
    // Paging through a partner's items walks every one once, each page with the same total.
    let mut seen = std::collections::HashSet::new();
    let mut url = "/v1/queue?partner=ZZ:A&state=held&limit=7".to_owned();
    loop {
        let m = s.request("GET", &url, &[], b"");
        assert_eq!(m.header("x-total-count"), Some("40"));
        for it in m.json().as_array().unwrap() {
            assert_eq!(it["partner"], "ZZ:A");
            assert!(seen.insert(it["id"].as_str().unwrap().to_owned()));
        }
        let Some(link) = m.header("link").map(str::to_owned) else { break };
        assert!(link.contains("partner=ZZ%3AA&state=held&limit=7&cursor="), "{link}");
        url = link.trim_start_matches('<').split('>').next().unwrap().to_owned();
    }
    assert_eq!(seen.len(), 40);
    for (query, name, value) in [
        ("state=parked", "state", "parked"),
        ("from=yesterday", "from", "yesterday"),
        ("limit=0", "limit", "0"),
    ] {
        let m = s.request("GET", &format!("/v1/queue?{query}"), &[], b"");
        assert_eq!(m.status, 400, "{query}");
        assert_eq!(
            (&m.json()["invalid_parameter"], &m.json()["value"]),
            (&Value::from(name), &Value::from(value))
        );
    }
    // A bulk action needs a filter, and a bad one changes nothing.
    let m = s.request("POST", "/v1/queue/purge", &[], b"");
    assert_eq!(m.status, 400, "{}", m.text());
    assert!(m.text().contains("needs a filter"), "{}", m.text());
    let m = s.request("POST", "/v1/queue/release?state=held&to=soon", &[], b"");
    assert_eq!((m.status, m.json()["invalid_parameter"].as_str()), (400, Some("to")));
    // A parameter a bulk action does not take, or an empty one, is refused: read as absent,
    // it widened the action to every held item (a misspelt partner purged all partners').
    for (query, name, value) in [
        ("state=held&parnter=ZZ:A", "parnter", "ZZ:A"),
        ("state=held&partner=", "partner", ""),
        ("state=held&limit=1", "limit", "1"),
    ] {
        let m = s.request("POST", &format!("/v1/queue/purge?{query}"), &[], b"");
        assert_eq!(m.status, 400, "{query}: {}", m.text());
        let got = (m.json()["invalid_parameter"].clone(), m.json()["value"].clone());
        assert_eq!(got, (Value::from(name), Value::from(value)), "{query}");
    }
    assert_eq!(total(&s, "state=held"), 80);
}

#[test]
fn a_bulk_purge_racing_single_purges_purges_each_item_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), 1500);
    let ids: Vec<String> = s
        .request("GET", "/v1/queue?partner=ZZ:A&state=held&limit=1000", &[], b"")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    let m = s.request("POST", "/v1/queue/purge?partner=ZZ:A&state=held", &[], b"");
    assert_eq!(m.status, 202, "{}", m.text());
    let at = m.header("location").unwrap().to_owned();
    assert_eq!(m.json()["total"], 1500);
    // A second job while the first runs is refused, pointing at the first.
    let second = s.request("POST", "/v1/queue/release?partner=ZZ:B", &[], b"");
    if second.status == 409 {
        assert_eq!(second.header("location"), Some(at.as_str()));
    } else {
        // The first was already over: then the second ran, and must be waited for too.
        assert_eq!(second.status, 202, "{}", second.text());
    }
    // Operators purge the first 1,000 one by one, from the newest down, meanwhile.
    let addr = s.addr.clone();
    let singles = std::thread::spawn(move || {
        ids.iter()
            .rev()
            .filter(|id| {
                let m = common::request_at(&addr, "DELETE", &format!("/v1/queue/{id}"), &[], b"");
                assert!(matches!(m.status, 204 | 404 | 409), "{}", m.text());
                m.status == 204
            })
            .count() as u64
    });
    let mut job = Value::Null;
    wait_until("the job's end", Duration::from_secs(120), || {
        job = s.request("GET", &at, &[], b"").json();
        job["state"] != "running"
    });
    let singles = singles.join().unwrap();
    assert_eq!(job["state"], "done", "{job}");
    let done = job["done"].as_u64().unwrap();
    assert_eq!(done + singles, 1500, "job {job}, single purges {singles}");
    assert_eq!(total(&s, "partner=ZZ:A&state=held"), 0);
    assert_eq!(
        total(&s, "partner=ZZ:B&state=held")
            + total(&s, "partner=ZZ:B&state=admitted")
            + total(&s, "partner=ZZ:B&state=delivered"),
        1505
    );
    let audit = s.request("GET", "/v1/audit?limit=1000", &[], b"").json();
    let bulk: Vec<&Value> =
        audit.as_array().unwrap().iter().filter(|r| r["action"] == "queue.purge_filter").collect();
    assert_eq!(bulk.len(), 1);
    assert_eq!(bulk[0]["after"]["done"].as_u64(), Some(done));
    let purged_one_by_one =
        audit.as_array().unwrap().iter().filter(|r| r["action"] == "queue.purge").count();
    assert_eq!(purged_one_by_one as u64, singles);
    // A job can be stopped; a stopped or finished job stays listed.
    let m = s.request("DELETE", &at, &[], b"");
    assert_eq!(m.status, 202);
    let jobs = s.request("GET", "/v1/queue/jobs", &[], b"").json();
    assert!(jobs.as_array().unwrap().iter().any(|j| j["id"] == job["id"]));
    assert_eq!(s.request("GET", "/v1/queue/jobs/999", &[], b"").status, 404);
}
