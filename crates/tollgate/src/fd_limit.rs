//! The open-file limit, which bounds connections before `max_connections` does, and its split
//! between the listeners.
//!
//! Each connection is a file descriptor. Many systems start processes with a soft limit of
//! 1024, which would cap the service below its default of 4096 connections and make `accept`
//! fail instead of queueing clients. At start-up the soft limit is raised to the hard limit
//! (always allowed, no privilege needed). Then a reserve is kept for everything that is not a
//! client connection (files, the store, outgoing connections, the gateway): [`reserve`] of the
//! limit. What is left is shared by the listeners: each gets its configured cap, or, when the
//! caps add up to more, a share in proportion to its cap (at least one connection each), and a
//! warning says how to raise the limit. So a flood of one listener can neither take the
//! descriptors of the other nor those of the rest of the process: `/healthz`, `/readyz` and the
//! admin API keep answering on the HTTP listener while the gRPC one is full, and the other way
//! round within the HTTP listener's own timeouts.

use std::num::NonZeroUsize;

/// Descriptors kept for everything that is not a client connection, out of a soft limit of
/// `limit`: a quarter of it, at least 64 and at most 256.
pub fn reserve(limit: u64) -> u64 {
    (limit / 4).clamp(64, 256)
}

/// The caps the listeners are served with: `http` and `grpc` (when gRPC is on) as
/// configured, or their shares of `limit` minus the [`reserve`] when that is smaller.
pub fn split(
    limit: Option<u64>,
    http: NonZeroUsize,
    grpc: Option<NonZeroUsize>,
) -> (NonZeroUsize, Option<NonZeroUsize>) {
    let Some(limit) = limit else { return (http, grpc) }; // unlimited
    let spare = usize::try_from(limit.saturating_sub(reserve(limit))).unwrap_or(usize::MAX);
    let wanted = http.get().saturating_add(grpc.map_or(0, NonZeroUsize::get));
    if wanted <= spare {
        return (http, grpc);
    }
    let at_least_one = |n: usize| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
    let Some(g) = grpc else { return (at_least_one(spare), None) };
    // In proportion to the caps, in u128 so that no product overflows.
    let share = (spare as u128 * g.get() as u128 / wanted as u128) as usize;
    let g_fit = at_least_one(share);
    let h_fit = at_least_one(spare.saturating_sub(g_fit.get()));
    (h_fit.min(http), Some(g_fit.min(g)))
}

/// Raises the soft open-file limit to the hard one and returns the caps that fit (see
/// [`split`]), warning when they are below the configured ones.
#[cfg(unix)]
pub fn fit_connections(
    http: NonZeroUsize,
    grpc: Option<NonZeroUsize>,
) -> (NonZeroUsize, Option<NonZeroUsize>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current;
    if limit.current != limit.maximum {
        let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => soft = limit.maximum,
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
        }
    }
    let (h, g) = split(soft, http, grpc);
    if h < http || g < grpc {
        tracing::warn!(
            open_files = soft,
            reserved = soft.map(reserve),
            max_connections = http,
            serving = h,
            grpc_max_connections = grpc.map(NonZeroUsize::get),
            grpc_serving = g.map(NonZeroUsize::get),
            "the open-file limit is too low for [server] max_connections (and \
             grpc_max_connections); serving fewer (raise it with `ulimit -n` or LimitNOFILE=)"
        );
    }
    (h, g)
}

/// Without Unix limits, the configured caps stand.
#[cfg(not(unix))]
pub fn fit_connections(
    http: NonZeroUsize,
    grpc: Option<NonZeroUsize>,
) -> (NonZeroUsize, Option<NonZeroUsize>) {
    (http, grpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn caps_that_fit_stand_and_others_share_what_is_left() {
        assert_eq!(split(None, nz(4096), Some(nz(1024))), (nz(4096), Some(nz(1024))));
        assert_eq!(split(Some(1 << 20), nz(4096), Some(nz(1024))), (nz(4096), Some(nz(1024))));
        // 256 descriptors: 64 kept, 192 shared 4:1.
        assert_eq!(split(Some(256), nz(4096), Some(nz(1024))), (nz(154), Some(nz(38))));
        assert_eq!(split(Some(256), nz(4096), None), (nz(192), None));
        assert_eq!(split(Some(256), nz(100), Some(nz(1000))), (nz(18), Some(nz(174))));
        // Nothing left: one connection each, never zero.
        assert_eq!(split(Some(10), nz(4096), Some(nz(1024))), (nz(1), Some(nz(1))));
        assert_eq!(reserve(20_000), 256);
    }
}
