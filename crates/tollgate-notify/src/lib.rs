//! Notifications that reach a person: when a partner starts or stops being held, when its
//! duplicates start, and when its held units exceed a threshold.
//!
//! Two halves, neither knowing of the HTTP server nor of the gateway's types:
//! - [`Detector`] turns periodic snapshots of per-group queue counts into [`Event`]s: a pure
//!   state machine (counts and a time in, events out), one event per episode, rate-limited
//!   per partner and event;
//! - [`Notifier`] sends events to webhooks: a JSON body signed with HMAC-SHA256
//!   (`X-Tollgate-Signature: sha256=<hex>`), a bounded queue per webhook (the oldest dropped
//!   first), retries with exponential backoff on network errors, 429 and 5xx, and a timeout
//!   per request.
//!
//! The binary wires them: it feeds the gateway's tally to the detector once a second and
//! publishes what comes out. Secrets (the HMAC keys, and the webhook URLs, which may carry a
//! token in their path) never reach a log line or an answer: webhooks are named by their
//! `name` and their scheme, host and port only.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod detect;
mod event;
mod send;
mod sign;

pub use detect::{Detector, Group, Observed, Rules};
pub use event::{Event, EventKind};
pub use send::{Notifier, SendOptions, TestOutcome, Webhook};
pub use sign::{SIGNATURE_HEADER, Secret, signature};
