//! Reading a certificate and its private key from PEM files into one [`CertifiedKey`].
//!
//! Invariant: a [`CertifiedKey`] returned here holds at least one certificate, a key the
//! crypto provider can sign with, and that key is the one the leaf certificate names. A pair
//! that breaks any of these is an error naming the file and why, never a guess.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A refused TLS file: the setting that names it (`tls_cert`, `tls_key`, `tls_client_ca`,
/// `ca_file`…), the file, and why. Displays as `KEY = "FILE": why`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {file:?}: {why}")]
pub struct TlsFileError {
    /// The setting that names the file.
    pub key: &'static str,
    /// The file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

impl TlsFileError {
    /// An error about `file`, named by `key`.
    pub fn new(key: &'static str, file: &Path, why: impl Into<String>) -> Self {
        Self { key, file: file.to_owned(), why: why.into() }
    }
}

/// Reads `file` whole (named `key` in errors).
pub(super) fn read(key: &'static str, file: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(file).map_err(|e| TlsFileError::new(key, file, format!("cannot read: {e}")))
}

/// Every `CERTIFICATE` block of a PEM file (named `key` in errors); none is an error.
pub fn certificates(
    key: &'static str,
    file: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let pem = read(key, file)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsFileError::new(key, file, format!("not a valid PEM file: {e}")))?;
    if certs.is_empty() {
        return Err(TlsFileError::new(key, file, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// The certificate chain in `cert` (leaf first) and the private key in `key`, checked to
/// belong together. The content of both files is also returned, so a watcher can tell a
/// change from a touch.
pub(super) fn load(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsFileError> {
    let chain = certificates("tls_cert", cert)?;
    let key_pem = read("tls_key", key)?;
    let der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        TlsFileError::new(
            "tls_key",
            key,
            format!("no private key (PKCS#8, PKCS#1 or SEC1 PEM block) in the file: {e}"),
        )
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsFileError::new("tls_key", key, format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) => Ok(Arc::new(certified)),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsFileError::new(
                "tls_key",
                key,
                format!("the key does not match the certificate in {}", cert.display()),
            ))
        }
        // The provider cannot tell the key's public half: nothing to compare, as rustls
        // itself would accept it.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(e) => {
            Err(TlsFileError::new("tls_cert", cert, format!("the certificate cannot be used: {e}")))
        }
    }
}
