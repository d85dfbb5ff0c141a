//! [`Gate`]: what the embedding server adds around each `ShouldRateLimit` call, the same rules
//! and records as for `GET /v1/quota`: who may call (client keys), which metering ids a caller
//! may use, and the decision metrics. This crate knows no HTTP; the binary implements it.

use std::net::IpAddr;
use std::time::Duration;

use tollgate_policy::DecisionOutcome;
use tollgate_quota::MeteringId;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The checks and records around a call; see the module docs.
pub trait Gate: Send + Sync + 'static {
    /// The caller, from the call's metadata and the connection's `peer` address: `Ok(None)`
    /// when any caller may use any id, `Ok(Some(n))` for the gate's client `n`,
    /// `UNAUTHENTICATED` otherwise (or `RESOURCE_EXHAUSTED` for a peer sending wrong
    /// credentials too often). Runs first.
    fn authenticate(
        &self,
        metadata: &MetadataMap,
        peer: Option<IpAddr>,
    ) -> Result<Option<usize>, Status>;
    /// `PERMISSION_DENIED` when client `n` may not use `id`. Runs for every mapped id before
    /// any is counted.
    fn permit(&self, client: usize, id: &MeteringId) -> Result<(), Status>;
    /// Counts one call refused, or one descriptor decided.
    fn record(&self, outcome: DecisionOutcome);
    /// Records how long the store took for one descriptor.
    fn store_latency(&self, took: Duration);
}

/// A [`Gate`] that lets every caller in and records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Open;

impl Gate for Open {
    fn authenticate(&self, _: &MetadataMap, _: Option<IpAddr>) -> Result<Option<usize>, Status> {
        Ok(None)
    }
    fn permit(&self, _: usize, _: &MeteringId) -> Result<(), Status> {
        Ok(())
    }
    fn record(&self, _: DecisionOutcome) {}
    fn store_latency(&self, _: Duration) {}
}
