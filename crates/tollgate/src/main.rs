//! The `tollgate` command: the quota service, the EDI gateway and the tools around them.
#![forbid(unsafe_code)]

mod edi;
mod queue;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Traffic control for EDI / B2B pipelines.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read, acknowledge and split X12 / EDIFACT interchanges.
    Edi(edi::EdiArgs),
    /// List, retry, release or purge the gateway's held and dead interchanges.
    Queue(queue::QueueArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Edi(args) => edi::run(args),
        Command::Queue(args) => queue::run(args),
    }
}
