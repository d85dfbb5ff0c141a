//! The console's overview through the real `tollgate serve` with `[server]
//! console_max_counters`: a store holding more live counters than that makes a page from the
//! first of them by metering id and says it is partial; a route filter reads that route's ids
//! only; refreshes racing new counters all answer, each from at most that many.

mod common;

use std::thread;

use common::Server;
use serde_json::Value;

/// Asks `/v1/quota` once for `id` (limit 100 a day), which makes its counter.
fn count(s: &Server, id: &str) {
    let headers = [
        ("metering-id", id),
        ("quota-limit", "100"),
        ("quota-interval", "1"),
        ("quota-timeunit", "day"),
        ("message-weight", "1"),
    ];
    let m = s.request("GET", "/v1/quota", &headers, b"");
    assert_eq!(m.status, 200, "{id}: {}", m.text());
}

fn overview(s: &Server) -> Value {
    overview_of(s, "")
}

fn overview_of(s: &Server, query: &str) -> Value {
    let m = s.request("GET", &format!("/ui/api/overview?per_page=500{query}"), &[], b"");
    assert_eq!(m.status, 200, "{}", m.text());
    m.json()
}

fn ids(page: &Value) -> Vec<String> {
    let rows = page["rows"].as_array().unwrap_or_else(|| panic!("{page}"));
    rows.iter().map(|r| r["metering_id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn beyond_console_max_counters_the_overview_is_made_from_the_first_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, "[server]\nconsole_max_counters = 5\n").unwrap();
    let s = Server::start(&["--store", "memory", "--config", config.to_str().unwrap()]);
    for p in ["E", "A", "D", "B", "C"] {
        count(&s, &format!("Orders:{p}"));
    }
    let page = overview(&s);
    assert_eq!(page["partial"], Value::Null, "five counters are all read: {page}");
    assert_eq!(ids(&page).len(), 5);
    for p in ["H", "F", "G"] {
        count(&s, &format!("Orders:{p}"));
    }
    let page = overview(&s);
    assert_eq!(page["partial"], 5, "{page}");
    assert_eq!(page["total"], 5, "{page}");
    let want: Vec<String> =
        ["A", "B", "C", "D", "E"].iter().map(|p| format!("Orders:{p}")).collect();
    assert_eq!(ids(&page), want, "the first five by metering id");
    // A counter that sorts first takes its place among them.
    count(&s, "Invoice:Z");
    assert_eq!(ids(&overview(&s))[0], "Invoice:Z");

    // Refreshes racing new counters: every one answers, from at most five counters.
    thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for i in 0..200 {
                count(&s, &format!("Race:{i:03}"));
            }
        });
        let readers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..25 {
                        let page = overview(&s);
                        assert!(ids(&page).len() <= 5, "{page}");
                        assert_eq!(page["partial"], 5, "{page}");
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        writer.join().unwrap();
    });
    // A route filter reads that route's ids: the cap counts among them.
    let page = overview_of(&s, "&route=Race");
    assert_eq!(ids(&page), ["Race:000", "Race:001", "Race:002", "Race:003", "Race:004"]);
    assert_eq!(page["partial"], 5, "{page}");
    let page = overview_of(&s, "&route=Invoice");
    assert_eq!((ids(&page), &page["partial"]), (vec!["Invoice:Z".to_owned()], &Value::Null));
    let bursting = s.request("GET", "/ui/api/bursting", &[], b"");
    assert_eq!(bursting.status, 200, "{}", bursting.text());
}
