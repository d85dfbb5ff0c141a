//! Keys seen: a store remembers opaque keys (the gateway's transaction fingerprints) until an
//! expiry, beside the counters, so every instance on one store shares one view of what was
//! already let through.
//!
//! A key is *claimed* by an owner (the gateway's item id) before the item is metered, kept if
//! the item is admitted and *released* if it is not: so a held or rejected transaction is not
//! yet "seen", and of two instances admitting copies of one transaction at once only one
//! holds the claim.
//!
//! Invariants:
//! - **A claim has one owner.** [`Seen::claim`] answers, per key, whether the key is now
//!   `owner`'s: it was free or expired (then it is stored), or `owner` already held it (then its
//!   expiry is renewed). Another owner's unexpired key is never taken. On Redis each key is one
//!   script run (atomic), the memory store decides under one lock, the embedded one in one redb
//!   write transaction. Claiming again under the same owner is harmless, so an item that
//!   crashed between its claim and its commit claims its keys again after the restart.
//! - **A hand-over is a compare-and-set** ([`Seen::hand_over`]): the key passes from one owner
//!   to the next only while the first holds it unexpired, atomically on each store (one lock,
//!   one redb write transaction, one script run), so a key's owner can carry state (the
//!   server's request-id records go pending → answered → refunded) and one transition wins.
//! - **Release frees only the owner's keys** ([`Seen::release`]), so a late release can never
//!   free a key another item has claimed since.
//! - **Remembered means durable** on the embedded store: `claim` returns after its redb
//!   transaction commits (no write-behind), so a restart right after still knows the key.
//! - **Bounded by the window.** An expired key is never reported as seen; the memory store
//!   drops expired keys when it grows past twice its size at the last prune, the embedded store
//!   in [`Seen::claim`] calls once a minute at most, and Redis by its own expiry.
//! - A failure is an error, never "not seen" and never "seen": the caller decides (the gateway
//!   follows `store_unavailable`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use super::StoreError;

/// Remembers keys for their owners until an expiry; see the module invariants.
pub trait Seen: Send + Sync + 'static {
    /// For each key, the owner other than `owner` that holds it unexpired, if any: a read,
    /// so a copy is found without a write, and named by what it copies.
    fn holders(
        &self,
        keys: &[&str],
        owner: &str,
    ) -> impl Future<Output = Result<Vec<Option<String>>, StoreError>> + Send;

    /// For each key, whether an owner other than `owner` holds it unexpired
    /// ([`Seen::holders`] without the names).
    fn seen(
        &self,
        keys: &[&str],
        owner: &str,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send {
        async move {
            let holders = self.holders(keys, owner).await?;
            Ok(holders.iter().map(Option::is_some).collect())
        }
    }

    /// Claims each key for `owner` for `ttl`; `true` where the key is now `owner`'s, `false`
    /// where another owner holds it unexpired.
    fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Forgets the keys `owner` holds; keys of other owners are left as they are.
    fn release(
        &self,
        keys: &[&str],
        owner: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Hands `key` over from `from` to `to` for `ttl`, atomically, only while `from` holds it
    /// unexpired: `true` when it is now `to`'s. A compare-and-set, so of two callers handing
    /// one key over from the same owner exactly one wins.
    fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The end of a claim made at `now_ms` for `ttl`.
pub(crate) fn expiry(now_ms: i64, ttl: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// Keys in memory with their expiry (Unix ms) and owner: the memory store's, and the shape of
/// the embedded store's table.
#[derive(Debug, Default)]
pub(crate) struct SeenMap {
    inner: Mutex<SeenInner>,
}

#[derive(Debug, Default)]
struct SeenInner {
    keys: HashMap<Box<str>, (i64, Box<str>)>,
    /// Size after the last prune; the next prune runs at twice this.
    pruned_at: usize,
}

impl SeenMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, SeenInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// See [`Seen::holders`], at `now_ms`.
    pub(crate) fn holders(&self, keys: &[&str], owner: &str, now_ms: i64) -> Vec<Option<String>> {
        let inner = self.lock();
        keys.iter()
            .map(|k| {
                let (until, who) = inner.keys.get(*k)?;
                (*until > now_ms && **who != *owner).then(|| who.to_string())
            })
            .collect()
    }

    /// See [`Seen::seen`], at `now_ms`.
    #[cfg(test)]
    pub(crate) fn seen(&self, keys: &[&str], owner: &str, now_ms: i64) -> Vec<bool> {
        self.holders(keys, owner, now_ms).iter().map(Option::is_some).collect()
    }

    /// See [`Seen::claim`], at `now_ms`.
    pub(crate) fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Vec<bool> {
        let until = expiry(now_ms, ttl);
        let mut inner = self.lock();
        if inner.keys.len() >= (inner.pruned_at * 2).max(1024) {
            inner.keys.retain(|_, (until, _)| *until > now_ms);
            inner.pruned_at = inner.keys.len();
        }
        keys.iter()
            .map(|k| match inner.keys.get_mut(*k) {
                Some((old, who)) if *old > now_ms && **who != *owner => false,
                Some(entry) => {
                    *entry = (until, owner.into());
                    true
                }
                None => {
                    inner.keys.insert((*k).into(), (until, owner.into()));
                    true
                }
            })
            .collect()
    }

    /// See [`Seen::hand_over`], at `now_ms`.
    pub(crate) fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> bool {
        let mut inner = self.lock();
        match inner.keys.get_mut(key) {
            Some(entry) if entry.0 > now_ms && *entry.1 == *from => {
                *entry = (expiry(now_ms, ttl), to.into());
                true
            }
            _ => false,
        }
    }

    /// See [`Seen::release`].
    pub(crate) fn release(&self, keys: &[&str], owner: &str) {
        let mut inner = self.lock();
        for k in keys {
            if inner.keys.get(*k).is_some_and(|(_, who)| **who == *owner) {
                inner.keys.remove(*k);
            }
        }
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
        assert_eq!(m.seen(&["a", "b"], "x", 0), [false, false]);
        assert_eq!(m.claim(&["a"], "x", ttl, 0), [true]);
        assert_eq!(m.claim(&["a", "b"], "y", ttl, 1), [false, true]);
        assert_eq!(m.claim(&["a"], "x", ttl, 2), [true], "the owner claims again");
        assert_eq!(m.seen(&["a", "b", "c"], "z", 9_999), [true, true, false]);
        let named = m.holders(&["a", "b", "c"], "z", 9_999);
        assert_eq!(named, [Some("x".into()), Some("y".into()), None], "each copy names its owner");
        assert_eq!(m.seen(&["a", "b"], "x", 9_999), [false, true], "x's own key is not a copy");
        assert_eq!(m.seen(&["a"], "z", 10_002), [false], "expired at the ttl");
        assert_eq!(m.claim(&["a"], "y", ttl, 10_002), [true], "claimed again once expired");
        m.release(&["a", "b"], "x");
        assert_eq!(m.seen(&["a", "b"], "z", 10_003), [true, false], "a is y's; b expired");
        m.release(&["a", "b"], "y");
        assert_eq!(m.seen(&["a", "b"], "z", 10_003), [false, false]);
    }

    #[test]
    fn a_key_is_handed_over_only_by_its_unexpired_owner() {
        let m = SeenMap::default();
        let ttl = Duration::from_secs(10);
        assert!(!m.hand_over("a", "x", "y", ttl, 0), "nobody holds it");
        m.claim(&["a"], "x", ttl, 0);
        assert!(!m.hand_over("a", "z", "y", ttl, 1), "z does not hold it");
        assert!(m.hand_over("a", "x", "y", Duration::from_secs(100), 1));
        assert!(!m.hand_over("a", "x", "w", ttl, 2), "handed over once only");
        assert_eq!(m.holders(&["a"], "", 50_000), [Some("y".into())], "with the new ttl");
        assert!(!m.hand_over("a", "y", "w", ttl, 200_000), "expired");
    }

    #[test]
    fn expired_keys_are_pruned_as_the_map_grows() {
        let m = SeenMap::default();
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            m.claim(&[k], "o", Duration::from_millis(1), i as i64);
        }
        assert!(m.len() < 2100, "{} keys held, most of them expired", m.len());
    }
}
