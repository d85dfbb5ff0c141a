//! `tollgate counters list|reset`: the live counters, through the admin API.
//!
//! The admin token comes from `--token` or `TOLLGATE_ADMIN_TOKEN` (none is needed against a
//! loopback server without a token). Exit codes: 0 done, 1 error (unreachable, refused,
//! 5xx), 2 usage.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::Value;

use crate::admin::{self, AdminTarget, encode_segment};
use crate::output::outln;

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
        /// Counters asked for per request (1 to 10,000). When absent: the most a page holds
        /// for the table, since each page costs the server a pass over its counters; the
        /// server's default with --json.
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this position (a page's `next`).
        #[arg(long, default_value = "")]
        after: String,
        /// Print the raw JSON answer of one page instead of a table of every page.
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
    match &args.action {
        Action::List { prefix, limit, after, json } => {
            let mut after = after.clone();
            let (mut total, mut first) = (0, true);
            loop {
                let mut path = format!(
                    "/v1/counters?prefix={}&after={}",
                    encode_segment(prefix),
                    encode_segment(&after)
                );
                let table_page = (!*json).then_some(tollgate_server::MAX_COUNTER_PAGE);
                if let Some(n) = limit.map(|n| n as usize).or(table_page) {
                    path.push_str(&format!("&limit={n}"));
                }
                let body = call(&args.target, Method::GET, &path).await?;
                if *json {
                    outln!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
                    return Ok(());
                }
                total += print_rows(&body, first);
                first = false;
                match body["next"].as_str() {
                    Some(next) => after = next.to_owned(),
                    None => break,
                }
            }
            outln!("{total} counter(s)");
        }
        Action::Reset { id } => {
            let path = format!("/v1/counters/{}", encode_segment(id));
            let body = call(&args.target, Method::DELETE, &path).await?;
            outln!("{id}: {} counter(s) reset", body["removed"].as_u64().unwrap_or(0));
        }
    }
    Ok(())
}

async fn call(target: &AdminTarget, method: Method, path: &str) -> anyhow::Result<Value> {
    let text = target.send(method, path).await?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("unexpected answer ({e}): {text}"))
}

/// Prints a page's counters as table rows (under a heading when `heading`); returns how many.
fn print_rows(body: &Value, heading: bool) -> usize {
    let empty = Vec::new();
    let rows = body["counters"].as_array().unwrap_or(&empty);
    if heading {
        outln!("{:<40} {:>10} {:>8} {:<12} WINDOW END", "IDENTIFIER", "USED", "EXCEEDED", "WINDOW");
    }
    for c in rows {
        let window = format!(
            "{}{}/{}",
            c["interval"].as_u64().unwrap_or(0),
            c["unit"].as_str().unwrap_or("?").chars().next().unwrap_or('?'),
            c["window"].as_str().unwrap_or("?")
        );
        outln!(
            "{:<40} {:>10} {:>8} {:<12} {}",
            c["identifier"].as_str().unwrap_or(""),
            c["used"].as_u64().unwrap_or(0),
            c["exceed_count"].as_u64().unwrap_or(0),
            window,
            c["window_end"].as_str().unwrap_or("-"),
        );
    }
    rows.len()
}
