//! The floor under any HTTP stack on this machine: a loop that answers every request head
//! with the same bytes, an allowed `GET /v1/quota` answer for the id `a:b` (402 bytes; the
//! benchmark's ids and limit make Tollgate's some 35 bytes longer), without parsing or deciding.
//!
//! `benches/peer.sh` runs it beside Tollgate and ThrottleCrab when `FLOOR=1`: what is left
//! between it and a real server is the server's own work per answer (HTTP parsing, routing,
//! the decision, the answer's headers and body), while the kernel's share (one `recvfrom`
//! and one `sendto` per answer, and waking the client) is the same for all of them.
//!
//! Run: `cargo run --release -p tollgate-server --example canned_answer [-- ADDR]` (default
//! `127.0.0.1:0`); it prints `listening on http://ADDR`. Not a server: it ignores what it
//! reads, and answers a pipelined batch with as many answers as it found heads.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An allowed answer of `GET /v1/quota` for the id `a:b`, as Tollgate sends it.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\n\
content-type: application/json\r\n\
ratelimit-policy: \"q\";q=100000;w=3600\r\n\
ratelimit: \"q\";r=99999;t=2096\r\n\
content-length: 223\r\n\
date: Fri, 04 Dec 2026 01:25:04 GMT\r\n\r\n\
{\"allowed\":true,\"identifier\":\"a:b\",\"limit\":100000,\"used\":1,\"available\":99999,\
\"weight\":1,\"exceed_count\":0,\"total_exceed_count\":0,\"window_start\":\"2026-12-04T01:00:00Z\",\
\"window_end\":\"2026-12-04T02:00:00Z\",\"retry_after_s\":null}";

/// The most bytes of unanswered request heads a connection may hold; more closes it.
const MAX_PENDING: usize = 64 * 1024;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(answer(stream));
    }
}

/// Answers each complete head (up to its blank line) read from `stream` until it closes.
async fn answer(mut stream: TcpStream) {
    let mut pending = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut out = Vec::with_capacity(4096);
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(chunk.get(..n).unwrap_or_default());
        let mut start = 0;
        while let Some(end) =
            pending.get(start..).and_then(|p| memchr::memmem::find(p, b"\r\n\r\n"))
        {
            out.extend_from_slice(ANSWER);
            start += end + 4;
        }
        pending.drain(..start);
        if pending.len() > MAX_PENDING {
            return;
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}
