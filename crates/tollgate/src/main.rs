//! The `tollgate` command: the quota service, the EDI gateway and the tools around them.
//!
//! Each subcommand lives in its own module: `serve` runs the service, `check` asks it one
//! question, `counters` administers live counters, `edi` and `queue` work on EDI files and the
//! gateway's hold queue, `backup` has a running service copy its data directory; `simulate` and `advise` run
//! traffic through the real gateway on a virtual clock. Usage errors exit with code 2 (clap's convention).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod admin;
mod backup;
mod check;
mod config;
mod console;
mod counters;
mod edi;
mod fd_limit;
mod logging;
mod notifications;
mod notify;
mod openapi;
mod output;
mod queue;
mod rls;
mod serve;
mod simulate;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The system allocator, on purpose. mimalloc spent about 12 % less CPU per `/v1/quota` answer,
// but held 90 B per live counter against 71 B and gave back 5 % of it after the windows
// expired, against 83 % (BENCHMARKS.md, "The release server's memory").

/// Traffic control for EDI / B2B pipelines.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the quota service (and the EDI gateway when the config has a `[gateway]` section).
    Serve(serve::ServeArgs),
    /// Ask a running service one quota question; exit 0 allowed, 3 exceeded, 1 error.
    Check(check::CheckArgs),
    /// List or reset live counters through the admin API.
    Counters(counters::CountersArgs),
    /// Read, acknowledge and split X12 / EDIFACT interchanges.
    Edi(edi::EdiArgs),
    /// List, retry, release or purge the gateway's held and dead interchanges.
    Queue(queue::QueueArgs),
    /// Have a running service write a consistent copy of its data directory.
    Backup(backup::BackupArgs),
    /// Run a traffic scenario through the real gateway on a virtual clock, and report.
    Simulate(simulate::SimulateArgs),
    /// Propose limits from a traffic history, and replay the history under them.
    Advise(simulate::AdviseArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Simulate(_) | Command::Advise(_)) {
        logging::init_at(logging::LogFormat::Text, "warn");
    } else if !matches!(cli.command, Command::Serve(_)) {
        // `serve` installs its own once the config file has chosen the format.
        logging::init(logging::LogFormat::Text);
    }
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Check(args) => check::run(args),
        Command::Counters(args) => counters::run(args),
        Command::Edi(args) => edi::run(args),
        Command::Queue(args) => queue::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Advise(args) => simulate::advise(args),
    }
}
