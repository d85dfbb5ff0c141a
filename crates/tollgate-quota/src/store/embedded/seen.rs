//! The embedded store's keys seen: a `seen` table (key → expiry in Unix ms) in the counters
//! file, written in its own transaction per call (never behind), so a key remembered before a
//! crash is still known after it. Expired rows are dropped by a `remember` at most once a
//! minute.

use super::*;
use crate::store::seen::Seen;

pub(super) const SEEN: TableDefinition<'static, &str, i64> = TableDefinition::new("seen");
/// How often (ms) a `remember` also drops expired rows.
const PRUNE_EVERY_MS: i64 = 60_000;

impl Seen for EmbeddedStore {
    async fn seen(&self, keys: &[&str]) -> Result<Vec<bool>, StoreError> {
        let shared = Arc::clone(&self.shared);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let now = shared.clock.now().as_millisecond();
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_read()?;
                let table = match txn.open_table(SEEN) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => {
                        return Ok(vec![false; keys.len()]);
                    }
                    Err(e) => return Err(e.into()),
                };
                keys.iter()
                    .map(|k| Ok(table.get(k.as_str())?.is_some_and(|until| until.value() > now)))
                    .collect()
            })
        })
        .await
    }

    async fn remember(&self, keys: &[&str], ttl: Duration) -> Result<Vec<bool>, StoreError> {
        let shared = Arc::clone(&self.shared);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let now = shared.clock.now().as_millisecond();
        let until = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_write()?;
                let claimed = {
                    let mut table = txn.open_table(SEEN)?;
                    let last = shared.seen_pruned_at.load(Ordering::Relaxed);
                    if now - last >= PRUNE_EVERY_MS {
                        table.retain(|_, until| until > now)?;
                        shared.seen_pruned_at.store(now, Ordering::Relaxed);
                    }
                    let mut claimed = Vec::with_capacity(keys.len());
                    for k in &keys {
                        let live = table.get(k.as_str())?.is_some_and(|u| u.value() > now);
                        if !live {
                            table.insert(k.as_str(), until)?;
                        }
                        claimed.push(!live);
                    }
                    claimed
                };
                txn.commit()?;
                Ok(claimed)
            })
        })
        .await
    }
}

/// Runs blocking file work off the async runtime; a failure is the store's I/O error.
async fn run<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(StoreError::Io),
        Err(e) => Err(StoreError::Io(format!("seen keys: {e}"))),
    }
}
