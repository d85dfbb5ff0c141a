//! The gRPC face of `tollgate serve`: Envoy's rate limit service on `[server] grpc_listen`,
//! answered by `tollgate-rls` from the same store as `/v1/quota`, with specs completed by the
//! same live `[[policy]]` set (so a policy edit applies to both at once), the same client keys
//! required ([`ClientGate`]) and the same decision metrics. With TLS configured,
//! gRPC is served over TLS too ([`tls_incoming`]), with the listener's rotating certificate
//! offered as `h2`. Either way the listener's connections are capped and timed out as
//! `tollgate_rls::ConnLimits` describes, with `[server] grpc_max_connections` (fitted to the
//! open-file limit, see `crate::fd_limit`), `header_timeout_ms` and `grpc_idle_timeout_ms`.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use std::io;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tollgate_http::client::{API_KEY_HEADER, ClientKeys};
use tollgate_http::failed_logins::FailedLogins;
use tollgate_http::tls::TlsAcceptor;
use tollgate_policy::{Decider, DecisionOutcome, Transport};
use tollgate_quota::MeteringId;
use tollgate_rls::{ConnLimits, Gate, Guarded, RateLimiter, RuleSet, Slots};
use tollgate_server::metrics;
use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::config::ConfigFile;

/// The rule of `/v1/quota` for gRPC callers: once any `[[client]]` is configured, a call
/// needs a client key, as `x-api-key` metadata (the HTTP header's name) or as
/// `authorization: Bearer <key>`, and may use only the metering ids the client's `allow`
/// globs cover. A wrong key counts against its peer's address in the same [`FailedLogins`]
/// as HTTP's credentials, and a locked-out address is refused (`RESOURCE_EXHAUSTED`) on both
/// faces. Decisions are counted in the same metrics as HTTP's, `transport="grpc"`.
struct ClientGate {
    keys: ClientKeys,
    failures: Arc<FailedLogins>,
}

impl Gate for ClientGate {
    fn authenticate(
        &self,
        metadata: &MetadataMap,
        peer: Option<IpAddr>,
    ) -> Result<Option<usize>, Status> {
        if !self.keys.enabled() {
            return Ok(None);
        }
        let presented = match metadata.get(API_KEY_HEADER) {
            Some(key) => Some(key.as_bytes()),
            None => metadata
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim_start().split_once([' ', '\t']))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, key)| key.trim().as_bytes()),
        };
        let Some(presented) = presented else {
            return Err(Status::unauthenticated(
                "this service requires a client key: send it as x-api-key metadata or as \
                 authorization: Bearer <key>",
            ));
        };
        // As over HTTP: a call from an unknown address counts under the unspecified one.
        let ip = peer.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        if let Some(refused) = self.failures.locked(ip) {
            return Err(Status::resource_exhausted(self.failures.detail(ip, refused)));
        }
        match self.keys.find_key(presented) {
            Some(i) => Ok(Some(i)),
            None => {
                self.failures.failed(ip);
                Err(Status::unauthenticated("the client key sent is not a configured key"))
            }
        }
    }

    fn permit(&self, client: usize, id: &MeteringId) -> Result<(), Status> {
        match self.keys.client(client) {
            Some(c) if c.permits(id) => Ok(()),
            Some(c) => Err(Status::permission_denied(format!(
                "client {:?} may not use the metering id {id}",
                c.name()
            ))),
            None => Err(Status::permission_denied(format!("no client may use {id}"))),
        }
    }

    fn record(&self, outcome: DecisionOutcome) {
        metrics::decision_via(Transport::Grpc, outcome);
    }

    fn store_latency(&self, took: Duration) {
        metrics::store_latency(took);
    }
}

/// The running gRPC listener of `tollgate serve`.
pub struct Grpc(tokio::task::JoinHandle<()>);

impl Grpc {
    /// Waits until the listener has stopped (after its stop future completed and the calls
    /// in flight finished); an error only when the server's task panicked.
    pub async fn finished(self) -> anyhow::Result<()> {
        self.0.await.context("the gRPC server task")
    }
}

/// Starts Envoy's rate limit service when `[server] grpc_listen` is set (`None` otherwise):
/// the `[[rls]]` rules deciding through `decider` (the one decision path of `/v1/quota`),
/// `clients`' keys required (wrong ones counted in `failures`, HTTP's), over TLS when `tls` is given, within `limits` (connections,
/// handshake and idle timeouts); prints `grpc listening on ADDR` once bound and serves until
/// `stop` completes.
pub async fn start(
    file: &ConfigFile,
    limits: ConnLimits,
    decider: Decider,
    clients: ClientKeys,
    failures: Arc<FailedLogins>,
    tls: Option<&TlsAcceptor>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Grpc>> {
    let Some(addr) = file.server.grpc_listen else { return Ok(None) };
    let rules = file.rls_rules()?;
    let gate = ClientGate { keys: clients, failures };
    let (listener, limiter) = bind(addr, decider, rules, gate).await?;
    let bound = listener.local_addr().context("grpc listener address")?;
    crate::output::announce(format_args!("grpc listening on {bound}"));
    let task = match tls {
        Some(tls) => {
            let incoming = tls_incoming(listener, tls, limits);
            tokio::spawn(tollgate_rls::serve_incoming(incoming, limiter, stop))
        }
        None => tokio::spawn(tollgate_rls::serve(listener, limits, limiter, stop)),
    };
    Ok(Some(Grpc(task)))
}

/// Binds `addr` for gRPC and builds the service; the caller serves it with
/// [`tollgate_rls::serve`].
async fn bind(
    addr: SocketAddr,
    decider: Decider,
    rules: RuleSet,
    gate: ClientGate,
) -> anyhow::Result<(TcpListener, RateLimiter)> {
    let listener =
        TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} (grpc)"))?;
    let limiter = RateLimiter::new(decider, rules).with_gate(Arc::new(gate));
    Ok((listener, limiter))
}

/// One gRPC connection over TLS.
pub struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// The gRPC listener's connections within `limits`, each after a TLS handshake with `tls`
/// (offering `h2`): a connection slot is taken before each accept (so handshakes in progress
/// count against `max_connections`), and the handshake, then the HTTP/2 preface, must be done
/// within `limits.handshake` of the accept (a silent client is dropped, as on the HTTP
/// listener). A failed handshake is logged at debug and costs nothing else.
pub fn tls_incoming(
    listener: TcpListener,
    tls: &TlsAcceptor,
    limits: ConnLimits,
) -> impl Stream<Item = Result<Guarded<TlsConn>, io::Error>> + Send + 'static {
    let tls = tls.with_alpn(vec![b"h2".to_vec()]);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let slots = Slots::new(&limits);
    tokio::spawn(async move {
        while !tx.is_closed() {
            let Some(slot) = slots.take().await else { break };
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors, say: wait instead of spinning.
                    tracing::warn!(error = %e, "grpc accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let accepted = tokio::time::Instant::now();
            // As on the plain listener: small answers go out at once, not after the peer's
            // delayed ACK (Nagle), which would add tens of milliseconds per call.
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "grpc: cannot set TCP_NODELAY");
            }
            let peer = tcp.peer_addr().ok().map(|a| a.ip());
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(limits.handshake, tls.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let conn = Guarded::new(TlsConn(stream), slot, accepted, &limits, peer);
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "grpc TLS handshake failed"),
                    Err(_) => tracing::debug!("grpc TLS handshake timed out"),
                }
            });
        }
    });
    tollgate_rls::Accepted::new(rx)
}
