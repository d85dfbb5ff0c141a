//! Opening the Redis client: for `rediss://`, which certificates the server's must chain to
//! (`ca_file`, else the system roots through rustls-native-certs); verification is never
//! skipped.

use super::{RedisOptions, StoreError};

/// The client for `opts.url`: a `rediss://` server's certificate is verified against
/// `opts.ca_file`, or the system roots (rustls-native-certs) without one.
pub(super) fn open_client(opts: &RedisOptions) -> Result<redis::Client, StoreError> {
    let invalid = |e: String| StoreError::Unavailable(format!("invalid redis url: {e}"));
    if opts.url.contains("#insecure") {
        return Err(invalid(
            "#insecure would skip the verification of the server's certificate; use \
             [store] ca_file to trust a private CA instead"
                .into(),
        ));
    }
    match &opts.ca_file {
        None => redis::Client::open(opts.url.as_str()).map_err(|e| invalid(e.to_string())),
        Some(file) => {
            if !opts.url.starts_with("rediss://") {
                return Err(StoreError::Unavailable(format!(
                    "ca_file = {file:?}: only used with a rediss:// URL"
                )));
            }
            let pem = std::fs::read(file).map_err(|e| {
                StoreError::Unavailable(format!("ca_file = {file:?}: cannot read: {e}"))
            })?;
            let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(pem) };
            redis::Client::build_with_tls(opts.url.as_str(), certs)
                .map_err(|e| StoreError::Unavailable(format!("ca_file = {file:?}: {e}")))
        }
    }
}
