//! Notifications through the real `tollgate serve` to a real HTTP receiver on a loopback port:
//! one signed `partner_held` per partner episode and one `partner_released` after a purge;
//! `backlog_exceeded` and `duplicates_started` once each; a receiver answering 500 twice gets
//! the event on the third try; `POST /v1/notify/test` reaches every webhook (operator or
//! admin, audit-recorded); and a bad `secret_file` stops the start with exit code 2, naming
//! the entry.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{HttpStub, Message, Server, Status214, wait_until};
use hmac::{Hmac, Mac};
use serde_json::Value;

/// The HMAC key the webhooks share in these tests.
const KEY: &str = "wh-s3cret-key";

/// A webhook receiver: answers the statuses of its script in turn (200 once it runs out) and
/// keeps every request.
struct Receiver {
    stub: HttpStub,
    got: Arc<Mutex<Vec<Message>>>,
}

impl Receiver {
    fn start(script: Vec<u16>) -> Receiver {
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&got);
        let calls = AtomicUsize::new(0);
        let stub = HttpStub::start(move |m| {
            kept.lock().unwrap().push(m.clone());
            let n = calls.fetch_add(1, Ordering::SeqCst);
            Message::reply(script.get(n).copied().unwrap_or(200), "")
        });
        Receiver { stub, got }
    }

    /// The webhook URL: a path with a token in it, as chat services give.
    fn url(&self) -> String {
        format!("{}/hooks/T01/SECRETPATH", self.stub.url())
    }

    fn requests(&self) -> Vec<Message> {
        self.got.lock().unwrap().clone()
    }

    /// The bodies received, each checked: a POST to the URL's path, signed with [`KEY`].
    fn events(&self) -> Vec<Value> {
        self.requests()
            .iter()
            .map(|m| {
                assert_eq!((m.method.as_str(), m.path.as_str()), ("POST", "/hooks/T01/SECRETPATH"));
                assert_eq!(m.header("content-type"), Some("application/json"));
                assert_signed(m);
                let body = m.json();
                assert_eq!(m.header("x-tollgate-event"), body["event"].as_str());
                body
            })
            .collect()
    }

    /// The `(event, partner)` of each body received, sorted.
    fn said(&self) -> Vec<(String, String)> {
        let mut said: Vec<(String, String)> =
            self.events().iter().map(|e| (text(&e["event"]), text(&e["partner"]))).collect();
        said.sort();
        said
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("null").to_owned()
}

/// The signature header is `sha256=` and the hex HMAC-SHA256 of the body under [`KEY`].
fn assert_signed(m: &Message) {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(KEY.as_bytes()).unwrap();
    mac.update(&m.body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(m.header("x-tollgate-signature"), Some(format!("sha256={hex}").as_str()));
}

fn pair(event: &str, partner: &str) -> (String, String) {
    (event.to_owned(), partner.to_owned())
}

/// A `[[notify.webhook]]` posting to `url`, its key in `secret_file`.
fn hook(name: &str, url: &str, secret_file: &Path) -> String {
    format!(
        "[[notify.webhook]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret_file = {secret_file:?}\n"
    )
}

/// The key file in `dir` (with the newline an editor leaves).
fn key_file(dir: &Path) -> PathBuf {
    let f = dir.join("webhook.key");
    std::fs::write(&f, format!("{KEY}\n")).unwrap();
    f
}

/// A config in `dir`: `notify` keys and `hooks`, and a gateway whose one route admits one
/// 214 a day per partner (CarrierA, CarrierB) and holds the rest.
fn config(dir: &Path, notify: &str, hooks: &str) -> PathBuf {
    let text = format!(
        r#"[server]
data = {data:?}

[notify]
{notify}

{hooks}

[gateway]
[[gateway.partner]]
name = "CarrierA"
ids = ["ZZ:CARRIERA"]
[[gateway.partner]]
name = "CarrierB"
ids = ["ZZ:CARRIERB"]

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1
unit = "day"
deliver = "dir:{out}"
"#,
        data = dir.join("data"),
        out = dir.join("out").display(),
    );
    let file = dir.join("tollgate.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn serve(config: &Path) -> Server {
    Server::start(&["--config", config.to_str().unwrap()])
}

/// Uploads a 214 from `sender` under ISA13 `control`; the gateway takes it (202).
fn upload(s: &Server, sender: &str, control: u32) {
    let answer =
        s.request("POST", "/v1/interchanges", &[], &Status214::new(sender, control).build());
    assert_eq!(answer.status, 202, "{}", answer.text());
}

/// How many items of `partner` are in `state` (the queue's `X-Total-Count`).
fn count(s: &Server, partner: &str, state: &str) -> u64 {
    let m = s.request("GET", &format!("/v1/queue?partner={partner}&state={state}"), &[], b"");
    assert_eq!(m.status, 200, "{}", m.text());
    m.header("x-total-count").and_then(|v| v.parse().ok()).unwrap()
}

/// Long enough for the once-a-second watch to have looked at the queue at least twice.
fn a_few_snapshots() {
    std::thread::sleep(Duration::from_millis(2500));
}

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn one_signed_held_event_per_partner_episode_and_one_release() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(vec![]);
    let hooks = hook("ops", &receiver.url(), &key_file(dir.path()));
    // No rate limit: one event per episode comes from the episodes alone.
    let s = serve(&config(dir.path(), "min_interval_s = 0", &hooks));
    // The first of each partner is admitted, the second held.
    for (sender, base) in [("CARRIERA", 100), ("CARRIERB", 200)] {
        upload(&s, sender, base + 1);
        wait_until("the first admitted", WAIT, || {
            count(&s, &sender.replace("CARRIER", "Carrier"), "delivered") == 1
        });
        upload(&s, sender, base + 2);
    }
    wait_until("two partner_held events", WAIT, || receiver.requests().len() >= 2);
    assert_eq!(
        receiver.said(),
        [pair("partner_held", "CarrierA"), pair("partner_held", "CarrierB")]
    );
    for e in receiver.events() {
        let partner = text(&e["partner"]);
        assert_eq!(e["metering_id"], format!("ShipmentStatus:{partner}"), "{e}");
        assert_eq!((e["held"].as_u64(), e["held_units"].as_u64()), (Some(1), Some(1)), "{e}");
        assert_eq!(e["duplicates"], 0, "{e}");
        let at: jiff::Timestamp = e["at"].as_str().unwrap().parse().unwrap();
        let age = jiff::Timestamp::now().as_second() - at.as_second();
        assert!((0..60).contains(&age), "{e}");
    }

    // More held for CarrierA: the same episode, no new event.
    upload(&s, "CARRIERA", 103);
    wait_until("two held for CarrierA", WAIT, || count(&s, "CarrierA", "held") == 2);
    a_few_snapshots();
    assert_eq!(receiver.requests().len(), 2, "{:?}", receiver.said());

    // CarrierA's held items purged: one partner_released for it; CarrierB is still held.
    let m = s.request("POST", "/v1/queue/purge?partner=CarrierA&state=held", &[], b"");
    assert_eq!(m.status, 202, "{}", m.text());
    wait_until("partner_released", WAIT, || receiver.requests().len() >= 3);
    a_few_snapshots();
    assert_eq!(
        receiver.said(),
        [
            pair("partner_held", "CarrierA"),
            pair("partner_held", "CarrierB"),
            pair("partner_released", "CarrierA"),
        ]
    );
    let released =
        receiver.events().into_iter().find(|e| e["event"] == "partner_released").unwrap();
    assert_eq!(released["metering_id"], "ShipmentStatus:CarrierA", "{released}");
    assert_eq!((released["held"].as_u64(), released["held_units"].as_u64()), (Some(0), Some(0)));
    let scrape = s.get("/metrics");
    assert_eq!(common::metric(&scrape, "tollgate_notify_sent_total"), Some(3.0));
    assert_eq!(common::metric(&scrape, "tollgate_notify_failed_total"), Some(0.0));
    assert_eq!(common::metric(&scrape, "tollgate_notify_dropped_total"), Some(0.0));
}

#[test]
fn a_backlog_and_duplicates_are_said_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(vec![]);
    let hooks = hook("ops", &receiver.url(), &key_file(dir.path()));
    let s = serve(&config(dir.path(), "backlog_threshold = 3", &hooks));
    upload(&s, "CARRIERA", 1);
    wait_until("the first admitted", WAIT, || count(&s, "CarrierA", "delivered") == 1);
    for control in 2..=5 {
        upload(&s, "CARRIERA", control);
    }
    wait_until("four held", WAIT, || count(&s, "CarrierA", "held") == 4);
    // Resent under the same control numbers: duplicates.
    upload(&s, "CARRIERA", 2);
    wait_until("one duplicate", WAIT, || count(&s, "CarrierA", "duplicate") == 1);
    upload(&s, "CARRIERA", 3);
    wait_until("two duplicates", WAIT, || count(&s, "CarrierA", "duplicate") == 2);
    wait_until("three events", WAIT, || receiver.requests().len() >= 3);
    a_few_snapshots();
    assert_eq!(
        receiver.said(),
        [
            pair("backlog_exceeded", "CarrierA"),
            pair("duplicates_started", "CarrierA"),
            pair("partner_held", "CarrierA"),
        ]
    );
    let events = receiver.events();
    let backlog = events.iter().find(|e| e["event"] == "backlog_exceeded").unwrap();
    assert!(backlog["held_units"].as_u64().unwrap() >= 3, "{backlog}");
    let duplicates = events.iter().find(|e| e["event"] == "duplicates_started").unwrap();
    assert!(duplicates["duplicates"].as_u64().unwrap() >= 1, "{duplicates}");
}

#[test]
fn a_receiver_answering_500_twice_gets_the_event_on_the_third_try() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(vec![500, 500]);
    let hooks = hook("ops", &receiver.url(), &key_file(dir.path()));
    let s = serve(&config(dir.path(), "", &hooks));
    upload(&s, "CARRIERB", 1);
    wait_until("the first admitted", WAIT, || count(&s, "CarrierB", "delivered") == 1);
    upload(&s, "CARRIERB", 2);
    // Tries after 0, 1 and 3 s.
    wait_until("three tries", WAIT, || receiver.requests().len() >= 3);
    wait_until("counted as sent", WAIT, || {
        common::metric(&s.get("/metrics"), "tollgate_notify_sent_total") == Some(1.0)
    });
    a_few_snapshots();
    let requests = receiver.requests();
    assert_eq!(requests.len(), 3, "no try after the 200");
    assert!(requests.iter().all(|m| m.body == requests[0].body), "the same event each time");
    assert_eq!(receiver.said(), vec![pair("partner_held", "CarrierB"); 3]);
    assert_eq!(common::metric(&s.get("/metrics"), "tollgate_notify_failed_total"), Some(0.0));
}

#[test]
fn the_test_endpoint_reaches_every_webhook_for_operators_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, failing) = (Receiver::start(vec![]), Receiver::start(vec![500; 10]));
    let key = key_file(dir.path());
    let users = format!(
        "[server]\nadmin_token = \"adm1n-token\"\ndata = {:?}\n\n\
         [[user]]\nname = \"olga\"\ntoken_sha256 = \"{}\"\nrole = \"operator\"\n\n\
         [[user]]\nname = \"vic\"\ntoken_sha256 = \"{}\"\nrole = \"viewer\"\n\n",
        dir.path().join("data"),
        common::sha256_hex("olga-token"),
        common::sha256_hex("vic-token"),
    );
    // No gateway: test events still go out.
    let body =
        format!("{users}{}{}", hook("ops", &ok.url(), &key), hook("pager", &failing.url(), &key));
    let file = dir.path().join("t.toml");
    std::fs::write(&file, body).unwrap();
    let s = serve(&file);
    let post = |token: &str| {
        let auth = format!("Bearer {token}");
        let headers: Vec<(&str, &str)> =
            if token.is_empty() { vec![] } else { vec![("authorization", &auth)] };
        s.request("POST", "/v1/notify/test", &headers, b"")
    };
    assert_eq!(post("").status, 401);
    let refused = post("vic-token");
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(refused.text().contains("may not send test notifications"), "{}", refused.text());
    assert!(ok.requests().is_empty() && failing.requests().is_empty());

    let m = post("olga-token");
    assert_eq!(m.status, 200, "{}", m.text());
    assert!(!m.text().contains("SECRETPATH"), "the URL's path is not shown: {}", m.text());
    let hooks = m.json()["channels"].as_array().unwrap().clone();
    assert_eq!(hooks.len(), 2, "{}", m.text());
    assert_eq!(
        (&hooks[0]["name"], &hooks[0]["target"], &hooks[0]["ok"], &hooks[0]["status"]),
        (&Value::from("ops"), &Value::from(ok.stub.url()), &Value::from(true), &Value::from(200)),
    );
    assert_eq!((&hooks[0]["error"], &hooks[0]["kind"]), (&Value::Null, &Value::from("webhook")));
    assert_eq!((&hooks[1]["name"], &hooks[1]["ok"]), (&Value::from("pager"), &Value::from(false)));
    assert_eq!(hooks[1]["status"], 500);
    assert!(text(&hooks[1]["error"]).contains("500"), "{}", m.text());
    // One try each, no retry for a test.
    assert_eq!((ok.requests().len(), failing.requests().len()), (1, 1));
    let event = &ok.events()[0];
    assert_eq!((&event["event"], &event["partner"]), (&Value::from("test"), &Value::Null));

    let audit =
        s.request("GET", "/v1/audit?limit=10", &[("authorization", "Bearer adm1n-token")], b"");
    let records = audit.json();
    let record = records.as_array().unwrap().iter().find(|r| r["action"] == "notify.test");
    let record = record.unwrap_or_else(|| panic!("no notify.test record: {records}"));
    assert_eq!((&record["who"], &record["role"]), (&Value::from("olga"), &Value::from("operator")));
    assert_eq!(record["after"]["channels"][1]["status"], 500, "{record}");
}

#[test]
fn a_bad_secret_file_stops_the_start_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let empty = dir.path().join("empty.key");
    std::fs::write(&empty, "\n").unwrap();
    let missing = dir.path().join("missing.key");
    for (file, why) in [(&missing, "cannot read"), (&empty, "empty")] {
        let hooks = format!(
            "{}{}",
            hook("ops", "https://hooks.example/T01/SECRETPATH", &key),
            hook("pager", "https://hooks.example/T02/SECRETPATH", file)
        );
        let cfg = config(dir.path(), "", &hooks);
        let out = common::exit_within(&["serve", "--config", cfg.to_str().unwrap()], WAIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let want =
            format!("[[notify.webhook]] #2 (name = \"pager\") secret_file = {file:?}: {why}");
        assert!(stderr.contains(&want), "{stderr}\nwant: {want}");
        assert!(stderr.starts_with(&format!("{}:", cfg.display())), "{stderr}");
        assert!(!stderr.contains("SECRETPATH") && !stderr.contains(KEY), "{stderr}");
    }
}
