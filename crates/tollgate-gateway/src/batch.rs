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
pub struct Candidate {
    /// Where it is.
    pub path: PathBuf,
    /// The sender sniffed from its head (empty when unknown).
    pub sender: String,
    /// The stamp it settled with.
    pub stamp: Stamp,
    /// Unchanged for `grace`: taken even if its last interchange is unfinished.
    pub grace_passed: bool,
}

/// Up to `max` files, taken round-robin across senders (in arrival order within a sender), so
/// that one partner's backlog of files does not delay the others' files; their sizes add up
/// to at most `max_bytes` (or the batch is one file).
pub fn fair_batch(ready: Vec<Candidate>, max: usize, max_bytes: u64) -> Vec<Candidate> {
    let mut order: Vec<String> = Vec::new();
    let mut queues: HashMap<String, VecDeque<Candidate>> = HashMap::new();
    for c in ready {
        if !queues.contains_key(&c.sender) {
            order.push(c.sender.clone());
        }
        queues.entry(c.sender.clone()).or_default().push_back(c);
    }
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    'fill: while batch.len() < max {
        let before = batch.len();
        for s in &order {
            if batch.len() >= max {
                break;
            }
            let Some(q) = queues.get_mut(s) else { continue };
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
    batch
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
        let batch = fair_batch(ready.clone(), 3, u64::MAX);
        assert_eq!(
            paths(batch),
            vec![PathBuf::from("b0"), PathBuf::from("n1"), PathBuf::from("b1")]
        );
        assert_eq!(paths(fair_batch(ready.clone(), 64, 25)).len(), 2);
        // One file over the byte bound still goes alone.
        assert_eq!(paths(fair_batch(vec![cand("big", "A", 100)], 64, 25)).len(), 1);
    }
}
