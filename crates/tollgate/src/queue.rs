//! `tollgate queue …`: the gateway's hold queue, through the admin API.
//!
//! `list [--state S] [--json]`, `retry ID`, `release ID`, `purge ID` against
//! `--url` (default `http://127.0.0.1:8080`), with `--token` / `TOLLGATE_ADMIN_TOKEN` as the
//! bearer token. Exit code 0 on success, 1 when the server refuses or cannot be reached.

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::Value;

use crate::admin::{self, AdminTarget, encode_segment};
use crate::output::outln;

/// Arguments of `tollgate queue`.
#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    #[command(flatten)]
    target: AdminTarget,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// List queue items (received, admitted, held, dead, rejected, duplicate, delivered; all
    /// if omitted).
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
    admin::run("queue", async move {
        let out = call(&args).await?;
        if !out.is_empty() {
            outln!("{out}");
        }
        Ok(())
    })
}

async fn call(args: &QueueArgs) -> anyhow::Result<String> {
    let (method, path) = match &args.action {
        Action::List { state, .. } => {
            let query = state
                .as_deref()
                .map(|s| format!("?state={}", encode_segment(s)))
                .unwrap_or_default();
            (Method::GET, format!("/v1/queue{query}"))
        }
        Action::Retry { id } => (Method::POST, format!("/v1/queue/{}/retry", encode_segment(id))),
        Action::Release { id } => {
            (Method::POST, format!("/v1/queue/{}/release", encode_segment(id)))
        }
        Action::Purge { id } => (Method::DELETE, format!("/v1/queue/{}", encode_segment(id))),
    };
    if let Action::List { json, .. } = &args.action {
        // Every page, following the server's `Link: rel="next"` headers.
        let rows = args.target.get_all(&path).await?;
        return Ok(if *json { Value::Array(rows).to_string() } else { table(&rows) });
    }
    let text = args.target.send(method, &path).await?;
    let parse = |text: &str| -> anyhow::Result<Value> {
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("unexpected answer ({e}): {text}"))
    };
    match &args.action {
        Action::List { .. } => Ok(text),
        Action::Purge { id } => Ok(format!("purged {id}")),
        Action::Retry { .. } | Action::Release { .. } => Ok(table(&[parse(&text)?])),
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
    // Partner text (a partner's name, a reason quoting the file) as text only.
    crate::output::printable(&out.join("\n")).into_owned()
}
