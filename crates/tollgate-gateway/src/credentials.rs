//! Who may upload interchanges (`POST /v1/interchanges`).
//!
//! Rule: when any credential is configured (the admin token, or any `[[client]]` key), an
//! upload must carry one: `x-api-key` with a client key, or `Authorization: Bearer` with the
//! admin token (401 otherwise). With none configured, uploads are open on a loopback listener
//! only (403 elsewhere), like the admin API. A client with a `partners` list may upload only
//! interchanges whose sender is in it; the admin token may upload for any sender.

use axum::http::{HeaderMap, StatusCode, header::AUTHORIZATION};
use tollgate_http::AccessGuard;
use tollgate_http::client::{API_KEY_HEADER, Client, ClientKeys};
use tollgate_http::problem::Problem;
use tollgate_http::tls::PeerCertificate;

/// The upload access rule: the server's admin guard and client keys.
#[derive(Debug, Clone)]
pub(crate) struct UploadGuard {
    admin: AccessGuard,
    clients: ClientKeys,
}

/// Who is uploading.
#[derive(Debug)]
pub(crate) enum Uploader<'a> {
    /// The admin token, or nobody on an open loopback listener: any sender.
    Unscoped,
    /// A `[[client]]`, limited to its partners.
    Client(&'a Client),
}

impl UploadGuard {
    /// The rule for this server's credentials.
    pub(crate) fn new(admin: AccessGuard, clients: ClientKeys) -> Self {
        Self { admin, clients }
    }

    /// Who sent the request, or the 401/403 to answer. A verified client certificate
    /// (`peer`, under mTLS) whose subject a `[[client]]` names counts as that client when no
    /// key is sent.
    pub(crate) fn authorize(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerCertificate>,
    ) -> Result<Uploader<'_>, Problem> {
        if self.clients.enabled() && (headers.contains_key(API_KEY_HEADER) || peer.is_some()) {
            return self.clients.authenticate_with(headers, peer).map(|c| match c {
                Some(c) => Uploader::Client(c),
                None => Uploader::Unscoped,
            });
        }
        if self.admin.has_token() && headers.contains_key(AUTHORIZATION) {
            return self.admin.authorize(headers).map(|()| Uploader::Unscoped);
        }
        if !self.clients.enabled() && !self.admin.has_token() {
            // Nothing configured: open on loopback, 403 elsewhere (the admin guard's rule).
            return self.admin.authorize(headers).map(|()| Uploader::Unscoped);
        }
        let mut accepted = Vec::new();
        if self.clients.enabled() {
            accepted.push("a client key in x-api-key");
        }
        if self.admin.has_token() {
            accepted.push("the admin token in Authorization: Bearer");
        }
        Err(Problem::new(StatusCode::UNAUTHORIZED, "upload-unauthorized", "Credentials required")
            .detail(format!("uploads need credentials: send {}", accepted.join(" or ")))
            .with("accepted", accepted))
    }
}
