//! The gRPC face of `tollgate serve`: Envoy's rate limit service on `[server] grpc_listen`,
//! answered by `tollgate-rls` from the same store as `/v1/quota`, with specs completed by the
//! same live `[[policy]]` set (so a policy edit applies to both at once).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tollgate_quota::store::OnStoreUnavailable;
use tollgate_quota::{AnyStore, MeteringId};
use tollgate_rls::{Asked, RateLimiter, ResolvedSpec, RuleSet, SpecSource};
use tollgate_server::config::PolicyMode;
use tollgate_server::headers::QuotaRequest;
use tollgate_server::policy::Policies;

/// Completes a rule's spec as `/v1/quota` completes one from its headers: the rule's values
/// play the headers' part, the first `[[policy]]` matching the id fills the gaps (or wins,
/// with `override`).
struct PolicySpecs(Arc<Policies>);

impl SpecSource for PolicySpecs {
    fn resolve(&self, id: &MeteringId, asked: &Asked) -> Result<ResolvedSpec, String> {
        let req = QuotaRequest {
            id: id.clone(),
            limit: asked.limit,
            interval: asked.interval,
            unit: asked.unit,
            window: asked.window,
            start: None,
            weight: 1,
        };
        let resolved = self.0.current().resolve(&req).map_err(|p| {
            let body = p.body();
            body["detail"].as_str().unwrap_or("no spec for this id").to_owned()
        })?;
        Ok(ResolvedSpec { spec: resolved.spec, shadow: resolved.mode == PolicyMode::Shadow })
    }
}

/// Binds `addr` for gRPC and builds the service; the caller serves it with
/// [`tollgate_rls::serve`].
pub async fn bind(
    addr: SocketAddr,
    store: Arc<AnyStore>,
    rules: RuleSet,
    policies: Arc<Policies>,
    on_store_unavailable: OnStoreUnavailable,
) -> anyhow::Result<(TcpListener, RateLimiter)> {
    let listener =
        TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} (grpc)"))?;
    let limiter =
        RateLimiter::new(store, rules, Arc::new(PolicySpecs(policies)), on_store_unavailable);
    Ok((listener, limiter))
}
