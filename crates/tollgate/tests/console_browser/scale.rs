//! The console at scale: 15,000 held items across three partners, counted on the server,
//! found by the queue's partner filter, and one partner's 10,000 purged in one bulk job; an
//! overview of more counters than `console_max_counters` that says so.

use std::time::Duration;

use serde_json::{Value, json};

use crate::browser::{browser, js, login, run, screenshot, setup, wait_js};
use crate::common::{Server, Status214, gateway_toml, wait_until};

/// Held items per partner (each sends 10 more, which its limit of 10 a day admits).
const HELD: [(&str, u64); 3] =
    [("CARRIERXYZ", 10_000), ("FASTFREIGHT", 3_000), ("SLOWBOAT", 2_000)];
const ADMIN: (&str, &str) = ("authorization", "Bearer root-token");

/// Writes `n` interchanges of `sender` into the landing directory, 1,000 to a file.
fn send(landing: &std::path::Path, sender: &str, n: u64) {
    let mut next = 1u32;
    for (f, count) in (0..n.div_ceil(1000)).map(|f| (f, (n - f * 1000).min(1000))) {
        let mut body = Vec::new();
        for _ in 0..count {
            body.extend_from_slice(&Status214::new(sender, next).build());
            next += 1;
        }
        let tmp = landing.join(format!(".{sender}-{f}.part"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, landing.join(format!("{sender}-{f}.edi"))).unwrap();
    }
}

fn total(s: &crate::browser::Setup, query: &str) -> u64 {
    let m = s.server.request("GET", &format!("/v1/queue?limit=1&{query}"), &[ADMIN], b"");
    assert_eq!(m.status, 200, "{}", m.text());
    m.header("x-total-count").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{m:?}"))
}

fn overview_held(s: &crate::browser::Setup) -> Vec<(String, u64)> {
    let m = s.server.request("GET", "/ui/api/overview?per_page=500", &[ADMIN], b"");
    assert_eq!(m.status, 200, "{}", m.text());
    let mut rows: Vec<(String, u64)> = m.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["partner"].as_str().unwrap().to_owned(), r["held"].as_u64().unwrap()))
        .collect();
    rows.sort();
    rows
}

#[test]
fn fifteen_thousand_held_items_are_counted_found_and_purged_in_bulk() {
    run(async {
        let s = setup(10, "");
        for (sender, held) in HELD {
            send(&s.landing, sender, held + 10);
        }
        let want: u64 = HELD.iter().map(|(_, n)| n).sum();
        wait_until("15,000 held items", Duration::from_secs(600), || {
            total(&s, "state=held") == want
        });
        // The overview's held counts are the queue's totals, partner by partner.
        let expected: Vec<(String, u64)> =
            HELD.iter().map(|(p, n)| (format!("ZZ:{p}"), *n)).collect();
        assert_eq!(overview_held(&s), expected);
        for (p, n) in &expected {
            assert_eq!(total(&s, &format!("state=held&partner={p}")), *n, "{p}");
        }
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "otto-token").await;
        wait_js(
            c,
            "the overview's held count with separators",
            r#"const r = document.querySelector('#overview tr[data-id="ShipmentStatus:ZZ:CARRIERXYZ"]');
            return !!r && r.querySelector('.held').textContent === '10,000';"#,
        )
        .await;
        wait_js(
            c,
            "the held partners in Bursting now",
            r#"const rows = [...document.querySelectorAll('#bursting tbody tr')];
            return rows.length === 3 && rows[0].dataset.id === 'ShipmentStatus:ZZ:CARRIERXYZ'
                && rows[0].cells[2].textContent.includes('10,000 held');"#,
        )
        .await;
        screenshot(c, "overview-scale").await;

        // The partner's chart over 24 hours shows the burst: its admitted and its held units.
        let base = &s.server.url;
        c.goto(&format!("{base}/ui/partner?name=ZZ:CARRIERXYZ")).await.unwrap();
        wait_js(
            c,
            "the partner's 24-hour chart with its held units",
            "const t = document.querySelector('.traffic-chart title');
            return !!t && t.textContent.includes('10 admitted')
                && t.textContent.includes('10,000 held');",
        )
        .await;
        let ticks =
            js(c, "return document.querySelectorAll('.traffic-chart .tick.x').length").await;
        assert_eq!(ticks, 6, "six time labels on the x axis");
        screenshot(c, "partner-burst").await;

        // The queue's partner filter finds every held item of a partner.
        c.goto(&format!("{base}/ui/queue?state=held&partner=ZZ:FASTFREIGHT")).await.unwrap();
        wait_js(
            c,
            "the partner's total",
            "return document.getElementById('q-count').textContent.startsWith('3,000 items match')",
        )
        .await;
        // One bulk purge of CarrierXYZ's held items, followed to its end.
        c.goto(&format!("{base}/ui/queue?state=held&partner=ZZ:CARRIERXYZ")).await.unwrap();
        wait_js(
            c,
            "CarrierXYZ's total",
            "return document.getElementById('q-count').textContent.startsWith('10,000 items match')",
        )
        .await;
        js(c, "document.getElementById('q-purge-all').click(); return true").await;
        wait_js(c, "the confirmation", "return document.getElementById('confirm').open").await;
        let text = js(c, "return document.getElementById('confirm-text').textContent").await;
        assert!(text.as_str().unwrap().contains("Purge all 10,000 items"), "{text}");
        js(c, "document.getElementById('confirm-ok').click(); return true").await;
        wait_js(c, "the job's progress", "return !document.getElementById('q-job').hidden").await;
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        loop {
            let t = js(c, "return document.getElementById('q-job-text').textContent").await;
            if t.as_str().is_some_and(|t| t.contains("(done)")) {
                assert!(t.as_str().unwrap().starts_with("purge: 10,000 of 10,000 done"), "{t}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the bulk purge did not end: {t}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        screenshot(c, "queue-bulk-purge").await;
        b.close().await;

        // Other partners untouched; one audit record naming the filter and the count.
        assert_eq!(
            overview_held(&s),
            [
                ("ZZ:CARRIERXYZ".to_owned(), 0),
                ("ZZ:FASTFREIGHT".into(), 3_000),
                ("ZZ:SLOWBOAT".into(), 2_000)
            ]
        );
        assert_eq!(total(&s, "state=held"), 5_000);
        let audit = s.server.request("GET", "/v1/audit?limit=1000", &[ADMIN], b"").json();
        let records: Vec<&Value> = audit
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"].as_str().unwrap_or("").starts_with("queue."))
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        let r = records[0];
        assert_eq!(r["action"], "queue.purge_filter");
        assert_eq!(r["who"], "otto");
        assert!(
            r["target"].as_str().unwrap().contains("partner=ZZ%3ACARRIERXYZ&state=held"),
            "{r}"
        );
        assert_eq!(r["before"]["total"], 10_000);
        assert_eq!((&r["after"]["done"], &r["after"]["state"]), (&json!(10_000), &json!("done")));
    });
}

/// A store holding more live counters than `[server] console_max_counters`: the overview says
/// its page is made from the first of them, and shows just those.
#[test]
fn an_overview_of_more_counters_than_it_reads_says_so() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
        std::fs::create_dir_all(&landing).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let server = crate::browser::server_section(&dir.path().join("data"))
            .replace("[server]\n", "[server]\nconsole_max_counters = 2\n");
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, gateway_toml(&landing, &out, "", &server)).unwrap();
        let server = Server::start(&["--config", cfg.to_str().unwrap()]);
        for p in ["C", "A", "B"] {
            let id = format!("Orders:{p}");
            let headers = [
                ADMIN,
                ("metering-id", id.as_str()),
                ("quota-limit", "10"),
                ("quota-interval", "1"),
                ("quota-timeunit", "day"),
            ];
            let m = server.request("GET", "/v1/quota", &headers, b"");
            assert_eq!(m.status, 200, "{}", m.text());
        }
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &server.url, "vera-token").await;
        wait_js(
            c,
            "the partial notice and the first two ids",
            r#"const n = document.getElementById('partial');
            const ids = [...document.querySelectorAll('#overview tbody tr')].map(r => r.dataset.id);
            return !n.hidden && n.textContent.includes('more than 2 live counters')
                && ids.join() === 'Orders:A,Orders:B';"#,
        )
        .await;
        screenshot(c, "overview-partial").await;
        // Filtered by route, the notice names it.
        js(
            c,
            "const r = document.getElementById('f-route'); r.value = 'Orders';
            r.dispatchEvent(new Event('input', { bubbles: true })); return true",
        )
        .await;
        wait_js(
            c,
            "the notice naming the route",
            "return document.getElementById('partial').textContent
                .includes('more than 2 live counters of route Orders')",
        )
        .await;
        b.close().await;
    });
}
