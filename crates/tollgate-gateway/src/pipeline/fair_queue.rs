//! Received files waiting to be parsed, fair across senders: one partner's backlog does not
//! hold up the others' files.

use std::collections::{HashMap, VecDeque};

use crate::spool::FileRecord;

/// Received files waiting to be parsed, one queue per sender (as sniffed at intake), served
/// round-robin. Files of one sender keep their order.
#[derive(Default)]
pub(super) struct FairQueue {
    queues: HashMap<String, VecDeque<FileRecord>>,
    turn: VecDeque<String>,
}

impl FairQueue {
    pub(super) fn push(&mut self, rec: FileRecord) {
        let q = self.queues.entry(rec.sender.clone()).or_default();
        if q.is_empty() {
            self.turn.push_back(rec.sender.clone());
        }
        q.push_back(rec);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// Up to `max` files, one per sender per round.
    pub(super) fn take(&mut self, max: usize) -> Vec<FileRecord> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(sender) = self.turn.pop_front() else { break };
            let Some(q) = self.queues.get_mut(&sender) else { continue };
            if let Some(rec) = q.pop_front() {
                out.push(rec);
            }
            if q.is_empty() {
                self.queues.remove(&sender);
            } else {
                self.turn.push_back(sender);
            }
        }
        out
    }
}
