//! The flusher thread: takes the queue, writes the current state of every queued counter in one
//! redb transaction per flush interval, publishes "committed up to sequence S", and retries a
//! failed commit on a reopened file. The invariants it keeps are in the parent module's docs.
//! It offers its core to other threads every [`YIELD_EVERY`] rows, so a large flush does not
//! hold back the answers.

use super::*;

/// Rows written between two offers of the CPU to the threads answering requests. A flush of
/// thousands of counters is milliseconds of work, and a request thread woken on this core
/// would wait for all of it (at half load that tripled the p99 of `/v1/quota`); yielding every
/// 256 rows (about 150 µs) lets it run first. The flusher keeps its share of the CPU: under
/// full load with many counters a commit cycle takes somewhat longer (about 130 ms instead of
/// 115 ms at 10,000 ids; BENCHMARKS.md, the p99 gap), but it is never starved.
const YIELD_EVERY: usize = 256;

impl Shared {
    pub(super) fn run_flusher(&self) {
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        // Set while the last commit failed: the batch was queued again and is retried every
        // flush interval, even when no new work arrives, until the disk takes it.
        let mut retrying = false;
        // The queue's buffer from the last batch, handed back to the queue empty: a buffer made
        // anew for every batch leaves the allocator holding freed memory it seldom returns.
        let mut spare: Vec<dirty::Key> = Vec::new();
        loop {
            let (mut dirty, resets, seq, stopping) = {
                let mut q = lock(&self.queue);
                let deadline = Instant::now() + self.flush_interval;
                while !q.urgent && !self.stop.load(Ordering::SeqCst) {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    q = self.wake.wait_timeout(q, left).unwrap_or_else(PoisonError::into_inner).0;
                }
                q.urgent = false;
                let stopping = self.stop.load(Ordering::SeqCst);
                let mut dirty = std::mem::take(&mut spare);
                dirty.append(&mut q.dirty);
                // The queue keeps its buffer, unless a burst of strict checks or a failed batch
                // handed back left it far larger than batches usually are.
                if q.dirty.capacity() > dirty::KEEP_KEYS {
                    q.dirty = Vec::new();
                }
                // The lanes too, under the queue's lock (see the invariants).
                self.dirty.take_into(&mut dirty);
                (dirty, std::mem::take(&mut q.resets), q.seq, stopping)
            };
            if Instant::now() >= next_sweep {
                self.counters.evict_expired(self.clock.now());
                next_sweep = Instant::now() + SWEEP_EVERY;
            }
            let evicted = self.counters.take_evicted();
            // Keys as queued, repeats included: the size the next batch's buffer needs.
            let queued = dirty.len();
            // Buffered keys come with no sequence number: their presence is the work.
            let work = !dirty.is_empty() || !evicted.is_empty();
            if *self.committed.borrow() < seq || work || retrying {
                dirty::distinct_in_key_order(&mut dirty);
                let result = self.commit(&dirty, &resets, &evicted);
                retrying = result.is_err();
                match result {
                    Ok(()) => {
                        let cleared = {
                            let mut failure = lock(&self.failure);
                            self.failing.store(false, Ordering::Release);
                            failure.take()
                        };
                        if cleared.is_some() {
                            tracing::info!(file = %self.path.display(), "quota counters are written again");
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "writing quota counters failed");
                        {
                            let mut failure = lock(&self.failure);
                            *failure = Some(e.to_string());
                            self.failing.store(true, Ordering::Release);
                        }
                        // Try these keys again with the next batch.
                        let mut q = lock(&self.queue);
                        let mut retry = std::mem::take(&mut dirty);
                        retry.append(&mut q.dirty);
                        q.dirty = retry;
                        let mut again = resets;
                        again.append(&mut q.resets);
                        q.resets = again;
                        drop(q);
                        // The dropped counters' rows too: they are deleted with a later batch.
                        self.counters.requeue_evicted(evicted);
                    }
                }
                // Waiters learn of a failure through `failure`; they must not hang.
                self.committed.send_replace(seq);
            }
            // Kept for the next batch, unless a burst left it far larger than batches now are.
            if dirty.capacity() > 4 * queued.max(4096) {
                dirty = Vec::new();
            }
            dirty.clear();
            spare = dirty;
            if stopping {
                return;
            }
        }
    }

    /// Writes one batch in one transaction, reopening the file first if the last commit
    /// failed. A failed commit drops the handle, so a transient error (a full disk, freed
    /// again) is recovered from without a restart; redb's recovery runs on the reopen.
    fn commit(
        &self,
        dirty: &[dirty::Key],
        resets: &[MeteringId],
        evicted: &[(String, CounterShape)],
    ) -> Result<(), String> {
        self.with_db(|db| self.write_batch(db, dirty, resets, evicted))
    }

    /// Runs `f` on the open file, reopening it first if the last write failed; a failed `f`
    /// drops the handle, since redb refuses every later write on a handle that met an I/O
    /// error. The error names the file.
    pub(super) fn with_db<T>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, redb::Error>,
    ) -> Result<T, String> {
        let mut db = lock(&self.db);
        if db.is_none() {
            let reopened = super::builder()
                .open(&self.path)
                .map_err(|e| format!("reopening {}: {e}", self.path.display()))?;
            *db = Some(reopened);
        }
        let Some(handle) = db.as_ref() else {
            return Err(format!("{} is not open", self.path.display()));
        };
        let written = f(handle);
        if written.is_err() {
            *db = None;
        }
        written.map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    /// The transaction of [`Shared::commit`].
    fn write_batch(
        &self,
        db: &Database,
        dirty: &[dirty::Key],
        resets: &[MeteringId],
        evicted: &[(String, CounterShape)],
    ) -> Result<(), redb::Error> {
        let now = self.clock.now();
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(COUNTERS)?;
            for id in resets {
                let lo = id_prefix(id.as_str(), 0);
                let hi = id_prefix(id.as_str(), 1);
                table.retain_in::<&[u8], _>(lo.as_slice()..hi.as_slice(), |_, _| false)?;
            }
            for (id, shape) in evicted {
                if self.counters.snapshot(id.as_bytes(), shape, now).is_none() {
                    table.remove(encode_key(id, shape).as_slice())?;
                }
            }
            // `dirty` holds each key once, in key order (see `run_flusher`): neighbouring rows
            // go in one after the other, into pages just touched.
            let (mut key, mut value) = (Vec::new(), Vec::new());
            for (written, (id, shape)) in dirty.iter().enumerate() {
                if written > 0 && written.is_multiple_of(YIELD_EVERY) {
                    std::thread::yield_now();
                }
                encode_key_into(&mut key, id.as_bytes(), shape);
                match self.counters.snapshot(id.as_bytes(), shape, now) {
                    Some(counter) => {
                        encode_counter_into(&mut value, &counter);
                        table.insert(key.as_slice(), value.as_slice())?;
                    }
                    None => {
                        table.remove(key.as_slice())?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}
