//! Reading the spool: the rows of its state database (received files, items, dedup keys) and
//! the delivered items of a stopped gateway's data dir. Spool files are read in `files`.

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable};

use super::{FileRecord, ITEMS, Spool, SpoolError, db_err, decode, decode_item};
use crate::filter::QueueFilter;
use crate::item::{Item, State};
use crate::statedb;

impl Spool {
    /// Files received but not yet split into items, oldest first.
    pub fn pending_files(&self) -> Result<Vec<FileRecord>, SpoolError> {
        let mut out = Vec::new();
        self.rows.files(&mut |k, v| {
            out.push(decode(k, v)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Items, all or those in `state`, in id (arrival) order.
    pub fn items(&self, state: Option<State>) -> Result<Vec<Item>, SpoolError> {
        let mut out = Vec::new();
        self.each_item(&QueueFilter { state, ..Default::default() }, &mut |item| out.push(item))?;
        Ok(out)
    }

    /// Hands every item `filter` keeps to `f` in id order as it is read, so that a caller
    /// keeping only a little of each never holds the whole spool. Reads rows only within the
    /// filter's time bounds.
    pub fn each_item(
        &self,
        filter: &QueueFilter,
        f: &mut dyn FnMut(Item),
    ) -> Result<(), SpoolError> {
        self.scan(filter, None, |item| {
            f(item);
            true
        })
    }

    /// One page of the items `filter` keeps, in id order after the id `after`: at most
    /// `limit`, and the id to continue after when more follow. Reads rows only up to the
    /// page's end (plus one to know whether more follow), within the filter's time bounds.
    pub fn page(
        &self,
        filter: &QueueFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Item>, Option<String>), SpoolError> {
        let mut out = Vec::new();
        let mut next = None;
        self.scan(filter, after, |item| {
            if out.len() == limit {
                next = out.last().map(|i: &Item| i.id.clone());
                return false;
            }
            out.push(item);
            true
        })?;
        Ok((out, next))
    }

    /// How many items `filter` keeps, read row by row (the tally answers filters without
    /// time bounds without reading).
    pub fn count(&self, filter: &QueueFilter) -> Result<u64, SpoolError> {
        let mut n = 0;
        self.scan(filter, None, |_| {
            n += 1;
            true
        })?;
        Ok(n)
    }

    /// Calls `take` with each item `filter` keeps, in id order after `after`, until it
    /// answers false.
    fn scan(
        &self,
        filter: &QueueFilter,
        after: Option<&str>,
        mut take: impl FnMut(Item) -> bool,
    ) -> Result<(), SpoolError> {
        use std::ops::Bound;
        let (low, high) = filter.id_bounds();
        let from = match (after, low.as_deref()) {
            (Some(a), Some(l)) if l > a => Bound::Included(l),
            (Some(a), _) => Bound::Excluded(a),
            (None, Some(l)) => Bound::Included(l),
            (None, None) => Bound::Unbounded,
        };
        let to = high.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        self.rows.items_in((from, to), &mut |k, v| {
            let item = decode_item(k, v)?;
            Ok(!filter.matches(&item) || take(item))
        })
    }

    /// One item by id.
    pub fn item(&self, id: &str) -> Result<Option<Item>, SpoolError> {
        self.rows.item(id, |v| decode_item(id, v))
    }

    /// When the dedup key was first seen, if at or after `since_ms`.
    pub fn seen_since(&self, key: &str, since_ms: i64) -> Result<Option<i64>, SpoolError> {
        Ok(self.rows.dedup(key)?.filter(|&at| at >= since_ms))
    }
}

/// The delivered items of a stopped gateway's data dir, read from its state database without
/// changing it (read only: refused while a gateway has the database open).
pub(crate) fn delivered_items(data_dir: &Path) -> Result<Vec<Item>, SpoolError> {
    let path = data_dir.join(statedb::STATE_DB);
    if !path.is_file() {
        return Err(SpoolError::Db(format!("{}: no such state database", path.display())));
    }
    let db = redb::ReadOnlyDatabase::open(&path).map_err(|e| {
        SpoolError::Db(format!("{}: {e} (is a gateway running on it?)", path.display()))
    })?;
    let tx = db.begin_read().map_err(db_err)?;
    let t = tx.open_table(ITEMS).map_err(db_err)?;
    let mut out = Vec::new();
    for row in t.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let item = decode_item(k.value(), v.value())?;
        if item.state == State::Delivered {
            out.push(item);
        }
    }
    Ok(out)
}
