//! Listing the landing directories: which files have settled (and which are too large), with
//! what the poller remembers of each file between listings (see the invariants in `inbound`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Landing;
use crate::batch::Candidate;
use crate::envelope;
use crate::landing::{self, Stamp};

/// What the poller knows about one landing file.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    stamp: Stamp,
    /// When this stamp was first seen.
    since: Instant,
    /// Sniffed once the file has settled.
    sender: Option<String>,
    /// This version was read and its last interchange had no trailer.
    pub(super) incomplete: bool,
    /// Failed attempts at this version, and when to try again.
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
}

impl Watch {
    fn new(stamp: Stamp, now: Instant) -> Self {
        Self { stamp, since: now, sender: None, incomplete: false, failures: 0, retry_at: None }
    }
}

/// What the poller remembers between listings.
#[derive(Default)]
pub(super) struct Memory {
    /// The landing files seen in the last listing.
    pub(super) files: HashMap<PathBuf, Watch>,
    /// Entries already reported (symlinks, non-regular, non-UTF-8 names).
    noted: HashSet<PathBuf>,
}

impl Memory {
    /// When the first file written to but not yet unchanged for `settle` will have been.
    pub(super) fn next_settled(&self, settle: Duration) -> Option<Instant> {
        let now = Instant::now();
        self.files
            .values()
            .filter(|w| w.stamp.len > 0 && now.duration_since(w.since) < settle)
            .map(|w| w.since + settle)
            .min()
    }
}

/// The sender of the first interchange, from the head of the file (empty when unknown).
fn sniff_sender(path: &Path) -> String {
    use std::io::Read;
    let mut head = vec![0u8; 1024];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    head.truncate(n);
    envelope::sniff_sender(&head)
}

/// Lists settled files (and settled files over the size limit); remembers the others' stamps.
pub(super) fn scan(landing: &Landing, mem: &mut Memory) -> (Vec<Candidate>, Vec<PathBuf>) {
    let now = Instant::now();
    let mut ready = Vec::new();
    let mut too_large = Vec::new();
    let mut present = HashSet::new();
    for dir in &landing.dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                if mem.noted.insert(dir.clone()) {
                    tracing::error!(dir = %dir.display(), error = %e, "cannot list landing directory");
                }
                continue;
            }
        };
        mem.noted.remove(dir);
        for entry in entries.flatten() {
            let path = entry.path();
            let raw = entry.file_name();
            let name = raw.to_string_lossy();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                continue; // too-large/ and the like: never taken
            }
            if landing.partial.matches(&name) {
                continue;
            }
            present.insert(path.clone());
            if !kind.is_file() {
                if mem.noted.insert(path.clone()) {
                    let what = if kind.is_symlink() { "a symlink" } else { "not a regular file" };
                    tracing::warn!(
                        path = %path.display(),
                        "skipping landing entry: {what} (only regular files are taken)"
                    );
                }
                continue;
            }
            if raw.to_str().is_none() && mem.noted.insert(path.clone()) {
                tracing::warn!(
                    path = %path.display(),
                    "landing file name is not UTF-8; taking it (the name is shown lossily)"
                );
            }
            let Ok(meta) = entry.metadata() else { continue };
            let stamp = Stamp::of(&meta);
            let w = mem.files.entry(path.clone()).or_insert_with(|| Watch::new(stamp, now));
            if w.stamp != stamp {
                *w = Watch::new(stamp, now);
            }
            let unchanged = now.duration_since(w.since);
            if stamp.len == 0 || unchanged < landing.settle {
                continue; // empty: created, not written yet
            }
            if w.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            if stamp.len > landing.max_file_bytes {
                too_large.push(path);
                continue;
            }
            let grace_passed = unchanged >= landing.grace;
            if w.incomplete && !grace_passed {
                continue;
            }
            let sender = w.sender.get_or_insert_with(|| sniff_sender(&path)).clone();
            ready.push(Candidate { path, sender, stamp, grace_passed });
        }
    }
    mem.files.retain(|p, _| present.contains(p));
    mem.noted.retain(|p| present.contains(p) || landing.dirs.contains(p));
    ready.sort_by(|a, b| a.path.cmp(&b.path));
    (ready, too_large)
}

/// Moves files over `max` bytes aside, logging why.
pub(super) fn set_aside(paths: Vec<PathBuf>, max: u64) -> Vec<(PathBuf, std::io::Result<PathBuf>)> {
    paths
        .into_iter()
        .map(|p| {
            let len = Stamp::at(&p).map(|s| s.len).unwrap_or(0);
            let reason =
                format!("{}: {len} bytes is over max_file_bytes ({max}); not taken", p.display());
            let res = landing::move_aside(&p, &reason);
            if let Ok(to) = &res {
                tracing::error!(
                    path = %p.display(),
                    moved_to = %to.display(),
                    bytes = len,
                    max_file_bytes = max,
                    "landing file over max_file_bytes moved aside"
                );
            }
            (p, res)
        })
        .collect()
}
