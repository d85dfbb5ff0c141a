//! A page on another site, opened in the real browser, attacks the console's login: eleven
//! hidden forms with wrong tokens (to lock the browser's address out) and one with the
//! attacker's own token (to log the browser into the attacker's session). Login takes only
//! JSON from its own origin, so none is counted or opens a session.

use std::io::{Read, Write};
use std::net::TcpListener;

use crate::browser::{browser, login, run, setup, wait_js};

/// The attacker's page: posts `text/plain` forms shaped like JSON to `target`'s login, one
/// every 150 ms, then sets its title to `done`.
fn attack_page(target: &str) -> String {
    format!(
        r#"<!doctype html><title>win a prize</title>
<form id="f" method="POST" action="{target}/ui/login" enctype="text/plain" target="sink">
<input id="i" name='{{"x":"' value=''></form>
<iframe name="sink"></iframe>
<script>
const tokens = [];
for (let n = 1; n <= 11; n++) tokens.push("guess-" + n);
tokens.push("vera-token");
let n = 0;
function next() {{
  if (n === tokens.length) {{ setTimeout(() => document.title = "done", 500); return; }}
  document.getElementById("i").value = '","token":"' + tokens[n++] + '"}}';
  document.getElementById("f").submit();
  setTimeout(next, 150);
}}
next();
</script>"#
    )
}

/// Serves `page` to every request on a free loopback port (another origin than the
/// console's); returns its URL.
fn serve_page(page: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    url
}

#[test]
fn a_page_on_another_site_neither_locks_the_login_nor_logs_the_browser_in() {
    run(async {
        let s = setup(1000, "");
        let Some(b) = browser().await else { return };
        let c = b.c();
        let base = &s.server.url;
        let evil = serve_page(attack_page(base));
        c.goto(&format!("{evil}/")).await.unwrap();
        wait_js(c, "the attack page's twelve forms", "return document.title === 'done'").await;

        // No session was opened in this browser by the attacker's form.
        c.goto(&format!("{base}/ui/")).await.unwrap();
        wait_js(c, "the login page", "return location.pathname === '/ui/login'").await;
        // And the browser's address is not locked out: the real user logs in.
        login(c, base, "otto-token").await;
        let who = crate::browser::js(c, "return document.getElementById('who').textContent").await;
        assert_eq!(who, "otto (operator)");
        b.close().await;
    });
}
