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

use std::net::IpAddr;
use std::sync::Arc;

use tollgate_policy::{DecideError, Decider, DecisionOutcome, PolicyMode, Transport};
use tollgate_quota::MeteringId;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::answer::{Answer, Checked};
use crate::conn::ConnActivity;
use crate::gate::{Gate, Open};
use crate::rls::rate_limit_service_server::RateLimitService;
use crate::rls::{RateLimitRequest, RateLimitResponse};
use crate::rules::RuleSet;

/// The rate limit service: rules, the one decision path, and the gate.
#[derive(Clone)]
pub struct RateLimiter {
    decider: Decider,
    rules: Arc<RuleSet>,
    gate: Arc<dyn Gate>,
}

impl RateLimiter {
    /// A service mapping descriptors with `rules` and deciding through `decider` (the same
    /// store, policies and `store_unavailable` as `GET /v1/quota`).
    pub fn new(decider: Decider, rules: RuleSet) -> Self {
        Self { decider, rules: Arc::new(rules), gate: Arc::new(Open) }
    }

    /// This service, checking callers and recording outcomes through `gate`.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = gate;
        self
    }

    /// Decides a call from `peer`: its caller through the gate, then the request.
    pub async fn call(
        &self,
        metadata: &MetadataMap,
        peer: Option<IpAddr>,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let client = self.gate.authenticate(metadata, peer).inspect_err(|_| {
            self.gate.record(DecisionOutcome::Unauthorized);
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
        let refused = |outcome: DecisionOutcome| {
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
                .map_err(refused(DecisionOutcome::BadRequest))?;
            planned.push(match found {
                None => None,
                Some((rule, id)) => {
                    if let Some(client) = client {
                        self.gate
                            .permit(client, &id)
                            .map_err(refused(DecisionOutcome::Forbidden))?;
                    }
                    let resolved = self
                        .decider
                        .resolve(&id, &rule.asked, Transport::Grpc)
                        .map_err(|e| {
                            Status::failed_precondition(format!(
                                "descriptors[{i}] (domain {:?}, metering id {id}): {e}",
                                req.domain
                            ))
                        })
                        .map_err(refused(DecisionOutcome::BadRequest))?;
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
            match self.decider.check(&id, resolved, weight, Transport::Grpc).await {
                Ok(verdict) => {
                    self.gate.store_latency(verdict.store_latency);
                    self.gate.record(verdict.outcome());
                    let shadow = verdict.resolved.mode == PolicyMode::Shadow;
                    answer.push(match verdict.decision {
                        Some(decision) => Checked::Decided {
                            id,
                            decision: Box::new(decision),
                            spec: verdict.resolved.spec,
                            shadow,
                        },
                        None => Checked::StoreUnavailable,
                    });
                }
                Err(e) => {
                    if let DecideError::StoreUnavailable { store_latency, .. } = &e {
                        self.gate.store_latency(*store_latency);
                    }
                    self.gate.record(e.outcome());
                    return Err(Status::unavailable(unavailable(&id, &e)));
                }
            }
        }
        Ok(answer.into_response())
    }
}

/// The `UNAVAILABLE` message: the id and what the store said.
fn unavailable(id: &MeteringId, e: &DecideError) -> String {
    match e {
        DecideError::StoreUnavailable { error, .. } => {
            format!("the counter store could not decide for {id}: {error}")
        }
        DecideError::Resolve(r) => format!("no spec for {id}: {r}"),
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let peer = request.extensions().get::<ConnActivity>().and_then(ConnActivity::peer);
        self.call(request.metadata(), peer, request.get_ref()).await.map(Response::new)
    }
}
