//! The embedded store's keys seen: a `seen` table (key → expiry in Unix ms and owner) in the
//! counters file, written in its own transaction per call (never behind), so a key claimed
//! before a crash is still known after it. Expired rows are dropped by a `claim` at most once
//! a minute.

use super::*;
use crate::store::seen::{Seen, expiry};

/// Key → (expiry in Unix ms, owner).
pub(super) const SEEN: TableDefinition<'static, &str, (i64, &str)> = TableDefinition::new("seen");
/// How often (ms) a `claim` also drops expired rows.
const PRUNE_EVERY_MS: i64 = 60_000;

impl Seen for EmbeddedStore {
    async fn holders(&self, keys: &[&str], owner: &str) -> Result<Vec<Option<String>>, StoreError> {
        let shared = Arc::clone(&self.shared);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let owner = owner.to_owned();
        let now = shared.clock.now().as_millisecond();
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_read()?;
                let table = match txn.open_table(SEEN) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => {
                        return Ok(vec![None; keys.len()]);
                    }
                    Err(e) => return Err(e.into()),
                };
                keys.iter()
                    .map(|k| {
                        Ok(table.get(k.as_str())?.and_then(|v| {
                            let (until, who) = v.value();
                            (until > now && who != owner).then(|| who.to_owned())
                        }))
                    })
                    .collect()
            })
        })
        .await
    }

    async fn claim(
        &self,
        keys: &[&str],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        let shared = Arc::clone(&self.shared);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let owner = owner.to_owned();
        let now = shared.clock.now().as_millisecond();
        let until = expiry(now, ttl);
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_write()?;
                let claimed = {
                    let mut table = txn.open_table(SEEN)?;
                    let last = shared.seen_pruned_at.load(Ordering::Relaxed);
                    if now - last >= PRUNE_EVERY_MS {
                        table.retain(|_, (until, _)| until > now)?;
                        shared.seen_pruned_at.store(now, Ordering::Relaxed);
                    }
                    let mut claimed = Vec::with_capacity(keys.len());
                    for k in &keys {
                        let taken = table.get(k.as_str())?.is_some_and(|v| {
                            let (until, who) = v.value();
                            until > now && who != owner
                        });
                        if !taken {
                            table.insert(k.as_str(), (until, owner.as_str()))?;
                        }
                        claimed.push(!taken);
                    }
                    claimed
                };
                txn.commit()?;
                Ok(claimed)
            })
        })
        .await
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &str,
        to: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let shared = Arc::clone(&self.shared);
        let (key, from, to) = (key.to_owned(), from.to_owned(), to.to_owned());
        let now = shared.clock.now().as_millisecond();
        let until = expiry(now, ttl);
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_write()?;
                let handed = {
                    let mut table = txn.open_table(SEEN)?;
                    let held = table.get(key.as_str())?.is_some_and(|v| {
                        let (until, who) = v.value();
                        until > now && who == from
                    });
                    if held {
                        table.insert(key.as_str(), (until, to.as_str()))?;
                    }
                    held
                };
                txn.commit()?;
                Ok(handed)
            })
        })
        .await
    }

    async fn release(&self, keys: &[&str], owner: &str) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let owner = owner.to_owned();
        run(move || {
            shared.with_db(|db| {
                let txn = db.begin_write()?;
                {
                    let mut table = txn.open_table(SEEN)?;
                    for k in &keys {
                        let mine = table.get(k.as_str())?.is_some_and(|v| v.value().1 == owner);
                        if mine {
                            table.remove(k.as_str())?;
                        }
                    }
                }
                txn.commit()?;
                Ok(())
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
