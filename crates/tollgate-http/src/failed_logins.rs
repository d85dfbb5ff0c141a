//! Failed credentials per source address: after [`MAX_FAILURES`] wrong tokens from one address
//! within [`WINDOW`] (console logins, and every 401 answered to a request carrying a bearer
//! token, an `x-api-key` or a session cookie; see [`crate::access::CredentialLimit`]), every
//! login or credentialed request from it answers 429 with `Retry-After` until the window that
//! began with its first failure is over, so credentials cannot be guessed faster than that.
//! Other addresses are not affected.
//!
//! Every login counts as a failure before its token is checked, and a correct token gives its
//! one back: parallel guesses cannot slip past the limit, and logging in with a token one holds
//! does not reset the count of the guesses made beside it. API calls count after their answer,
//! so parallel valid calls never lock their source out; parallel wrong ones may pass the limit
//! by at most the listener's connection cap.
//!
//! An address is the client's IP as the listener gives it: the TCP peer, or behind a proxy
//! named in `[server] trusted_proxies` the hop that proxy forwarded for ([`crate::proxy`]),
//! never an `X-Forwarded-For` a client wrote itself. IPv6 addresses count by their /64, the
//! block one host usually holds. A request without a known address (a router called
//! in-process) counts under the unspecified address.
//!
//! Bounds: at most [`MAX_ADDRESSES`] addresses are tracked. An attempt from a new address when
//! the table is full first drops the expired entries, then the address not locked out whose
//! window ends first. An address under lockout is never dropped before its window ends, so new
//! addresses cannot free it; when every tracked address is locked out, a login from a new
//! address is refused ([`Refused::full`]) until the first lockout ends, while an API call
//! carrying credentials from it is let through ([`FailedLogins::locked`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::http::header::{HeaderValue, RETRY_AFTER};

use crate::problem::Problem;

/// Wrong tokens one address may send within [`WINDOW`].
pub const MAX_FAILURES: u32 = 10;
/// The window that begins with an address's first failure.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);
/// The most addresses tracked at once.
pub const MAX_ADDRESSES: usize = 4096;

/// Why an attempt was refused, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long until the address may try again.
    pub wait: Duration,
    /// True when the address itself is not locked out but every tracked one is, so there is
    /// no room to count it.
    pub full: bool,
}

impl Refused {
    /// The wait in whole seconds, rounded up, so that a client waiting that long is let in.
    pub fn retry_after_secs(&self) -> u64 {
        self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0)
    }
}

/// One address's failures in its current window.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the window ends (its first failure plus the window's length).
    ends: Instant,
    failures: u32,
}

/// The failed logins of the current window, per source address.
#[derive(Debug)]
pub struct FailedLogins {
    map: Mutex<HashMap<IpAddr, Entry>>,
    /// When the last lockout ends, in ms after `epoch`: before then [`FailedLogins::locked`]
    /// looks at the map; after, no address can be locked and it answers without the lock.
    /// Invariant: at least the `ends` of every entry with `max_failures` failures.
    lockouts_end_ms: AtomicU64,
    epoch: Instant,
    max_failures: u32,
    window: Duration,
    max_addresses: usize,
}

impl Default for FailedLogins {
    fn default() -> Self {
        Self::new(MAX_FAILURES, WINDOW, MAX_ADDRESSES)
    }
}

/// The key an address counts under: IPv4 as is (and IPv4-mapped IPv6 as IPv4), IPv6 by /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl FailedLogins {
    /// A table allowing `max_failures` per `window` per address (at least one of each) and
    /// tracking at most `max_addresses` (at least one).
    pub fn new(max_failures: u32, window: Duration, max_addresses: usize) -> Self {
        Self {
            map: Mutex::default(),
            lockouts_end_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            max_failures: max_failures.max(1),
            window,
            max_addresses: max_addresses.max(1),
        }
    }

    /// Wrong tokens one address may send within [`FailedLogins::window`].
    pub fn max_failures(&self) -> u32 {
        self.max_failures
    }

    /// The window that begins with an address's first failure.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Counts a login attempt from `ip` as a failure, or `Err` (counting nothing) while `ip`
    /// has used up its failures, or while the table is full of addresses that have.
    pub fn attempt(&self, ip: IpAddr) -> Result<(), Refused> {
        self.attempt_at(ip, Instant::now())
    }

    /// Counts one failed credential from `ip` (nothing when the table is full of locked-out
    /// addresses and `ip` is not among them: it is then refused anyway).
    pub fn failed(&self, ip: IpAddr) {
        let _ = self.attempt_at(ip, Instant::now());
    }

    /// `Some` while `ip` itself is locked out, counting nothing. Unlike a login
    /// ([`FailedLogins::attempt`]), an API call from an address that never failed is not
    /// refused when the table is full: addresses an attacker locked out must not stop a
    /// pipeline's calls (its middleware would hold on the 429, Envoy fail open on gRPC). Its
    /// wrong keys then go uncounted until an entry expires; keys are not guessable anyway.
    pub fn locked(&self, ip: IpAddr) -> Option<Refused> {
        self.locked_at(ip, Instant::now())
    }

    fn locked_at(&self, ip: IpAddr, now: Instant) -> Option<Refused> {
        if self.ms(now) >= self.lockouts_end_ms.load(Ordering::Acquire) {
            return None;
        }
        let map = self.lock();
        match map.get(&key(ip)) {
            Some(e) if e.ends > now && e.failures >= self.max_failures => {
                Some(Refused { wait: e.ends - now, full: false })
            }
            _ => None,
        }
    }

    /// The 429 answered to `ip` while it is refused.
    pub fn problem(&self, ip: IpAddr, refused: Refused) -> Problem {
        let secs = refused.retry_after_secs();
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-failed-logins",
            "Too many failed logins",
        )
        .detail(self.detail(ip, refused))
        .with("limit", self.max_failures)
        .with("window_seconds", self.window.as_secs())
        .with("retry_after", secs)
        .header(RETRY_AFTER, HeaderValue::from(secs))
    }

    /// Why `ip` is refused, in words: the 429's detail, and the gRPC status message.
    pub fn detail(&self, ip: IpAddr, refused: Refused) -> String {
        let secs = refused.retry_after_secs();
        let limit = self.max_failures;
        let window = self.window.as_secs();
        if refused.full {
            format!(
                "every address tracked for failed credentials is locked out after {limit} wrong \
                 ones; logins and credentialed requests from new addresses such as {ip} are \
                 refused for {secs} s more"
            )
        } else {
            format!(
                "{limit} wrong credentials (logins, bearer tokens, API keys or session cookies) \
                 came from {ip} within {window} s; logins and credentialed requests from this \
                 address are refused for {secs} s more"
            )
        }
    }

    /// Gives back the failure [`FailedLogins::attempt`] counted: `ip` sent a correct token.
    pub fn succeeded(&self, ip: IpAddr) {
        if let Some(e) = self.lock().get_mut(&key(ip)) {
            e.failures = e.failures.saturating_sub(1);
        }
    }

    /// How many addresses are tracked (expired ones included until they are dropped).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `at` in ms after `epoch`.
    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attempt_at(&self, ip: IpAddr, now: Instant) -> Result<(), Refused> {
        let ip = key(ip);
        let mut map = self.lock();
        if let Some(e) = map.get_mut(&ip) {
            if e.ends <= now {
                *e = Entry { ends: now + self.window, failures: 1 };
            } else if e.failures >= self.max_failures {
                return Err(Refused { wait: e.ends - now, full: false });
            } else {
                e.failures += 1;
            }
            let e = *e;
            self.note_lockout(e);
            return Ok(());
        }
        // Invariant: the table never holds more than `max_addresses` entries.
        if map.len() >= self.max_addresses {
            map.retain(|_, e| e.ends > now);
        }
        if map.len() >= self.max_addresses {
            // Invariant: an address under lockout stays until its window ends.
            let max = self.max_failures;
            let first = map.iter().filter(|(_, e)| e.failures < max).min_by_key(|(_, e)| e.ends);
            match first.map(|(k, _)| *k) {
                Some(k) => {
                    map.remove(&k);
                }
                None => {
                    let ends = map.values().map(|e| e.ends).min().unwrap_or(now);
                    return Err(Refused { wait: ends.saturating_duration_since(now), full: true });
                }
            }
        }
        let e = Entry { ends: now + self.window, failures: 1 };
        map.insert(ip, e);
        self.note_lockout(e);
        Ok(())
    }

    /// Keeps `lockouts_end_ms` at or after `e`'s end when `e` is locked out.
    fn note_lockout(&self, e: Entry) {
        if e.failures >= self.max_failures {
            self.lockouts_end_ms.fetch_max(self.ms(e.ends).saturating_add(1), Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_refused_after_its_failures_until_its_window_ends() {
        let t = FailedLogins::new(3, Duration::from_secs(60), 16);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(t.attempt_at(ip("192.0.2.1"), start), Ok(()));
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(
            t.attempt_at(ip("192.0.2.1"), later),
            Err(Refused { wait: Duration::from_secs(40), full: false })
        );
        assert_eq!(
            t.attempt_at(ip("192.0.2.1"), later),
            Err(Refused { wait: Duration::from_secs(40), full: false })
        );
        assert_eq!(t.attempt_at(ip("192.0.2.2"), later), Ok(()), "other addresses go on");
        let over = start + Duration::from_secs(60);
        assert_eq!(t.attempt_at(ip("192.0.2.1"), over), Ok(()), "a new window");
        assert_eq!(t.attempt_at(ip("192.0.2.1"), over), Ok(()));
    }

    #[test]
    fn a_correct_token_gives_back_its_own_attempt_only() {
        let t = FailedLogins::new(2, Duration::from_secs(60), 16);
        let now = Instant::now();
        assert_eq!(t.attempt_at(ip("192.0.2.1"), now), Ok(()));
        // A correct token: its attempt is given back, the failure before it stays.
        assert_eq!(t.attempt_at(ip("192.0.2.1"), now), Ok(()));
        t.succeeded(ip("192.0.2.1"));
        assert_eq!(t.attempt_at(ip("192.0.2.1"), now), Ok(()));
        assert!(t.attempt_at(ip("192.0.2.1"), now).is_err());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let t = FailedLogins::new(2, Duration::from_secs(60), 16);
        let now = Instant::now();
        t.attempt_at(ip("2001:db8:1:2::1"), now).unwrap();
        t.attempt_at(ip("2001:db8:1:2:ffff::9"), now).unwrap();
        assert!(t.attempt_at(ip("2001:db8:1:2::77"), now).is_err());
        assert_eq!(t.attempt_at(ip("2001:db8:1:3::1"), now), Ok(()));
        t.attempt_at(ip("::ffff:192.0.2.9"), now).unwrap();
        t.attempt_at(ip("192.0.2.9"), now).unwrap();
        assert!(t.attempt_at(ip("192.0.2.9"), now).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_newest_windows() {
        let t = FailedLogins::new(2, Duration::from_secs(60), 4);
        let start = Instant::now();
        for i in 0..10u8 {
            let at = start + Duration::from_secs(u64::from(i));
            t.attempt_at(IpAddr::from([10, 0, 0, i]), at).unwrap();
            assert!(t.len() <= 4);
        }
        assert_eq!(t.len(), 4);
        let now = start + Duration::from_secs(10);
        t.attempt_at(ip("10.0.0.9"), now).unwrap();
        assert!(t.attempt_at(ip("10.0.0.9"), now).is_err(), "the newest is kept");
        t.attempt_at(ip("10.0.0.0"), now).unwrap();
        assert_eq!(t.attempt_at(ip("10.0.0.0"), now), Ok(()), "the oldest made room");
    }

    #[test]
    fn a_locked_address_is_never_dropped_for_a_new_one() {
        let t = FailedLogins::new(2, Duration::from_secs(60), 3);
        let start = Instant::now();
        for _ in 0..2 {
            t.attempt_at(ip("10.0.0.1"), start).unwrap();
        }
        for i in 2..50u8 {
            t.attempt_at(IpAddr::from([10, 0, 0, i]), start).unwrap();
            assert!(t.attempt_at(ip("10.0.0.1"), start).is_err(), "still locked after {i}");
        }
        // A table full of locked addresses refuses new ones until the first lockout ends.
        for a in ["10.0.1.1", "10.0.1.2"] {
            t.attempt_at(ip(a), start).unwrap();
            t.attempt_at(ip(a), start).unwrap();
        }
        let e = t.attempt_at(ip("10.0.2.1"), start + Duration::from_secs(10)).unwrap_err();
        assert_eq!(e, Refused { wait: Duration::from_secs(50), full: true });
        // An API call from it is not refused: only its own lockout would refuse it.
        assert_eq!(t.locked_at(ip("10.0.2.1"), start + Duration::from_secs(10)), None);
        assert!(t.locked_at(ip("10.0.1.1"), start + Duration::from_secs(10)).is_some());
        assert_eq!(t.attempt_at(ip("10.0.2.1"), start + Duration::from_secs(60)), Ok(()));
    }
}
