//! `tollgate counters list|reset`: the live counters, through the admin API.
//!
//! The admin token comes from `--token` or `TOLLGATE_ADMIN_TOKEN` (none is needed against a
//! loopback server without a token). Exit codes: 0 done, 1 error (unreachable, refused,
//! 5xx), 2 usage.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::Value;

use crate::admin::{self, AdminTarget, encode_segment};

/// Arguments of `tollgate counters`.
#[derive(Debug, clap::Args)]
pub struct CountersArgs {
    #[command(flatten)]
    target: AdminTarget,
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
    admin::run("counters", counters(args))
}

async fn counters(args: CountersArgs) -> anyhow::Result<()> {
    let (method, path) = match &args.action {
        Action::List { prefix, .. } => {
            (Method::GET, format!("/v1/counters?prefix={}", encode_segment(prefix)))
        }
        Action::Reset { id } => (Method::DELETE, format!("/v1/counters/{}", encode_segment(id))),
    };
    let text = args.target.send(method, &path).await?;
    let body: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("unexpected answer ({e}): {text}"))?;
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
