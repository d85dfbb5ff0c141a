//! `tollgate check`: one quota check from the command line, for scripts and smoke tests.
//!
//! Prints the service's JSON answer on stdout. Exit codes: 0 allowed, 3 exceeded (any 429),
//! 1 error (unreachable, timeout, 5xx, refused credentials), 2 usage (bad arguments, or a 400
//! from the service because a value was refused).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::output::{self, Unwritten};

/// Arguments of `tollgate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The service, e.g. http://127.0.0.1:8080 (a URL ending in /v1/quota is used as is).
    #[arg(long)]
    url: String,
    /// The metering id, e.g. ShipmentStatus:CarrierXYZ.
    #[arg(long)]
    id: String,
    /// Allowed units per window (optional when a server policy supplies it).
    #[arg(long)]
    limit: Option<u64>,
    /// Window length in units.
    #[arg(long)]
    interval: Option<u32>,
    /// second, minute, hour, day, week or month.
    #[arg(long)]
    unit: Option<String>,
    /// Units this message consumes (0 probes without consuming).
    #[arg(long)]
    weight: Option<u64>,
    /// calendar, flexi or rolling.
    #[arg(long)]
    window: Option<String>,
    /// RFC 3339 anchor for calendar windows.
    #[arg(long)]
    start: Option<String>,
    /// Client key, sent as x-api-key.
    #[arg(long, env = "TOLLGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// For an https:// URL: trust only the CA certificates in this PEM file (default: the
    /// system's roots).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
}

/// Exit code for an allowed check.
const ALLOWED: u8 = 0;
/// Exit code for an error (unreachable, 5xx).
const ERROR: u8 = 1;
/// Exit code for a usage error (including values the service refused with 400).
const USAGE: u8 = 2;
/// Exit code for an exceeded quota.
const EXCEEDED: u8 = 3;

/// Runs `tollgate check`.
pub fn run(args: CheckArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(ERROR);
        }
    };
    match runtime.block_on(check(&args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(ERROR)
        }
    }
}

/// The `/v1/quota` URL for `--url`.
pub fn quota_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/quota") { base.to_owned() } else { format!("{base}/v1/quota") }
}

async fn check(args: &CheckArgs) -> anyhow::Result<u8> {
    let mut builder = reqwest::Client::builder();
    if let Some(file) = &args.ca_file {
        let pem = std::fs::read(file)
            .with_context(|| format!("--ca-file {}: cannot read", file.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("--ca-file {}: not PEM certificates", file.display()))?;
        anyhow::ensure!(!certs.is_empty(), "--ca-file {}: no CERTIFICATE block", file.display());
        builder = builder.tls_certs_only(certs);
    }
    let client = builder
        .no_proxy()
        .timeout(Duration::from_millis(args.timeout_ms))
        .build()
        .context("building the HTTP client")?;
    let url = quota_url(&args.url);
    let mut req = client.get(&url).header("metering-id", &args.id);
    let optional = [
        ("quota-limit", args.limit.map(|v| v.to_string())),
        ("quota-interval", args.interval.map(|v| v.to_string())),
        ("quota-timeunit", args.unit.clone()),
        ("message-weight", args.weight.map(|v| v.to_string())),
        ("quota-window", args.window.clone()),
        ("quota-start", args.start.clone()),
        ("x-api-key", args.api_key.clone()),
    ];
    for (name, value) in optional {
        if let Some(v) = value {
            req = req.header(name, v);
        }
    }
    let resp = req.send().await.with_context(|| format!("cannot reach {url}"))?;
    let status = resp.status();
    let body = resp.text().await.context("reading the answer")?;
    let pretty = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(body);
    let code = match status.as_u16() {
        200..=299 => ALLOWED,
        429 => EXCEEDED,
        400 => USAGE,
        _ => ERROR,
    };
    if code == ALLOWED || code == EXCEEDED {
        // The answer is the exit code: a reader gone away does not change it.
        if let Err(Unwritten::Failed(e)) = output::try_text(format_args!("{pretty}\n")) {
            eprintln!("error: cannot write to standard output: {e}");
            return Ok(ERROR);
        }
    } else {
        eprintln!("{status}");
        eprintln!("{pretty}");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_gets_the_quota_path_once() {
        assert_eq!(quota_url("http://h:1"), "http://h:1/v1/quota");
        assert_eq!(quota_url("http://h:1/"), "http://h:1/v1/quota");
        assert_eq!(quota_url("http://h:1/v1/quota"), "http://h:1/v1/quota");
    }
}
