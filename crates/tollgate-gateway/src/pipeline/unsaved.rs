//! A batch whose commit failed (a full disk, say): kept whole and written first with the next
//! commit, its spool files let go only once it is written.
//!
//! Dropped, what it wrote was lost for good wherever no later change of the same item wrote it
//! again: a `files` row's removal (after a restart the file was split again and its items
//! delivered twice), the dedup keys, a purge (the purged item came back), a delivered state.
//!
//! Invariant: a kept change holds each item's last version once ([`Change::then`]), so it grows
//! with the items it touches while the disk stays full, not with the batches tried.

use tokio::time::Instant;

use crate::item::Item;
use crate::spool::Change;

/// How soon a kept batch is tried again when nothing else wakes the pipeline.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// See the module docs.
#[derive(Default)]
pub(super) struct Unsaved {
    change: Change,
    drop_files: Vec<String>,
}

impl Unsaved {
    /// What the next commit writes: the kept batch, then `change`; and the spool files both
    /// let go of.
    pub(super) fn before(
        &mut self,
        change: Change,
        drop_files: Vec<String>,
    ) -> (Change, Vec<String>) {
        let kept = std::mem::take(self);
        let mut files = kept.drop_files;
        files.extend(drop_files);
        (kept.change.then(change), files)
    }

    /// What the kept batch says of item `id`: `Some(None)` when it deletes it, `Some(item)`
    /// for the version it writes, `None` when it does not touch it.
    pub(super) fn item(&self, id: &str) -> Option<Option<&Item>> {
        if self.change.delete.iter().any(|d| d == id) {
            return Some(None);
        }
        self.change.put.iter().rev().find(|i| i.id == id).map(Some)
    }

    /// True when no batch waits to be written.
    pub(super) fn is_empty(&self) -> bool {
        self.change.is_empty()
    }

    /// Keeps a batch whose commit failed, for the next commit.
    pub(super) fn keep(&mut self, change: Change, drop_files: Vec<String>) {
        *self = Self { change, drop_files };
    }

    /// `wake`, or sooner when a kept batch waits to be tried again.
    pub(super) fn wake(&self, wake: Option<Instant>) -> Option<Instant> {
        if self.is_empty() {
            return wake;
        }
        let retry = Instant::now() + RETRY;
        Some(wake.map_or(retry, |w| w.min(retry)))
    }
}
