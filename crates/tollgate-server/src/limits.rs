//! What one client may hold of the listener: how long it may take to send a request head or
//! the next body chunk, and how many connections are served at once.
//!
//! These bound what anyone who can reach the port consumes without credentials (slowloris
//! heads, stalled or trickled bodies, floods of idle connections). They are read from
//! `[server]` in the config file (`header_timeout_ms`, `body_timeout_ms`,
//! `body_min_rate_bytes`, `max_connections`, and
//! `trusted_proxies`, which says whose address a per-client limit counts by).

use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;

use tollgate_http::proxy::TrustedProxies;

/// Default time to receive a whole request head, and the keep-alive idle time.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// Default longest silence between two chunks of a request body.
pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default least average rate of a request body once `body_timeout` has passed, in bytes
/// per second.
pub(crate) const DEFAULT_BODY_MIN_RATE: NonZeroU64 = NonZeroU64::new(1024).expect("non-zero");
/// Default number of connections served at once.
pub(crate) const DEFAULT_MAX_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(4096).expect("non-zero");

/// Limits on each client connection; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time allowed to receive a request head, counted from when the connection starts
    /// waiting for it. That includes the wait for the next request on a keep-alive
    /// connection, so this is also the idle keep-alive timeout. Beyond it the connection is
    /// closed.
    pub header_timeout: Duration,
    /// Longest silence allowed mid-transfer: between two chunks of a request body (and
    /// before the first), beyond which the request is answered 408 and the connection
    /// closed; and while an answer waits for the client to take any of it, beyond which the
    /// connection is closed.
    pub body_timeout: Duration,
    /// Bytes per second a request body must average, counted from its start, once
    /// `body_timeout` has passed; a slower one is answered 408 and its connection closed, so a
    /// client that trickles a byte before each silence would end frees its slot within
    /// `body_timeout + length / body_min_rate`.
    pub body_min_rate: NonZeroU64,
    /// How long a request body may take before `body_min_rate` applies: `body_timeout`, or the
    /// gateway's upload grace when that is longer (see `tollgate serve`).
    pub body_rate_grace: Duration,
    /// Connections served at once. Further clients wait in the kernel's accept queue until a
    /// slot frees up, which the timeouts above guarantee happens. At least one.
    pub max_connections: NonZeroUsize,
    /// Reverse proxies whose `X-Forwarded-For` hops name the client (none by default).
    pub trusted_proxies: TrustedProxies,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            body_rate_grace: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}
