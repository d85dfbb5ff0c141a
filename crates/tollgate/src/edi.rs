//! `tollgate edi …`: inspect, acknowledge and split EDI files.

use std::process::ExitCode;

/// Arguments of `tollgate edi`.
#[derive(Debug, clap::Args)]
pub struct EdiArgs {}

/// Runs `tollgate edi`.
pub fn run(_args: EdiArgs) -> ExitCode {
    ExitCode::from(2)
}
