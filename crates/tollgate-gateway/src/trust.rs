//! Which servers the gateway's outbound HTTPS calls trust, and how a refused certificate is
//! reported.
//!
//! By default the remote quota service and HTTP delivery targets are verified against the
//! system's roots (reqwest's platform verifier: on Linux, the CA bundle of the operating
//! system, e.g. `/etc/ssl/certs`). With a `ca_file` (`[gateway.quota] ca_file`,
//! `[gateway] deliver_ca_file`), only the certificates in that PEM file are trusted.
//! Verification is never turned off: there is no key for it.
//!
//! A call that fails because the server's certificate was refused gets a reason that starts
//! `TLS certificate verification failed`, so a held item or a delivery error says so instead
//! of a bare connection error.

use std::error::Error as _;
use std::path::Path;

/// How rustls words [`rustls::Error::InvalidCertificate`].
const INVALID_CERTIFICATE: &str = "invalid peer certificate: ";

/// The certificates of a PEM `ca_file` (named `key` in errors), at least one.
pub(crate) fn ca_certificates(key: &str, file: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = std::fs::read(file).map_err(|e| format!("{key} = {file:?}: cannot read: {e}"))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("{key} = {file:?}: not a PEM file of certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} = {file:?}: no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// A client builder trusting `ca_file` only when given, the system roots otherwise.
pub(crate) fn client_builder(
    key: &str,
    ca_file: Option<&Path>,
) -> Result<reqwest::ClientBuilder, String> {
    let builder = reqwest::Client::builder();
    Ok(match ca_file {
        Some(file) => builder.tls_certs_only(ca_certificates(key, file)?),
        None => builder,
    })
}

/// A reqwest error as an item's reason: `TLS certificate verification failed: …` when the
/// server's certificate was refused, else the error with its causes.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let (text, _) = explain(e);
    text
}

/// Like [`describe`], when the server's certificate was refused; `None` for other errors.
pub(crate) fn certificate_refused(e: &reqwest::Error) -> Option<String> {
    match explain(e) {
        (text, true) => Some(text),
        (_, false) => None,
    }
}

/// The error with its causes, and whether one of them is a refused certificate.
fn explain(e: &reqwest::Error) -> (String, bool) {
    let mut chain = e.to_string();
    let mut source = e.source();
    let mut refused = None;
    while let Some(s) = source {
        let text = s.to_string();
        if !chain.contains(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        // rustls reports through io::Error, whose source() skips the rustls error itself.
        let rustls_err = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(why)) = rustls_err {
            refused = Some(why.to_string());
        } else if refused.is_none()
            && let Some(why) = text.strip_prefix(INVALID_CERTIFICATE)
        {
            // The same error reached through a wrapper that hides its type (the connector
            // boxes it): rustls' own words for a refused certificate.
            refused = Some(why.to_owned());
        }
        source = s.source();
    }
    match refused {
        Some(why) => (format!("TLS certificate verification failed: {why} ({e})"), true),
        None => (chain, false),
    }
}
