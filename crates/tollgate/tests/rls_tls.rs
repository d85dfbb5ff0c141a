//! Envoy's rate limit service over TLS: with `tls_cert` and `tls_key`, `tollgate serve` speaks
//! gRPC over TLS (ALPN `h2`) on `grpc_listen` with the listener's certificate; a client that
//! trusts the CA is answered, a plaintext client is not.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_rls::rls::RateLimitRequest;
use tollgate_rls::rls::rate_limit_response::Code;
use tollgate_rls::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::tls::TestCa;
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel to `addr` over TLS, trusting only `ca`, offering `h2`.
async fn tls_channel(addr: String, ca: &TestCa) -> Result<Channel, tonic::transport::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls_pki_types::pem::PemObject::from_pem_slice(ca.cert.as_bytes()).unwrap();
    roots.add(der).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let (connector, addr) = (connector.clone(), addr.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").unwrap();
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
}

fn ask(id: &str) -> RateLimitRequest {
    let entries = vec![Entry { key: "partner".into(), value: id.into() }];
    RateLimitRequest {
        domain: "edi".into(),
        descriptors: vec![RateLimitDescriptor { entries, ..Default::default() }],
        hits_addend: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_is_served_over_tls_with_the_listeners_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Test CA");
    let (cert, key) = ca.server("tollgate-1").write(dir.path(), "server");
    let cfg = dir.path().join("t.toml");
    let rules = "[[rls.rule]]\ndomain = \"edi\"\ndescriptor = [\"partner\"]\n\
                 metering_id = \"partner:{partner}\"\nlimit = 1\nunit = \"hour\"\n";
    std::fs::write(&cfg, format!("[server]\ngrpc_listen = \"127.0.0.1:0\"\n{rules}")).unwrap();
    let server = tokio::task::spawn_blocking(move || {
        Server::start(&[
            "--store",
            "memory",
            "--config",
            cfg.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ])
    })
    .await
    .unwrap();
    let grpc = server.grpc_addr();

    let channel = tls_channel(grpc.clone(), &ca).await.expect("a TLS gRPC channel");
    let mut client = RateLimitServiceClient::new(channel);
    let first = client.should_rate_limit(ask("acme")).await.unwrap().into_inner();
    assert_eq!(first.overall_code, Code::Ok as i32);
    let second = client.should_rate_limit(ask("acme")).await.unwrap().into_inner();
    assert_eq!(second.overall_code, Code::OverLimit as i32, "one counter, limit 1");

    // A plaintext client gets no answer from the TLS listener.
    let plain = async {
        let mut c = RateLimitServiceClient::connect(format!("http://{grpc}")).await?;
        c.should_rate_limit(ask("acme")).await.map_err(|s| s.into())
    };
    let plain: Result<_, Box<dyn std::error::Error>> =
        tokio::time::timeout(Duration::from_secs(10), plain).await.expect("refused in time");
    assert!(plain.is_err(), "a plaintext gRPC call was answered");
    // Nor does a client that trusts another CA.
    assert!(tls_channel(grpc, &TestCa::new("Other CA")).await.is_err());
}
