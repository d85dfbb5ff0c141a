//! One atomic change to the spool database: what a batch of the pipeline writes in one
//! transaction ([`super::Spool::commit`]).

use std::collections::{HashMap, HashSet};

use crate::item::Item;

/// One atomic change to the spool database.
#[derive(Debug, Default)]
pub struct Change {
    /// `files` rows to remove (their items are in `put`).
    pub remove_files: Vec<String>,
    /// Items to insert or replace.
    pub put: Vec<Item>,
    /// Items to remove (purge).
    pub delete: Vec<String>,
    /// Dedup keys first seen now: key → Unix ms.
    pub dedup: Vec<(String, i64)>,
}

impl Change {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.remove_files.is_empty()
            && self.put.is_empty()
            && self.delete.is_empty()
            && self.dedup.is_empty()
    }

    /// `self`, then `later`, as one change; an item put by both is put once, as `later` has it.
    pub fn then(mut self, later: Change) -> Change {
        self.remove_files.extend(later.remove_files);
        self.put.extend(later.put);
        let mut seen = HashSet::new();
        self.put = self.put.drain(..).rev().filter(|i| seen.insert(i.id.clone())).collect();
        self.put.reverse();
        self.delete.extend(later.delete);
        self.dedup.extend(later.dedup);
        self
    }

    /// The last version of each item in `put`, in order: an earlier one would be replaced
    /// in the same transaction, so it is not written (nor counted) at all.
    pub(crate) fn last_puts(&self) -> impl Iterator<Item = &Item> {
        let mut last: HashMap<&str, usize> = HashMap::new();
        if self.put.len() > 1 {
            last.extend(self.put.iter().enumerate().map(|(i, item)| (item.id.as_str(), i)));
        }
        let is_last =
            move |(i, item): &(usize, &Item)| last.get(item.id.as_str()).is_none_or(|at| at == i);
        self.put.iter().enumerate().filter(is_last).map(|(_, item)| item)
    }
}
