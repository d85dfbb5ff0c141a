//! `tollgate queue …`: the gateway's hold queue, through the admin API.
//!
//! `list [--state S] [--json]`, `retry ID`, `release ID`, `purge ID` against
//! `--url` (default `http://127.0.0.1:8080`), with `--token` / `TOLLGATE_ADMIN_TOKEN` as the
//! bearer token. Exit code 0 on success, 1 when the server refuses or cannot be reached.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

/// Arguments of `tollgate queue`.
#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Base URL of the running `tollgate serve`.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Admin bearer token.
    #[arg(long, global = true, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// List queue items (held, dead, rejected, duplicate, delivered, received; all if omitted).
    List {
        /// Only items in this state.
        #[arg(long)]
        state: Option<String>,
        /// Print the JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Re-meter an item now.
    Retry {
        /// Item id.
        id: String,
    },
    /// Deliver an item without metering.
    Release {
        /// Item id.
        id: String,
    },
    /// Remove an item and its spooled bytes.
    Purge {
        /// Item id.
        id: String,
    },
}

/// Runs `tollgate queue`.
pub fn run(args: QueueArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate queue: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(call(&args)) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tollgate queue: {e}");
            ExitCode::from(1)
        }
    }
}

async fn call(args: &QueueArgs) -> Result<String, String> {
    let base = args.url.trim_end_matches('/');
    let client = reqwest::Client::new();
    let seg = |id: &str| -> String {
        id.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    };
    let req = match &args.action {
        Action::List { state, .. } => {
            let query = state.as_deref().map(|s| format!("?state={}", seg(s))).unwrap_or_default();
            client.get(format!("{base}/v1/queue{query}"))
        }
        Action::Retry { id } => client.post(format!("{base}/v1/queue/{}/retry", seg(id))),
        Action::Release { id } => client.post(format!("{base}/v1/queue/{}/release", seg(id))),
        Action::Purge { id } => client.delete(format!("{base}/v1/queue/{}", seg(id))),
    };
    let req = match &args.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    let resp = req.send().await.map_err(|e| format!("{base}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("{base}: {e}"))?;
    if !status.is_success() {
        let detail = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|p| {
                let title = p["title"].as_str()?.to_owned();
                Some(match p["detail"].as_str() {
                    Some(d) => format!("{title}: {d}"),
                    None => title,
                })
            })
            .unwrap_or(text);
        return Err(format!("{status}: {detail}"));
    }
    match &args.action {
        Action::List { json: true, .. } => Ok(text),
        Action::List { .. } => {
            let rows: Vec<Value> =
                serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))?;
            Ok(table(&rows))
        }
        Action::Purge { id } => Ok(format!("purged {id}")),
        Action::Retry { .. } | Action::Release { .. } => {
            let row: Value =
                serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))?;
            Ok(table(&[row]))
        }
    }
}

fn table(rows: &[Value]) -> String {
    let cols =
        ["id", "state", "partner", "document", "weight", "attempts", "next_attempt_at", "reason"];
    let cell = |r: &Value, c: &str| match &r[c] {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let mut widths: Vec<usize> = cols.iter().map(|c| c.len()).collect();
    for r in rows {
        for (i, c) in cols.iter().enumerate().take(cols.len() - 1) {
            widths[i] = widths[i].max(cell(r, c).len());
        }
    }
    let line =
        |cells: Vec<String>| {
            cells
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if i + 1 == cols.len() { s.clone() } else { format!("{s:<w$}", w = widths[i]) }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
    let mut out = vec![line(cols.iter().map(|c| c.to_uppercase()).collect())];
    for r in rows {
        out.push(line(cols.iter().map(|c| cell(r, c)).collect()));
    }
    out.join("\n")
}
