//! Notification e-mail: each event as a short plain-text message (a sentence, the figures, and
//! the same JSON a webhook gets) sent over SMTP to a fixed list of recipients.
//!
//! The connection is TLS from the start (`tls`, port 465), upgraded with STARTTLS before any
//! credential or message is sent (`starttls`, port 587; a server that cannot upgrade gets
//! nothing), or plain (`none`, for a relay on the same host or network). A transient refusal
//! (4xx) or a network error is retried like a webhook's 5xx; a permanent one (5xx) is not.

use std::time::Duration;

pub use lettre::message::Mailbox;
use lettre::message::Message;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::event::{Event, EventKind};
use crate::sign::Secret;

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (SMTPS, port 465 by default).
    Tls,
    /// Plain, then STARTTLS before anything else is sent (port 587 by default).
    StartTls,
    /// No TLS (port 25 by default).
    None,
}

impl Security {
    /// The usual port.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Tls => 465,
            Self::StartTls => 587,
            Self::None => 25,
        }
    }
}

/// The `[notify.smtp]` channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Email {
    /// Its name in logs, metrics and test answers.
    pub name: String,
    /// The SMTP server.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// How the connection is protected.
    pub security: Security,
    /// The user name and password to log in with, when the server wants them.
    pub login: Option<(String, Secret)>,
    /// The sender.
    pub from: Mailbox,
    /// The recipients (at least one).
    pub to: Vec<Mailbox>,
    /// The events it gets (a `test` always goes through).
    pub events: Vec<EventKind>,
}

impl Email {
    /// `smtp://host:port` (`smtps://` with TLS from the start): what may be shown of it.
    pub fn target(&self) -> String {
        let scheme = if self.security == Security::Tls { "smtps" } else { "smtp" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// An address as written (`ops@example.com`, `Tollgate <tollgate@example.com>`), or why not.
pub fn mailbox(text: &str) -> Result<Mailbox, String> {
    text.parse::<Mailbox>().map_err(|e| format!("not an e-mail address ({e})"))
}

/// The connection pool to one SMTP server.
pub(crate) type Transport = AsyncSmtpTransport<Tokio1Executor>;

/// The transport for `email`, each command waiting `timeout` at most.
pub(crate) fn transport(email: &Email, timeout: Duration) -> Result<Transport, String> {
    let refused = |e: lettre::transport::smtp::Error| {
        format!("[notify.smtp] host = {:?}: cannot set up TLS for it: {e}", email.host)
    };
    let builder = match email.security {
        Security::Tls => Transport::relay(&email.host).map_err(refused)?,
        Security::StartTls => Transport::starttls_relay(&email.host).map_err(refused)?,
        Security::None => Transport::builder_dangerous(email.host.clone()),
    };
    let mut builder = builder.port(email.port).timeout(Some(timeout));
    if let Some((user, password)) = &email.login {
        let password = String::from_utf8_lossy(password.bytes()).into_owned();
        builder = builder.credentials(Credentials::new(user.clone(), password));
    }
    Ok(builder.build())
}

/// How one try went, as [`crate::send`] counts it.
pub(crate) enum Sent {
    Delivered,
    Retry(String),
    Refused(String),
}

/// Sends `event` to `email`'s recipients once.
pub(crate) async fn send(transport: &Transport, email: &Email, event: &Event) -> Sent {
    let mut message = Message::builder().from(email.from.clone());
    for to in &email.to {
        message = message.to(to.clone());
    }
    let message = message.subject(subject(event)).header(ContentType::TEXT_PLAIN).body(text(event));
    let message = match message {
        Ok(m) => m,
        Err(e) => return Sent::Refused(format!("cannot build the message: {e}")),
    };
    match transport.send(message).await {
        Ok(_) => Sent::Delivered,
        Err(e) if e.is_permanent() => Sent::Refused(e.to_string()),
        Err(e) => Sent::Retry(e.to_string()),
    }
}

/// The partner's name as one line of text (a raw sender id could hold anything).
fn partner(event: &Event) -> String {
    let p = event.partner.as_deref().unwrap_or("");
    p.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// The subject: what happened, to whom.
pub(crate) fn subject(event: &Event) -> String {
    let p = partner(event);
    match event.event {
        EventKind::PartnerHeld => format!("Tollgate: {p} is held ({} items)", event.held),
        EventKind::PartnerReleased => format!("Tollgate: {p} is no longer held"),
        EventKind::DuplicatesStarted => format!("Tollgate: {p} is sending duplicates"),
        EventKind::BacklogExceeded => {
            format!("Tollgate: {p} has {} held units, over the threshold", event.held_units)
        }
        EventKind::Test => "Tollgate: test notification".to_owned(),
    }
}

/// The body: the subject's sentence, the figures, and the event as a webhook gets it.
pub(crate) fn text(event: &Event) -> String {
    let json = String::from_utf8_lossy(&event.body()).into_owned();
    let figures = match event.event {
        EventKind::Test => String::new(),
        _ => format!(
            "partner: {}\nmetering id: {}\nheld: {} items, {} units\nduplicates: {}\n",
            partner(event),
            event.metering_id.as_deref().unwrap_or("-"),
            event.held,
            event.held_units,
            event.duplicates
        ),
    };
    format!("{}\n\nevent: {}\nat: {}\n{figures}\n{json}\n", subject(event), event.event, event.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_says_what_happened_in_a_line_and_in_json() {
        let event = Event {
            event: EventKind::PartnerHeld,
            partner: Some("ZZ:ODD\r\nBcc: x@example.com".into()),
            metering_id: Some("ShipmentStatus:ZZ:ODD".into()),
            at: "2026-12-02T04:13:23Z".parse().unwrap(),
            held: 221,
            held_units: 4900,
            duplicates: 3,
        };
        // A raw sender id cannot start a header of its own.
        assert_eq!(subject(&event), "Tollgate: ZZ:ODD  Bcc: x@example.com is held (221 items)");
        let text = text(&event);
        assert!(text.contains("\nheld: 221 items, 4900 units\nduplicates: 3\n"), "{text}");
        assert!(text.contains("\nat: 2026-12-02T04:13:23Z\n"), "{text}");
        assert!(text.contains(&String::from_utf8(event.body()).unwrap()), "{text}");
        let test = Event::test(event.at);
        assert_eq!(subject(&test), "Tollgate: test notification");
        assert!(mailbox("Tollgate <tollgate@example.com>").is_ok());
        assert!(mailbox("not an address").unwrap_err().starts_with("not an e-mail address"));
        assert_eq!(Security::StartTls.default_port(), 587);
    }
}
