//! Taking one batch of settled landing files into the spool: read, parse once, make durable,
//! then record only the files that did not change meanwhile (see the invariants in `inbound`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::batch::Candidate;
use crate::config::Plan;
use crate::landing::{self, Contents, Stamp};
use crate::spool::Spool;

/// What one batch gave.
pub(super) struct Took {
    pub(super) records: Vec<crate::spool::FileRecord>,
    /// Spooled and unchanged since, with the length spooled: retire them.
    pub(super) spooled: Vec<(PathBuf, u64)>,
    /// Read, but the last interchange is unfinished: wait.
    pub(super) incomplete: Vec<PathBuf>,
    /// Could not be read, and why.
    pub(super) failed: Vec<(PathBuf, String)>,
}

/// Reads the files and spools them durably, then keeps only those that did not change
/// meanwhile (the caller removes them).
/// Each file is parsed here, once: the parse says whether it is complete and goes with its
/// record to the pipeline.
pub(super) fn take(
    spool: &Spool,
    plan: &Plan,
    batch: Vec<Candidate>,
) -> Result<Took, crate::spool::SpoolError> {
    let mut files = Vec::new();
    let mut parses = Vec::new();
    let mut read = Vec::new();
    let mut took = Took {
        records: Vec::new(),
        spooled: Vec::new(),
        incomplete: Vec::new(),
        failed: Vec::new(),
    };
    for c in batch {
        match landing::read_if_unchanged(&c.path, c.stamp) {
            Ok(Contents::Bytes(bytes)) => {
                let parsed = crate::receipt::parse(&bytes, plan);
                if !landing::complete(&bytes, &parsed.scan) {
                    if !c.grace_passed {
                        took.incomplete.push(c.path);
                        continue;
                    }
                    tracing::warn!(
                        path = %c.path.display(),
                        "taking landing file whose last interchange is unfinished after \
                         incomplete_grace_ms unchanged; it will be rejected with the reason"
                    );
                }
                files.push((bytes, c.path.display().to_string()));
                parses.push(Arc::new(parsed));
                read.push(c);
            }
            // Seen again, with its new stamp, on the next scan (or gone: the sender took it back).
            Ok(Contents::Changed) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => took.failed.push((c.path, e.to_string())),
        }
    }
    if files.is_empty() {
        return Ok(took);
    }
    let refs: Vec<(&[u8], String)> = files.iter().map(|(b, o)| (b.as_slice(), o.clone())).collect();
    // Re-check once the bytes are durable: a file written to after it was read must not be
    // removed, and the partial copy just spooled gets no row, so it is never delivered.
    let unchanged = |i: usize| Stamp::at(&read[i].path).ok() == Some(read[i].stamp);
    let kept = spool.receive_unchanged(&refs, unchanged)?;
    let mut kept = kept.into_iter().peekable();
    for (i, (c, parsed)) in read.into_iter().zip(parses).enumerate() {
        match kept.next_if(|(k, _)| *k == i) {
            Some((_, mut rec)) => {
                rec.sender = c.sender;
                rec.parsed = Some(parsed);
                took.records.push(rec);
                took.spooled.push((c.path, c.stamp.len));
            }
            None => tracing::info!(
                path = %c.path.display(),
                "landing file changed while it was taken; taking it again once it settles"
            ),
        }
    }
    Ok(took)
}
