//! `tollgate queue …`: the gateway's hold queue, through the admin API.

use std::process::ExitCode;

/// Arguments of `tollgate queue`.
#[derive(Debug, clap::Args)]
pub struct QueueArgs {}

/// Runs `tollgate queue`.
pub fn run(_args: QueueArgs) -> ExitCode {
    ExitCode::from(2)
}
