//! Log output: where log records go, in which format, and when they carry colour.
//!
//! Records go to stderr; stdout carries answers and the `listening on http://ADDR` line, which
//! is printed the same way in every log format (it is not a log record).
//!
//! Invariant: **no ANSI escape codes unless stderr is a terminal** (and `NO_COLOR` is unset),
//! so files, pipes and journald get plain text. `RUST_LOG` filters in both formats (default
//! `info`; e.g. `RUST_LOG=info,tollgate_gateway=debug`).
//!
//! What each level carries (the rule every `tracing` call follows):
//! - `error`: something failed that an operator must fix or know about: a commit of counters
//!   or of the spool failed, a refused policy file, a file the parser failed on, the quota
//!   service refusing the gateway's requests, a corrupt state file moved aside, a failed backup.
//! - `warn`: degraded, retried on its own, or lost work waiting for an operator: a delivery
//!   failed (retrying), an item went dead, the quota service is unavailable or its breaker
//!   opened, the store could not decide, orphaned spool files, no admin token off loopback.
//! - `info`: the life cycle and rare events: serving (address, store), gateway started and
//!   stopped, signals, policies reloaded, counter resets, an outage's end, backups.
//! - `debug`: routine detail: connection errors and the connection cap, dedup pruning, Redis
//!   fallbacks decided locally.

use std::io::IsTerminal;
use std::str::FromStr;

/// How log records are written: `--log-format` and `[server] log_format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per record (the default).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the record's
    /// own fields (`item`, `partner`, `metering_id`, …) at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err("expected text or json".to_owned()),
        }
    }
}

/// Installs the process's log subscriber (once; a second call changes nothing).
pub fn init(format: LogFormat) {
    init_at(format, "info");
}

/// [`init`] with another default level when `RUST_LOG` is unset (`simulate` and `advise`
/// show warnings only: the gateway they run is theirs, not a service).
pub fn init_at(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colour()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Colour only for a person at a terminal who has not asked for none.
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_text_and_json() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert!("JSON".parse::<LogFormat>().is_err());
        assert!("".parse::<LogFormat>().is_err());
    }
}
