//! A `[[notify.webhook]]` and one try of posting an event to it: the event's JSON with its
//! signature (`X-Tollgate-Signature: sha256=<hex>`) and kind (`X-Tollgate-Event`). What is
//! retried, and when, is [`crate::send`]'s.

use std::error::Error as _;

use reqwest::header::{CONTENT_TYPE, USER_AGENT};

use crate::event::{Event, EventKind};
use crate::send::Tried;
use crate::sign::{SIGNATURE_HEADER, Secret};

/// One `[[notify.webhook]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// Its name, in logs, metrics and test answers.
    pub name: String,
    /// Where events are posted (`http` or `https`).
    pub url: reqwest::Url,
    /// The HMAC key of the signature.
    pub secret: Secret,
    /// The events it gets (a `test` always goes through).
    pub events: Vec<EventKind>,
}

impl Webhook {
    /// `scheme://host[:port]` of its URL: what may be shown of it.
    pub fn target(&self) -> String {
        let host = self.url.host_str().unwrap_or("");
        match self.url.port() {
            Some(port) => format!("{}://{host}:{port}", self.url.scheme()),
            None => format!("{}://{host}", self.url.scheme()),
        }
    }
}

/// Posts `body` (the JSON of `event`) with its `signature` to `webhook` once.
pub(crate) async fn post(
    client: &reqwest::Client,
    webhook: &Webhook,
    event: &Event,
    body: &[u8],
    signature: Option<&str>,
) -> Tried {
    let sent = client
        .post(webhook.url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .header(SIGNATURE_HEADER, signature.unwrap_or(""))
        .header("x-tollgate-event", event.event.as_str())
        .body(body.to_vec())
        .send()
        .await;
    match sent {
        Ok(answer) => {
            let status = answer.status();
            // Read (and drop) the body so the connection can be kept.
            let _ = answer.bytes().await;
            let code = status.as_u16();
            let why = || format!("answered HTTP {status}");
            if status.is_success() {
                Tried::Delivered(Some(code))
            } else if status.is_server_error() || code == 429 {
                Tried::Retry(Some(code), why())
            } else {
                Tried::Refused(Some(code), why())
            }
        }
        Err(e) => Tried::Retry(None, describe(&e)),
    }
}

/// A reqwest error as words and its causes, without the URL (reqwest's own wording of the
/// error names it; its causes do not).
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    }
    .to_owned();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
