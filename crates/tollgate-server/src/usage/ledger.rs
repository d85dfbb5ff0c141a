//! The ledger: where the usage history is kept, one per counter store kind — in this
//! process's memory ([`memory`]), in `<data>/usage.redb` ([`mod@file`]) or in Redis ([`redis`]).
//! A ledger takes whole batches (one write transaction, one pipeline) and answers one id's
//! buckets in a range.

pub mod file;
pub mod memory;
pub mod redis;

use tollgate_quota::MeteringId;

use super::aggregate::{Batch, Delta};

/// See the module docs.
pub enum Ledger {
    /// Lost with the process.
    Memory(memory::MemoryLedger),
    /// A redb file beside the counters file.
    File(file::FileLedger),
    /// Redis hashes with a TTL, shared by every instance.
    Redis(redis::RedisLedger),
}

impl Ledger {
    /// Adds `batch`'s deltas, drops the buckets older than `cutoff` of the ids it lists for
    /// trimming, and every bucket of the ids in `gone`. All or nothing where the ledger allows
    /// it (the file); where it does not (Redis), batch `number` adds its units once however
    /// often it is sent. The caller sends a failed batch again as it was, numbers batches in
    /// rising order, and sends none before the last one is taken. (Redis drops old buckets by
    /// TTL.)
    pub async fn write(
        &self,
        batch: &Batch,
        number: u64,
        cutoff: i64,
        gone: &[MeteringId],
    ) -> Result<(), String> {
        match self {
            Self::Memory(l) => {
                l.write(batch, cutoff, gone);
                Ok(())
            }
            Self::File(l) => l.write(batch.clone(), cutoff, gone.to_vec()).await,
            Self::Redis(l) => l.write(&batch.deltas, number).await,
        }
    }

    /// What the ledger holds of `id` in `from..to` (bucket indexes).
    pub async fn read(&self, id: &MeteringId, from: i64, to: i64) -> Result<Stored, String> {
        let whole = |buckets| Stored { buckets, taken: Vec::new() };
        match self {
            Self::Memory(l) => Ok(whole(l.read(id, from, to))),
            Self::File(l) => l.read(id.clone(), from, to).await.map(whole),
            Self::Redis(l) => l.read(id, from, to).await,
        }
    }

    /// Writes a copy of the ledger into the backup directory `dir`; the file's name, or
    /// `None` for a ledger kept elsewhere (memory, Redis).
    pub async fn backup_to(&self, dir: &std::path::Path) -> Result<Option<&'static str>, String> {
        match self {
            Self::File(l) => l.backup_to(dir).await.map(|()| Some(file::FILE_NAME)),
            Self::Memory(_) | Self::Redis(_) => Ok(None),
        }
    }
}

/// What a ledger holds of one id in a range.
#[derive(Debug)]
pub struct Stored {
    /// The id's buckets, ascending.
    pub buckets: Vec<Delta>,
    /// Bucket ranges (one per day on Redis) and the last batch this process wrote to each: a
    /// batch Redis took in part is held and sent again, and a read must not add the part Redis
    /// took twice. Empty where a batch is taken whole or not at all (memory, the file).
    pub taken: Vec<(std::ops::Range<i64>, u64)>,
}

impl Stored {
    /// Whether the ledger already holds batch `number`'s units of `bucket`.
    pub fn holds(&self, bucket: i64, number: u64) -> bool {
        self.taken.iter().any(|(range, last)| range.contains(&bucket) && *last >= number)
    }
}
