//! The spool's upkeep: pruning what the dedup window no longer needs, and the values kept in
//! the `meta` table (this data dir's instance id, the next control number).

use redb::{Database, ReadableTable};

use super::{DEDUP, ITEMS, META, Spool, SpoolError, db_err, decode_tally};
use crate::item::State;
use crate::tally::TallyChange;

impl Spool {
    /// Drops dedup keys first seen before `before_ms`, and delivered items received before it.
    pub fn prune(&self, before_ms: i64) -> Result<usize, SpoolError> {
        let _order = self.rows_written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut counted = TallyChange::default();
        let n = self.db.with(|db| {
            counted = TallyChange::default();
            let tx = db.begin_write().map_err(db_err)?;
            let mut n = 0;
            {
                let mut dedup = tx.open_table(DEDUP).map_err(db_err)?;
                n += dedup.extract_if(|_, at| at < before_ms).map_err(db_err)?.count();
                // Ids start with their receive time: only the rows received before `before_ms`
                // are read, not every item the spool keeps.
                let mut items = tx.open_table(ITEMS).map_err(db_err)?;
                let end = crate::filter::id_below(before_ms);
                let old =
                    items.extract_from_if(..end.as_str(), |_, v| delivered_before(v, before_ms));
                for row in old.map_err(db_err)? {
                    let (k, v) = row.map_err(db_err)?;
                    counted.gone(decode_tally(k.value(), v.value())?);
                    n += 1;
                }
            }
            tx.commit().map_err(db_err)?;
            Ok(n)
        })?;
        self.tally.apply(&counted, self.now_ms());
        Ok(n)
    }

    /// The next control number for split parts and acknowledgements (persistent, 1..=999999999).
    pub fn next_control_number(&self) -> Result<u64, SpoolError> {
        self.db.with(|db| {
            let tx = db.begin_write().map_err(db_err)?;
            let n;
            {
                let mut meta = tx.open_table(META).map_err(db_err)?;
                let cur = meta.get("control").map_err(db_err)?.map(|v| v.value()).unwrap_or(0);
                n = cur % 999_999_999 + 1;
                meta.insert("control", n).map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
            Ok(n)
        })
    }
}

/// Whether a stored item was delivered and received before `before_ms`. The prune visits
/// every row received before then, so only these two fields are decoded (the old `admitted`
/// flag only ever accompanies `received`, so it cannot make a row delivered).
fn delivered_before(json: &[u8], before_ms: i64) -> bool {
    #[derive(serde::Deserialize)]
    struct Stored {
        state: State,
        received_at: i64,
    }
    serde_json::from_slice::<Stored>(json)
        .is_ok_and(|s| s.state == State::Delivered && s.received_at < before_ms)
}

/// The instance id kept in `meta`, made (random) on first use.
pub(super) fn instance_of(db: &Database) -> Result<u64, SpoolError> {
    let tx = db.begin_write().map_err(db_err)?;
    let id = {
        let mut meta = tx.open_table(META).map_err(db_err)?;
        let stored = meta.get("instance").map_err(db_err)?.map(|v| v.value());
        match stored {
            Some(id) => id,
            None => {
                let id = rand::random::<u64>();
                meta.insert("instance", id).map_err(db_err)?;
                id
            }
        }
    };
    tx.commit().map_err(db_err)?;
    Ok(id)
}
