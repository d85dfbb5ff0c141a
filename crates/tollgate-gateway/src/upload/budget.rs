//! The memory budget of uploads in flight, and each client's share of it.
//!
//! Invariants:
//! - Bytes reserved by all uploads together never exceed `upload_budget_bytes`; those of one
//!   client (a `[[client]]` by name, or a source address without a client key: IPv4 as is,
//!   IPv6 by /64) never exceed its share: a quarter of the budget, but at least
//!   `max_upload_bytes` (and at most the budget). So however many uploads one client keeps
//!   open, the others always have three quarters of the budget.
//! - A reservation is given back when it is dropped, whatever ended the upload; a client
//!   holding nothing has no entry, so the table holds at most one entry per upload in flight.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Who holds upload bytes: one share each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    /// A `[[client]]`, by name.
    Client(String),
    /// A source address without a client key (IPv6 by its /64).
    Address(IpAddr),
}

impl Holder {
    /// The holder for a request from `ip` without a client key.
    pub(crate) fn address(ip: IpAddr) -> Self {
        let ip = match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            },
        };
        Self::Address(ip)
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Client(name) => write!(f, "client {name:?}"),
            Self::Address(ip) => write!(f, "address {ip}"),
        }
    }
}

/// Upload bytes that may be held in memory at once, shared by all uploads, and each holder's
/// part of them. One permit is one byte; one upload reserves at most `u32::MAX` bytes
/// (`max_upload_bytes` is capped so).
#[derive(Debug, Clone)]
pub(crate) struct UploadBudget {
    units: Arc<Semaphore>,
    bytes: u64,
    share: u64,
    held: Arc<Mutex<HashMap<Holder, u64>>>,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The holder already holds `held` bytes of its share.
    Share {
        /// Bytes the holder has reserved.
        held: u64,
    },
    /// The whole budget is spent.
    Budget,
}

/// Bytes reserved by one upload; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    _units: OwnedSemaphorePermit,
    holder: Holder,
    bytes: u64,
    held: Arc<Mutex<HashMap<Holder, u64>>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.holder) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.remove(&self.holder);
            }
        }
    }
}

impl UploadBudget {
    /// A budget of `bytes`, each holder's share a quarter of it but at least `max_upload`.
    pub(crate) fn new(bytes: u64, max_upload: u64) -> Self {
        let units = usize::try_from(bytes).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        let share = (bytes / 4).max(max_upload).min(bytes);
        Self { units: Arc::new(Semaphore::new(units)), bytes, share, held: Arc::default() }
    }

    /// The whole budget, in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// One holder's share, in bytes.
    pub(crate) fn share(&self) -> u64 {
        self.share
    }

    /// Reserves `bytes` for `holder` now, or says why it cannot at the moment: the whole
    /// budget is checked first, then the holder's share.
    pub(crate) fn try_reserve(&self, holder: Holder, bytes: u64) -> Result<Reservation, Refusal> {
        let bytes = bytes.max(1);
        let units = u32::try_from(bytes).map_err(|_| Refusal::Budget)?;
        let permit =
            self.units.clone().try_acquire_many_owned(units).map_err(|_| Refusal::Budget)?;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let has = held.get(&holder).copied().unwrap_or(0);
        if has.saturating_add(bytes) > self.share {
            return Err(Refusal::Share { held: has }); // the permit goes back as it drops
        }
        held.insert(holder.clone(), has + bytes);
        Ok(Reservation { _units: permit, holder, bytes, held: Arc::clone(&self.held) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str) -> Holder {
        Holder::Client(name.into())
    }

    #[test]
    fn the_budget_refuses_what_it_cannot_hold_and_takes_it_back() {
        let b = UploadBudget::new(10_000, 6_000);
        let first = b.try_reserve(client("a"), 6_000).unwrap();
        assert_eq!(b.try_reserve(client("b"), 4_001).unwrap_err(), Refusal::Budget);
        let second = b.try_reserve(client("b"), 4_000).unwrap();
        assert_eq!(b.try_reserve(client("c"), 1).unwrap_err(), Refusal::Budget);
        drop(first);
        assert!(b.try_reserve(client("c"), 5_000).is_ok());
        drop(second);
        assert!(b.try_reserve(client("c"), u64::MAX).is_err());
    }

    #[test]
    fn one_holder_gets_its_share_and_no_more() {
        let b = UploadBudget::new(4_000, 500);
        assert_eq!(b.share(), 1_000);
        let a1 = b.try_reserve(client("a"), 600).unwrap();
        assert_eq!(b.try_reserve(client("a"), 401).unwrap_err(), Refusal::Share { held: 600 });
        let a2 = b.try_reserve(client("a"), 400).unwrap();
        let others: Vec<_> =
            ["b", "c", "d"].iter().map(|n| b.try_reserve(client(n), 1_000)).collect();
        assert!(others.iter().all(Result::is_ok), "{others:?}");
        drop((a1, a2, others));
        assert!(b.held.lock().unwrap().is_empty());
        assert!(b.try_reserve(client("a"), 1_000).is_ok());
    }

    #[test]
    fn addresses_count_ipv6_by_its_64() {
        let a = Holder::address("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = Holder::address("2001:db8:1:2:bbbb::9".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(
            Holder::address("::ffff:10.0.0.1".parse().unwrap()),
            Holder::address("10.0.0.1".parse().unwrap())
        );
    }
}
