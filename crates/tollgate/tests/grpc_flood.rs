//! Idle connections flooding the gRPC listener of the real `tollgate serve`, started under
//! `ulimit -n 256`: the gRPC listener holds only its share of the descriptors, so `/healthz`,
//! `/readyz` and the admin API keep answering on the HTTP listener; connections that never
//! send the HTTP/2 preface are closed after the handshake timeout, and gRPC then answers again;
//! a connection that sent the preface but makes no call is closed after the idle timeout.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{BIN, Server, wait_until};

/// Opens up to `n` TCP connections to `addr` that send nothing; those the kernel does not
/// complete within 200 ms (a full accept queue) are left out.
fn flood(addr: &str, n: usize) -> Vec<TcpStream> {
    let addr = addr.parse().unwrap();
    (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect()
}

/// True once the server has closed `c` (a read sees the end of the stream, or a reset).
fn closed(c: &mut TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    match c.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A gRPC health check over a new connection: true when it answers SERVING.
fn grpc_serving(addr: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let Ok(ch) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(2))
            .connect()
            .await
        else {
            return false;
        };
        let mut client = tonic_health::pb::health_client::HealthClient::new(ch);
        let asked = tonic_health::pb::HealthCheckRequest { service: String::new() };
        client.check(asked).await.is_ok_and(|r| r.into_inner().status == 1)
    })
}

#[test]
fn a_flood_of_idle_grpc_connections_leaves_health_and_admin_answering() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        "[server]\ngrpc_listen = \"127.0.0.1:0\"\nheader_timeout_ms = 1000\n\n\
         [[policy]]\nmatch = \"Flood:*\"\nlimit = 5\nunit = \"day\"\n",
    )
    .unwrap();
    let mut launcher = Command::new("sh");
    launcher.args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", BIN]);
    let s = Server::start_via(
        launcher,
        &["--store", "memory", "--config", file.to_str().unwrap()],
        &[],
    );
    let grpc = s.grpc_addr();
    assert!(grpc_serving(&grpc), "gRPC does not answer before the flood");

    let mut idle = flood(&grpc, 600);
    assert!(idle.len() > 300, "only {} connections were opened", idle.len());
    for path in ["/healthz", "/readyz", "/v1/policies"] {
        let answer = s.request("GET", path, &[], b"");
        assert_eq!(answer.status, 200, "{path} under a gRPC flood: {}", answer.text());
    }
    // Connections that never send the preface are closed (the cap's slots are freed a round
    // at a time, as the queued ones are accepted and time out in turn).
    wait_until("every idle gRPC connection closed", Duration::from_secs(60), || {
        idle.retain_mut(|c| !closed(c));
        idle.is_empty()
    });
    assert!(grpc_serving(&grpc), "gRPC does not answer after the flood");
    assert_eq!(s.request("GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn a_grpc_connection_with_no_call_is_closed_after_the_idle_timeout() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, "[server]\ngrpc_listen = \"127.0.0.1:0\"\ngrpc_idle_timeout_ms = 300\n")
        .unwrap();
    let s = Server::start(&["--store", "memory", "--config", file.to_str().unwrap()]);
    let grpc = s.grpc_addr();
    let mut c = TcpStream::connect(&grpc).unwrap();
    // The HTTP/2 preface and an empty SETTINGS frame: a client that connected and then made
    // no call.
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue, // the server's SETTINGS and its acknowledgement of ours
            Err(e) => {
                let kept = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                assert!(!kept, "an idle gRPC connection was kept open for 10 s");
                break; // reset: closed too
            }
        }
    }
    assert!(grpc_serving(&grpc), "gRPC does not answer a new connection");
}
