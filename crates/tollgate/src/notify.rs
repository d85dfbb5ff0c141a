//! systemd readiness (`Type=notify`): `READY=1` once the listener is bound and requests can be
//! served, `STATUS=` while a standby waits for the data directory, `STOPPING=1` when a
//! graceful stop begins.
//!
//! The protocol is one datagram to the unix socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name written `@name`). Without the variable nothing is sent; a send that fails is
//! logged and ignored (the service manager then times the start out, which says more than a
//! failed start would).

/// Tells the service manager the service is ready (call after the listener is bound).
pub fn ready() {
    send("READY=1\nSTATUS=serving");
}

/// Tells the service manager what the service is doing before it is ready (a standby waiting
/// for the data directory, say); one line, shown by `systemctl status`.
pub fn status(text: &str) {
    send(&format!("STATUS={}", text.replace('\n', " ")));
}

/// Tells the service manager a graceful stop has begun.
pub fn stopping() {
    send("STOPPING=1");
}

fn send(message: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    if let Err(e) = send_to(&target, message) {
        tracing::warn!(socket = ?target, error = %e, "cannot notify the service manager");
    }
}

#[cfg(unix)]
fn send_to(target: &std::ffi::OsStr, message: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::UnixDatagram;

    let socket = UnixDatagram::unbound()?;
    let bytes = target.as_bytes();
    match bytes.split_first() {
        #[cfg(target_os = "linux")]
        Some((b'@', name)) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(message.as_bytes(), &addr)?;
        }
        Some((b'/', _)) => {
            socket.send_to(message.as_bytes(), std::path::Path::new(target))?;
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "NOTIFY_SOCKET is neither an absolute path nor an @abstract name",
            ));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn send_to(_target: &std::ffi::OsStr, _message: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no unix sockets here"))
}
