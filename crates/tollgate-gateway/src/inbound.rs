//! Inbound: the poller that takes finished files from the landing directories into the spool.
//!
//! Invariants (see [`crate::landing`] for when a file is finished):
//! - A landing file is taken only once its stamp (size, mtime, inode) has been unchanged for
//!   `settle_ms`, it is not empty, and its name matches none of `partial_names`.
//! - A landing file is moved out of the way (into [`crate::taken`], which keeps it a while and
//!   takes bytes appended to it later) only after [`Spool::receive_unchanged`] has made its
//!   bytes durable and the file still has the stamp it was read with. A file that changed
//!   meanwhile stays, and its spooled copy gets no row (a spool file holding only such copies
//!   is removed at once): it is taken again, whole, later.
//! - At most `max_file_bytes` are read per file, and a batch holds at most `max_file_bytes`
//!   (or one file); a larger file is moved to `too-large/` in its landing directory.
//! - The files one scan finds settled are taken batch after batch ([`Ready`]); the directories
//!   are listed again once they are all taken, or once [`SCAN_SHARE`] times the last scan's
//!   duration has passed, so listing a backlog stays a small share of the poller's time and a
//!   file that arrives meanwhile, from any sender, waits at most that long to be seen.
//! - A batch the spool refuses (a full disk) leaves the landing files in place; the next
//!   attempt waits until the spool can be written again ([`crate::spool::SpoolHealth`]) and
//!   one poll period, doubling with each refusal in a row up to [`SPOOL_BACKOFF_POLLS`].
//! - A file that cannot be read is retried with exponential backoff (up to [`MAX_BACKOFF`]) and
//!   reported once; symlinks and other non-regular entries are skipped and reported once; a
//!   name that is not UTF-8 is taken like any other (shown lossily) and reported once.
//! - With nothing to take, the directories are listed once per `poll_ms` (or when a file seen
//!   unsettled in the last listing will have settled, if sooner), sooner only when a
//!   change that can matter arrives ([`matters`]: an entry created, written, renamed or its
//!   metadata changed; never an open or a read, such as the poller's own listing), and then not
//!   within `poll_ms / WAKE_SHARE` of the last listing however many changes arrive. Each
//!   listing counts in `tollgate_gateway_landing_scans_total`.
//!
//! One state machine: the loop here ([`poll`]) wakes on a change that [`matters`], lists and
//! settles files (`scan`: what it remembers of each file between listings, and `set_aside` for
//! files too large), takes a batch into the spool (`take`), then retires the taken files;
//! `failed` and `spool_backoff` are its two ways of waiting.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::batch::Ready;
use crate::config::Plan;
use crate::landing::PartialNames;
use crate::pipeline::Event;
use crate::spool::Spool;

mod scan;
mod take;
use scan::{Memory, scan, set_aside};
use take::take;

/// Files taken per spool transaction at most.
const MAX_FILES_PER_BATCH: usize = 64;
/// The taken-file sweep ([`crate::taken::sweep`]) runs at most this often: not once per batch,
/// since it looks at every file retained in the last [`crate::taken::RETENTION`] and a
/// backlog is taken 64 files at a time.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// And the poller spends at most one part in this many of its time sweeping: the next sweep
/// waits at least this many times as long as the last one took (many retained files).
const SWEEP_SHARE: u32 = 20;
/// While files from the last scan remain to be taken, the directories are listed again only
/// after this many times as long as that listing took.
const SCAN_SHARE: u32 = 20;
/// The longest wait between two attempts at a file that cannot be read.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The longest wait, in poll periods, before a batch the spool refused is tried again (a
/// power of two). The retry also waits until the spool can be written again (see
/// [`crate::spool::SpoolHealth`]), so on a full disk nothing is written until the probe finds
/// space.
const SPOOL_BACKOFF_POLLS: u32 = 8;
/// A change notification lists the directories no sooner than `poll / WAKE_SHARE` after the
/// last listing, so a sender writing a large file in many small writes does not make the
/// poller list the directory at the rate of its writes.
const WAKE_SHARE: u32 = 10;

/// The landing-directory settings, from the [`Plan`].
#[derive(Debug, Clone)]
pub(crate) struct Landing {
    /// Landing directories.
    pub dirs: Vec<PathBuf>,
    /// Scan period.
    pub poll: Duration,
    /// Unchanged this long before a file is taken.
    pub settle: Duration,
    /// Unchanged this long before a file with an unfinished last interchange is taken.
    pub grace: Duration,
    /// Files larger than this are moved aside.
    pub max_file_bytes: u64,
    /// Names of files still being written.
    pub partial: PartialNames,
    /// The routes, for weighing what the intake parse finds (the pipeline does not parse
    /// again).
    pub plan: Arc<Plan>,
}

impl Landing {
    /// The landing settings of `plan`.
    pub(crate) fn new(plan: &Plan) -> Self {
        Self {
            dirs: plan.inbound.clone(),
            poll: plan.poll,
            settle: plan.settle,
            grace: plan.incomplete_grace,
            max_file_bytes: plan.max_file_bytes,
            partial: plan.partial_names.clone(),
            plan: Arc::new(plan.clone()),
        }
    }
}

/// Polls the landing directories (woken early by file-system notifications where available)
/// until `stop` turns true.
pub(crate) async fn poll(
    landing: Landing,
    spool: Arc<Spool>,
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) {
    let landing = Arc::new(landing);
    let mut mem = Memory::default();
    let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
    let _watcher = watch_dirs(&landing.dirs, wake_tx);
    let mut next_sweep = Instant::now();
    let mut queued = Ready::default();
    let mut next_scan = Instant::now();
    let mut last_scan = Instant::now();
    // When the first file seen unsettled in the last listing will have settled.
    let mut settles_at: Option<Instant> = None;
    // Consecutive batches the spool refused, and when the next may be tried.
    let mut spool_failures = 0u32;
    let mut spool_retry: Option<Instant> = None;
    let mut spool_failing = spool.health().watch();
    loop {
        if *stop.borrow() {
            return;
        }
        if let Some(at) = spool_retry.take() {
            // The spool refused the last batch: wait until a write (or the probe) succeeds,
            // and until the backoff has passed, before reading landing files again.
            tokio::select! {
                _ = stop.changed() => return,
                _ = async {
                    let _ = spool_failing.wait_for(|f| !*f).await;
                    tokio::time::sleep_until(at.into()).await;
                } => {}
            }
        }
        if Instant::now() >= next_sweep {
            let (dirs, settle, grace, max) =
                (landing.dirs.clone(), landing.settle, landing.grace, landing.max_file_bytes);
            let started = Instant::now();
            let _ = tokio::task::spawn_blocking(move || {
                for d in &dirs {
                    crate::taken::sweep(d, settle, grace, max);
                }
            })
            .await;
            next_sweep = Instant::now() + SWEEP_EVERY.max(started.elapsed() * SWEEP_SHARE);
        }
        if queued.is_empty() || Instant::now() >= next_scan {
            let started = Instant::now();
            last_scan = started;
            crate::telemetry::landing_scanned();
            // Listing and stat-ing a backlog takes milliseconds: off the runtime's workers,
            // which also serve HTTP.
            let l = Arc::clone(&landing);
            let scanned = tokio::task::spawn_blocking(move || {
                let found = scan(&l, &mut mem);
                (mem, found)
            })
            .await;
            let (ready, too_large);
            (mem, (ready, too_large)) = match scanned {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(error = %e, "landing scan task failed; scanning again");
                    (Memory::default(), (Vec::new(), Vec::new()))
                }
            };
            next_scan = Instant::now() + started.elapsed() * SCAN_SHARE;
            settles_at = mem.next_settled(landing.settle);
            queued = Ready::new(ready);
            if !too_large.is_empty() {
                let max = landing.max_file_bytes;
                let moved = tokio::task::spawn_blocking(move || set_aside(too_large, max))
                    .await
                    .unwrap_or_default();
                for (path, res) in moved {
                    if let Err(e) = res {
                        failed(
                            &landing,
                            &mut mem,
                            &path,
                            &format!("cannot move it to too-large/: {e}"),
                        );
                    }
                }
            }
        }
        let batch = queued.next_batch(MAX_FILES_PER_BATCH, landing.max_file_bytes);
        // More to take, or a full batch: files may have arrived meanwhile.
        let mut more = !queued.is_empty() || batch.len() == MAX_FILES_PER_BATCH;
        if !batch.is_empty() {
            let (spool, plan) = (spool.clone(), landing.plan.clone());
            let taken = tokio::task::spawn_blocking(move || take(&spool, &plan, batch)).await;
            match taken {
                Ok(Ok(took)) => {
                    spool_failures = 0;
                    if !took.records.is_empty() {
                        let _ = events.send(Event::Received(took.records));
                    }
                    for (path, why) in &took.failed {
                        failed(&landing, &mut mem, path, why);
                    }
                    for path in &took.incomplete {
                        if let Some(w) = mem.files.get_mut(path) {
                            if !w.incomplete {
                                tracing::info!(
                                    path = %path.display(),
                                    grace_ms = landing.grace.as_millis() as u64,
                                    "landing file's last interchange has no trailer yet: waiting \
                                     for the sender to finish (taken as it is after \
                                     incomplete_grace_ms unchanged)"
                                );
                            }
                            w.incomplete = true;
                        }
                    }
                    // Durable and recorded: now the landing files may go (after the event,
                    // so that removing them is not on the way to delivery).
                    for (p, _) in &took.spooled {
                        mem.files.remove(p);
                    }
                    let spooled = took.spooled;
                    let _ = tokio::task::spawn_blocking(move || crate::taken::retire_all(&spooled))
                        .await;
                }
                Ok(Err(e)) => {
                    // Reported (once) by the spool's health; the files stay where they are.
                    spool_failures = spool_failures.saturating_add(1);
                    let wait = spool_backoff(landing.poll, spool_failures);
                    tracing::debug!(error = %e, retry_in_ms = wait.as_millis() as u64,
                        "spooling inbound files failed");
                    spool_retry = Some(Instant::now() + wait);
                    more = false;
                    queued = Ready::default();
                }
                Err(e) => {
                    tracing::error!(error = %e, "spooling task failed; retrying");
                    more = false;
                    queued = Ready::default();
                }
            }
        }
        if more {
            // Take the next batch at once (listing again when the rule above says so).
            continue;
        }
        // Nothing to take: list again one poll period after the last listing (or once a file
        // seen then has settled, if sooner), or sooner for a change that matters (see the
        // module invariant). Without notifications (the channel closed) only time counts.
        let next_listing = settles_at.map_or(last_scan + landing.poll, |at| {
            at.max(last_scan + landing.poll / WAKE_SHARE).min(last_scan + landing.poll)
        });
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep_until(next_listing.into()) => {}
            Some(()) = wake_rx.recv() => {
                let soonest = last_scan + landing.poll / WAKE_SHARE;
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep_until(soonest.into()) => {}
                }
            }
        }
    }
}

/// True for a change in a landing directory that can give the poller something to do: an
/// entry created, written (or closed after writing), renamed in or out, or its metadata
/// changed, a lost-events notice, and an event the backend cannot classify. Opens, reads and
/// closes after reading are not: the poller's own listing raises them, and waking for them
/// would list the directory in a loop.
fn matters(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        // `Any`: a backend that cannot tell what happened.
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Other | EventKind::Any => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Remove(_) => false,
    }
}

/// The wait after the `failures`-th consecutive batch the spool refused: one poll period,
/// doubling up to [`SPOOL_BACKOFF_POLLS`] of them.
fn spool_backoff(poll: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(SPOOL_BACKOFF_POLLS.ilog2());
    poll.saturating_mul(1 << doublings)
}

/// Records a failed attempt at `path`: backs off exponentially, reports the first failure only.
fn failed(landing: &Landing, mem: &mut Memory, path: &Path, why: &str) {
    let Some(w) = mem.files.get_mut(path) else { return };
    w.failures = w.failures.saturating_add(1);
    let wait = landing.poll.saturating_mul(1u32 << w.failures.min(16)).min(MAX_BACKOFF);
    w.retry_at = Some(Instant::now() + wait);
    if w.failures == 1 {
        tracing::warn!(
            path = %path.display(),
            error = why,
            "cannot take landing file; retrying with backoff (up to {} s), reported once",
            MAX_BACKOFF.as_secs()
        );
    }
}

/// Wakes the poller when something that [`matters`] changes in a landing directory (an error
/// from the watcher wakes it too: a listing finds what was missed); `None` (polling only)
/// where notifications are unavailable.
fn watch_dirs(dirs: &[PathBuf], wake: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.as_ref().is_ok_and(|e| !matters(&e.kind)) {
            return;
        }
        let _ = wake.try_send(());
    })
    .ok()?;
    for d in dirs {
        if let Err(e) = watcher.watch(d, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %d.display(), error = %e, "no change notifications; polling only");
        }
    }
    Some(watcher)
}

/// Creates the landing directories so that senders can write into them; an existing path that
/// is not a directory is an error naming it.
pub(crate) fn ensure_dirs(dirs: &[PathBuf]) -> Result<(), (PathBuf, std::io::Error)> {
    for d in dirs {
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => {
                let e = std::io::Error::other("exists and is not a directory");
                return Err((d.clone(), e));
            }
            Err(_) => std::fs::create_dir_all(d).map_err(|e| (d.clone(), e))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
