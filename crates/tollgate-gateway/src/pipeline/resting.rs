//! Held items at rest: a held item that waits behind the head of its group is kept in the
//! spool only, so a burst of held interchanges costs the pipeline an id each, not an item.
//!
//! Invariants:
//! - **Only behind a head.** An item rests only while it is `held`, in the hold queue and not
//!   the head of its group; [`Pipeline::resting`] counts the held items not in `live`.
//! - **Only once written.** An item rests only after the commit that wrote it, and only when
//!   its live version is the one that commit wrote: its row is then its whole state.
//! - **Woken before use.** Nothing reads or changes a resting item: it is woken (read back
//!   into `live`) before a new item is held behind its group, before an operator acts on it,
//!   and when it heads its group and the hold queue is looked at: a head at rest counts as
//!   due, and once awake it is metered only if its own time has come.

use super::*;

impl Pipeline {
    /// Lets the held items `committed` wrote rest when they wait behind their group's head.
    pub(super) fn settle_held(&mut self, committed: &Change) {
        for item in committed.last_puts() {
            let Some(m) = item.metering_id.as_ref().filter(|_| item.state == State::Held) else {
                continue;
            };
            let waits_behind =
                self.held.contains(m, &item.id) && self.held.head(m) != Some(item.id.as_str());
            if waits_behind && self.live.get(&item.id).is_some_and(|live| **live == *item) {
                self.live.remove(&item.id);
                self.resting += 1;
            }
        }
    }

    /// When head `id` is next looked at, Unix ms: its own time when awake; at rest, now (it
    /// is woken to read its time), or a second after a failed read.
    pub(super) fn head_due_at(&self, id: &str) -> Option<i64> {
        match self.live.get(id) {
            Some(item) => item.next_attempt_at,
            None => Some(self.wake_after),
        }
    }

    /// Reads resting item `id` of group `m` back into `live`; true when it is live. An item
    /// the spool does not hold as held leaves the queue (logged), so its group moves on; one
    /// that cannot be read stays at rest and its group waits for the next try.
    pub(super) async fn wake(&mut self, m: &MeteringId, id: &str) -> bool {
        if self.live.contains_key(id) {
            return true;
        }
        match self.stored(id).await {
            Ok(Some(item)) if item.state == State::Held => {
                self.resting = self.resting.saturating_sub(1);
                self.live.insert(id.to_owned(), Box::new(item));
                true
            }
            Ok(found) => {
                let state = found.map(|i| i.state.as_str());
                tracing::error!(
                    item = id,
                    ?state,
                    "a held item is not held in the spool; dropped from the hold queue"
                );
                self.held.remove(m, id);
                self.resting = self.resting.saturating_sub(1);
                false
            }
            Err(e) => self.wake_failed(id, &e),
        }
    }

    /// Item `id` as the spool holds it, read off the runtime (inline for a simulation's
    /// spool in memory); `Err` says why it could not be read.
    pub(super) async fn stored(&self, id: &str) -> Result<Option<Item>, String> {
        let spool = self.parts.spool.clone();
        let key = id.to_owned();
        let read = crate::blocking::off_runtime(spool.is_ephemeral(), move || spool.item(&key));
        read.await?.map_err(|e| e.to_string())
    }

    /// A head could not be read: heads at rest wait a second before the next try.
    fn wake_failed(&mut self, id: &str, error: &str) -> bool {
        tracing::error!(item = id, error, "reading a held item failed; its group waits");
        let wait = i64::try_from(UNAVAILABLE_RETRY.as_millis()).unwrap_or(1_000);
        self.wake_after = self.parts.spool.now_ms().saturating_add(wait);
        false
    }

    /// Wakes `item` (read from the spool for an operator) when it rests.
    pub(super) fn wake_read(&mut self, item: &Item) {
        let rests = item.state == State::Held
            && !self.live.contains_key(&item.id)
            && item.metering_id.as_ref().is_some_and(|m| self.held.contains(m, &item.id));
        if rests {
            self.resting = self.resting.saturating_sub(1);
            self.live.insert(item.id.clone(), Box::new(item.clone()));
        }
    }

    /// Lets every held item that waits behind its group's head rest (after loading from the
    /// spool, where each is written as it is).
    pub(super) fn rest_loaded(&mut self) {
        let behind: Vec<String> = self
            .live
            .values()
            .filter(|i| i.state == State::Held)
            .filter(|i| {
                i.metering_id.as_ref().is_some_and(|m| {
                    self.held.contains(m, &i.id) && self.held.head(m) != Some(i.id.as_str())
                })
            })
            .map(|i| i.id.clone())
            .collect();
        self.resting += behind.len();
        for id in behind {
            self.live.remove(&id);
        }
    }

    /// Items live and received (neither held nor admitted): what `live` holds beside them.
    pub(super) fn received_depth(&self) -> usize {
        let held_live = self.held.len().saturating_sub(self.resting);
        self.live.len().saturating_sub(held_live + self.lanes.len())
    }
}
