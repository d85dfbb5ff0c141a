//! `tollgate simulate` and `tollgate advise`: the command line of the simulator
//! (`tollgate-sim`). Reports go to `--out`, the summary (simulate) or the proposal as TOML
//! (advise) to stdout, progress and messages to stderr. Bad input exits 1 with the file, line
//! and field.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tollgate_sim::{Scenario, Simulation, Sweep, gateway_table};

use crate::output::out;

/// `tollgate simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The scenario (TOML): partners, traffic, bursts, backend capacity, and `[gateway]`.
    scenario: PathBuf,
    /// Take the gateway (routes, limits, partners) from this config's `[gateway]` section
    /// instead of the scenario's.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where report.html, report.json and the charts (SVG) are written.
    #[arg(long, default_value = "simulation")]
    out: PathBuf,
    /// The random seed (the scenario's `seed`, else 1).
    #[arg(long)]
    seed: Option<u64>,
    /// One run per value of a route's key: `ROUTE.KEY=v1,v2,…` (e.g. ShipmentStatus.limit=500,1000).
    #[arg(long)]
    sweep: Option<Sweep>,
}

/// `tollgate advise`.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// A CSV export of a message log with a header and the columns time (RFC 3339), partner,
    /// document and records, in any order.
    #[arg(long, conflicts_with = "from_queue", required_unless_present = "from_queue")]
    history: Option<PathBuf>,
    /// Read the history from the gateway's own record of delivered items in `--data-dir`.
    #[arg(long)]
    from_queue: bool,
    /// The data directory of the gateway (for `--from-queue`; the gateway must be stopped).
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
    /// The share of ordinary hours that may be held, in percent (`0.1%` or `0.1`).
    #[arg(long, default_value = "0.1%")]
    target_held: String,
    /// The factor the proposed limit is multiplied by.
    #[arg(long, default_value_t = 1.5)]
    headroom: f64,
    /// Where the replay's report is written.
    #[arg(long, default_value = "advice")]
    out: PathBuf,
    /// Name each proposal by this config's route and metering id, and show the limit in force
    /// (the route's, or a `[[policy]]`'s) beside it.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// A progress bar on stderr when stderr is a terminal (never touching a terminal otherwise).
fn progress_bar(total: u64) -> ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {msg} [{bar:40}] {pos}/{len} interchanges, {elapsed} elapsed, about {eta} left",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("simulating");
    bar
}

/// Runs `tollgate simulate`.
pub fn run(args: SimulateArgs) -> ExitCode {
    match simulate(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn simulate(args: &SimulateArgs) -> Result<(), String> {
    let file = args.scenario.display().to_string();
    let scenario = Scenario::load(&args.scenario).map_err(|e| e.to_string())?;
    let table =
        gateway_table(&scenario, &file, args.config.as_deref()).map_err(|e| e.to_string())?;
    let seed = args.seed.unwrap_or(scenario.seed);
    let runs = args.sweep.as_ref().map_or(1, |s| s.values.len()) as u64;
    let expected = tollgate_sim::arrivals(&scenario, seed).len() as u64;
    let bar = progress_bar(expected * runs);
    let sim = tollgate_sim::simulate(
        &scenario,
        &table,
        seed,
        args.sweep.as_ref(),
        &|n| bar.inc(n),
        &mut |_| {},
    )
    .map_err(|e| format!("{file}: {e}"))?;
    bar.finish_and_clear();
    for note in &sim.notes {
        eprintln!("note: {note}");
    }
    tollgate_sim::write_report(&sim, &args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    out!("{}", summary(&sim));
    eprintln!("report: {}", args.out.join("report.html").display());
    Ok(())
}

/// The terminal summary: one table per case.
pub fn summary(sim: &Simulation) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for case in &sim.cases {
        let f = &case.figures;
        if !case.label.is_empty() {
            let _ = writeln!(o, "== {}", case.label);
        }
        let _ = writeln!(
            o,
            "{:<20} {:>9} {:>9} {:>9} {:>9} {:>12} {:>10} {:>9}",
            "partner",
            "offered",
            "delivered",
            "held",
            "ever held",
            "longest hold",
            "duplicate",
            "rejected"
        );
        for r in f.partners.iter().chain(std::iter::once(&f.total)) {
            let name = if sim.bursting.contains(&r.partner) {
                format!("{} *", r.partner)
            } else {
                r.partner.clone()
            };
            let _ = writeln!(
                o,
                "{:<20} {:>9} {:>9} {:>9} {:>9} {:>11}s {:>10} {:>9}",
                name,
                r.offered,
                r.delivered,
                r.held,
                r.ever_held,
                r.longest_hold_s,
                r.duplicates,
                r.rejected
            );
        }
        let _ = writeln!(o, "{}", f.end_state());
        let _ = writeln!(
            o,
            "backend peak per hour: {} with Tollgate, {} without (capacity {}); hours over capacity: {} with, {} without",
            f.peak_with,
            f.peak_without,
            f.capacity_per_hour,
            f.hours_over_with,
            f.hours_over_without
        );
        let _ = writeln!(o, "(* bursts)");
    }
    o
}

/// Runs `tollgate advise`.
pub fn advise(args: AdviseArgs) -> ExitCode {
    match tollgate_sim::advise(
        args.history.as_deref(),
        args.from_queue.then_some(args.data_dir.as_path()),
        args.config.as_deref(),
        &args.target_held,
        args.headroom,
        &args.out,
        &|total| {
            let bar = progress_bar(total);
            Box::new(move |n| bar.inc(n))
        },
    ) {
        Ok(toml) => {
            out!("{toml}");
            eprintln!("report: {}", args.out.join("report.html").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
