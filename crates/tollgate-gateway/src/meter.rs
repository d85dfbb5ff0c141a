//! Metering: asking the quota engine (in-process) or a quota service (remote) whether an
//! interchange of a given weight may pass.
//!
//! `embedded` decides through the server's one decision path (`tollgate_policy::Decider`): its
//! store, so the gateway's counters are the ones `/v1/counters` lists and resets, and its
//! `[[policy]]` set, so a policy overrides a route's limit as it overrides a request's. `remote` sends `GET` with the seed headers
//! (`metering-id`, `quota-limit`, `quota-interval`, `quota-timeunit`, `message-weight`) to any
//! compatible service, with `x-api-key` when `api_key` is set. A timeout, a connection error,
//! a 408 or a 5xx is [`Verdict::Unavailable`]: the pipeline applies `on_unavailable`. A
//! [`Breaker`] stops paying the timeout during an outage, and the outage is logged once when
//! it starts and once when it ends.
//!
//! Any other 4xx but 429 (a wrong key, a wrong URL, a header the service refuses) is
//! [`Verdict::Misconfigured`]: never an outage, so never fail-open, since a wrong key must not
//! silently switch throttling off. The item is held, the reason is shown by `/readyz` (see
//! [`Meter::misconfiguration`]) and counted in `tollgate_gateway_quota_misconfigured_total`,
//! and it is logged once until the service accepts a request again.
//!
//! Units held or found duplicate get no decision, so the pipeline reports them here
//! ([`Meter::held`], [`Meter::duplicate`]): embedded metering passes them to its store's
//! observer (the server's usage history counts them beside the decisions); a remote service
//! keeps the history of its own decisions, so nothing is reported for it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tollgate_policy::{Asked, DecideError, Decider, DecisionOutcome, Transport};
use tollgate_quota::store::Withheld;
use tollgate_quota::{MeteringId, QuotaSpec, Store};

use crate::breaker::Breaker;
use crate::config::RemoteQuota;
use crate::item::{Charge, Item, State};

/// The answer to one metering call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Counted; go on. The charge says where, when the embedded store counted it (see
    /// [`Meter::give_back`]).
    Admitted {
        /// Where the units were counted.
        charge: Option<Charge>,
    },
    /// Over quota; the window frees enough after this long.
    Exceeded {
        /// Time until the weight fits.
        retry_after: Duration,
        /// The limit in force (a policy's, when one overrides the route).
        limit: u64,
    },
    /// The weight is larger than the limit in force: it will never fit as a whole.
    TooHeavy {
        /// The limit in force.
        limit: u64,
    },
    /// The quota service could not answer (or the breaker is open); nothing was counted.
    Unavailable {
        /// What went wrong, for the item's reason.
        reason: String,
    },
    /// The quota service refused the request itself (400, 401, 403, 404, …): the gateway is
    /// misconfigured. Nothing was counted; the item must wait for an operator's fix.
    Misconfigured {
        /// The status and what the service said, for the item's reason.
        reason: String,
    },
}

enum Backend {
    Embedded(Decider),
    Remote { client: reqwest::Client, url: String, api_key: Option<reqwest::header::HeaderValue> },
}

/// Meters interchanges against the embedded store or a remote quota service.
pub struct Meter {
    backend: Backend,
    breaker: Breaker,
    outage: AtomicBool,
    /// The last misconfiguration answer, until a request is accepted again.
    misconfigured: Mutex<Option<String>>,
}

/// The first cool-down of the breaker in front of a remote quota service.
const BREAKER_COOL_DOWN: Duration = Duration::from_secs(1);

/// The longest `Retry-After` taken from a remote quota service: the end of the longest window
/// (100 years of 366 days). A larger value (a broken or hostile service) is cut to it, so the
/// hold's due time stays a real time.
const MAX_RETRY_AFTER_SECS: u64 = tollgate_quota::MAX_WINDOW_YEARS as u64 * 366 * 86_400;

impl Meter {
    /// Meters through the server's decision path: its store and the `[[policy]]` set in
    /// force, which may override the route's limit as it overrides a request's.
    pub fn embedded(decider: Decider) -> Self {
        Self::with(Backend::Embedded(decider))
    }

    /// Meters against a remote quota service, verifying its certificate against
    /// `remote.ca_file` or the system roots (see [`crate::trust`]).
    pub fn remote(remote: &RemoteQuota) -> Result<Self, String> {
        let client =
            crate::trust::client_builder("gateway.quota.ca_file", remote.ca_file.as_deref())?
                .timeout(remote.timeout)
                .connect_timeout(remote.timeout)
                .build()
                .map_err(|e| format!("http client: {e}"))?;
        Ok(Self::with(Backend::Remote {
            client,
            url: remote.url.to_string(),
            api_key: remote.api_key.as_ref().map(|k| k.header_value().clone()),
        }))
    }

    fn with(backend: Backend) -> Self {
        Self {
            backend,
            breaker: Breaker::new(BREAKER_COOL_DOWN),
            outage: AtomicBool::new(false),
            misconfigured: Mutex::new(None),
        }
    }

    /// Why the quota service refuses the gateway's requests, while it does (for `/readyz`).
    pub fn misconfiguration(&self) -> Option<String> {
        self.misconfigured.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a misconfiguration answer (logged once) or its end.
    fn set_misconfigured(&self, reason: Option<&str>) {
        let mut m = self.misconfigured.lock().unwrap_or_else(|p| p.into_inner());
        match (reason, m.is_some()) {
            (Some(r), false) => {
                tracing::error!(reason = %r, "the quota service refuses the gateway's requests: check [gateway.quota] url and api_key; items are held meanwhile");
                *m = Some(r.to_owned());
            }
            (Some(r), true) => *m = Some(r.to_owned()),
            (None, true) => {
                tracing::info!("the quota service accepts the gateway's requests again");
                *m = None;
            }
            (None, false) => {}
        }
    }

    /// Reports `item`'s weight as held, the first time it is held: call it before the item's
    /// `held_at` is set. An item held before (re-held, or held again after an operator's
    /// retry) is not reported again.
    pub fn held(&self, item: &Item) {
        if item.state != State::Held && item.held_at.is_none() {
            self.withheld(item, Withheld::Held);
        }
    }

    /// Reports `item`'s weight as duplicate: once, when it becomes a duplicate.
    pub fn duplicate(&self, item: &Item) {
        self.withheld(item, Withheld::Duplicate);
    }

    /// Reports `item`'s weight withheld as `kind` to the embedded store's observer, when the
    /// item has a metering id (see the module docs).
    fn withheld(&self, item: &Item, kind: Withheld) {
        if let (Backend::Embedded(decider), Some(id)) = (&self.backend, &item.metering_id) {
            decider.store().withheld(id, kind, item.weight);
        }
    }

    /// Gives back `units` of `id` that the embedded store counted as `charge` says; how many
    /// it took back (fewer once its window has ended, none for a remote service, which keeps
    /// its own counters).
    pub async fn give_back(
        &self,
        id: &MeteringId,
        charge: &Charge,
        units: u64,
    ) -> Result<u64, String> {
        let Backend::Embedded(decider) = &self.backend else { return Ok(0) };
        let Some(spec) = charge.spec() else { return Ok(0) };
        match decider.store().give_back(id, &spec, &charge.counted, units).await {
            Ok(tollgate_quota::GivenBack::Units(n)) => Ok(n),
            Ok(_) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Checks `weight` units for `id` against `spec`.
    pub async fn check(&self, id: &MeteringId, spec: &QuotaSpec, weight: u64) -> Verdict {
        if !self.breaker.allow() {
            return Verdict::Unavailable { reason: "quota service circuit breaker open".into() };
        }
        let verdict = match &self.backend {
            Backend::Embedded(decider) => {
                match decider.decide(id, &Asked::spec(spec), weight, Transport::Gateway).await {
                    Ok(v) => from_decided(&v),
                    Err(e @ DecideError::Resolve(_)) => {
                        Verdict::Misconfigured { reason: e.to_string() }
                    }
                    Err(e) => Verdict::Unavailable { reason: e.to_string() },
                }
            }
            Backend::Remote { client, url, api_key } => {
                remote_check(client, url, api_key.as_ref(), id, spec, weight).await
            }
        };
        if let Verdict::Misconfigured { reason } = &verdict {
            // The service answered: not an outage (a probe through the breaker succeeded).
            metrics::counter!("tollgate_gateway_quota_misconfigured_total").increment(1);
            self.set_misconfigured(Some(reason));
            if self.breaker.success() {
                crate::telemetry::breaker_open(false);
            }
            return verdict;
        }
        if let Verdict::Unavailable { reason } = &verdict {
            metrics::counter!("tollgate_gateway_quota_errors_total").increment(1);
            if self.breaker.failure() {
                metrics::counter!("tollgate_gateway_breaker_opened_total").increment(1);
                crate::telemetry::breaker_open(true);
                tracing::warn!("quota service circuit breaker opened");
            }
            if !self.outage.swap(true, Ordering::Relaxed) {
                tracing::warn!(%reason, "quota service unavailable; applying on_unavailable until it answers again");
            }
        } else {
            self.set_misconfigured(None);
            if self.breaker.success() {
                crate::telemetry::breaker_open(false);
            }
            if self.outage.swap(false, Ordering::Relaxed) {
                tracing::info!("quota service answers again");
            }
        }
        verdict
    }
}

/// The gateway's verdict on a decision: a shadow policy's refusal lets the item through, as
/// it lets a request through over HTTP; an undecided one (`store_unavailable = "allow"`) is
/// an outage, for `on_unavailable` to decide.
fn from_decided(v: &tollgate_policy::Verdict) -> Verdict {
    let limit = v.resolved.spec.limit;
    let Some(d) = &v.decision else {
        return Verdict::Unavailable { reason: "the counter store could not decide".into() };
    };
    match v.outcome() {
        DecisionOutcome::Exceeded => Verdict::Exceeded {
            retry_after: d.retry_after().unwrap_or(Duration::from_secs(1)),
            limit,
        },
        DecisionOutcome::WeightExceedsLimit => Verdict::TooHeavy { limit },
        _ => Verdict::Admitted {
            charge: (d.outcome == tollgate_quota::Outcome::Allowed)
                .then(|| Charge::of(&v.resolved.spec, d.counted())),
        },
    }
}

async fn remote_check(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&reqwest::header::HeaderValue>,
    id: &MeteringId,
    spec: &QuotaSpec,
    weight: u64,
) -> Verdict {
    let mut req = client.get(url);
    if let Some(key) = api_key {
        req = req.header("x-api-key", key.clone());
    }
    let resp = req
        .header("metering-id", id.as_str())
        .header("quota-limit", spec.limit.to_string())
        .header("quota-interval", spec.interval.to_string())
        .header("quota-timeunit", spec.unit.as_str())
        .header("message-weight", weight.to_string())
        .send()
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) if e.is_timeout() => {
            return Verdict::Unavailable { reason: format!("quota service timed out: {e}") };
        }
        // A refused certificate is not an outage: failing open on it would let whoever
        // answers with the wrong certificate wave items through unmetered. Held instead.
        Err(e) if let Some(reason) = crate::trust::certificate_refused(&e) => {
            return Verdict::Misconfigured { reason: format!("quota service: {reason}") };
        }
        Err(e) => {
            return Verdict::Unavailable {
                reason: format!("quota service: {}", crate::trust::describe(&e)),
            };
        }
    };
    let status = resp.status();
    if status.is_success() {
        return Verdict::Admitted { charge: None };
    }
    if status.as_u16() == 429 {
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|secs| Duration::from_secs(secs.min(MAX_RETRY_AFTER_SECS)));
        let body = resp.text().await.unwrap_or_default();
        // The limit in force is the service's (its policies may override ours).
        let limit = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["limit"].as_u64())
            .unwrap_or(spec.limit);
        return match retry_after {
            _ if body.contains("weight-exceeds-limit") => Verdict::TooHeavy { limit },
            Some(d) => Verdict::Exceeded { retry_after: d, limit },
            None => Verdict::Exceeded { retry_after: Duration::from_secs(1), limit },
        };
    }
    if status.is_client_error() && status.as_u16() != 408 {
        let body = resp.text().await.unwrap_or_default();
        let detail: String = body.chars().take(200).collect();
        return Verdict::Misconfigured {
            reason: format!("quota service refused the request with {status}: {}", detail.trim()),
        };
    }
    Verdict::Unavailable { reason: format!("quota service answered {status}") }
}
