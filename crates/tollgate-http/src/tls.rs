//! HTTPS for the listener: the server certificate, its live rotation, and client
//! certificates (mTLS).
//!
//! [`TlsAcceptor`] turns an accepted TCP stream into a TLS stream with whatever certificate is
//! current (see [`TlsAcceptor::accept`]); the HTTP listener uses it, and any other listener
//! (a gRPC one, say) can take the same acceptor. The certificate is served through a resolver
//! holding one `Arc<CertifiedKey>`, swapped whole when the files change, so every handshake
//! sees either the old pair or the new one, never half of each; connections already open keep
//! the certificate they were made with.
//!
//! Rotation ([`TlsAcceptor::watch`]): the directories of `tls_cert` and `tls_key` are watched
//! (atomic renames replace the files' inodes) and polled. A changed pair is loaded and
//! checked (readable, PEM, a key that matches the leaf certificate) before it is swapped in;
//! a broken pair is refused: the previous certificate stays in use, the error is logged,
//! counted (`tollgate_tls_reload_errors_total`) and shown in `/readyz` (`tls.last_error`,
//! status `degraded`, still 200, as for a refused policy file: the instance still serves
//! with its previous certificate). The next good pair clears the error.
//!
//! Client certificates: with `tls_client_ca`, a client must present a certificate signed by
//! that CA or the handshake fails. The verified certificate's subject reaches every request
//! of the connection as a [`PeerCertificate`] extension. The CA file is read at start-up
//! only.

mod pair;
pub mod subject;
mod watch;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};

pub use pair::{TlsFileError, certificates};

/// Rotated certificate pairs taken into use.
pub const TLS_RELOADS: &str = "tollgate_tls_reloads_total";
/// Changed certificate pairs refused.
pub const TLS_RELOAD_ERRORS: &str = "tollgate_tls_reload_errors_total";
pub use watch::TlsWatcher;

/// The files that make the listener HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls_cert`: the certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// `tls_key`: the leaf's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `tls_client_ca`: when set, clients must present a certificate signed by one of these
    /// CA certificates (PEM).
    pub client_ca: Option<PathBuf>,
}

/// The subject of the verified client certificate of the connection a request came on
/// (RFC 4514, e.g. `CN=edi.acme.example,O=Acme`); a request extension inserted by the
/// listener, absent without mTLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The certificate's subject.
    pub subject: String,
}

/// What `/readyz` shows about the certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsStatus {
    /// How many pairs were taken into use (1 after start-up).
    pub generation: u64,
    /// Why the last changed pair was refused, until a good one is loaded.
    pub last_error: Option<String>,
}

/// The process-wide crypto provider (aws-lc-rs, the one reqwest also uses).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Serves the current pair to every handshake.
#[derive(Debug)]
struct CertResolver {
    /// Invariant: always a checked pair (see [`pair::load`]); replaced whole, never edited.
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        Some(Arc::clone(&current))
    }
}

struct Shared {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
    /// The bytes of the pair in use (cert, key), so a touch without a change is no reload.
    loaded: Mutex<(Vec<u8>, Vec<u8>)>,
    status: Mutex<TlsStatus>,
}

/// Makes TLS streams out of accepted connections with the current certificate; cheap to
/// clone (one `Arc`).
#[derive(Clone)]
pub struct TlsAcceptor {
    shared: Arc<Shared>,
    /// The server config of this listener (its ALPN protocols); the certificate comes from
    /// the shared resolver, so every acceptor made by [`TlsAcceptor::with_alpn`] rotates
    /// together.
    config: Arc<rustls::ServerConfig>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor").field("files", &self.shared.files).finish()
    }
}

impl TlsAcceptor {
    /// Loads and checks the pair (and the client CA, if any). An error names the setting,
    /// the file and why; a server must not start on it.
    pub fn load(files: TlsFiles) -> Result<Self, TlsFileError> {
        let provider = provider();
        let pair = pair::load(&files.cert, &files.key, &provider)?;
        let loaded = (read_or_empty(&files.cert), read_or_empty(&files.key));
        let resolver = Arc::new(CertResolver { current: RwLock::new(pair) });
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsFileError::new("tls_cert", &files.cert, e.to_string()))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates("tls_client_ca", ca)? {
                    roots.add(cert).map_err(|e| {
                        TlsFileError::new("tls_client_ca", ca, format!("not a usable CA: {e}"))
                    })?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| TlsFileError::new("tls_client_ca", ca, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_cert_resolver(Arc::clone(&resolver) as _);
        let shared = Arc::new(Shared {
            files,
            provider,
            resolver,
            loaded: Mutex::new(loaded),
            status: Mutex::new(TlsStatus { generation: 1, last_error: None }),
        });
        let acceptor = Self {
            shared,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config.clone())),
            config: Arc::new(config),
        };
        Ok(acceptor.with_alpn(vec![b"http/1.1".to_vec()]))
    }

    /// The same certificate (and its rotation, and client-certificate rule) offered with the
    /// ALPN protocols `protocols`, for another listener: the HTTP/1.1 listener uses
    /// `http/1.1`, a gRPC one would use `h2`.
    pub fn with_alpn(&self, protocols: Vec<Vec<u8>>) -> Self {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols;
        let config = Arc::new(config);
        Self {
            shared: Arc::clone(&self.shared),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::clone(&config)),
            config,
        }
    }

    /// The files this acceptor serves.
    pub fn files(&self) -> &TlsFiles {
        &self.shared.files
    }

    /// The TLS handshake on `stream` with the current certificate. It is not bounded here:
    /// the caller wraps it in its own timeout (the HTTP listener uses `header_timeout`).
    pub async fn accept<S>(&self, stream: S) -> io::Result<tokio_rustls::server::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.acceptor.accept(stream).await
    }

    /// The verified client certificate's subject on an accepted stream, when there is one.
    pub fn peer<S>(stream: &tokio_rustls::server::TlsStream<S>) -> Option<PeerCertificate> {
        let (_, conn) = stream.get_ref();
        let leaf = conn.peer_certificates()?.first()?;
        Some(PeerCertificate { subject: subject::of(leaf)? })
    }

    /// Re-reads the pair. `Ok(true)`: a changed pair is now in use; `Ok(false)`: the files
    /// are as loaded; `Err`: the new pair is refused and the previous one stays in use.
    pub fn reload(&self) -> Result<bool, TlsFileError> {
        let files = &self.shared.files;
        let bytes = (read_or_empty(&files.cert), read_or_empty(&files.key));
        if *lock(&self.shared.loaded) == bytes {
            return Ok(false);
        }
        match pair::load(&files.cert, &files.key, &self.shared.provider) {
            Ok(pair) => {
                *self.shared.resolver.current.write().unwrap_or_else(|p| p.into_inner()) = pair;
                *lock(&self.shared.loaded) = bytes;
                let generation = {
                    let mut status = lock(&self.shared.status);
                    status.generation += 1;
                    status.last_error = None;
                    status.generation
                };
                metrics::counter!(TLS_RELOADS).increment(1);
                tracing::info!(cert = %files.cert.display(), generation, "TLS certificate reloaded");
                Ok(true)
            }
            Err(e) => {
                let msg = e.to_string();
                let mut status = lock(&self.shared.status);
                if status.last_error.as_deref() != Some(&msg) {
                    tracing::error!(error = %msg, "TLS certificate refused; the previous one stays in use");
                    metrics::counter!(TLS_RELOAD_ERRORS).increment(1);
                }
                status.last_error = Some(msg);
                Err(e)
            }
        }
    }

    /// The generation in use and the last refusal.
    pub fn status(&self) -> TlsStatus {
        lock(&self.shared.status).clone()
    }
}

/// The file's bytes, or nothing when it cannot be read (a rename in progress; the load that
/// follows says why if it persists).
fn read_or_empty(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(path: &Path, text: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn reload_swaps_a_good_pair_and_keeps_the_old_one_on_a_broken_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let (c1, k1) = pair("one.test");
        write(&cert, &c1);
        write(&key, &k1);
        let files = TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: None };
        let tls = TlsAcceptor::load(files).unwrap();
        let grpc = tls.with_alpn(vec![b"h2".to_vec()]);
        assert_eq!(tls.reload(), Ok(false), "unchanged files are no reload");

        let (c2, k2) = pair("two.test");
        write(&key, &k2);
        let e = tls.reload().unwrap_err();
        assert_eq!(e.key, "tls_key");
        assert!(e.why.contains("does not match"), "{e}");
        assert_eq!(grpc.status().generation, 1);
        assert!(grpc.status().last_error.is_some(), "one status for every acceptor");

        write(&cert, &c2);
        assert_eq!(tls.reload(), Ok(true));
        assert_eq!(grpc.status(), TlsStatus { generation: 2, last_error: None });
    }

    #[test]
    fn load_names_the_file_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let (c1, k1) = pair("one.test");
        write(&cert, &k1);
        write(&key, &c1);
        let files = TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: None };
        let e = TlsAcceptor::load(files).unwrap_err().to_string();
        assert!(e.starts_with(&format!("tls_cert = {cert:?}: no CERTIFICATE block")), "{e}");
    }
}
