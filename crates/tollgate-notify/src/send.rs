//! Sending events to the channels: webhooks (a `POST` of the event's JSON with its signature,
//! `X-Tollgate-Signature: sha256=<hex>`, and its kind, `X-Tollgate-Event`) and e-mail
//! ([`crate::mail`]).
//!
//! Invariants:
//! - **Bounded.** Each channel has its own queue of at most [`SendOptions::queue_len`] events
//!   and one task sending them in order; when it is full the oldest waiting event is dropped
//!   and counted (`tollgate_notify_dropped_total`), so a receiver that is down holds neither
//!   memory nor the other channels.
//! - **Retried.** A network error, a timeout ([`SendOptions::timeout`] per request), a 429 or
//!   a 5xx (for e-mail: a transient 4xx refusal) is tried again after
//!   [`SendOptions::first_retry`], then twice as long each time, up to
//!   [`SendOptions::attempts`] tries in all; any other answer but a 2xx (a 3xx: redirects are
//!   not followed, so the signature goes nowhere else; for e-mail, a permanent 5xx refusal)
//!   ends the tries. Each event ends counted as sent or failed (`tollgate_notify_sent_total`,
//!   `tollgate_notify_failed_total`); events the detector's rate limit kept back are counted
//!   in `tollgate_notify_suppressed_total`.
//! - **Quiet about secrets.** Logs and answers name a channel by its name and its target
//!   (scheme, host and port); a webhook URL's path, query and credentials, the keys and the
//!   SMTP password are never shown (reqwest's errors are stripped of the URL).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::event::{Event, EventKind};
use crate::mail::{self, Email};
use crate::sign::signature;
use crate::webhook::{self, Webhook};

/// Sent events, by channel and event.
const SENT: &str = "tollgate_notify_sent_total";
/// Events given up on (refused, or still failing after the last try), by channel and event.
const FAILED: &str = "tollgate_notify_failed_total";
/// Events dropped from a full queue, by channel.
const DROPPED: &str = "tollgate_notify_dropped_total";
/// Events the rate limit kept back, by event.
const SUPPRESSED: &str = "tollgate_notify_suppressed_total";

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Where events go: a webhook or e-mail.
#[derive(Debug, Clone, PartialEq)]
pub enum Channel {
    /// A `[[notify.webhook]]`.
    Webhook(Webhook),
    /// `[notify.smtp]`.
    Email(Email),
}

impl From<Webhook> for Channel {
    fn from(w: Webhook) -> Self {
        Self::Webhook(w)
    }
}

impl From<Email> for Channel {
    fn from(e: Email) -> Self {
        Self::Email(e)
    }
}

impl Channel {
    /// Its name, in logs, metrics and test answers.
    pub fn name(&self) -> &str {
        match self {
            Self::Webhook(w) => &w.name,
            Self::Email(e) => &e.name,
        }
    }

    /// What may be shown of where it sends: scheme, host and port.
    pub fn target(&self) -> String {
        match self {
            Self::Webhook(w) => w.target(),
            Self::Email(e) => e.target(),
        }
    }

    /// `webhook` or `email`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Webhook(_) => "webhook",
            Self::Email(_) => "email",
        }
    }

    fn wants(&self, kind: EventKind) -> bool {
        let events = match self {
            Self::Webhook(w) => &w.events,
            Self::Email(e) => &e.events,
        };
        kind == EventKind::Test || events.contains(&kind)
    }
}

/// How events are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOptions {
    /// The longest one request (one SMTP command) may take, connecting included.
    pub timeout: Duration,
    /// The wait before the second try (doubled for each further one).
    pub first_retry: Duration,
    /// Tries per event, the first included (≥ 1).
    pub attempts: u32,
    /// Events waiting per channel at most (≥ 1).
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

/// What a test send got from one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    /// The channel's name.
    pub name: String,
    /// `webhook` or `email`.
    pub kind: &'static str,
    /// Its [`Channel::target`].
    pub target: String,
    /// The HTTP status a webhook answered, when it answered (none for e-mail).
    pub status: Option<u16>,
    /// True when it took the event (a 2xx; for e-mail, the server accepted the message).
    pub ok: bool,
    /// Why it failed (no answer, or not a 2xx; the SMTP server's refusal).
    pub error: Option<String>,
    /// How long the send took.
    pub elapsed: Duration,
}

/// An event waiting to be sent: the event, its body, and its signature for a webhook.
struct Pending {
    event: Arc<Event>,
    body: Arc<[u8]>,
    signature: Option<String>,
}

/// What a channel sends with: the shared HTTP client, or its SMTP connection pool.
enum Out {
    Http(reqwest::Client),
    Smtp(Box<mail::Transport>),
}

/// A channel, its queue and what wakes its task.
struct Hook {
    channel: Channel,
    out: Out,
    queue: Mutex<VecDeque<Pending>>,
    wake: tokio::sync::Notify,
}

impl Hook {
    fn pending(&self, event: &Arc<Event>, body: &Arc<[u8]>) -> Pending {
        let signature = match &self.channel {
            Channel::Webhook(w) => Some(signature(&w.secret, body)),
            Channel::Email(_) => None,
        };
        Pending { event: Arc::clone(event), body: Arc::clone(body), signature }
    }
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

/// Sends events to the configured channels; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    hooks: Arc<[Arc<Hook>]>,
    options: SendOptions,
    _workers: Arc<Workers>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.hooks.iter().map(|h| h.channel.name()).collect();
        f.debug_struct("Notifier").field("channels", &names).finish()
    }
}

impl Notifier {
    /// Starts one sending task per channel (call within a Tokio runtime); `Err` when the
    /// HTTP client or an SMTP transport cannot be made.
    pub fn start(channels: Vec<Channel>, options: SendOptions) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .build()
            .map_err(|e| format!("cannot make the webhook client: {}", webhook::describe(&e)))?;
        let options = SendOptions {
            attempts: options.attempts.max(1),
            queue_len: options.queue_len.max(1),
            ..options
        };
        for kind in EventKind::WATCHED {
            metrics::counter!(SUPPRESSED, "event" => kind.as_str()).increment(0);
        }
        let mut hooks = Vec::with_capacity(channels.len());
        for channel in channels {
            let out = match &channel {
                Channel::Webhook(_) => Out::Http(client.clone()),
                Channel::Email(e) => Out::Smtp(Box::new(mail::transport(e, options.timeout)?)),
            };
            let name = channel.name().to_owned();
            metrics::counter!(DROPPED, "channel" => name.clone()).increment(0);
            for kind in EventKind::WATCHED.into_iter().chain([EventKind::Test]) {
                let labels = [("channel", name.clone()), ("event", kind.as_str().to_owned())];
                metrics::counter!(SENT, &labels).increment(0);
                metrics::counter!(FAILED, &labels).increment(0);
            }
            let queue = Mutex::default();
            hooks.push(Arc::new(Hook { channel, out, queue, wake: Default::default() }));
        }
        let hooks: Arc<[Arc<Hook>]> = hooks.into();
        let workers = hooks.iter().map(|hook| tokio::spawn(run(Arc::clone(hook), options)));
        let workers = Arc::new(Workers(workers.collect()));
        Ok(Self { hooks, options, _workers: workers })
    }

    /// The configured channels.
    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.hooks.iter().map(|h| &h.channel)
    }

    /// Queues `event` for every channel that wants it (returns at once).
    pub fn publish(&self, event: &Event) {
        let body: Arc<[u8]> = Arc::from(event.body());
        let event = Arc::new(event.clone());
        for hook in self.hooks.iter().filter(|h| h.channel.wants(event.event)) {
            let pending = hook.pending(&event, &body);
            let mut queue = hook.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.len() >= self.options.queue_len
                && let Some(old) = queue.pop_front()
            {
                let name = hook.channel.name().to_owned();
                metrics::counter!(DROPPED, "channel" => name).increment(1);
                tracing::warn!(
                    channel = %hook.channel.name(),
                    target = %hook.channel.target(),
                    event = %old.event.event,
                    waiting = self.options.queue_len,
                    "notification dropped: the channel's queue is full"
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

    /// Sends a `test` event to every channel at once, one try each, and says what each
    /// answered (in the configured order).
    pub async fn test(&self) -> Vec<TestOutcome> {
        let event = Arc::new(Event::test(jiff::Timestamp::now()));
        let body: Arc<[u8]> = Arc::from(event.body());
        let sends = self.hooks.iter().map(|hook| {
            let pending = hook.pending(&event, &body);
            async move {
                let started = Instant::now();
                let tried = attempt(hook, &pending).await;
                let elapsed = started.elapsed();
                let (status, error) = match &tried {
                    Tried::Delivered(s) => (*s, None),
                    Tried::Retry(s, why) | Tried::Refused(s, why) => (*s, Some(why.clone())),
                };
                count(&hook.channel, EventKind::Test, matches!(tried, Tried::Delivered(_)));
                let c = &hook.channel;
                TestOutcome {
                    name: c.name().to_owned(),
                    kind: c.kind(),
                    target: c.target(),
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

/// One channel's task: sends its queue in order, waiting when it is empty.
async fn run(hook: Arc<Hook>, options: SendOptions) {
    loop {
        let next = hook.queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        match next {
            Some(pending) => deliver(&hook, &options, &pending).await,
            // A `notify_one` made since the queue was found empty is kept for this wait.
            None => hook.wake.notified().await,
        }
    }
}

/// Sends one event, retrying as the module docs say.
async fn deliver(hook: &Hook, o: &SendOptions, p: &Pending) {
    let (c, kind) = (&hook.channel, p.event.event);
    let mut wait = o.first_retry;
    for n in 1..=o.attempts {
        let (status, why) = match attempt(hook, p).await {
            Tried::Delivered(status) => {
                count(c, kind, true);
                tracing::info!(
                    channel = %c.name(), target = %c.target(), event = %kind, status,
                    attempt = n, "notification sent"
                );
                return;
            }
            Tried::Retry(status, why) if n < o.attempts => (status, why),
            Tried::Retry(status, why) | Tried::Refused(status, why) => {
                count(c, kind, false);
                tracing::warn!(
                    channel = %c.name(), target = %c.target(), event = %kind, status,
                    attempts = n, error = %why, "notification not delivered"
                );
                return;
            }
        };
        tracing::info!(
            channel = %c.name(), target = %c.target(), event = %kind, status, attempt = n,
            error = %why, retry_in_ms = wait.as_millis() as u64,
            "notification failed; trying again"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_BACKOFF);
    }
}

fn count(channel: &Channel, kind: EventKind, sent: bool) {
    let labels = [("channel", channel.name().to_owned()), ("event", kind.as_str().to_owned())];
    metrics::counter!(if sent { SENT } else { FAILED }, &labels).increment(1);
}

/// How one try went: the HTTP status when a webhook answered, and why it failed.
pub(crate) enum Tried {
    Delivered(Option<u16>),
    /// Worth another try (no answer, 429, 5xx; a transient SMTP refusal).
    Retry(Option<u16>, String),
    /// Not worth another (any other answer; a permanent SMTP refusal).
    Refused(Option<u16>, String),
}

async fn attempt(hook: &Hook, p: &Pending) -> Tried {
    match (&hook.channel, &hook.out) {
        (Channel::Webhook(w), Out::Http(client)) => {
            webhook::post(client, w, &p.event, &p.body, p.signature.as_deref()).await
        }
        (Channel::Email(e), Out::Smtp(transport)) => {
            match mail::send(transport, e, &p.event).await {
                mail::Sent::Delivered => Tried::Delivered(None),
                mail::Sent::Retry(why) => Tried::Retry(None, why),
                mail::Sent::Refused(why) => Tried::Refused(None, why),
            }
        }
        // `Notifier::start` pairs each channel with its own kind of sender.
        _ => Tried::Refused(None, "no sender for this kind of channel".to_owned()),
    }
}

#[cfg(test)]
mod tests;
