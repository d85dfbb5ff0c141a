//! The webhook signature: `X-Tollgate-Signature: sha256=<hex>`, the HMAC-SHA256 of the exact
//! body bytes under the webhook's secret, so a receiver can tell a notification came from
//! this service and was not changed on the way.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-tollgate-signature";

/// A webhook's HMAC key. Its `Debug` shows no byte of it, so it can sit in logged structs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<[u8]>);

impl Secret {
    /// A key of `bytes`; `None` when empty (an empty key signs nothing worth checking).
    pub fn new(bytes: &[u8]) -> Option<Self> {
        (!bytes.is_empty()).then(|| Self(Arc::from(bytes)))
    }

    /// Whether the key is UTF-8 text (as an SMTP password must be).
    pub fn is_utf8(&self) -> bool {
        std::str::from_utf8(&self.0).is_ok()
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(hidden)")
    }
}

/// The header value for `body` signed with `secret`: `sha256=` and 64 lowercase hex digits.
pub fn signature(secret: &Secret, body: &[u8]) -> String {
    // HMAC takes a key of any length: new_from_slice cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4231_test_case_2() {
        // RFC 4231, 4.3: key "Jefe", data "what do ya want for nothing?".
        let key = Secret::new(b"Jefe").unwrap();
        assert_eq!(
            signature(&key, b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(Secret::new(b"").is_none());
        assert_eq!(format!("{key:?}"), "Secret(hidden)");
    }
}
