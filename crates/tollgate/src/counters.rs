//! `tollgate counters list|reset`: the live counters, through the admin API.
//!
//! The admin token comes from `--token` or `TOLLGATE_ADMIN_TOKEN` (none is needed against a
//! loopback server without a token). Exit codes: 0 done, 1 error (unreachable, refused,
//! 5xx), 2 usage.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// Arguments of `tollgate counters`.
#[derive(Debug, clap::Args)]
pub struct CountersArgs {
    /// The service.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Admin bearer token.
    #[arg(long, global = true, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// List live counters (optionally those whose id starts with --prefix).
    List {
        /// Only ids starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Print the raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Drop every counter of one metering id.
    Reset {
        /// The metering id.
        id: String,
    },
}

/// Runs `tollgate counters`.
pub fn run(args: CountersArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(counters(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Percent-encodes a metering id for a path segment or query value (keeps unreserved
/// characters and `:`).
pub fn encode_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn counters(args: &CountersArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")?;
    let base = args.url.trim_end_matches('/');
    let req = match &args.action {
        Action::List { prefix, .. } => {
            client.get(format!("{base}/v1/counters?prefix={}", encode_segment(prefix)))
        }
        Action::Reset { id } => client.delete(format!("{base}/v1/counters/{}", encode_segment(id))),
    };
    let req = match &args.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    let resp = req.send().await.with_context(|| format!("cannot reach {base}"))?;
    let status = resp.status();
    let body: Value = resp.json().await.context("reading the answer")?;
    if !status.is_success() {
        let detail = body["detail"].as_str().unwrap_or("");
        bail!("{status}: {detail}");
    }
    match &args.action {
        Action::List { json: true, .. } => {
            println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
        }
        Action::List { json: false, .. } => print_table(&body),
        Action::Reset { id } => {
            println!("{id}: {} counter(s) reset", body["removed"].as_u64().unwrap_or(0));
        }
    }
    Ok(())
}

fn print_table(body: &Value) {
    let empty = Vec::new();
    let rows = body["counters"].as_array().unwrap_or(&empty);
    println!("{:<40} {:>10} {:>8} {:<12} WINDOW END", "IDENTIFIER", "USED", "EXCEEDED", "WINDOW");
    for c in rows {
        let window = format!(
            "{}{}/{}",
            c["interval"].as_u64().unwrap_or(0),
            c["unit"].as_str().unwrap_or("?").chars().next().unwrap_or('?'),
            c["window"].as_str().unwrap_or("?")
        );
        println!(
            "{:<40} {:>10} {:>8} {:<12} {}",
            c["identifier"].as_str().unwrap_or(""),
            c["used"].as_u64().unwrap_or(0),
            c["exceed_count"].as_u64().unwrap_or(0),
            window,
            c["window_end"].as_str().unwrap_or("-"),
        );
    }
    println!("{} counter(s)", rows.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_for_a_path_segment() {
        assert_eq!(encode_segment("ShipmentStatus:Carrier-1"), "ShipmentStatus:Carrier-1");
        assert_eq!(encode_segment("a/b?c#d%"), "a%2Fb%3Fc%23d%25");
    }
}
