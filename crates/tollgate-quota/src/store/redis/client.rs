//! Opening the Redis connection: one server or a cluster (`RedisOptions::cluster`), and for
//! `rediss://` which certificates the server's must chain to (`ca_file`, else the system roots
//! through rustls-native-certs); verification is never skipped.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};

use super::conn::Conn;
use super::{RedisOptions, StoreError};

/// A lazy connection for `opts`: nothing is dialled until the first command, so a store starts
/// while Redis is down; only a malformed URL or an unreadable `ca_file` fails here.
pub(super) fn open_conn(opts: &RedisOptions) -> Result<Conn, StoreError> {
    let connect_timeout = opts.timeout.max(Duration::from_millis(10));
    let client = open_client(opts)?;
    if !opts.cluster {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StoreError::Unavailable(format!("redis: {e}")))?;
        return Ok(Conn::Single(conn));
    }
    // A cluster has only database 0: a URL naming another is a mistake, said at start-up.
    let db = client.get_connection_info().redis_settings().db();
    if db != 0 {
        return Err(StoreError::Unavailable(format!(
            "invalid redis url: a Redis Cluster has only database 0, the url names database {db}"
        )));
    }
    let mut builder = ClusterClientBuilder::new([opts.url.as_str()])
        .connection_timeout(connect_timeout)
        // Each attempt, and all of them together, within the store's timeout. One retry: it
        // follows a MOVED or ASK redirection (the slot map is refreshed on the way, which is
        // how requests find a promoted replica) and nothing is retried after the caller was
        // answered (a script Redis ran before the timeout still counted: see `RedisStore`).
        .response_timeout(opts.timeout)
        .retries(1)
        .min_retry_wait(5)
        .max_retry_wait(opts.timeout.as_millis().try_into().unwrap_or(u64::MAX).max(5));
    if let Some(certs) = ca_certificates(opts)? {
        builder = builder.certs(certs);
    }
    let cluster =
        builder.build().map_err(|e| StoreError::Unavailable(format!("invalid redis url: {e}")))?;
    Ok(Conn::Cluster(cluster.get_pending_async_connection_with_config(ClusterConfig::new())))
}

/// The client for `opts.url`: a `rediss://` server's certificate is verified against
/// `opts.ca_file`, or the system roots (rustls-native-certs) without one.
fn open_client(opts: &RedisOptions) -> Result<redis::Client, StoreError> {
    match ca_certificates(opts)? {
        None => redis::Client::open(opts.url.as_str()).map_err(|e| invalid(e.to_string())),
        Some(certs) => redis::Client::build_with_tls(opts.url.as_str(), certs).map_err(|e| {
            let file = opts.ca_file.clone().unwrap_or_default();
            StoreError::Unavailable(format!("ca_file = {file:?}: {e}"))
        }),
    }
}

/// The CA certificates of `ca_file`, checking the URL on the way: `#insecure` (which would skip
/// the verification) is refused, and `ca_file` goes only with `rediss://`.
fn ca_certificates(opts: &RedisOptions) -> Result<Option<redis::TlsCertificates>, StoreError> {
    if opts.url.contains("#insecure") {
        return Err(invalid(
            "#insecure would skip the verification of the server's certificate; use \
             [store] ca_file to trust a private CA instead"
                .into(),
        ));
    }
    let Some(file) = &opts.ca_file else { return Ok(None) };
    if !opts.url.starts_with("rediss://") {
        return Err(StoreError::Unavailable(format!(
            "ca_file = {file:?}: only used with a rediss:// URL"
        )));
    }
    let pem = std::fs::read(file)
        .map_err(|e| StoreError::Unavailable(format!("ca_file = {file:?}: cannot read: {e}")))?;
    Ok(Some(redis::TlsCertificates { client_tls: None, root_cert: Some(pem) }))
}

fn invalid(e: String) -> StoreError {
    StoreError::Unavailable(format!("invalid redis url: {e}"))
}
