//! Keys seen: a store remembers opaque keys (the gateway's transaction fingerprints) until an
//! expiry, beside the counters, so every instance on one store shares one view of what was
//! already let through.
//!
//! Invariants:
//! - **Remember is a claim.** [`Seen::remember`] answers, per key, whether this call stored it
//!   (`true`) or found it already remembered and unexpired (`false`). On Redis this is one
//!   `SET NX PX` per key, so of two instances remembering the same key at once exactly one
//!   gets `true`; the memory store decides under one lock, the embedded one in one redb write
//!   transaction.
//! - **Remembered means durable** on the embedded store: `remember` returns after its redb
//!   transaction commits (no write-behind), so a restart right after still knows the key.
//! - **Bounded by the window.** An expired key is never reported as seen; the memory store
//!   drops expired keys when it grows past twice its size at the last prune, the embedded store
//!   in [`Seen::remember`] calls once a minute at most, and Redis by its own expiry.
//! - A failure is an error, never "not seen" and never "seen": the caller decides (the gateway
//!   follows `store_unavailable`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use super::StoreError;

/// Remembers keys until an expiry; see the module invariants.
pub trait Seen: Send + Sync + 'static {
    /// For each key, whether it is remembered and not expired.
    fn seen(&self, keys: &[&str]) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Remembers each key for `ttl` unless it already is; `true` where this call stored it.
    fn remember(
        &self,
        keys: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;
}

/// Keys in memory with their expiry (Unix ms): the memory store's, and the shape of the
/// embedded store's table.
#[derive(Debug, Default)]
pub(crate) struct SeenMap {
    inner: Mutex<SeenInner>,
}

#[derive(Debug, Default)]
struct SeenInner {
    keys: HashMap<Box<str>, i64>,
    /// Size after the last prune; the next prune runs at twice this.
    pruned_at: usize,
}

impl SeenMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, SeenInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// See [`Seen::seen`], at `now_ms`.
    pub(crate) fn seen(&self, keys: &[&str], now_ms: i64) -> Vec<bool> {
        let inner = self.lock();
        keys.iter().map(|k| inner.keys.get(*k).is_some_and(|&until| until > now_ms)).collect()
    }

    /// See [`Seen::remember`], at `now_ms`.
    pub(crate) fn remember(&self, keys: &[&str], ttl: Duration, now_ms: i64) -> Vec<bool> {
        let until = now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let mut inner = self.lock();
        if inner.keys.len() >= (inner.pruned_at * 2).max(1024) {
            inner.keys.retain(|_, until| *until > now_ms);
            inner.pruned_at = inner.keys.len();
        }
        keys.iter()
            .map(|k| match inner.keys.get_mut(*k) {
                Some(old) if *old > now_ms => false,
                Some(old) => {
                    *old = until;
                    true
                }
                None => {
                    inner.keys.insert((*k).into(), until);
                    true
                }
            })
            .collect()
    }

    /// How many keys are held (expired ones included until the next prune).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_claimed_once_until_it_expires() {
        let m = SeenMap::default();
        let ttl = Duration::from_secs(10);
        assert_eq!(m.seen(&["a", "b"], 0), [false, false]);
        assert_eq!(m.remember(&["a"], ttl, 0), [true]);
        assert_eq!(m.remember(&["a", "b"], ttl, 1), [false, true]);
        assert_eq!(m.seen(&["a", "b", "c"], 9_999), [true, true, false]);
        assert_eq!(m.seen(&["a"], 10_000), [false], "expired at the ttl");
        assert_eq!(m.remember(&["a"], ttl, 10_000), [true], "claimed again once expired");
    }

    #[test]
    fn expired_keys_are_pruned_as_the_map_grows() {
        let m = SeenMap::default();
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            m.remember(&[k], Duration::from_millis(1), i as i64);
        }
        assert!(m.len() < 2100, "{} keys held, most of them expired", m.len());
    }
}
