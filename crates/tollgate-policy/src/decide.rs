//! The one decision path: what a caller asked, completed by the policies in force, checked
//! on the store, with `store_unavailable` applied. The HTTP header API, Envoy's RLS and the
//! gateway's embedded metering (so the simulator too) all decide through [`Decider::decide`];
//! each face only maps the [`Verdict`] or [`DecideError`] at its edge.
//!
//! Invariant: the store is called only once the spec is resolved, so a refused request
//! counts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_quota::store::OnStoreUnavailable;
use tollgate_quota::{AnyStore, Decision, MeteringId, Outcome, Store, StoreError};

use crate::rule::PolicyMode;
use crate::set::{Asked, LimitSource, PolicyHandle, ResolveError, Resolved};

/// How a decision was asked for (the `transport` label of `tollgate_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `GET /v1/quota`.
    Http,
    /// Envoy's rate limit service.
    Grpc,
    /// The gateway's embedded metering.
    Gateway,
}

impl Transport {
    /// Every transport, in label order.
    pub const ALL: [Self; 3] = [Self::Http, Self::Grpc, Self::Gateway];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Grpc => "grpc",
            Self::Gateway => "gateway",
        }
    }

    /// Whose the asked values are: a request's, or (for the gateway) a route's.
    fn asker(self) -> LimitSource {
        match self {
            Self::Http | Self::Grpc => LimitSource::Request,
            Self::Gateway => LimitSource::Route,
        }
    }
}

/// Why a decision was answered the way it was (the `outcome` label): one enum for every face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOutcome {
    /// Go on.
    Allowed,
    /// Over the limit: hold and retry later.
    Exceeded,
    /// The weight is larger than the limit: never admissible.
    WeightExceedsLimit,
    /// A shadow policy would have refused; let through.
    ShadowWouldReject,
    /// The request was invalid (nothing counted).
    BadRequest,
    /// The caller's credentials were missing or wrong.
    Unauthorized,
    /// The caller may not use this metering id.
    Forbidden,
    /// The store could not decide; answered per `store_unavailable`.
    StoreError,
}

impl DecisionOutcome {
    /// Every outcome, in label order.
    pub const ALL: [Self; 8] = [
        Self::Allowed,
        Self::Exceeded,
        Self::WeightExceedsLimit,
        Self::ShadowWouldReject,
        Self::BadRequest,
        Self::Unauthorized,
        Self::Forbidden,
        Self::StoreError,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Exceeded => "exceeded",
            Self::WeightExceedsLimit => "weight_exceeds_limit",
            Self::ShadowWouldReject => "shadow_would_reject",
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::StoreError => "store_error",
        }
    }
}

/// A decided request: the spec in force and what the store said.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The spec checked, and where its limit came from.
    pub resolved: Resolved,
    /// The store's decision; `None` when it could not decide and `store_unavailable =
    /// "allow"` let the request through.
    pub decision: Option<Decision>,
    /// How long the store took (`None` when it was not asked).
    pub store_latency: Duration,
}

impl Verdict {
    /// The outcome to answer and record: a shadow policy turns a refusal into
    /// [`DecisionOutcome::ShadowWouldReject`].
    pub fn outcome(&self) -> DecisionOutcome {
        let Some(d) = &self.decision else { return DecisionOutcome::StoreError };
        match d.outcome {
            Outcome::Allowed => DecisionOutcome::Allowed,
            _ if self.resolved.mode == PolicyMode::Shadow => DecisionOutcome::ShadowWouldReject,
            Outcome::Exceeded => DecisionOutcome::Exceeded,
            Outcome::WeightExceedsLimit => DecisionOutcome::WeightExceedsLimit,
        }
    }

    /// True when the caller should go on: allowed, a shadow refusal, or an undecided request
    /// that `store_unavailable = "allow"` lets through.
    pub fn go_on(&self) -> bool {
        matches!(
            self.outcome(),
            DecisionOutcome::Allowed
                | DecisionOutcome::ShadowWouldReject
                | DecisionOutcome::StoreError
        )
    }
}

/// Why nothing was decided.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// What was asked makes no spec (nothing counted).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The store failed and `store_unavailable` is `deny` or `local`.
    #[error("the counter store could not decide for {id}: {error}")]
    StoreUnavailable {
        /// The metering id.
        id: MeteringId,
        /// What the store said.
        error: StoreError,
        /// How long the store took to fail.
        store_latency: Duration,
    },
}

impl DecideError {
    /// The outcome to record.
    pub fn outcome(&self) -> DecisionOutcome {
        match self {
            Self::Resolve(_) => DecisionOutcome::BadRequest,
            Self::StoreUnavailable { .. } => DecisionOutcome::StoreError,
        }
    }
}

/// Decides on the store with the policies in force; cheap to clone, shared by every face.
#[derive(Clone)]
pub struct Decider {
    store: Arc<AnyStore>,
    policies: PolicyHandle,
    on_unavailable: OnStoreUnavailable,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider").field("on_unavailable", &self.on_unavailable).finish()
    }
}

impl Decider {
    /// Decides on `store` with `policies`, applying `on_unavailable` when the store fails.
    pub fn new(
        store: Arc<AnyStore>,
        policies: PolicyHandle,
        on_unavailable: OnStoreUnavailable,
    ) -> Self {
        Self { store, policies, on_unavailable }
    }

    /// Decides on `store` with no policies (each caller's spec as asked), refusing when the
    /// store fails: for tools and tests that run one face alone.
    pub fn without_policies(store: Arc<AnyStore>) -> Self {
        Self::new(store, PolicyHandle::default(), OnStoreUnavailable::Deny)
    }

    /// The store decisions are made on.
    pub fn store(&self) -> &Arc<AnyStore> {
        &self.store
    }

    /// The policies in force.
    pub fn policies(&self) -> &PolicyHandle {
        &self.policies
    }

    /// The spec `id` is checked against when `transport` asks `asked`, without counting.
    pub fn resolve(
        &self,
        id: &MeteringId,
        asked: &Asked,
        transport: Transport,
    ) -> Result<Resolved, ResolveError> {
        self.policies.current().resolve(id, asked, transport.asker())
    }

    /// Resolves the spec, counts `weight` units for `id` on the store, and applies
    /// `store_unavailable` when the store fails (see the module docs).
    pub async fn decide(
        &self,
        id: &MeteringId,
        asked: &Asked,
        weight: u64,
        transport: Transport,
    ) -> Result<Verdict, DecideError> {
        let resolved = self.resolve(id, asked, transport)?;
        self.check(id, resolved, weight, transport).await
    }

    /// Counts `weight` units for `id` against a spec resolved before (a face that must
    /// resolve several ids before counting any, as Envoy's RLS does), applying
    /// `store_unavailable` when the store fails.
    pub async fn check(
        &self,
        id: &MeteringId,
        resolved: Resolved,
        weight: u64,
        transport: Transport,
    ) -> Result<Verdict, DecideError> {
        let started = Instant::now();
        let result = self.store.check(id, &resolved.spec, weight).await;
        let store_latency = started.elapsed();
        match result {
            Ok(d) => Ok(Verdict { resolved, decision: Some(d), store_latency }),
            Err(error) => {
                tracing::warn!(identifier = %id, %error, mode = ?self.on_unavailable, transport = transport.label(), "store could not decide");
                match self.on_unavailable {
                    OnStoreUnavailable::Allow => {
                        Ok(Verdict { resolved, decision: None, store_latency })
                    }
                    OnStoreUnavailable::Deny | OnStoreUnavailable::Local => {
                        Err(DecideError::StoreUnavailable { id: id.clone(), error, store_latency })
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::PolicySet;
    use tollgate_quota::store::MemoryStore;
    use tollgate_quota::{CounterListing, QuotaSpec, TimeUnit};

    fn decider(policies: &str) -> Decider {
        #[derive(serde::Deserialize)]
        struct File {
            policy: Vec<crate::PolicyRule>,
        }
        let set = PolicySet::new(toml::from_str::<File>(policies).unwrap().policy);
        let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
        Decider::new(store, PolicyHandle::new(set), OnStoreUnavailable::Deny)
    }

    #[tokio::test]
    async fn a_route_is_held_to_an_override_policy() {
        let d = decider("[[policy]]\nmatch = \"S:*\"\nlimit = 1\noverride = true\n");
        let id = MeteringId::new("S:RR").unwrap();
        let asked = Asked::spec(&QuotaSpec::new(1000, 1, TimeUnit::Hour).unwrap());
        let first = d.decide(&id, &asked, 1, Transport::Gateway).await.unwrap();
        assert_eq!(first.outcome(), DecisionOutcome::Allowed);
        assert_eq!(first.resolved.source, LimitSource::Policy);
        let second = d.decide(&id, &asked, 1, Transport::Gateway).await.unwrap();
        assert_eq!(second.outcome(), DecisionOutcome::Exceeded);
        assert!(!second.go_on());
    }

    #[tokio::test]
    async fn a_shadow_refusal_goes_on_and_a_bad_request_counts_nothing() {
        let d =
            decider("[[policy]]\nmatch = \"*\"\nlimit = 0\nunit = \"hour\"\nmode = \"shadow\"\n");
        let id = MeteringId::new("x").unwrap();
        let v = d.decide(&id, &Asked::default(), 1, Transport::Http).await.unwrap();
        assert_eq!(v.outcome(), DecisionOutcome::ShadowWouldReject);
        assert!(v.go_on());
        let d = decider("[[policy]]\nmatch = \"nothing\"\nlimit = 1\n");
        let e = d.decide(&id, &Asked::default(), 1, Transport::Http).await.unwrap_err();
        assert_eq!(e.outcome(), DecisionOutcome::BadRequest);
        assert!(
            d.store().counters(&CounterListing::all("")).await.unwrap().counters.is_empty(),
            "nothing counted"
        );
    }
}
