//! Consistent copies of a live redb file, for backups taken while the service runs.
//!
//! A redb file being written is not consistent to copy byte by byte. A read transaction is: it
//! sees one committed state however many commits follow. [`copy_table`] writes one table of
//! such a snapshot into a new file; [`create_copy`] makes that file, refusing to overwrite one.

use std::path::Path;

use redb::{Database, Key, ReadTransaction, ReadableTable, TableDefinition, TableError, Value};

/// Creates `dest` as a new, empty redb file; an existing `dest` is refused (a backup never
/// overwrites another one).
pub fn create_copy(dest: &Path) -> Result<Database, String> {
    if dest.exists() {
        return Err(format!("{} exists already: a backup never overwrites a file", dest.display()));
    }
    Database::create(dest).map_err(|e| format!("creating {}: {e}", dest.display()))
}

/// Copies every row of `table` as `snapshot` sees it into `dest`, in one transaction. A table
/// the snapshot does not have yet is created empty.
pub fn copy_table<K: Key + 'static, V: Value + 'static>(
    snapshot: &ReadTransaction,
    dest: &Database,
    table: TableDefinition<'_, K, V>,
) -> Result<u64, redb::Error> {
    let tx = dest.begin_write()?;
    let mut rows = 0;
    {
        let mut to = tx.open_table(table)?;
        match snapshot.open_table(table) {
            Ok(from) => {
                for row in from.iter()? {
                    let (k, v) = row?;
                    to.insert(k.value(), v.value())?;
                    rows += 1;
                }
            }
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tx.commit()?;
    Ok(rows)
}
