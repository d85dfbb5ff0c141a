//! Notifications that reach a person: when a partner starts or stops being held, when its
//! duplicates start, and when its held units exceed a threshold.
//!
//! Two halves, neither knowing of the HTTP server nor of the gateway's types:
//! - [`Detector`] turns periodic snapshots of per-group queue counts into [`Event`]s: a pure
//!   state machine (counts and a time in, events out), one event per episode, rate-limited
//!   per partner and event;
//! - [`Notifier`] sends events to its channels: webhooks, a JSON body signed with
//!   HMAC-SHA256 (`X-Tollgate-Signature: sha256=<hex>`), and e-mail over SMTP; a bounded
//!   queue per channel (the oldest dropped first), retries with exponential backoff on network
//!   errors, 429 and 5xx (transient SMTP refusals), and a timeout per request.
//!
//! The binary wires them: it feeds the gateway's tally to the detector once a second and
//! publishes what comes out. Secrets (the HMAC keys, and the webhook URLs, which may carry a
//! token in their path, and the SMTP password) never reach a log line or an answer: channels
//! are named by their `name` and their scheme, host and port only.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod detect;
mod event;
mod mail;
mod send;
mod sign;
mod webhook;

pub use detect::{Detector, Group, Observed, Rules};
pub use event::{Event, EventKind};
pub use mail::{Email, Mailbox, Security, mailbox};
pub use send::{Channel, Notifier, SendOptions, TestOutcome};
pub use sign::{SIGNATURE_HEADER, Secret, signature};
pub use webhook::Webhook;
