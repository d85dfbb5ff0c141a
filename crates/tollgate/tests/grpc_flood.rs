//! Idle connections flooding the gRPC listener of the real `tollgate serve`, started under
//! `ulimit -n 256`: the gRPC listener holds only its share of the descriptors, so `/healthz`,
//! `/readyz` and the admin API keep answering on the HTTP listener; connections that never
//! send the HTTP/2 preface are closed after the handshake timeout, and gRPC then answers again;
//! a connection that sent the preface but makes no call is closed after the idle timeout; a
//! client that makes calls and reads none of the answers (nor the pings) is dropped by the
//! keepalive.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

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
    c.write_all(&h2_hello()).unwrap();
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

/// What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
fn h2_hello() -> Vec<u8> {
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(h2_frame(0x4, 0, 0, &[]));
    hello
}

/// One HTTP/2 frame: 24-bit length, type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// `ShouldRateLimit` calls on streams 1, 3, 5…, headers as HPACK literals (no table, no
/// Huffman), each with a one-descriptor request in one DATA frame that ends the stream.
fn should_rate_limit_calls(n: u32) -> Vec<u8> {
    let literal = |name: &str, value: &str| {
        let mut b = vec![0x00, u8::try_from(name.len()).unwrap()];
        b.extend(name.as_bytes());
        b.push(u8::try_from(value.len()).unwrap());
        b.extend(value.as_bytes());
        b
    };
    let headers: Vec<u8> = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
        (":authority", "tollgate"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .flat_map(|(n, v)| literal(n, v))
    .collect();
    // RateLimitRequest { domain: "edi", descriptors: [{ entries: [{ key: "metering_id",
    // value: "Deaf:X" }] }] }, in a gRPC message frame.
    let entry = [&[0x0a, 11][..], b"metering_id", &[0x12, 6], b"Deaf:X"].concat();
    let descriptor = [&[0x0a, u8::try_from(entry.len()).unwrap()][..], &entry].concat();
    let request =
        [&[0x0a, 3][..], b"edi", &[0x12, u8::try_from(descriptor.len()).unwrap()], &descriptor]
            .concat();
    let mut message = vec![0];
    message.extend(u32::try_from(request.len()).unwrap().to_be_bytes());
    message.extend(&request);
    (0..n)
        .flat_map(|i| {
            let stream = 2 * i + 1;
            let mut call = h2_frame(0x1, 0x4, stream, &headers); // HEADERS, END_HEADERS
            call.extend(h2_frame(0x0, 0x1, stream, &message)); // DATA, END_STREAM
            call
        })
        .collect()
}

#[test]
fn a_grpc_client_that_reads_none_of_its_answers_is_dropped_by_the_keepalive() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    // One connection at a time, and an idle timeout far beyond the test: only the keepalive
    // (a ping every 30 s, dropped when unanswered for 30 s) can free the slot.
    std::fs::write(
        &file,
        "[server]\ngrpc_listen = \"127.0.0.1:0\"\ngrpc_max_connections = 1\n\
         grpc_idle_timeout_ms = 600000\n\n\
         [[policy]]\nmatch = \"Deaf:*\"\nlimit = 1000000000\nunit = \"day\"\n",
    )
    .unwrap();
    let s = Server::start(&["--store", "memory", "--config", file.to_str().unwrap()]);
    let grpc = s.grpc_addr();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build();
    let rt = rt.unwrap();
    // The preface, an empty SETTINGS frame, then 1,000 calls: within the server's 1,024
    // concurrent streams and the 64 KiB the connection may send before a window update it
    // never reads. With a 4 KiB receive buffer the answers soon fill the socket and the
    // server's writes wait; the writer task waits too once the server stops reading.
    let unread = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = socket.connect(grpc.parse().unwrap()).await.unwrap();
        let (unread, mut write) = stream.into_split();
        let mut bytes = h2_hello();
        bytes.extend(should_rate_limit_calls(1000));
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = write.write_all(&bytes).await;
            // Keep the writing half open: the client stays connected, silent.
            std::future::pending::<()>().await;
        });
        unread
    });
    let held = Instant::now();
    assert!(!grpc_serving(&grpc), "a second client was served while the deaf one held the slot");
    wait_until("the deaf client's slot to come free", Duration::from_secs(120), || {
        grpc_serving(&grpc)
    });
    let waited = held.elapsed();
    // Not the idle timeout (10 min), and not a bound that never comes.
    assert!(waited < Duration::from_secs(90), "slot freed after {waited:?}");
    drop(unread);
    rt.shutdown_background();
}
