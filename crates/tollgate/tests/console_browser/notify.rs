//! The Health page's "Send a test notification": an operator's click posts a signed `test`
//! event to the real receiver and shows what each webhook answered, as text; a viewer sees
//! no button.

use std::sync::{Arc, Mutex};

use fantoccini::Locator;

use crate::browser::{browser, js, login, run, screenshot, setup, wait_js};
use crate::common::{HttpStub, Message};

#[test]
fn an_operator_sends_a_test_notification_from_the_health_page() {
    run(async {
        let got = Arc::new(Mutex::new(Vec::<Message>::new()));
        let kept = Arc::clone(&got);
        let receiver = HttpStub::start(move |m| {
            kept.lock().unwrap().push(m.clone());
            Message::reply(204, "")
        });
        let key = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(key.path(), "k3y\n").unwrap();
        // The second webhook's name is markup: shown as text, never parsed.
        let hooks = format!(
            "[[notify.webhook]]\nname = \"ops\"\nurl = \"{}/hook/T1/SECRETPATH\"\nsecret_file = {:?}\n\n\
             [[notify.webhook]]\nname = \"<b>x</b>\"\nurl = \"http://127.0.0.1:9/\"\nsecret_file = {:?}\n",
            receiver.url(),
            key.path(),
            key.path()
        );
        let s = setup(1000, &hooks);
        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;

        login(c, base, "vera-token").await;
        c.goto(&format!("{base}/ui/health")).await.unwrap();
        wait_js(c, "the health facts", "return document.querySelectorAll('#health dt').length > 5")
            .await;
        let hidden = js(c, "return document.getElementById('notify').hidden").await;
        assert_eq!(hidden, true, "a viewer gets no button");
        c.delete_all_cookies().await.unwrap();

        login(c, base, "otto-token").await;
        c.goto(&format!("{base}/ui/health")).await.unwrap();
        let button = c.wait().for_element(Locator::Id("notify-test")).await.unwrap();
        assert!(button.is_displayed().await.unwrap());
        button.click().await.unwrap();
        wait_js(
            c,
            "the test's answer",
            "return document.getElementById('notify-result').textContent.includes('<b>x</b>')",
        )
        .await;
        let shown = js(c, "return document.getElementById('notify-result').textContent").await;
        let shown = shown.as_str().unwrap().to_owned();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 2, "{shown}");
        let ok = format!("ops ({}): delivered, HTTP 204, ", receiver.url());
        assert!(lines[0].starts_with(&ok), "{shown}");
        assert!(lines[1].starts_with("<b>x</b> (http://127.0.0.1:9): failed: "), "{shown}");
        assert!(!shown.contains("SECRETPATH"), "{shown}");
        let bold = js(c, "return document.querySelectorAll('#notify-result b').length").await;
        assert_eq!(bold, 0, "the name is text, not markup");
        screenshot(c, "health-notify").await;

        let got = got.lock().unwrap().clone();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].json()["event"], "test");
        assert!(got[0].header("x-tollgate-signature").unwrap().starts_with("sha256="));
        b.close().await;
    });
}
