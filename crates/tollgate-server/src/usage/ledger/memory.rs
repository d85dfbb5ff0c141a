//! The ledger of a memory store: a map in this process, lost with it (as the counters are).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use tollgate_quota::MeteringId;

use crate::usage::aggregate::Delta;

/// One id's buckets: bucket index → `(admitted, refused)`.
type Rows = BTreeMap<i64, (u64, u64)>;

/// Per id, per bucket: `(admitted, refused)`.
#[derive(Default)]
pub struct MemoryLedger {
    ids: Mutex<HashMap<MeteringId, Rows>>,
}

impl MemoryLedger {
    /// See [`super::Ledger::write`].
    pub fn write(&self, batch: &[(MeteringId, Delta)], cutoff: i64, gone: &[MeteringId]) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, d) in batch {
            let rows = ids.entry(id.clone()).or_default();
            let row = rows.entry(d.bucket).or_default();
            row.0 = row.0.saturating_add(d.admitted);
            row.1 = row.1.saturating_add(d.refused);
            if rows.first_key_value().is_some_and(|(b, _)| *b < cutoff) {
                *rows = rows.split_off(&cutoff);
            }
        }
        for id in gone {
            ids.remove(id);
        }
    }

    /// See [`super::Ledger::read`].
    pub fn read(&self, id: &MeteringId, from: i64, to: i64) -> Vec<Delta> {
        if from >= to {
            return Vec::new();
        }
        let ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        ids.get(id).map_or_else(Vec::new, |rows| {
            rows.range(from..to)
                .map(|(b, (a, r))| Delta { bucket: *b, admitted: *a, refused: *r })
                .collect()
        })
    }
}
