//! The Limits page in the browser: an invalid edit is refused beside its field, a valid one
//! is written to the config file (comments kept) and survives a restart, and applying over
//! someone else's change is refused with a reload.

use fantoccini::elements::Element;
use fantoccini::{Client, Locator};

use crate::browser::{Setup, browser, js, login, raw, run, screenshot, setup, wait_js};
use crate::common::Server;

/// Logs in as the `limits` user, sets the first policy's limit to `value` on the Limits page
/// and opens the review of the change; the limit's field.
async fn review_limit(c: &Client, base: &str, value: &str) -> Element {
    login(c, base, "lena-token").await;
    c.goto(&format!("{base}/ui/limits")).await.unwrap();
    let limit = c.wait().for_element(Locator::Css("fieldset.rule [data-key=limit]")).await;
    let limit = limit.unwrap();
    limit.clear().await.unwrap();
    limit.send_keys(value).await.unwrap();
    c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
    wait_js(c, "the diff", "return !document.getElementById('diff-box').hidden").await;
    limit
}

/// A policy file with comments an edit must keep.
pub(crate) const POLICIES: &str = "# Limits agreed with the carriers; ask ops before raising them.\n\
    [[policy]]\nmatch = \"Carrier:*\" # every carrier\nlimit = 100\nunit = \"day\"\n";

#[test]
fn limits_invalid_edit_is_refused_beside_the_field_and_a_valid_one_survives_a_restart() {
    run(async {
        let s = setup(1000, POLICIES);
        let before = std::fs::read_to_string(&s.cfg).unwrap();
        let Some(b) = browser().await else { return };
        let c = b.c();
        let limit = review_limit(c, &s.server.url, "-5").await;
        let diff = js(c, "return document.getElementById('diff').textContent").await;
        assert_eq!(diff, "~ \"Carrier:*\": limit 100 → -5", "only the changed field");
        c.find(Locator::Id("apply")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the error beside the limit",
            "const i = document.querySelector(\
            'fieldset.rule [data-key=limit]'); return i.getAttribute('aria-invalid') === 'true' \
            && document.getElementById(i.id + '-error').textContent.length > 0",
        )
        .await;
        let err = js(
            c,
            "const i = document.querySelector('fieldset.rule [data-key=limit]'); \
            return document.getElementById(i.id + '-error').textContent",
        )
        .await;
        assert!(err.as_str().unwrap().contains("-5"), "{err}");
        // The error sits beside its field, and nothing changed anywhere.
        let beside = js(
            c,
            "const i = document.querySelector('fieldset.rule [data-key=limit]'); \
            return i.parentElement.contains(document.getElementById(i.id + '-error'))",
        )
        .await;
        assert_eq!(beside, true);
        assert_eq!(std::fs::read_to_string(&s.cfg).unwrap(), before);
        screenshot(c, "limits").await;

        // A valid limit, tried in shadow first: applied, written with the comments kept.
        limit.clear().await.unwrap();
        limit.send_keys("250").await.unwrap();
        c.find(Locator::Id("shadow-first")).await.unwrap().click().await.unwrap();
        c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
        wait_js(c, "the diff", "return !document.getElementById('diff-box').hidden").await;
        c.find(Locator::Id("apply")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "applied",
            "return document.getElementById('status').textContent\
            .startsWith('Applied')",
        )
        .await;
        let after = std::fs::read_to_string(&s.cfg).unwrap();
        assert!(after.contains("limit = 250") && after.contains("mode = \"shadow\""), "{after}");
        assert!(after.contains("# Limits agreed with the carriers"), "{after}");
        assert!(after.contains("[gateway]"), "{after}");

        // A restart: the edit is in force, and the audit log names who made it.
        let Setup { server, cfg, dir, .. } = s;
        server.sigterm();
        let server = Server::start(&["--config", cfg.to_str().unwrap()]);
        login(c, &server.url, "lena-token").await;
        c.goto(&format!("{}/ui/limits", server.url)).await.unwrap();
        wait_js(
            c,
            "the limit after the restart",
            "const i = document.querySelector(\
            'fieldset.rule [data-key=limit]'); return !!i && i.value === '250'",
        )
        .await;
        let mode =
            js(c, "return document.querySelector('fieldset.rule [data-key=mode]').value").await;
        assert_eq!(mode, "shadow");
        c.goto(&format!("{}/ui/audit", server.url)).await.unwrap();
        wait_js(
            c,
            "the audit record",
            "const r = document.querySelector('#audit tbody tr'); \
            return !!r && r.cells[1].textContent === 'lena' && \
            r.cells[3].textContent === 'policies.replace'",
        )
        .await;
        screenshot(c, "audit").await;
        c.goto(&format!("{}/ui/health", server.url)).await.unwrap();
        wait_js(c, "the health facts", "return document.querySelectorAll('#health dt').length > 5")
            .await;
        screenshot(c, "health").await;
        drop(dir);
        b.close().await;
    });
}

#[test]
fn limits_applied_over_someone_elses_change_are_refused_with_a_reload() {
    run(async {
        let s = setup(1000, POLICIES);
        let Some(b) = browser().await else { return };
        let c = b.c();
        review_limit(c, &s.server.url, "300").await;

        // Meanwhile another editor applies a change of their own.
        let other = r#"{"policies":[{"match":"Carrier:*","limit":77,"unit":"day"}]}"#;
        let (status, _, body) = raw(
            &s.server,
            &format!(
                "PUT /v1/policies HTTP/1.1\r\nhost: x\r\nauthorization: Bearer root-token\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{other}",
                other.len()
            ),
        );
        assert_eq!(status, 200, "{body}");

        // Applying the edit made on the older version is refused and says to reload.
        c.find(Locator::Id("apply")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the refusal",
            "return document.getElementById('form-error').textContent\
            .includes('someone else changed the limits')",
        )
        .await;
        let said = js(c, "return document.getElementById('status').textContent").await;
        assert!(said.as_str().unwrap().contains("reload"), "{said}");
        let text = std::fs::read_to_string(&s.cfg).unwrap();
        assert!(text.contains("limit = 77") && !text.contains("limit = 300"), "{text}");
        screenshot(c, "limits-changed-meanwhile").await;

        // Reloading shows the other editor's change.
        c.find(Locator::Id("reload-policies")).await.unwrap().click().await.unwrap();
        wait_js(
            c,
            "the limit in force",
            "const i = document.querySelector('fieldset.rule [data-key=limit]'); \
            return !!i && i.value === '77'",
        )
        .await;
        b.close().await;
    });
}
