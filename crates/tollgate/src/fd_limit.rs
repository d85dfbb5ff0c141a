//! The open-file limit, which bounds connections before `max_connections` does.
//!
//! Each connection is a file descriptor. Many systems start processes with a soft limit of
//! 1024, which would cap the service below its default of 4096 connections and make `accept`
//! fail instead of queueing clients. At start-up the soft limit is raised to the hard limit
//! (always allowed, no privilege needed); if that is still too low for `max_connections`
//! plus a reserve for files, the store and outgoing connections, the cap is lowered to fit
//! and a warning says how to raise the limit.

use std::num::NonZeroUsize;

/// Descriptors kept for everything that is not a client connection.
const RESERVE: u64 = 256;

/// Raises the soft open-file limit to the hard one and returns how many connections fit
/// (`wanted`, or fewer when the limit is too low).
#[cfg(unix)]
pub fn fit_connections(wanted: NonZeroUsize) -> NonZeroUsize {
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
    let Some(soft) = soft else { return wanted }; // unlimited
    let fits = usize::try_from(soft.saturating_sub(RESERVE))
        .ok()
        .map_or(NonZeroUsize::MAX, |n| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN));
    if fits < wanted {
        tracing::warn!(
            open_files = soft,
            max_connections = wanted,
            serving = fits,
            "the open-file limit is too low for [server] max_connections; serving fewer \
             (raise it with `ulimit -n` or LimitNOFILE=)"
        );
        return fits;
    }
    wanted
}

/// Without Unix limits, the configured cap stands.
#[cfg(not(unix))]
pub fn fit_connections(wanted: NonZeroUsize) -> NonZeroUsize {
    wanted
}
