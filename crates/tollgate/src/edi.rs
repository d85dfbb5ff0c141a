//! `tollgate edi …`: inspect, acknowledge and split EDI files.
//!
//! Exit codes: 0 clean, 1 when an envelope error was found (the report is still printed),
//! 2 for usage errors, unreadable files and files without any interchange.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use tollgate_edi::{AckFormat, acknowledge, gaps};
use tollgate_edi::{EnvelopeError, Interchange, ParsedFile, PartyId};

use crate::output::{self, Unwritten};

/// Arguments of `tollgate edi`.
#[derive(Debug, clap::Args)]
pub struct EdiArgs {
    #[command(subcommand)]
    command: EdiCommand,
}

#[derive(Debug, clap::Subcommand)]
enum EdiCommand {
    /// Show the interchanges, groups, transactions and envelope errors of EDI files.
    Inspect {
        /// Print one JSON object per file (one per line) instead of a table.
        #[arg(long)]
        json: bool,
        /// X12 or EDIFACT files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write the acknowledgement (TA1, 997, 999 or CONTRL) of a file to stdout.
    Ack {
        /// auto, ta1, 997, 999 or contrl.
        #[arg(long, default_value = "auto")]
        format: AckFormat,
        /// Control number of the first acknowledgement (incremented per interchange).
        #[arg(long, default_value_t = 1)]
        control_number: u64,
        /// The X12 or EDIFACT file to acknowledge.
        file: PathBuf,
    },
    /// Split each interchange of a file into one interchange per transaction.
    Split {
        /// One output interchange per transaction (the only mode).
        #[arg(long, required = true)]
        per_transaction: bool,
        /// Directory for the output files (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Control number of the first output interchange (incremented per file).
        #[arg(long, default_value_t = 1)]
        control_number: u64,
        /// The X12 or EDIFACT file to split.
        file: PathBuf,
    },
}

/// Runs `tollgate edi`.
pub fn run(args: EdiArgs) -> ExitCode {
    let code = match args.command {
        EdiCommand::Inspect { json, files } => inspect(&files, json),
        EdiCommand::Ack { format, control_number, file } => ack(&file, format, control_number),
        EdiCommand::Split { per_transaction: _, out, control_number, file } => {
            split(&file, &out, control_number)
        }
    };
    ExitCode::from(code)
}

/// Reads and parses a file, or explains on stderr why it cannot.
fn load(file: &Path) -> Result<(Vec<u8>, ParsedFile), u8> {
    match std::fs::read(file) {
        Ok(bytes) => {
            let parsed = tollgate_edi::parse(&bytes);
            Ok((bytes, parsed))
        }
        Err(e) => {
            eprintln!("tollgate edi: cannot read {}: {e}", file.display());
            Err(2)
        }
    }
}

fn no_interchange(file: &Path, parsed: &ParsedFile) -> bool {
    if parsed.interchanges.is_empty() {
        let why =
            parsed.errors.first().map_or("no interchange found".to_string(), |e| e.message.clone());
        eprintln!("tollgate edi: {}: not an X12 or EDIFACT file: {why}", file.display());
        return true;
    }
    false
}

fn inspect(files: &[PathBuf], as_json: bool) -> u8 {
    let mut worst = 0u8;
    for file in files {
        let (_, parsed) = match load(file) {
            Ok(v) => v,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let report = if as_json {
            format!("{}\n", file_json(file, &parsed))
        } else {
            output::printable(&file_table(file, &parsed)).into_owned()
        };
        let code = if no_interchange(file, &parsed) {
            2
        } else if parsed.has_errors() {
            1
        } else {
            0
        };
        worst = worst.max(code);
        match output::try_bytes(report.as_bytes()) {
            Ok(()) => {}
            // Nobody reads further: the code says what was found up to here.
            Err(Unwritten::ReaderGone) => return worst,
            Err(e) => {
                eprintln!("tollgate edi: cannot write the report: {e}");
                return 2;
            }
        }
    }
    worst
}

fn party_json(p: &PartyId) -> Value {
    json!({ "qualifier": p.qualifier, "id": p.id })
}

fn error_json(e: &EnvelopeError) -> Value {
    json!({ "code": e.code, "message": e.message, "segment": e.segment, "offset": e.offset })
}

fn interchange_json(ic: &Interchange) -> Value {
    let groups: Vec<Value> = ic
        .groups
        .iter()
        .map(|g| {
            let txs: Vec<Value> = g
                .transactions
                .iter()
                .map(|t| {
                    json!({
                        "type": t.kind,
                        "control_number": t.control_number.as_str(),
                        "segments": t.segments,
                        "message_version": t.message_version,
                    })
                })
                .collect();
            json!({
                "functional_id": g.functional_id,
                "control_number": g.control_number.as_ref().map(|c| c.as_str()),
                "version": g.version,
                "transactions": txs,
            })
        })
        .collect();
    json!({
        "standard": ic.standard.as_str(),
        "sender": party_json(&ic.sender),
        "receiver": party_json(&ic.receiver),
        "control_number": ic.control_number.as_str(),
        "version": ic.version,
        "test": ic.test,
        "groups": groups,
        "errors": ic.errors.iter().map(error_json).collect::<Vec<_>>(),
    })
}

fn file_json(file: &Path, parsed: &ParsedFile) -> Value {
    json!({
        "file": file.display().to_string(),
        "interchanges": parsed.interchanges.iter().map(interchange_json).collect::<Vec<_>>(),
        "errors": parsed.errors.iter().map(error_json).collect::<Vec<_>>(),
    })
}

fn file_table(file: &Path, parsed: &ParsedFile) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "{}", file.display());
    for ic in &parsed.interchanges {
        let _ = writeln!(
            s,
            "  {} interchange {}  {} -> {}  version {}{}  ({} groups, {} transactions)",
            ic.standard.as_str(),
            ic.control_number,
            ic.sender,
            ic.receiver,
            ic.version,
            if ic.test { "  TEST" } else { "" },
            ic.counts.groups,
            ic.counts.transactions,
        );
        for g in &ic.groups {
            let _ = writeln!(
                s,
                "    group {} {} {}",
                g.functional_id.as_deref().unwrap_or("(none)"),
                g.control_number.as_ref().map_or("-", |c| c.as_str()),
                g.version.as_deref().unwrap_or("")
            );
            for t in &g.transactions {
                let _ = writeln!(
                    s,
                    "      {:<8} {:<16} {:>6} segments  {}",
                    t.kind,
                    t.control_number,
                    t.segments,
                    t.message_version.as_deref().unwrap_or("")
                );
            }
        }
        for e in &ic.errors {
            let _ = writeln!(s, "    error {e}");
        }
    }
    for e in &parsed.errors {
        let _ = writeln!(s, "  error {}", e.message);
    }
    s
}

fn ack(file: &Path, format: AckFormat, control_number: u64) -> u8 {
    let (bytes, parsed) = match load(file) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if no_interchange(file, &parsed) {
        return 2;
    }
    let mut out = Vec::new();
    let mut next = control_number;
    for ic in &parsed.interchanges {
        if ic.is_acknowledgement() {
            eprintln!(
                "tollgate edi: {}: interchange {} is itself an acknowledgement; not acknowledged",
                file.display(),
                ic.control_number
            );
            continue;
        }
        match acknowledge(&bytes, ic, format, next) {
            Some(ack) => {
                out.extend_from_slice(&ack);
                next += 1;
                for gap in gaps(ic, format) {
                    eprintln!(
                        "tollgate edi: {}: interchange {}: {gap}",
                        file.display(),
                        ic.control_number
                    );
                }
            }
            None => {
                eprintln!(
                    "tollgate edi: --format {format:?} does not apply to {} interchange {}",
                    ic.standard.as_str(),
                    ic.control_number
                );
                return 2;
            }
        }
    }
    if let Err(Unwritten::Failed(e)) = output::try_bytes(&out) {
        eprintln!("tollgate edi: cannot write the acknowledgement: {e}");
        return 2;
    }
    // As `inspect`: the acknowledgement is written either way, and 1 says it reports errors.
    if parsed.has_errors() { 1 } else { 0 }
}

fn split(file: &Path, out: &Path, control_number: u64) -> u8 {
    let (bytes, parsed) = match load(file) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if no_interchange(file, &parsed) {
        return 2;
    }
    let stem =
        file.file_stem().map_or("interchange".to_string(), |s| s.to_string_lossy().into_owned());
    // Every piece is built before any is written: a file that cannot be split whole writes
    // nothing.
    let mut pieces = Vec::new();
    let mut next = control_number;
    for (i, ic) in parsed.interchanges.iter().enumerate() {
        for t in 0..ic.transactions().count() {
            match tollgate_edi::split(&bytes, ic, &[t], &next.to_string()) {
                Ok(piece) => {
                    pieces.push((out.join(format!("{stem}.{}.{}.edi", i + 1, t + 1)), piece))
                }
                Err(e) => {
                    eprintln!(
                        "tollgate edi: {}: interchange {}: {e}; no pieces written",
                        file.display(),
                        ic.control_number
                    );
                    return 1;
                }
            }
            next += 1;
        }
    }
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("tollgate edi: cannot create {}: {e}", out.display());
        return 2;
    }
    let mut listed = true;
    for (path, piece) in pieces {
        if let Err(e) = std::fs::write(&path, piece) {
            eprintln!("tollgate edi: cannot write {}: {e}", path.display());
            return 2;
        }
        // The pieces are what `split` makes: a reader gone stops the list, not the pieces.
        if listed {
            match output::try_text(format_args!("{}\n", path.display())) {
                Ok(()) => {}
                Err(Unwritten::ReaderGone) => listed = false,
                Err(e) => {
                    eprintln!("tollgate edi: cannot list {}: {e}", path.display());
                    return 2;
                }
            }
        }
    }
    if parsed.has_errors() { 1 } else { 0 }
}
