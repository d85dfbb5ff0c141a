//! The console read by people: numbers with separators, times with their zone (UTC or the
//! browser's, chosen in the header and kept), an HTML 404 page, no navigation before login,
//! sentences for empty tables and unknown partners, phone columns, no controls a role cannot
//! use, reasons in plain words, the audit log's filters and pages over the real server, and
//! policy diffs that list only what changed.

use fantoccini::{Client, Locator};
use serde_json::json;

use crate::browser::{browser, browser_in_zone, js, login, raw, run, screenshot, setup, wait_js};
use crate::common::{Server, Status214};

/// A request with the admin token: status, head and body.
fn admin(server: &Server, method: &str, path: &str, extra: &str) -> (u16, String, String) {
    raw(
        server,
        &format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer root-token\r\n{extra}\
             content-length: 0\r\nconnection: close\r\n\r\n"
        ),
    )
}

/// The texts of the header cells of `table` a person sees.
async fn visible_columns(c: &Client, table: &str) -> serde_json::Value {
    js(
        c,
        &format!(
            "return [...document.querySelectorAll('#{table} thead th')]\
             .filter(h => h.offsetParent !== null).map(h => h.textContent.trim())"
        ),
    )
    .await
}

#[test]
fn numbers_carry_separators_and_times_show_the_zone_chosen() {
    run(async {
        let s = setup(1000, "[[policy]]\nmatch = \"Quota:*\"\nlimit = 20000\nunit = \"day\"\n");
        std::fs::write(s.landing.join("a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
        let quota = "metering-id: Quota:BIG\r\nmessage-weight: 12345\r\n";
        assert_eq!(admin(&s.server, "GET", "/v1/quota", quota).0, 200);
        let Some(b) = browser_in_zone(Some("Asia/Kolkata")).await else { return };
        let c = b.c();
        login(c, &s.server.url, "root-token").await;
        let used = |id: &str| {
            format!(
                "const r = document.querySelector('tr[data-id=\"{id}\"]'); \
                 return r ? r.querySelector('.used .num').textContent : null"
            )
        };
        let gateway_row = "const r = document\
                           .querySelector('tr[data-id=\"ShipmentStatus:ZZ:CARRIERA\"]'); \
                           return !!r && r.querySelector('.used .num').textContent === '1 / 1,000'";
        wait_js(c, "the gateway's row", gateway_row).await;
        assert_eq!(js(c, &used("Quota:BIG")).await, json!("12,345 / 20,000"));
        let summary = js(c, "return document.getElementById('summary').textContent").await;
        assert!(summary.as_str().unwrap().ends_with(" UTC"), "{summary}");

        // A time in the queue: UTC first, with how long ago.
        c.goto(&format!("{}/ui/queue", s.server.url)).await.unwrap();
        c.find(Locator::Id("q-state")).await.unwrap().select_by_value("").await.unwrap();
        let time = "const t = document.querySelector('#queue tbody time'); \
                    return t ? t.textContent : ''";
        let in_utc = "const t = document.querySelector('#queue tbody time'); \
                      return !!t && t.textContent.includes(' UTC, ')";
        wait_js(c, "a received time in UTC", in_utc).await;
        let utc = js(c, time).await.as_str().unwrap().to_owned();
        assert!(utc.ends_with("UTC, just now") || utc.ends_with("min ago"), "{utc}");
        let picked = "const s = document.getElementById('zone'); \
                      return s.options[s.selectedIndex].textContent";
        assert_eq!(js(c, picked).await, "UTC");

        // The local zone: the same instant, 5 h 30 later on the clock, named by its offset.
        c.find(Locator::Id("zone")).await.unwrap().select_by_value("local").await.unwrap();
        let in_local = "const t = document.querySelector('#queue tbody time'); \
                        return !!t && t.textContent.includes(' GMT+5:30, ')";
        wait_js(c, "the time in local time", in_local).await;
        let local = js(c, time).await.as_str().unwrap().to_owned();
        assert!(local.contains(" GMT+5:30, "), "{local}");
        assert_ne!(local, utc);
        let named = js(c, picked).await;
        assert!(named.as_str().unwrap().starts_with("local time (Asia/"), "{named}");
        let hour =
            |t: &str| t[11..13].parse::<u32>().unwrap() * 60 + t[14..16].parse::<u32>().unwrap();
        assert_eq!((hour(&utc) + 330) % 1440, hour(&local), "{utc} / {local}");
        screenshot(c, "queue-local-time").await;

        // The choice is kept in this browser: another page shows local times at once.
        c.goto(&format!("{}/ui/audit", s.server.url)).await.unwrap();
        wait_js(c, "the zone kept", "return document.getElementById('zone').value === 'local'")
            .await;
        b.close().await;
    });
}

#[test]
fn unknown_pages_are_html_404_and_nothing_navigates_before_login() {
    run(async {
        let s = setup(1000, "");
        // Over HTTP: an HTML page with the console's policy, status 404; the API's stay JSON.
        let (status, head, body) =
            raw(&s.server, "GET /ui/no-such-page HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let head = head.to_ascii_lowercase();
        assert_eq!(status, 404, "{head}");
        assert!(head.contains("content-type: text/html"), "{head}");
        assert!(head.contains("content-security-policy: default-src 'none'"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert!(body.contains("<title>Page not found · Tollgate console</title>"), "{body}");
        for path in ["/ui/api/no-such-thing", "/ui/api", "/v1/no-such-thing"] {
            let (status, head, body) = raw(
                &s.server,
                &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
            );
            assert_eq!(status, 404, "{path}");
            assert!(
                head.to_ascii_lowercase().contains("application/problem+json"),
                "{path}: {head}"
            );
            assert!(body.contains("not-found"), "{path}: {body}");
        }

        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;
        // The login page has no navigation and no link but "skip to content".
        c.goto(&format!("{base}/ui/")).await.unwrap();
        c.wait().for_element(Locator::Id("token")).await.unwrap();
        let links = "return [document.querySelectorAll('nav, [data-nav]').length, \
                     document.querySelectorAll('a:not(.skip)').length]";
        assert_eq!(js(c, links).await, json!([0, 0]));
        // The 404 page before login: its path, a way to the overview, no navigation.
        c.goto(&format!("{base}/ui/no-such-page?x=1")).await.unwrap();
        wait_js(
            c,
            "the path named",
            "return document.getElementById('nf-path').textContent === '/ui/no-such-page'",
        )
        .await;
        let shown = "return [document.getElementById('nav').hidden, \
                     document.getElementById('nf-home').getAttribute('href'), \
                     document.getElementById('title').textContent]";
        assert_eq!(js(c, shown).await, json!([true, "/ui/", "Page not found"]));
        // After login, the same page offers the navigation.
        login(c, base, "vera-token").await;
        c.goto(&format!("{base}/ui/no-such-page")).await.unwrap();
        wait_js(c, "the navigation", "return !document.getElementById('nav').hidden").await;
        screenshot(c, "not-found").await;
        c.find(Locator::Id("nf-home")).await.unwrap().click().await.unwrap();
        wait_js(c, "the overview", "return location.pathname === '/ui/'").await;
        b.close().await;
    });
}

#[test]
fn a_viewer_gets_no_controls_and_phones_keep_the_columns_that_matter() {
    run(async {
        let s = setup(1, "");
        std::fs::write(s.landing.join("a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
        std::fs::write(s.landing.join("b.edi"), Status214::new("CARRIERA", 2).build()).unwrap();
        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;
        let held_row = "return document.querySelectorAll('#queue tbody tr[data-id]').length === 1";
        let checkboxes = "return [...document.querySelectorAll('#queue input[type=checkbox]')]\
                          .filter(i => i.offsetParent !== null).length";
        // An operator ticks items; a viewer has nothing to tick.
        login(c, base, "otto-token").await;
        c.goto(&format!("{base}/ui/queue")).await.unwrap();
        wait_js(c, "the held item", held_row).await;
        assert_eq!(js(c, checkboxes).await, 2, "the item's and the page's");
        login_as(c, base, "vera-token").await;
        c.goto(&format!("{base}/ui/queue")).await.unwrap();
        wait_js(c, "the held item", held_row).await;
        assert_eq!(js(c, checkboxes).await, 0);
        let controls = "return [...document\
                        .querySelectorAll('main button, main input[type=checkbox]')]\
                        .filter(b => b.offsetParent !== null).map(b => b.id)";
        assert_eq!(js(c, controls).await, json!(["q-first", "q-next"]));
        // The reason, with its plain sentence.
        let plain =
            js(c, "return document.querySelector('#queue tbody .reason .plain').textContent").await;
        assert!(
            plain.as_str().unwrap().starts_with("Held: this partner has used its allowance"),
            "{plain}"
        );
        // An empty page says so.
        c.find(Locator::Id("q-state")).await.unwrap().select_by_value("dead").await.unwrap();
        wait_js(
            c,
            "the empty sentence",
            "const f = document.querySelector('#queue tfoot'); \
             return !!f && f.textContent === 'No dead items on this page.'",
        )
        .await;
        assert_eq!(js(c, "return document.querySelectorAll('#queue tbody tr').length").await, 0);

        // At phone width: the overview keeps partner, used/limit and state; the queue keeps id,
        // state and partner.
        c.set_window_size(390, 844).await.unwrap();
        wait_js(c, "the narrow layout", "return window.innerWidth < 500").await;
        c.find(Locator::Id("q-state")).await.unwrap().select_by_value("held").await.unwrap();
        wait_js(c, "the held item", held_row).await;
        assert_eq!(visible_columns(c, "queue").await, json!(["Id", "State", "Partner"]));
        let cells = "return [...document.querySelectorAll('#queue tbody tr:first-child td')]\
                     .filter(d => d.offsetParent !== null).length";
        assert_eq!(js(c, cells).await, 3);
        screenshot(c, "queue-phone-viewer").await;
        c.goto(&format!("{base}/ui/")).await.unwrap();
        wait_js(
            c,
            "the row",
            "return document.querySelectorAll('#overview tbody tr').length === 1",
        )
        .await;
        assert_eq!(
            visible_columns(c, "overview").await,
            json!(["Partner", "Used / limit", "State"])
        );
        let row = "const r = document.querySelector('#overview tbody tr'); \
                   return [...r.cells].filter(d => d.offsetParent !== null)\
                   .map(d => d.textContent.trim())";
        let row = js(c, row).await;
        assert_eq!(row[0], "ZZ:CARRIERA");
        assert!(row[1].as_str().unwrap().starts_with("1 / 1"), "{row}");
        assert_eq!(row[2], "exceeded");
        c.set_window_size(1280, 800).await.unwrap();

        // A partner nothing is known of: one sentence, no empty tables.
        c.goto(&format!("{base}/ui/partner?partner=NOBODY")).await.unwrap();
        wait_js(c, "the sentence", "return !document.getElementById('partner-unknown').hidden")
            .await;
        let said = js(
            c,
            "return [document.getElementById('partner-unknown').textContent, \
             [...document.querySelectorAll('main section')].every(s => s.offsetParent === null)]",
        )
        .await;
        assert!(
            said[0]
                .as_str()
                .unwrap()
                .starts_with("No traffic and no queue item is known for partner \"NOBODY\""),
            "{said}"
        );
        assert_eq!(said[1], true);
        // A known one shows its tables.
        c.goto(&format!("{base}/ui/partner?name=ZZ%3ACARRIERA")).await.unwrap();
        wait_js(
            c,
            "its items",
            "return document.querySelectorAll('#recent tbody tr').length === 2",
        )
        .await;
        assert_eq!(js(c, "return document.getElementById('partner-unknown').hidden").await, true);
        b.close().await;
    });
}

/// Logs out the current session and logs in with `token`.
async fn login_as(c: &Client, base: &str, token: &str) {
    c.find(Locator::Id("logout")).await.unwrap().click().await.unwrap();
    wait_js(c, "the login page", "return location.pathname === '/ui/login'").await;
    login(c, base, token).await;
}

#[test]
fn the_audit_page_filters_and_pages_over_the_server() {
    run(async {
        let s = setup(1000, "");
        for i in 0..55 {
            assert_eq!(
                admin(&s.server, "DELETE", &format!("/v1/counters/Carrier:A{i:02}"), "").0,
                200
            );
        }
        for i in 0..3 {
            assert_eq!(admin(&s.server, "DELETE", &format!("/v1/counters/Bank:B{i}"), "").0, 200);
        }
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "vera-token").await;
        c.goto(&format!("{}/ui/audit", s.server.url)).await.unwrap();
        let targets = "return [...document.querySelectorAll('#audit tbody tr')]\
                       .map(r => r.cells[4].textContent)";
        wait_js(
            c,
            "the first page",
            "return document.querySelectorAll('#audit tbody tr').length === 50",
        )
        .await;
        let first = js(c, targets).await;
        assert_eq!((first[0].as_str(), first[49].as_str()), (Some("Bank:B2"), Some("Carrier:A08")));
        let buttons = "return [document.getElementById('a-newest').disabled, \
                       document.getElementById('a-older').disabled]";
        assert_eq!(js(c, buttons).await, json!([true, false]));
        // Older: the 8 left, then nothing older.
        c.find(Locator::Id("a-older")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the second page",
            "return document.querySelectorAll('#audit tbody tr').length === 8",
        )
        .await;
        let second = js(c, targets).await;
        assert_eq!(
            (second[0].as_str(), second[7].as_str()),
            (Some("Carrier:A07"), Some("Carrier:A00"))
        );
        assert_eq!(js(c, buttons).await, json!([false, true]));
        let count = js(c, "return document.getElementById('a-count').textContent").await;
        assert_eq!(count, "Page 2: 8 changes, newest first.");
        // A filter, in any case, on the server: the three Bank resets, one page.
        c.find(Locator::Id("a-target")).await.unwrap().send_keys("bANK").await.unwrap();
        wait_js(
            c,
            "the filtered page",
            "return document.querySelectorAll('#audit tbody tr').length === 3",
        )
        .await;
        assert_eq!(js(c, targets).await, json!(["Bank:B2", "Bank:B1", "Bank:B0"]));
        assert_eq!(js(c, buttons).await, json!([true, true]));
        // One that finds nothing says so.
        c.find(Locator::Id("a-who")).await.unwrap().send_keys("nobody").await.unwrap();
        wait_js(
            c,
            "the empty sentence",
            "return document.querySelector('#audit tfoot').textContent === \
             'No recorded change matches these filters.'",
        )
        .await;
        screenshot(c, "audit-filtered").await;
        b.close().await;
    });
}

#[test]
fn a_policy_diff_lists_only_the_changed_policy() {
    run(async {
        let policies = "[[policy]]\nmatch = \"Carrier:*\"\nlimit = 100\nunit = \"day\"\n\n\
                        [[policy]]\nmatch = \"Bank:*\"\nlimit = 5000\nunit = \"hour\"\n";
        let s = setup(1000, policies);
        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;
        login(c, base, "lena-token").await;
        c.goto(&format!("{base}/ui/limits")).await.unwrap();
        wait_js(
            c,
            "the policies",
            "return document.querySelectorAll('fieldset.rule').length === 2",
        )
        .await;
        // Reviewing without an edit: nothing to apply.
        c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
        wait_js(c, "the diff", "return !document.getElementById('diff-box').hidden").await;
        let diff = "return document.getElementById('diff').textContent";
        assert_eq!(js(c, diff).await, "No change.");
        assert_eq!(js(c, "return document.getElementById('apply').disabled").await, true);
        c.find(Locator::Id("back")).await.unwrap().click().await.unwrap();
        // One limit changed: only that policy, only that field.
        let limit = c.find(Locator::Css("fieldset.rule:nth-of-type(2) [data-key=limit]")).await;
        let limit = limit.unwrap();
        limit.clear().await.unwrap();
        limit.send_keys("7500").await.unwrap();
        c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
        wait_js(c, "the diff", "return !document.getElementById('diff-box').hidden").await;
        let want = "~ \"Bank:*\": limit 5,000 → 7,500\n(1 other policy unchanged)";
        assert_eq!(js(c, diff).await, want);
        c.find(Locator::Id("apply")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "applied",
            "return document.getElementById('status').textContent.startsWith('Applied')",
        )
        .await;
        assert!(std::fs::read_to_string(&s.cfg).unwrap().contains("limit = 7500"));
        // The audit record shows the same.
        c.goto(&format!("{base}/ui/audit")).await.unwrap();
        wait_js(
            c,
            "the record's diff",
            "const p = document.querySelector('#audit tbody pre.diff'); return !!p",
        )
        .await;
        let shown =
            js(c, "return document.querySelector('#audit tbody pre.diff').textContent").await;
        assert_eq!(shown, want);
        b.close().await;
    });
}
