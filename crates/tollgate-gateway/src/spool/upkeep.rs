//! The spool's upkeep: pruning what the dedup window no longer needs, and the next control
//! number (kept in the `meta` table).

use super::{Spool, SpoolError};
use crate::tally::{TallyChange, TallyRow};

impl Spool {
    /// Drops dedup keys first seen before `before_ms`, and delivered items received before it.
    pub fn prune(&self, before_ms: i64) -> Result<usize, SpoolError> {
        let _order = self.commit_order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (n, counted) = self.rows.write(|rows| {
            let mut counted = TallyChange::default();
            let mut n = rows.prune_dedup(before_ms)?;
            // Ids start with their receive time: only the rows received before `before_ms`
            // are read, not every item the spool keeps.
            let end = crate::filter::id_below(before_ms);
            for row in rows.prune_items(&end, &|v| TallyRow::delivered_before(v, before_ms))? {
                counted.gone(row);
                n += 1;
            }
            Ok((n, counted))
        })?;
        self.tally.apply(&counted, self.now_ms());
        Ok(n)
    }

    /// The next control number for split parts and acknowledgements (persistent, 1..=999999999).
    pub fn next_control_number(&self) -> Result<u64, SpoolError> {
        self.rows.next_control_number()
    }
}
