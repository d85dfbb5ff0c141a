//! The console in a real browser: Debian's `chromium`, driven over WebDriver (`chromedriver`)
//! against the real `tollgate serve`, with a real gateway moving real files.
//!
//! Each test starts its own chromedriver (in its own process group, killed with its browser
//! when the test ends, pass or fail) on a free port; the tests take turns, so two browsers
//! never share the machine's two cores. Without chromium or chromedriver the tests fail when
//! `CI` is set, and otherwise print a notice and pass without running.
//!
//! A screenshot of each page lands in `target/console-screenshots/`.

mod browser;
#[path = "../common/mod.rs"]
mod common;
mod cross_origin;
mod limits;
mod notify;
mod people;
mod scale;

use std::path::Path;
use std::time::Duration;

use browser::{browser, fetch, js, login, raw, run, screenshot, setup, wait_js};
use common::Status214;
use fantoccini::Locator;
use fantoccini::key::Key;
use serde_json::{Value, json};

#[test]
fn login_and_logout() {
    run(async {
        let s = setup(1000, "");
        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;
        c.goto(&format!("{base}/")).await.unwrap();
        c.wait().for_element(Locator::Id("token")).await.unwrap();
        assert_eq!(c.current_url().await.unwrap().path(), "/ui/login");
        screenshot(c, "login").await;

        // A wrong token: an error beside the form, still on the login page.
        c.find(Locator::Id("token")).await.unwrap().send_keys("nope").await.unwrap();
        c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the login error",
            "return document.getElementById('login-error')\
            .textContent.includes('neither the admin token')",
        )
        .await;

        login(c, base, "otto-token").await;
        let who = js(c, "return document.getElementById('who').textContent").await;
        assert_eq!(who, "otto (operator)");
        // The cookie is HttpOnly: the page's script cannot read it.
        assert_eq!(js(c, "return document.cookie").await, "");
        let cookies = c.get_all_cookies().await.unwrap();
        let session = cookies.iter().find(|k| k.name() == "tollgate_session").expect("a cookie");
        assert_eq!(session.http_only(), Some(true));
        assert_eq!(format!("{:?}", session.same_site()), "Some(Strict)");
        let (status, _) = fetch(c, "GET", "/v1/queue", None).await;
        assert_eq!(status, 200);

        // The same cookie without the CSRF token cannot act (nor read) through the API.
        let cookie = format!("tollgate_session={}", session.value());
        let (status, _, body) = raw(
            &s.server,
            &format!(
                "POST /v1/queue/x/release HTTP/1.1\r\nhost: x\r\ncookie: {cookie}\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("X-CSRF-Token") || body.contains("x-csrf-token"), "{body}");
        // The login answer's cookie attributes.
        let login_body = r#"{"token":"vera-token"}"#;
        let (status, head, _) = raw(
            &s.server,
            &format!(
                "POST /ui/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{login_body}",
                login_body.len()
            ),
        );
        assert_eq!(status, 200, "{head}");
        let set = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).unwrap();
        for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(set.contains(part), "{set}");
        }
        assert!(!set.contains("Secure"), "plain HTTP: {set}");

        c.find(Locator::Id("logout")).await.unwrap().click().await.unwrap();
        wait_js(c, "the login page after logout", "return location.pathname === '/ui/login'").await;
        // The old session is gone on the server too.
        let (status, _, _) = raw(
            &s.server,
            &format!(
                "GET /ui/api/session HTTP/1.1\r\nhost: x\r\ncookie: {cookie}\r\n\
                 connection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 401);
        b.close().await;
    });
}

#[test]
fn the_overview_follows_a_gateway_burst_while_it_happens() {
    run(async {
        let s = setup(36, "");
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "root-token").await;
        let used = r#"const r = document.querySelector('#overview tr[data-id="ShipmentStatus:ZZ:BURST"]');
            return r ? Number(r.querySelector('.used .num').textContent.split(' / ')[0]) : 0;"#;
        // 30 interchanges, one every 200 ms: the page (refreshed every second) shows the count
        // rising meanwhile.
        let landing = s.landing.clone();
        let burst = tokio::task::spawn_blocking(move || {
            for i in 0..30u32 {
                let body = Status214::new("BURST", 100 + i).build();
                let tmp = landing.join(format!(".b{i}.part"));
                std::fs::write(&tmp, body).unwrap();
                std::fs::rename(&tmp, landing.join(format!("b{i}.edi"))).unwrap();
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let mut seen = Vec::new();
        while !burst.is_finished() {
            let n = js(c, used).await.as_u64().unwrap_or(0);
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        burst.await.unwrap();
        let between: Vec<&u64> = seen.iter().filter(|n| (1..30).contains(*n)).collect();
        assert!(between.len() >= 2, "the page showed the burst only as {seen:?}");
        let all = r#"const r = document.querySelector('#overview tr[data-id="ShipmentStatus:ZZ:BURST"]');
            return !!r && r.querySelector('.used .num').textContent === '30 / 36';"#;
        wait_js(c, "all 30 shown", all).await;
        let row = js(
            c,
            r#"const r = document.querySelector('#overview tr[data-id="ShipmentStatus:ZZ:BURST"]');
            return [r.querySelector('.badge').textContent, r.querySelector('meter').value,
                    r.cells[1].textContent, r.cells[2].textContent]"#,
        )
        .await;
        assert_eq!(row, json!(["near", 30, "ZZ:BURST", "ShipmentStatus"]));
        screenshot(c, "overview").await;
        // At phone width the page fits: only the table scrolls, inside its own box.
        c.set_window_size(390, 844).await.unwrap();
        wait_js(c, "the narrow layout", "return window.innerWidth < 500").await;
        let fits = "return document.documentElement.scrollWidth <= window.innerWidth";
        assert_eq!(js(c, fits).await, true);
        screenshot(c, "overview-phone").await;
        b.close().await;
    });
}

#[test]
fn a_held_item_released_from_the_queue_page_reaches_the_outbound_directory() {
    run(async {
        let s = setup(3, "");
        std::fs::write(
            s.landing.join("a.edi"),
            Status214::new("CARRIERA", 1).transactions(3).build(),
        )
        .unwrap();
        std::fs::write(
            s.landing.join("b.edi"),
            Status214::new("CARRIERA", 2).transactions(3).build(),
        )
        .unwrap();
        let out_files = |dir: &Path| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        common::wait_until("one delivered", Duration::from_secs(20), || out_files(&s.out) == 1);
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "otto-token").await;
        c.goto(&format!("{}/ui/queue", s.server.url)).await.unwrap();
        wait_js(
            c,
            "the held item",
            "return document.querySelectorAll('#queue tbody tr').length === 1",
        )
        .await;
        // By keyboard: space ticks the item, Enter presses the buttons.
        let key = |k: Key| char::from(k).to_string();
        let pick = c.find(Locator::Css("#queue tbody input.pick")).await.unwrap();
        pick.send_keys(&key(Key::Space)).await.unwrap();
        assert_eq!(
            js(c, "return document.querySelector('#queue tbody input.pick').checked").await,
            true
        );
        c.find(Locator::Id("q-release")).await.unwrap().send_keys(&key(Key::Enter)).await.unwrap();
        wait_js(c, "the confirmation", "return document.getElementById('confirm').open").await;
        let text = js(c, "return document.getElementById('confirm-text').textContent").await;
        assert_eq!(text, "Release 1 interchange (3 records) to ShipmentStatus without metering?");
        screenshot(c, "queue").await;
        assert_eq!(out_files(&s.out), 1, "nothing is released before the confirmation");
        c.find(Locator::Id("confirm-ok")).await.unwrap().send_keys(&key(Key::Enter)).await.unwrap();
        wait_js(
            c,
            "the release reported",
            "return document.getElementById('status')\
            .textContent.startsWith('release: 1 of 1 done')",
        )
        .await;
        common::wait_until("the released item delivered", Duration::from_secs(20), || {
            out_files(&s.out) == 2
        });
        let (status, _, body) = raw(
            &s.server,
            "GET /v1/audit HTTP/1.1\r\nhost: x\r\nauthorization: Bearer root-token\r\n\
             connection: close\r\n\r\n",
        );
        assert_eq!(status, 200);
        let records: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (records[0]["action"].as_str(), records[0]["who"].as_str()),
            (Some("queue.release"), Some("otto"))
        );
        b.close().await;
    });
}

#[test]
fn a_viewer_sees_no_action_buttons_and_gets_403_from_the_api() {
    run(async {
        let s = setup(1, limits::POLICIES);
        std::fs::write(s.landing.join("a.edi"), Status214::new("CARRIERA", 1).build()).unwrap();
        std::fs::write(s.landing.join("b.edi"), Status214::new("CARRIERA", 2).build()).unwrap();
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "vera-token").await;
        c.goto(&format!("{}/ui/queue", s.server.url)).await.unwrap();
        wait_js(
            c,
            "the held item",
            "return document.querySelectorAll('#queue tbody tr').length === 1",
        )
        .await;
        let visible = js(
            c,
            "return [...document.querySelectorAll('button')]\
            .filter(b => b.offsetParent !== null).map(b => b.id)",
        )
        .await;
        assert_eq!(visible, json!(["logout", "q-first", "q-next"]), "only paging and logout");
        let id = js(c, "return document.querySelector('#queue tbody tr').dataset.id").await;
        let (status, body) =
            fetch(c, "POST", &format!("/v1/queue/{}/release", id.as_str().unwrap()), None).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("viewer"), "{body}");
        let payload = format!("/v1/queue/{}/payload", id.as_str().unwrap());
        let (status, body) = fetch(c, "GET", &payload, None).await;
        assert_eq!(status, 403, "a viewer does not see partner payloads: {body}");

        c.goto(&format!("{}/ui/limits", s.server.url)).await.unwrap();
        wait_js(
            c,
            "the policies",
            "return document.querySelectorAll('fieldset.rule').length === 1",
        )
        .await;
        let editable = js(
            c,
            "return [...document.querySelectorAll('#rules input, #rules select')]\
            .filter(i => !i.disabled).length + [...document.querySelectorAll('button')]\
            .filter(b => b.offsetParent !== null && b.id !== 'logout').length",
        )
        .await;
        assert_eq!(editable, 0);
        let put = r#"{"policies":[]}"#;
        let (status, body) = fetch(c, "PUT", "/v1/policies", Some(put)).await;
        assert_eq!(status, 403, "{body}");
        assert!(std::fs::read_to_string(&s.cfg).unwrap().contains("limit = 100"));
        b.close().await;
    });
}

#[test]
fn a_sender_id_with_markup_is_shown_as_text_and_never_runs() {
    run(async {
        // One a day: the first is delivered, the second held (its bytes stay in the spool).
        let s = setup(1, "");
        let sender = "<script>";
        std::fs::write(s.landing.join("x.edi"), Status214::new(sender, 7).build()).unwrap();
        std::fs::write(s.landing.join("y.edi"), Status214::new(sender, 8).build()).unwrap();
        // A metering id with an event handler, through the quota API.
        let evil = "Quota:<img/src=x/onerror=window.pwned=1>";
        let (status, _, _) = raw(
            &s.server,
            &format!(
                "GET /v1/quota HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer root-token\r\n\
                 metering-id: {evil}\r\nquota-limit: 5\r\nquota-timeunit: day\r\n\
                 connection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 200);
        let Some(b) = browser().await else { return };
        let c = b.c();
        login(c, &s.server.url, "root-token").await;
        wait_js(
            c,
            "both rows",
            "return document.querySelectorAll('#overview tbody tr').length === 2",
        )
        .await;
        let ids = js(
            c,
            "return [...document.querySelectorAll('#overview td.id')]\
            .map(t => t.textContent)",
        )
        .await;
        assert_eq!(ids, json!([evil, "ShipmentStatus:ZZ:<script>"]));
        let injected = "return [document.scripts.length, document.querySelectorAll('main img').length, \
            window.pwned === undefined]";
        assert_eq!(js(c, injected).await, json!([1, 0, true]));
        c.goto(&format!("{}/ui/queue", s.server.url)).await.unwrap();
        c.find(Locator::Id("q-state")).await.unwrap().select_by_value("").await.unwrap();
        wait_js(
            c,
            "the item's sender",
            "return [...document.querySelectorAll('#queue td')]\
            .some(t => t.textContent === 'ZZ:<script>')",
        )
        .await;
        assert_eq!(js(c, injected).await, json!([1, 0, true]));
        common::wait_until("the second interchange held", Duration::from_secs(20), || {
            let get = "GET /v1/queue?state=held HTTP/1.1\r\nhost: x\r\n\
                       authorization: Bearer root-token\r\nconnection: close\r\n\r\n";
            raw(&s.server, get).2.contains("\"id\"")
        });
        c.goto(&format!("{}/ui/partner?name={}", s.server.url, "ZZ%3A%3Cscript%3E")).await.unwrap();
        wait_js(
            c,
            "the partner's interchanges",
            "return document.querySelectorAll('#recent tbody tr')\
            .length === 2",
        )
        .await;
        // The payload, for a role allowed to see it, as text.
        let held = r#"//tr[td[2][text()="held"]]//summary"#;
        c.find(Locator::XPath(held)).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the payload",
            "const p = document.querySelector('#recent details[open] pre'); \
            return !!p && p.textContent.startsWith('ISA*') && p.textContent.includes('<script>')",
        )
        .await;
        let title = js(c, "return document.getElementById('title').textContent").await;
        assert_eq!(title, "Partner ZZ:<script>");
        assert_eq!(js(c, injected).await, json!([1, 0, true]));
        screenshot(c, "partner").await;
        // The page's policy forbids inline script, whatever reaches the page.
        let (_, head, _) =
            raw(&s.server, "GET /ui/ HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let csp = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-security-policy:"))
            .unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(head.to_ascii_lowercase().contains("x-content-type-options: nosniff"));
        b.close().await;
    });
}
