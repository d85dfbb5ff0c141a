//! Envoy's rate limit service from the outside: a `tollgate serve` with a gRPC listener, and
//! the generated client's requests and calls that the RLS tests share.

use std::path::Path;

use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_rls::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::rls::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

use super::{Server, free_port};

/// `tollgate serve --store STORE` with `rest` as its config plus a `grpc_listen`; the gRPC
/// address too.
pub fn serve(dir: &Path, store: &str, rest: &str) -> (Server, String) {
    let file = dir.join(format!("rls-{}.toml", free_port()));
    std::fs::write(&file, format!("[server]\ngrpc_listen = \"127.0.0.1:0\"\n{rest}")).unwrap();
    let data = dir.join("data");
    let server = Server::start(&[
        "--store",
        store,
        "--data",
        data.to_str().unwrap(),
        "--config",
        file.to_str().unwrap(),
    ]);
    let grpc = server.grpc_addr();
    (server, grpc)
}

/// A two-worker runtime for the gRPC client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A client connected to the gRPC listener at `grpc` (`host:port`).
pub async fn client(grpc: &str) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{grpc}")).await.unwrap()
}

/// A descriptor of `(key, value)` entries, with its own `hits_addend` when given.
pub fn descriptor(pairs: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() })
            .collect(),
        hits_addend: hits,
    }
}

/// A `ShouldRateLimit` request in `domain`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest { domain: domain.into(), descriptors, hits_addend: hits }
}

/// `ShouldRateLimit`, which must answer.
pub async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    c.should_rate_limit(r).await.unwrap().into_inner()
}
