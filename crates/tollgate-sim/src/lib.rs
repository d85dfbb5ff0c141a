//! `tollgate-sim`: what Tollgate would do to a partner's traffic, seen before it happens.
//!
//! [`simulate`] runs a [`Scenario`] (partners, their traffic and bursts, the backend's
//! capacity) through the real gateway pipeline and the real quota engine on a virtual clock
//! (module `run`), and [`write_report`] renders what happened as a self-contained HTML page
//! and a JSON file. [`advise()`] reads a traffic history, proposes limits and replays the
//! history under them with the same machinery.
//!
//! The public surface is the `pub use` list below; the modules are private.
//!
//! ```text
//! scenario ─▶ traffic (seeded) ─▶ run (gateway + engine, paused clock) ─▶ figures ─▶ report
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod advise;
mod figures;
mod history;
mod report;
mod run;
mod scenario;
mod setup;
mod traffic;

use std::path::Path;

pub use advise::{InForce, Proposal, command as advise, propose, replay};
pub use figures::Figures;
pub use history::{Row, parse_csv};
pub use run::{Fate, RunError, RunOutput};
pub use scenario::{InputError, Scenario};
pub use setup::{Sweep, gateway_table, limits as route_limits};
pub use traffic::{Arrival, Kind, arrivals};

/// One run of a simulation: the value swept (if any) and its figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    /// `ROUTE.KEY=value` for a sweep, else empty.
    pub label: String,
    /// The value swept, if any.
    pub value: Option<i64>,
    /// The route limits it ran with: (route, limit, interval, unit).
    pub limits: Vec<(String, i64, i64, String)>,
    /// Its figures.
    pub figures: Figures,
}

/// A whole simulation: what was run and every case's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Simulation {
    /// The scenario's title.
    pub name: String,
    /// The seed.
    pub seed: u64,
    /// The virtual start, RFC 3339.
    pub start: String,
    /// Length in hours.
    pub hours: f64,
    /// The partners that burst.
    pub bursting: Vec<String>,
    /// One case, or one per swept value.
    pub cases: Vec<Case>,
    /// What the simulation replaced in the gateway config (a remote quota service, …).
    pub notes: Vec<String>,
}

/// What went wrong in [`simulate`].
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A scenario, config or history file is malformed.
    #[error("{0}")]
    Input(#[from] InputError),
    /// The gateway config cannot be simulated as given.
    #[error("{0}")]
    Config(String),
    /// A run failed.
    #[error("{0}")]
    Run(#[from] run::RunError),
}

/// Runs `scenario` with the gateway `table` once, or once per value of `sweep`, calling
/// `progress(done, total)` as arrivals are offered; the raw runs go to `on_run`.
pub fn simulate(
    scenario: &Scenario,
    table: &toml::Table,
    seed: u64,
    sweep: Option<&Sweep>,
    progress: &(dyn Fn(u64) + Sync),
    on_run: &mut dyn FnMut(&run::RunOutput),
) -> Result<Simulation, SimError> {
    let arrivals = traffic::arrivals(scenario, seed);
    let values: Vec<Option<i64>> = match sweep {
        Some(s) => s.values.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    // Each value's gateway is prepared here, in order; the runs, independent (each on its own
    // runtime, clock and work dir), share the machine's cores; their results are taken in order.
    let mut notes = Vec::new();
    let mut prepared = Vec::with_capacity(values.len());
    for value in values {
        let mut t = table.clone();
        let label = match (sweep, value) {
            (Some(s), Some(v)) => {
                setup::apply_sweep(&mut t, s, v).map_err(SimError::Config)?;
                format!("{}.{}={v}", s.route, s.key)
            }
            _ => String::new(),
        };
        let work = run::work_dir().map_err(|e| SimError::Config(format!("work dir: {e}")))?;
        let backend = work.path().join("backend");
        let (config, n) = setup::prepare(scenario, t.clone(), &backend, &work.path().join("acks"))
            .map_err(SimError::Config)?;
        for note in n {
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        prepared.push((label, value, t, config, work));
    }
    // Every value replays the same arrivals: the same cost.
    let outputs = run::on_cores(
        prepared.len(),
        |_| 1,
        |i| {
            let (_, _, _, config, work) = &prepared[i];
            run::run(scenario, config.clone(), arrivals.clone(), seed, work.path(), progress)
        },
    );
    let mut cases = Vec::with_capacity(prepared.len());
    for ((label, value, t, ..), out) in prepared.into_iter().zip(outputs) {
        let out = out?;
        on_run(&out);
        let figures = figures::compute(scenario, &out);
        cases.push(Case { label, value, limits: setup::limits(&t), figures });
    }
    Ok(Simulation {
        name: scenario.name.clone(),
        seed,
        start: scenario.start.to_string(),
        hours: scenario.length_ms as f64 / 3_600_000.0,
        bursting: (0..scenario.partners.len())
            .filter(|&i| scenario.bursts_for(i))
            .map(|i| scenario.partners[i].name.get_ref().clone())
            .collect(),
        cases,
        notes,
    })
}

/// Writes `report.html`, `report.json` and the charts as SVG files into `dir`.
pub fn write_report(sim: &Simulation, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(sim).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), json + "\n")?;
    let charts = report::charts(sim);
    std::fs::write(dir.join("report.html"), report::html(sim, &charts))?;
    for (name, svg) in &charts {
        std::fs::write(dir.join(format!("{name}.svg")), svg)?;
    }
    Ok(())
}
