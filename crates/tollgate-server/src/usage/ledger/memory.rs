//! The ledger of a memory store: a map in this process, lost with it (as the counters are).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use tollgate_quota::MeteringId;

use crate::usage::aggregate::{Batch, Delta};

/// One id's buckets: bucket index → its units.
type Rows = BTreeMap<i64, Delta>;

/// Per id, per bucket: admitted, refused, held and duplicate units.
#[derive(Default)]
pub struct MemoryLedger {
    ids: Mutex<HashMap<MeteringId, Rows>>,
}

impl MemoryLedger {
    /// See [`super::Ledger::write`].
    pub fn write(&self, batch: &Batch, cutoff: i64, gone: &[MeteringId]) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        // First: an id tracked again since it was untracked may have deltas in this batch.
        for id in gone {
            ids.remove(id);
        }
        for (id, d) in &batch.deltas {
            let rows = ids.entry(id.clone()).or_default();
            rows.entry(d.bucket).or_insert_with(|| Delta::empty(d.bucket)).add(d);
        }
        for id in &batch.trim {
            if let Some(rows) = ids.get_mut(id)
                && rows.first_key_value().is_some_and(|(b, _)| *b < cutoff)
            {
                *rows = rows.split_off(&cutoff);
            }
        }
    }

    /// See [`super::Ledger::read`].
    pub fn read(&self, id: &MeteringId, from: i64, to: i64) -> Vec<Delta> {
        if from >= to {
            return Vec::new();
        }
        let ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        ids.get(id).map_or_else(Vec::new, |rows| rows.range(from..to).map(|(_, d)| *d).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id untracked and tracked again before a flush: its old rows go, its new deltas stay.
    #[test]
    fn an_id_tracked_again_keeps_the_deltas_of_the_batch_that_drops_its_rows() {
        let l = MemoryLedger::default();
        let id = MeteringId::new("S:A").unwrap();
        let units =
            |bucket, admitted| Delta { bucket, admitted, refused: 0, held: 0, duplicate: 0 };
        l.write(&Batch { deltas: vec![(id.clone(), units(10, 4))], trim: Vec::new() }, 0, &[]);
        let again = Batch { deltas: vec![(id.clone(), units(500, 7))], trim: Vec::new() };
        l.write(&again, 0, std::slice::from_ref(&id));
        assert_eq!(l.read(&id, 0, 1000), [units(500, 7)]);
    }
}
