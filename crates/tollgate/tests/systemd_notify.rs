//! `Type=notify` readiness of the real `tollgate serve`: with `$NOTIFY_SOCKET` naming a unix
//! datagram socket (a path, or an `@abstract` name), `READY=1` arrives once the listener is
//! bound (a connection right after it succeeds), and `STOPPING=1` on SIGTERM. Without the
//! variable nothing is sent and the server runs as before.

#![cfg(unix)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::{Server, free_port};

fn recv(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("no notification within 20 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn ready_then_stopping(socket: &UnixDatagram, notify_socket: &str) {
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start_with_env(
        &["--listen", &addr, "--store", "memory", "--data", data.to_str().unwrap()],
        &[("NOTIFY_SOCKET", notify_socket)],
    );
    let msg = recv(socket);
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    // Ready means bound: a connection now is accepted and answered.
    assert!(s.get("/healthz").starts_with("HTTP/1.1 200"));
    assert_eq!(s.sigterm().code(), Some(0));
    let msg = recv(socket);
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg:?}");
}

#[test]
fn ready_after_the_bind_and_stopping_on_sigterm_through_a_socket_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    ready_then_stopping(&socket, path.to_str().unwrap());
}

#[cfg(target_os = "linux")]
#[test]
fn ready_through_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("tollgate-notify-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&addr).unwrap();
    ready_then_stopping(&socket, &format!("@{name}"));
}

#[test]
fn a_notify_socket_nobody_reads_is_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nobody-listens.sock");
    let s = Server::start_with_env(
        &["--store", "memory"],
        &[("NOTIFY_SOCKET", missing.to_str().unwrap())],
    );
    assert!(s.get("/healthz").starts_with("HTTP/1.1 200"), "serves although nobody got READY=1");
}
