//! The client's address behind reverse proxies the operator trusts (`[server] trusted_proxies`).
//!
//! Per-address limits (failed credentials, an upload's share when it has no key) count by the
//! client's address. Without trusted proxies that is the TCP peer, always. When the peer is a
//! trusted proxy, the address is read from `X-Forwarded-For`, right to left: each hop a trusted
//! proxy appended is skipped, and the first address not in the trusted list is the client. Only
//! the hops the trusted proxies wrote are believed, so a client cannot choose its address by
//! sending an `X-Forwarded-For` of its own: its value stays left of the proxy's hop, never read.
//! A hop that is not an IP address ends the walk at the last trusted hop.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use axum::http::HeaderMap;

/// The header a reverse proxy appends the address it received a request from to.
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The most `X-Forwarded-For` hops read (a longer chain counts as its rightmost hops).
const MAX_HOPS: usize = 32;

/// An address block: `10.0.0.0/8`, `2001:db8::/32`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// True when `ip` is inside this block (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.trim().parse().map_err(|_| {
            format!("{addr:?} is not an IP address (expected e.g. 10.0.0.0/8 or 2001:db8::1)")
        })?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("the prefix length {p:?} is not between 0 and {max}"))?,
        };
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The reverse proxies whose `X-Forwarded-For` hops are believed; empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Arc<[Cidr]>);

impl TrustedProxies {
    /// Trusts the proxies in `blocks`.
    pub fn new(blocks: Vec<Cidr>) -> Self {
        Self(blocks.into())
    }

    /// True when no proxy is trusted (the peer is always the client).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client's address for a request from `peer` carrying `headers`; see the module docs.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let values: Vec<&[u8]> =
            headers.get_all(FORWARDED_FOR).iter().map(|v| v.as_bytes()).collect();
        let hops = values.iter().rev().flat_map(|v| v.rsplit(|b| *b == b',')).take(MAX_HOPS);
        for hop in hops {
            let Some(ip) = std::str::from_utf8(hop).ok().and_then(|h| h.trim().parse().ok()) else {
                return client;
            };
            client = IpAddr::to_canonical(&ip);
            if !self.trusts(client) {
                return client;
            }
        }
        client
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(blocks: &[&str]) -> TrustedProxies {
        TrustedProxies::new(blocks.iter().map(|b| b.parse().unwrap()).collect())
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn blocks_read_and_match() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains(ip("10.1.200.3")));
        assert!(!c.contains(ip("10.2.0.1")));
        assert!(c.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped counts as IPv4");
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("192.0.2.1")));
        assert!("2001:db8::/32".parse::<Cidr>().unwrap().contains(ip("2001:db8:1::5")));
        assert_eq!("192.0.2.7".parse::<Cidr>().unwrap().to_string(), "192.0.2.7/32");
        let e = "10.0.0.0/33".parse::<Cidr>().unwrap_err();
        assert!(e.contains("\"33\"") && e.contains("32"), "{e}");
        let e = "proxy.local".parse::<Cidr>().unwrap_err();
        assert!(e.contains("\"proxy.local\""), "{e}");
    }

    #[test]
    fn only_hops_written_by_trusted_proxies_are_believed() {
        let t = trusted(&["10.0.0.0/8"]);
        let h = forwarded(&["6.6.6.6, 198.51.100.4"]);
        assert_eq!(t.client(ip("10.0.0.2"), &h), ip("198.51.100.4"), "the proxy's hop");
        assert_eq!(t.client(ip("192.0.2.9"), &h), ip("192.0.2.9"), "an untrusted peer");
        let chain = forwarded(&["6.6.6.6", "198.51.100.4, 10.0.0.7"]);
        assert_eq!(t.client(ip("10.0.0.2"), &chain), ip("198.51.100.4"), "two proxies");
        let bad = forwarded(&["198.51.100.4, junk, 10.0.0.7"]);
        assert_eq!(t.client(ip("10.0.0.2"), &bad), ip("10.0.0.7"), "stops at a bad hop");
        assert_eq!(t.client(ip("10.0.0.2"), &HeaderMap::new()), ip("10.0.0.2"), "no header");
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.0.0.2"), &h), ip("10.0.0.2"), "nothing trusted");
    }
}
