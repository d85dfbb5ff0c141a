//! Sending events to webhooks: a `POST` of the event's JSON with its signature
//! (`X-Tollgate-Signature: sha256=<hex>`) and its kind (`X-Tollgate-Event`).
//!
//! Invariants:
//! - **Bounded.** Each webhook has its own queue of at most [`SendOptions::queue_len`] events
//!   and one task sending them in order; when it is full the oldest waiting event is dropped
//!   and counted (`tollgate_notify_dropped_total`), so a receiver that is down holds neither
//!   memory nor the other webhooks.
//! - **Retried.** A network error, a timeout ([`SendOptions::timeout`] per request), a 429 or
//!   a 5xx is tried again after [`SendOptions::first_retry`], then twice as long each time, up
//!   to [`SendOptions::attempts`] tries in all; any other answer but a 2xx (a 3xx: redirects
//!   are not followed, so the signature goes nowhere else) ends the tries. Each event ends
//!   counted as sent or failed (`tollgate_notify_sent_total`, `tollgate_notify_failed_total`);
//!   events the detector's rate limit kept back are counted in
//!   `tollgate_notify_suppressed_total`.
//! - **Quiet about secrets.** Logs and answers name a webhook by its name and
//!   [`Webhook::target`] (scheme, host and port); the URL's path, query and credentials, and
//!   the key, are never shown (reqwest's errors are stripped of the URL).

use std::collections::VecDeque;
use std::error::Error as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, USER_AGENT};

use crate::event::{Event, EventKind};
use crate::sign::{SIGNATURE_HEADER, Secret, signature};

/// Sent events, by webhook and event.
const SENT: &str = "tollgate_notify_sent_total";
/// Events given up on (refused, or still failing after the last try), by webhook and event.
const FAILED: &str = "tollgate_notify_failed_total";
/// Events dropped from a full queue, by webhook.
const DROPPED: &str = "tollgate_notify_dropped_total";
/// Events the rate limit kept back, by event.
const SUPPRESSED: &str = "tollgate_notify_suppressed_total";

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

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

    fn wants(&self, kind: EventKind) -> bool {
        kind == EventKind::Test || self.events.contains(&kind)
    }
}

/// How events are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOptions {
    /// The longest one request may take, connecting included.
    pub timeout: Duration,
    /// The wait before the second try (doubled for each further one).
    pub first_retry: Duration,
    /// Tries per event, the first included (≥ 1).
    pub attempts: u32,
    /// Events waiting per webhook at most (≥ 1).
    pub queue_len: usize,
}

impl Default for SendOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            first_retry: Duration::from_secs(1),
            attempts: 5,
            queue_len: 1000,
        }
    }
}

/// What a test send got from one webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    /// The webhook's name.
    pub name: String,
    /// Its [`Webhook::target`].
    pub target: String,
    /// The HTTP status it answered, when it answered.
    pub status: Option<u16>,
    /// True for a 2xx.
    pub ok: bool,
    /// Why it failed (no answer, or not a 2xx).
    pub error: Option<String>,
    /// How long the request took.
    pub elapsed: Duration,
}

/// An event waiting to be sent: its kind and its signed body.
struct Pending {
    kind: EventKind,
    body: Arc<[u8]>,
    signature: String,
}

/// A webhook, its queue and what wakes its task.
struct Hook {
    webhook: Webhook,
    queue: Mutex<VecDeque<Pending>>,
    wake: tokio::sync::Notify,
}

/// The sending tasks, stopped when the last [`Notifier`] clone goes.
struct Workers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &self.0 {
            w.abort();
        }
    }
}

/// Sends events to the configured webhooks; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    hooks: Arc<[Arc<Hook>]>,
    client: reqwest::Client,
    options: SendOptions,
    _workers: Arc<Workers>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.hooks.iter().map(|h| h.webhook.name.as_str()).collect();
        f.debug_struct("Notifier").field("webhooks", &names).finish()
    }
}

impl Notifier {
    /// Starts one sending task per webhook (call within a Tokio runtime); `Err` when the
    /// HTTP client cannot be made.
    pub fn start(webhooks: Vec<Webhook>, options: SendOptions) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .build()
            .map_err(|e| format!("cannot make the webhook client: {}", describe(&e)))?;
        let options = SendOptions {
            attempts: options.attempts.max(1),
            queue_len: options.queue_len.max(1),
            ..options
        };
        for kind in EventKind::WATCHED {
            metrics::counter!(SUPPRESSED, "event" => kind.as_str()).increment(0);
        }
        let hooks: Arc<[Arc<Hook>]> = webhooks
            .into_iter()
            .map(|webhook| {
                let name = webhook.name.clone();
                metrics::counter!(DROPPED, "webhook" => name.clone()).increment(0);
                for kind in EventKind::WATCHED.into_iter().chain([EventKind::Test]) {
                    let labels = [("webhook", name.clone()), ("event", kind.as_str().to_owned())];
                    metrics::counter!(SENT, &labels).increment(0);
                    metrics::counter!(FAILED, &labels).increment(0);
                }
                Arc::new(Hook { webhook, queue: Mutex::default(), wake: Default::default() })
            })
            .collect();
        let workers = hooks
            .iter()
            .map(|hook| tokio::spawn(run(Arc::clone(hook), client.clone(), options)))
            .collect();
        Ok(Self { hooks, client, options, _workers: Arc::new(Workers(workers)) })
    }

    /// The configured webhooks.
    pub fn webhooks(&self) -> impl Iterator<Item = &Webhook> {
        self.hooks.iter().map(|h| &h.webhook)
    }

    /// Queues `event` for every webhook that wants it (returns at once).
    pub fn publish(&self, event: &Event) {
        let body: Arc<[u8]> = Arc::from(event.body());
        for hook in self.hooks.iter().filter(|h| h.webhook.wants(event.event)) {
            let signature = signature(&hook.webhook.secret, &body);
            let pending = Pending { kind: event.event, body: Arc::clone(&body), signature };
            let mut queue = hook.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.len() >= self.options.queue_len
                && let Some(old) = queue.pop_front()
            {
                metrics::counter!(DROPPED, "webhook" => hook.webhook.name.clone()).increment(1);
                tracing::warn!(
                    webhook = %hook.webhook.name,
                    target = %hook.webhook.target(),
                    event = %old.kind,
                    waiting = self.options.queue_len,
                    "notification dropped: the webhook's queue is full"
                );
            }
            queue.push_back(pending);
            drop(queue);
            hook.wake.notify_one();
        }
    }

    /// Counts `event` as kept back by the rate limit (see [`crate::Observed::suppressed`]).
    pub fn suppressed(&self, event: &Event) {
        metrics::counter!(SUPPRESSED, "event" => event.event.as_str()).increment(1);
        tracing::debug!(
            event = %event.event, partner = event.partner.as_deref().unwrap_or(""),
            "not notifying: the same event went out for this partner within the minimum interval"
        );
    }

    /// Sends a `test` event to every webhook at once, one try each, and says what each
    /// answered (in the configured order).
    pub async fn test(&self) -> Vec<TestOutcome> {
        let event = Event::test(jiff::Timestamp::now());
        let body: Arc<[u8]> = Arc::from(event.body());
        let sends = self.hooks.iter().map(|hook| {
            let pending = Pending {
                kind: EventKind::Test,
                body: Arc::clone(&body),
                signature: signature(&hook.webhook.secret, &body),
            };
            let client = self.client.clone();
            async move {
                let started = Instant::now();
                let tried = attempt(&client, &hook.webhook, &pending).await;
                let elapsed = started.elapsed();
                let (status, error) = match &tried {
                    Tried::Delivered(s) => (Some(*s), None),
                    Tried::Retry(s, why) | Tried::Refused(s, why) => (*s, Some(why.clone())),
                };
                count(&hook.webhook, EventKind::Test, matches!(tried, Tried::Delivered(_)));
                let w = &hook.webhook;
                TestOutcome {
                    name: w.name.clone(),
                    target: w.target(),
                    status,
                    ok: error.is_none(),
                    error,
                    elapsed,
                }
            }
        });
        futures_util::future::join_all(sends).await
    }
}

/// One webhook's task: sends its queue in order, waiting when it is empty.
async fn run(hook: Arc<Hook>, client: reqwest::Client, options: SendOptions) {
    loop {
        let next = hook.queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        match next {
            Some(pending) => deliver(&hook.webhook, &client, &options, &pending).await,
            // A `notify_one` made since the queue was found empty is kept for this wait.
            None => hook.wake.notified().await,
        }
    }
}

/// Sends one event, retrying as the module docs say.
async fn deliver(webhook: &Webhook, client: &reqwest::Client, o: &SendOptions, p: &Pending) {
    let mut wait = o.first_retry;
    for n in 1..=o.attempts {
        let (status, why) = match attempt(client, webhook, p).await {
            Tried::Delivered(status) => {
                count(webhook, p.kind, true);
                tracing::info!(
                    webhook = %webhook.name, target = %webhook.target(), event = %p.kind,
                    status, attempt = n, "notification sent"
                );
                return;
            }
            Tried::Retry(status, why) if n < o.attempts => (status, why),
            Tried::Retry(status, why) | Tried::Refused(status, why) => {
                count(webhook, p.kind, false);
                tracing::warn!(
                    webhook = %webhook.name, target = %webhook.target(), event = %p.kind,
                    status, attempts = n, error = %why, "notification not delivered"
                );
                return;
            }
        };
        tracing::info!(
            webhook = %webhook.name, target = %webhook.target(), event = %p.kind, status,
            attempt = n, error = %why, retry_in_ms = wait.as_millis() as u64,
            "notification failed; trying again"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_BACKOFF);
    }
}

fn count(webhook: &Webhook, kind: EventKind, sent: bool) {
    let labels = [("webhook", webhook.name.clone()), ("event", kind.as_str().to_owned())];
    metrics::counter!(if sent { SENT } else { FAILED }, &labels).increment(1);
}

/// How one try went: the status when there was an answer, and why it failed.
enum Tried {
    Delivered(u16),
    /// Worth another try (no answer, 429, 5xx).
    Retry(Option<u16>, String),
    /// Not worth another (any other answer).
    Refused(Option<u16>, String),
}

async fn attempt(client: &reqwest::Client, webhook: &Webhook, p: &Pending) -> Tried {
    let sent = client
        .post(webhook.url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .header(SIGNATURE_HEADER, &p.signature)
        .header("x-tollgate-event", p.kind.as_str())
        .body(p.body.to_vec())
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
                Tried::Delivered(code)
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
fn describe(e: &reqwest::Error) -> String {
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

#[cfg(test)]
mod tests;
