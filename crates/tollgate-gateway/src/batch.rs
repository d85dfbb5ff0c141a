//! Batches: which ready landing files go into the next spool transaction.
//!
//! Invariants: files are taken round-robin across senders, so one partner's backlog does not
//! delay the others' files; a batch holds at most `max` files and at most `max_bytes` bytes
//! (or a single file), which bounds the memory one batch can take.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use crate::landing::Stamp;

/// A settled file, ready to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Where it is.
    pub path: PathBuf,
    /// The sender sniffed from its head (empty when unknown).
    pub sender: String,
    /// The stamp it settled with.
    pub stamp: Stamp,
    /// Unchanged for `grace`: taken even if its last interchange is unfinished.
    pub grace_passed: bool,
}

/// The settled files of one scan, queued per sender, from which batches are taken until the
/// next scan replaces them.
///
/// Taking batch after batch from one scan, instead of listing the directory again for each,
/// keeps a backlog of `n` files linear: a scan reads every entry, so a scan per batch of 64
/// made a 10,000-file backlog cost 156 full listings.
#[derive(Debug, Default)]
pub(crate) struct Ready {
    /// Senders in the order their first file appears.
    order: Vec<String>,
    queues: HashMap<String, VecDeque<Candidate>>,
    len: usize,
}

impl Ready {
    /// Queues `ready` (in arrival order) per sender.
    pub(crate) fn new(ready: Vec<Candidate>) -> Self {
        let mut this = Self::default();
        for c in ready {
            match this.queues.get_mut(&c.sender) {
                Some(q) => q.push_back(c),
                None => {
                    this.order.push(c.sender.clone());
                    this.queues.insert(c.sender.clone(), VecDeque::from([c]));
                }
            }
            this.len += 1;
        }
        this
    }

    /// No file left to take.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes up to `max` files, round-robin across senders (in arrival order within a sender),
    /// so that one partner's backlog of files does not delay the others' files; their sizes
    /// add up to at most `max_bytes` (or the batch is one file).
    pub(crate) fn next_batch(&mut self, max: usize, max_bytes: u64) -> Vec<Candidate> {
        let mut batch = Vec::new();
        let mut bytes = 0u64;
        'fill: while batch.len() < max {
            let before = batch.len();
            for s in &self.order {
                if batch.len() >= max {
                    break;
                }
                let Some(q) = self.queues.get_mut(s) else { continue };
                let Some(c) = q.front() else { continue };
                if !batch.is_empty() && bytes.saturating_add(c.stamp.len) > max_bytes {
                    break 'fill;
                }
                if let Some(c) = q.pop_front() {
                    bytes = bytes.saturating_add(c.stamp.len);
                    batch.push(c);
                }
            }
            if batch.len() == before {
                break;
            }
        }
        self.len -= batch.len();
        if self.queues.values().any(VecDeque::is_empty) {
            let queues = &mut self.queues;
            queues.retain(|_, q| !q.is_empty());
            self.order.retain(|s| queues.contains_key(s));
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(path: &str, sender: &str, len: u64) -> Candidate {
        Candidate {
            path: PathBuf::from(path),
            sender: sender.to_owned(),
            stamp: Stamp { len, modified: None, ino: 0 },
            grace_passed: false,
        }
    }

    fn paths(batch: Vec<Candidate>) -> Vec<PathBuf> {
        batch.into_iter().map(|c| c.path).collect()
    }

    #[test]
    fn batches_are_fair_across_senders_and_bounded_in_bytes() {
        let ready: Vec<Candidate> = (0..6)
            .map(|i| cand(&format!("b{i}"), "ZZ:BURST", 10))
            .chain([cand("n1", "ZZ:NORMAL", 10)])
            .collect();
        let mut queued = Ready::new(ready.clone());
        let batch = queued.next_batch(3, u64::MAX);
        assert_eq!(
            paths(batch),
            vec![PathBuf::from("b0"), PathBuf::from("n1"), PathBuf::from("b1")]
        );
        // The rest stays queued, in order, for the next batches.
        assert_eq!(paths(queued.next_batch(3, u64::MAX)), ["b2", "b3", "b4"].map(PathBuf::from));
        assert_eq!(paths(queued.next_batch(3, u64::MAX)), [PathBuf::from("b5")]);
        assert!(queued.is_empty());
        assert!(queued.next_batch(3, u64::MAX).is_empty());
        assert_eq!(paths(Ready::new(ready).next_batch(64, 25)).len(), 2);
        // One file over the byte bound still goes alone.
        assert_eq!(paths(Ready::new(vec![cand("big", "A", 100)]).next_batch(64, 25)).len(), 1);
    }

    #[test]
    fn a_sender_arriving_later_in_the_queue_is_served_in_the_next_batch() {
        let ready: Vec<Candidate> = (0..4)
            .map(|i| cand(&format!("b{i}"), "ZZ:BURST", 10))
            .chain([cand("n1", "ZZ:NORMAL", 10), cand("n2", "ZZ:NORMAL", 10)])
            .collect();
        let mut queued = Ready::new(ready);
        assert_eq!(paths(queued.next_batch(2, u64::MAX)), ["b0", "n1"].map(PathBuf::from));
        assert_eq!(paths(queued.next_batch(2, u64::MAX)), ["b1", "n2"].map(PathBuf::from));
        assert_eq!(paths(queued.next_batch(9, u64::MAX)), ["b2", "b3"].map(PathBuf::from));
    }
}
