//! Certificates made at test time with `rcgen`: a CA, server certificates for `localhost` and
//! `127.0.0.1` (valid, expired, or from another CA), and client certificates with a chosen
//! common name, written as PEM files where a test needs them.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate and its private key, as PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8).
    pub key: String,
}

impl Pem {
    /// Writes `NAME.crt` and `NAME.key` into `dir` (atomically: written beside, then renamed
    /// over) and returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        replace(&cert, self.cert.as_bytes());
        replace(&key, self.key.as_bytes());
        (cert, key)
    }
}

/// Replaces `path` with `bytes` atomically (write a temp file beside it, then rename).
pub fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A certificate authority made for one test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub cert: String,
}

fn dn(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl TestCa {
    /// A new CA named `cn`.
    pub fn new(cn: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self { cert: cert.pem(), issuer: Issuer::new(params, key) }
    }

    /// Writes the CA certificate to `dir/NAME.crt`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.crt"));
        replace(&path, self.cert.as_bytes());
        path
    }

    /// A server certificate for `localhost` and `127.0.0.1`, common name `cn`.
    pub fn server(&self, cn: &str) -> Pem {
        self.sign(self.server_params(cn))
    }

    /// Like [`TestCa::server`], expired yesterday.
    pub fn expired_server(&self, cn: &str) -> Pem {
        let mut params = self.server_params(cn);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.sign(params)
    }

    /// A client certificate whose subject is `CN=cn`.
    pub fn client(&self, cn: &str) -> Pem {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn server_params(&self, cn: &str) -> CertificateParams {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name = dn(cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params
    }

    fn sign(&self, params: CertificateParams) -> Pem {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pem { cert: cert.pem(), key: key.serialize_pem() }
    }
}
