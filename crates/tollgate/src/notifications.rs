//! Notifications in `tollgate serve`: the watch that feeds the gateway's queue tally to the
//! detector once a second and publishes what it finds, and `POST /v1/notify/test`, which sends
//! a `test` event to every channel (webhooks and e-mail) and answers what each returned.
//!
//! The detection and the sending are `tollgate_notify`'s; this module only wires them to the
//! gateway, the access guard and the audit log.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use tollgate_gateway::{QueueTally, State as ItemState};
use tollgate_http::AccessGuard;
use tollgate_http::problem::Problem;
use tollgate_http::user::Permission;
use tollgate_notify::{Detector, Group, Notifier, Rules, TestOutcome};

/// How often the queue's tally is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Starts watching `tally`: every [`WATCH_EVERY`], its snapshot goes through a detector with
/// `rules` and each event found is published to `notifier`. Stops when the task is aborted.
pub fn watch(tally: QueueTally, notifier: Notifier, rules: Rules) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut detector = Detector::new(rules);
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let snapshot = tally.snapshot();
            let groups = snapshot.iter().map(|(key, counts)| Group {
                partner: &key.partner,
                metering_id: key.metering_id.as_deref(),
                held: counts.items_in(ItemState::Held),
                held_units: counts.units_in(ItemState::Held),
                duplicates: counts.items_in(ItemState::Duplicate),
            });
            let observed = detector.observe(groups, jiff::Timestamp::now());
            for e in &observed.send {
                tracing::info!(
                    event = %e.event, partner = e.partner.as_deref().unwrap_or(""),
                    metering_id = e.metering_id.as_deref().unwrap_or(""), held = e.held,
                    held_units = e.held_units, duplicates = e.duplicates, "notifying"
                );
                notifier.publish(e);
            }
            for e in &observed.suppressed {
                notifier.suppressed(e);
            }
        }
    })
}

/// What `POST /v1/notify/test` needs: the channels (none configured: `None`) and the guard.
#[derive(Clone)]
pub struct NotifyApi {
    notifier: Option<Notifier>,
    guard: AccessGuard,
}

/// The `POST /v1/notify/test` route.
pub fn router(notifier: Option<Notifier>, guard: AccessGuard) -> Router {
    Router::new().route("/v1/notify/test", post(test).with_state(NotifyApi { notifier, guard }))
}

/// The answer of `POST /v1/notify/test`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TestAnswer {
    /// One entry per configured channel, the webhooks in the config's order, then e-mail
    /// (empty when none is configured).
    channels: Vec<ChannelAnswer>,
}

/// What one channel answered to the test event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChannelAnswer {
    /// The channel's name: a webhook's `name` (`webhook-N` when the config gives none), or
    /// `smtp` for e-mail.
    name: String,
    /// `webhook` or `email`.
    #[schema(pattern = "^(webhook|email)$")]
    kind: String,
    /// Where it sends: a webhook URL's scheme, host and port (the rest may hold a token and is
    /// not shown), or `smtp://host:port` (`smtps://` with TLS from the start).
    target: String,
    /// True when it took the event: a 2xx answer, or the SMTP server accepted the message.
    ok: bool,
    /// The HTTP status a webhook answered; null when no answer came, and for e-mail.
    #[schema(minimum = 100, maximum = 599)]
    status: Option<u16>,
    /// Why it failed (no answer, a timeout, a status other than 2xx, the SMTP server's
    /// refusal); null when it did not.
    error: Option<String>,
    /// How long the request took, in milliseconds.
    elapsed_ms: u64,
}

impl From<TestOutcome> for ChannelAnswer {
    fn from(o: TestOutcome) -> Self {
        Self {
            name: o.name,
            kind: o.kind.to_owned(),
            target: o.target,
            ok: o.ok,
            status: o.status,
            error: o.error,
            elapsed_ms: u64::try_from(o.elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// `POST /v1/notify/test`: sends a `test` event to every channel, one try each, and answers
/// what each returned; recorded in the audit log.
#[utoipa::path(
    post,
    path = "/v1/notify/test",
    tag = "admin",
    operation_id = "notify_test",
    summary = "Send a test notification to every channel and say what each answered",
    description = "Posts the event `{\"event\": \"test\", \"partner\": null, ...}`, signed as any notification (`X-Tollgate-Signature: sha256=<hex>`), to every `[[notify.webhook]]`, and mails it through `[notify.smtp]`, all at once, one try each without retries, and answers what each returned. Needs the operator or admin role; recorded in the audit log as `notify.test`.",
    responses(
        (status = 200, description = "Sent; what each channel answered (`ok` false for one that failed). An empty list when no channel is configured.", body = TestAnswer),
        tollgate_http::openapi::AccessRefused,
        (status = 500, description = "The test was sent but its audit record could not be written (problem audit-write-failed), or the test could not be completed (problem notify-test-failed).", body = tollgate_http::openapi::ProblemDoc, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = [])),
)]
pub async fn test(State(api): State<NotifyApi>, headers: HeaderMap) -> Response {
    let who = match api.guard.allow(&headers, Permission::Notify) {
        Ok(who) => who,
        Err(p) => return p.into_response(),
    };
    // A task of its own: a client that hangs up does not cut the record.
    let task = tokio::spawn(async move {
        let outcomes = match &api.notifier {
            Some(n) => n.test().await,
            None => Vec::new(),
        };
        let answer = TestAnswer { channels: outcomes.into_iter().map(Into::into).collect() };
        let after = serde_json::to_value(&answer).unwrap_or_default();
        let guard = api.guard.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            guard.record(&who, "notify.test", "channels", serde_json::Value::Null, after)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|written| written);
        match recorded {
            Ok(()) => Json(answer).into_response(),
            Err(e) => tollgate_http::audit::write_failed(e).into_response(),
        }
    });
    match task.await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(error = %e, "the test notification task failed");
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "notify-test-failed", "Test failed")
                .detail("the test could not be completed; the server log has why")
                .into_response()
        }
    }
}
