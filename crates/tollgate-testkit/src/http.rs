//! Plain HTTP/1.1 for tests, on std alone: [`HttpStub`] is a peer that Tollgate talks to (a
//! remote quota service, a delivery target) on a free loopback port, answering each request
//! with a closure; [`send`] is a one-shot client for a server under test. Bodies are framed by
//! `Content-Length` only, which is what Tollgate and reqwest send.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One HTTP request or answer: the start line's parts, the headers (names lowercased) and the
/// body.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// The method of a request (empty in an answer).
    pub method: String,
    /// The target of a request (empty in an answer).
    pub path: String,
    /// The status of an answer (0 in a request).
    pub status: u16,
    /// Header names (lowercased) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Message {
    /// An answer with `status` and `body`.
    pub fn reply(status: u16, body: impl Into<Vec<u8>>) -> Message {
        Message { status, body: body.into(), ..Message::default() }
    }

    /// Adds a header.
    pub fn with(mut self, name: &str, value: &str) -> Message {
        self.headers.push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The answer a server sent as `raw` bytes (status line, headers, body), when it is one.
    pub fn answer_from(raw: &[u8]) -> Option<Message> {
        read_message(&mut std::io::Cursor::new(raw), false)
    }

    /// The header lines, `name: value` each (names lowercased), for assertions on the head.
    pub fn head(&self) -> String {
        self.headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect()
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; fails the test naming the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Reads one message from `r`: `None` at a clean end of stream.
fn read_message(r: &mut impl BufRead, request: bool) -> Option<Message> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.trim_end().splitn(3, ' ');
    let mut m = Message::default();
    if request {
        m.method = parts.next()?.to_owned();
        m.path = parts.next()?.to_owned();
    } else {
        parts.next()?;
        m.status = parts.next()?.parse().ok()?;
    }
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        m.headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let len: usize = m.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    m.body = vec![0; len];
    r.read_exact(&mut m.body).ok()?;
    Some(m)
}

fn write_message(w: &mut impl Write, start: &str, m: &Message) -> std::io::Result<()> {
    let mut head = format!("{start}\r\n");
    for (n, v) in &m.headers {
        if n != "content-length" {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", m.body.len()));
    w.write_all(head.as_bytes())?;
    w.write_all(&m.body)?;
    w.flush()
}

/// Sends one request to `addr` (`host:port`) on a new connection and reads the answer; a 30 s
/// read timeout keeps a stuck server from hanging the test. Panics when no answer comes.
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Message {
    try_send(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// [`send`], returning the error instead of failing the test (a refused connection, or a
/// connection closed before the answer).
pub fn try_send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Message> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = Message { body: body.to_vec(), ..Message::default() };
    req = req.with("host", addr).with("connection", "close");
    for (n, v) in headers {
        req = req.with(n, v);
    }
    write_message(&mut c, &format!("{method} {path} HTTP/1.1"), &req)?;
    read_message(&mut BufReader::new(c), false)
        .ok_or_else(|| std::io::Error::other("the connection closed before an answer"))
}

/// A peer HTTP server on a free loopback port: each connection on its own thread, each
/// request answered by the handler (which may sleep to play a slow peer). Stops accepting
/// when dropped.
pub struct HttpStub {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl HttpStub {
    /// Starts the stub; `handler` answers every request.
    pub fn start(handler: impl Fn(&Message) -> Message + Send + Sync + 'static) -> HttpStub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let flag = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let handler = handler.clone();
                std::thread::spawn(move || serve(conn, &*handler));
            }
        });
        HttpStub { addr, stop }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Answers the requests of one connection until the client closes it.
fn serve(conn: TcpStream, handler: &(dyn Fn(&Message) -> Message + Send + Sync)) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut input = BufReader::new(conn);
    while let Some(req) = read_message(&mut input, true) {
        let answer = handler(&req);
        let start = format!("HTTP/1.1 {} X", answer.status);
        if write_message(&mut out, &start, &answer).is_err() {
            return;
        }
    }
}

impl Drop for HttpStub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }
}
