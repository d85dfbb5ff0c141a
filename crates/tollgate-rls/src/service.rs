//! [`RateLimiter`]: `ShouldRateLimit`, from a request's descriptors to quota decisions.
//!
//! Each descriptor that matches a rule becomes a metering id, a spec and a weight (its own
//! `hits_addend`, else the request's, else 1); one that matches none is OK without a limit,
//! as in envoy ratelimit. Every descriptor is decided on its own counter, in order; one over
//! its limit makes the overall code OVER_LIMIT (a descriptor allowed before it stays counted,
//! as in envoy ratelimit). The store is the one `GET /v1/quota` uses, so an id counted over
//! gRPC and over HTTP shares one counter.
//!
//! Invariant: nothing is counted for a request that is refused (`INVALID_ARGUMENT`,
//! `FAILED_PRECONDITION`): every descriptor is mapped and its spec resolved before the store
//! is called for any of them.
//!
//! The [`Gate`] sees the call first: a caller it refuses (`UNAUTHENTICATED`), or an id a
//! caller may not use (`PERMISSION_DENIED`), counts nothing either. It records one outcome per
//! refused call and per decided descriptor, as `/v1/quota` does per answer.
//!
//! A store failure follows `store_unavailable` as over HTTP: `allow` answers OK without a
//! limit (and `tollgate-degraded: store-unavailable`); `deny` and `local` (whose local
//! fallback failed too) answer gRPC `UNAVAILABLE`.

use std::sync::Arc;
use std::time::Instant;

use tollgate_quota::store::OnStoreUnavailable;
use tollgate_quota::{AnyStore, MeteringId, Outcome, QuotaSpec, Store, WindowKind};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::answer::{Answer, Checked};
use crate::gate::{Gate, Open, Outcome as GateOutcome};
use crate::rls::rate_limit_service_server::RateLimitService;
use crate::rls::{RateLimitRequest, RateLimitResponse};
use crate::rules::{Asked, RuleSet};

/// The spec a metering id is checked against, after the policies had their say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSpec {
    /// The quota to check.
    pub spec: QuotaSpec,
    /// A shadow policy matched: over-limit answers become OK (with `tollgate-shadow`).
    pub shadow: bool,
}

/// Completes what a rule asks for into a spec, as the HTTP service does with its headers:
/// the binary plugs the live `[[policy]]` set in here, so this crate needs no HTTP crate.
pub trait SpecSource: Send + Sync + 'static {
    /// The spec for `id`, or why there is none (e.g. no limit from the rule nor a policy).
    fn resolve(&self, id: &MeteringId, asked: &Asked) -> Result<ResolvedSpec, String>;
}

/// A [`SpecSource`] without policies: the rule must give `limit` and `unit`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesOnly;

impl SpecSource for RulesOnly {
    fn resolve(&self, id: &MeteringId, asked: &Asked) -> Result<ResolvedSpec, String> {
        let limit = asked.limit.ok_or_else(|| format!("no limit for {id}: the rule has none"))?;
        let unit = asked.unit.ok_or_else(|| format!("no unit for {id}: the rule has none"))?;
        let spec = QuotaSpec {
            limit,
            interval: asked.interval.unwrap_or(1),
            unit,
            window: asked.window.unwrap_or(WindowKind::Calendar),
            start: None,
        }
        .validated()
        .map_err(|e| e.to_string())?;
        Ok(ResolvedSpec { spec, shadow: false })
    }
}

/// The rate limit service: rules, specs, the shared store and the gate.
#[derive(Clone)]
pub struct RateLimiter {
    store: Arc<AnyStore>,
    rules: Arc<RuleSet>,
    specs: Arc<dyn SpecSource>,
    on_store_unavailable: OnStoreUnavailable,
    gate: Arc<dyn Gate>,
}

impl RateLimiter {
    /// A service deciding on `store` with `rules`, completing specs through `specs`.
    pub fn new(
        store: Arc<AnyStore>,
        rules: RuleSet,
        specs: Arc<dyn SpecSource>,
        on_store_unavailable: OnStoreUnavailable,
    ) -> Self {
        Self { store, rules: Arc::new(rules), specs, on_store_unavailable, gate: Arc::new(Open) }
    }

    /// This service, checking callers and recording outcomes through `gate`.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = gate;
        self
    }

    /// Decides a call: its caller through the gate, then the request.
    pub async fn call(
        &self,
        metadata: &MetadataMap,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let client = self.gate.authenticate(metadata).inspect_err(|_| {
            self.gate.record(GateOutcome::Unauthorized);
        })?;
        self.decide_for(client, req).await
    }

    /// Decides a request from a caller that may use every id (see the module docs).
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        self.decide_for(None, req).await
    }

    async fn decide_for(
        &self,
        client: Option<usize>,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let refused = |outcome: GateOutcome| {
            let gate = &self.gate;
            move |status: Status| {
                gate.record(outcome);
                status
            }
        };
        let request_weight = if req.hits_addend == 0 { 1 } else { u64::from(req.hits_addend) };
        // First map every descriptor, so that a refused request counts nothing.
        let mut planned = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            let found = self
                .rules
                .find(&req.domain, d)
                .map_err(|e| {
                    Status::invalid_argument(format!(
                        "descriptors[{i}] (domain {:?}): {e}",
                        req.domain
                    ))
                })
                .map_err(refused(GateOutcome::BadRequest))?;
            planned.push(match found {
                None => None,
                Some((rule, id)) => {
                    if let Some(client) = client {
                        self.gate.permit(client, &id).map_err(refused(GateOutcome::Forbidden))?;
                    }
                    let resolved = self
                        .specs
                        .resolve(&id, &rule.asked)
                        .map_err(|e| {
                            Status::failed_precondition(format!(
                                "descriptors[{i}] (domain {:?}, metering id {id}): {e}",
                                req.domain
                            ))
                        })
                        .map_err(refused(GateOutcome::BadRequest))?;
                    Some((id, resolved, d.hits_addend.unwrap_or(request_weight)))
                }
            });
        }
        let mut answer = Answer::with_capacity(planned.len());
        for plan in planned {
            let Some((id, resolved, weight)) = plan else {
                answer.push(Checked::Unlimited);
                continue;
            };
            let started = Instant::now();
            let result = self.store.check(&id, &resolved.spec, weight).await;
            self.gate.store_latency(started.elapsed());
            match result {
                Ok(decision) => {
                    self.gate.record(match decision.outcome {
                        _ if decision.outcome != Outcome::Allowed && resolved.shadow => {
                            GateOutcome::ShadowWouldReject
                        }
                        Outcome::Allowed => GateOutcome::Allowed,
                        Outcome::Exceeded => GateOutcome::Exceeded,
                        Outcome::WeightExceedsLimit => GateOutcome::WeightExceedsLimit,
                    });
                    answer.push(Checked::Decided {
                        decision: Box::new(decision),
                        spec: resolved.spec,
                        shadow: resolved.shadow,
                    });
                }
                Err(e) => {
                    self.gate.record(GateOutcome::StoreError);
                    tracing::warn!(identifier = %id, error = %e, mode = ?self.on_store_unavailable,
                        "store could not decide (rls)");
                    match self.on_store_unavailable {
                        OnStoreUnavailable::Allow => answer.push(Checked::StoreUnavailable),
                        OnStoreUnavailable::Deny | OnStoreUnavailable::Local => {
                            return Err(Status::unavailable(format!(
                                "the counter store could not decide for {id}: {e}"
                            )));
                        }
                    }
                }
            }
        }
        Ok(answer.into_response())
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.call(request.metadata(), request.get_ref()).await.map(Response::new)
    }
}
