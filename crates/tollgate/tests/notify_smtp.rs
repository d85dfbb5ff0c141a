//! Notification e-mail through the real `tollgate serve` to a minimal SMTP receiver written
//! here (plain SMTP on a loopback port, AUTH PLAIN accepted): a held partner is mailed once to
//! every recipient, after a transient refusal is retried; `POST /v1/notify/test` mails a test.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, Status214, wait_until};
use serde_json::Value;

/// One message as the receiver took it.
#[derive(Debug, Clone, Default)]
struct Mail {
    auth: Option<String>,
    from: String,
    to: Vec<String>,
    data: String,
}

/// An SMTP server speaking just what a client needs: EHLO (offering AUTH PLAIN), AUTH,
/// MAIL, RCPT, DATA, RSET, NOOP, QUIT. The first `refuse` messages get a transient 451.
struct SmtpReceiver {
    port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
    refused: Arc<AtomicUsize>,
}

impl SmtpReceiver {
    fn start(refuse: usize) -> SmtpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let (m, r) = (Arc::clone(&mails), Arc::clone(&refused));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (m, r) = (Arc::clone(&m), Arc::clone(&r));
                std::thread::spawn(move || session(conn, &m, &r, refuse));
            }
        });
        SmtpReceiver { port, mails, refused }
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

/// One client connection, until QUIT or the client hangs up.
fn session(conn: TcpStream, mails: &Mutex<Vec<Mail>>, refused: &AtomicUsize, refuse: usize) {
    let mut out = conn.try_clone().unwrap();
    let mut input = BufReader::new(conn);
    let mut say = |text: &str| out.write_all(format!("{text}\r\n").as_bytes()).is_ok();
    say("220 receiver ESMTP ready");
    let (mut auth, mut mail) = (None, Mail::default());
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let command = line.trim_end().to_owned();
        let verb = command.split(' ').next().unwrap_or("").to_ascii_uppercase();
        let ok = match verb.as_str() {
            "EHLO" => say("250-receiver\r\n250-AUTH PLAIN\r\n250 8BITMIME"),
            "HELO" | "NOOP" => say("250 ok"),
            "AUTH" => {
                auth = command.split(' ').nth(2).map(str::to_owned);
                say("235 2.7.0 authenticated")
            }
            "MAIL" => {
                mail = Mail { auth: auth.clone(), from: address(&command), ..Mail::default() };
                say("250 ok")
            }
            "RCPT" => {
                mail.to.push(address(&command));
                say("250 ok")
            }
            "DATA" => {
                say("354 end with <CRLF>.<CRLF>");
                let mut data = String::new();
                loop {
                    line.clear();
                    if input.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == ".\r\n" {
                        break;
                    }
                    data.push_str(line.strip_prefix('.').unwrap_or(&line));
                }
                if refused.fetch_add(1, Ordering::SeqCst) < refuse {
                    say("451 4.3.0 try again later")
                } else {
                    mails.lock().unwrap().push(Mail { data, ..std::mem::take(&mut mail) });
                    say("250 2.0.0 queued")
                }
            }
            "RSET" => {
                mail = Mail::default();
                say("250 ok")
            }
            "QUIT" => {
                say("221 bye");
                return;
            }
            _ => say("502 not implemented"),
        };
        if !ok {
            return;
        }
    }
}

/// `x@y` of `MAIL FROM:<x@y>` or `RCPT TO:<x@y> …`.
fn address(command: &str) -> String {
    let start = command.find('<').map_or(0, |i| i + 1);
    let end = command.find('>').unwrap_or(command.len());
    command[start..end].to_owned()
}

/// The `Subject:` header of a message.
fn subject(mail: &Mail) -> String {
    let line = mail.data.lines().find(|l| l.starts_with("Subject: ")).unwrap_or_default();
    line.trim_start_matches("Subject: ").to_owned()
}

/// A config in `dir` mailing through `port` as `tollgate` and a gateway route admitting one
/// 214 a day per partner.
fn config(dir: &Path, port: u16) -> std::path::PathBuf {
    let pass = dir.join("smtp.pass");
    std::fs::write(&pass, "pa55word\n").unwrap();
    let text = format!(
        r#"[server]
data = {data:?}

[notify]
min_interval_s = 0

[notify.smtp]
host = "127.0.0.1"
port = {port}
security = "none"
username = "tollgate"
password_file = {pass:?}
from = "Tollgate <tollgate@example.com>"
to = ["ops@example.com", "EDI team <edi@example.com>"]

[gateway]
[[gateway.partner]]
name = "CarrierA"
ids = ["ZZ:CARRIERA"]

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

fn upload(s: &Server, control: u32) {
    let body = Status214::new("CARRIERA", control).build();
    let answer = s.request("POST", "/v1/interchanges", &[], &body);
    assert_eq!(answer.status, 202, "{}", answer.text());
}

fn count(s: &Server, state: &str) -> u64 {
    let m = s.request("GET", &format!("/v1/queue?partner=CarrierA&state={state}"), &[], b"");
    m.header("x-total-count").and_then(|v| v.parse().ok()).unwrap_or(0)
}

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_held_partner_is_mailed_once_to_every_recipient_and_a_test_mail_goes_through() {
    let dir = tempfile::tempdir().unwrap();
    // The first message is refused for now (451): it is sent again a second later.
    let receiver = SmtpReceiver::start(1);
    let s = Server::start(&["--config", config(dir.path(), receiver.port).to_str().unwrap()]);
    upload(&s, 1);
    wait_until("the first admitted", WAIT, || count(&s, "delivered") == 1);
    upload(&s, 2);
    wait_until("the held mail", WAIT, || !receiver.mails().is_empty());
    // Long enough for the once-a-second watch to look again several times.
    std::thread::sleep(Duration::from_millis(2500));
    let mails = receiver.mails();
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert_eq!(receiver.refused.load(Ordering::SeqCst), 2, "one refusal, then the retry");
    let mail = &mails[0];
    assert_eq!(mail.from, "tollgate@example.com");
    assert_eq!(mail.to, ["ops@example.com", "edi@example.com"]);
    // AUTH PLAIN: base64 of "\0tollgate\0pa55word".
    assert_eq!(mail.auth.as_deref(), Some("AHRvbGxnYXRlAHBhNTV3b3Jk"));
    assert_eq!(subject(mail), "Tollgate: CarrierA is held (1 items)");
    assert!(mail.data.contains("\r\nheld: 1 items, 1 units\r\n"), "{}", mail.data);
    assert!(mail.data.contains("metering id: ShipmentStatus:CarrierA"), "{}", mail.data);
    wait_until("counted as sent", WAIT, || {
        common::metric(&s.get("/metrics"), "tollgate_notify_sent_total") == Some(1.0)
    });

    let m = s.request("POST", "/v1/notify/test", &[], b"");
    assert_eq!(m.status, 200, "{}", m.text());
    let channel = &m.json()["channels"][0];
    assert_eq!(channel["name"], "smtp", "{channel}");
    assert_eq!(channel["kind"], "email", "{channel}");
    assert_eq!(channel["target"], format!("smtp://127.0.0.1:{}", receiver.port), "{channel}");
    assert_eq!((&channel["ok"], &channel["status"]), (&Value::from(true), &Value::Null));
    let mails = receiver.mails();
    assert_eq!(mails.len(), 2);
    assert_eq!(subject(&mails[1]), "Tollgate: test notification");
}
