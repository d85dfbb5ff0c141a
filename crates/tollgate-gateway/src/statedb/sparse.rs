//! The storage of an ephemeral (simulated) spool's state database: bytes in memory, kept in
//! fixed chunks that exist only once something is written to them.
//!
//! redb grows its file ahead of use (it doubles it while small) and writes only the pages it
//! allocates. A single `Vec` (redb's own in-memory backend) zero-fills and copies the whole
//! length at every growth, so memory follows the length; here it follows what was written.
//!
//! Invariants:
//! - Bytes never written read as zero, as do bytes cut off by a shorter length and then
//!   grown back (a chunk past the end is dropped, the tail of the last one is zeroed).
//! - A read or write past the length is refused, as a file's would be by redb's contract.

use std::io;
use std::sync::{PoisonError, RwLock};

use redb::StorageBackend;

/// Bytes per chunk: 16 of redb's 4 KiB pages.
const CHUNK: usize = 64 * 1024;

/// redb storage in memory that allocates only the chunks written to.
#[derive(Debug, Default)]
pub(crate) struct SparseMemory(RwLock<Chunks>);

#[derive(Debug, Default)]
struct Chunks {
    len: u64,
    chunks: Vec<Option<Box<[u8]>>>,
}

fn out_of_range(offset: u64, n: usize, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{n} bytes at {offset} are past the end ({len} bytes)"),
    )
}

/// The chunk pieces of `n` bytes from `offset`: (chunk index, offset in chunk, length).
fn pieces(offset: u64, n: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let mut at = offset;
    let end = offset + n as u64;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let index = usize::try_from(at / CHUNK as u64).ok()?;
        let within = (at % CHUNK as u64) as usize;
        let take = (CHUNK - within).min(usize::try_from(end - at).ok()?);
        at += take as u64;
        Some((index, within, take))
    })
}

impl Chunks {
    fn check(&self, offset: u64, n: usize) -> io::Result<()> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(out_of_range(offset, n, self.len)),
        }
    }
}

impl StorageBackend for SparseMemory {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.read().unwrap_or_else(PoisonError::into_inner).len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let c = self.0.read().unwrap_or_else(PoisonError::into_inner);
        c.check(offset, out.len())?;
        let mut done = 0;
        for (index, within, take) in pieces(offset, out.len()) {
            let to = &mut out[done..done + take];
            match c.chunks.get(index).and_then(Option::as_ref) {
                Some(chunk) => to.copy_from_slice(&chunk[within..within + take]),
                None => to.fill(0),
            }
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut c = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let count =
            usize::try_from(len.div_ceil(CHUNK as u64)).map_err(|_| out_of_range(len, 0, c.len))?;
        if len < c.len {
            c.chunks.truncate(count);
            let tail = (len % CHUNK as u64) as usize;
            if tail > 0
                && let Some(Some(last)) = c.chunks.last_mut()
            {
                last[tail..].fill(0);
            }
        }
        c.chunks.resize_with(count, || None);
        c.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut c = self.0.write().unwrap_or_else(PoisonError::into_inner);
        c.check(offset, data.len())?;
        let mut done = 0;
        for (index, within, take) in pieces(offset, data.len()) {
            let chunk = c.chunks[index].get_or_insert_with(|| vec![0; CHUNK].into_boxed_slice());
            chunk[within..within + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redb::StorageBackend;

    use super::{CHUNK, SparseMemory};

    #[derive(Debug, Clone)]
    enum Op {
        SetLen(u64),
        Write(u64, Vec<u8>),
        Read(u64, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let span = 3 * CHUNK as u64;
        prop_oneof![
            (0..span).prop_map(Op::SetLen),
            (0..span, proptest::collection::vec(1u8..=255, 1..200))
                .prop_map(|(o, d)| Op::Write(o, d)),
            (0..span, 0usize..(CHUNK + 10)).prop_map(|(o, n)| Op::Read(o, n)),
        ]
    }

    proptest! {
        /// The backend reads back exactly what a plain byte vector (a file) would, and refuses
        /// exactly what it would refuse.
        #[test]
        fn behaves_as_a_byte_vector(ops in proptest::collection::vec(op(), 1..60)) {
            let sparse = SparseMemory::default();
            let mut model: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::SetLen(len) => {
                        sparse.set_len(len).unwrap();
                        model.resize(len as usize, 0);
                    }
                    Op::Write(at, data) => {
                        let fits = at as usize + data.len() <= model.len();
                        prop_assert_eq!(sparse.write(at, &data).is_ok(), fits);
                        if fits {
                            model[at as usize..at as usize + data.len()].copy_from_slice(&data);
                        }
                    }
                    Op::Read(at, n) => {
                        let mut out = vec![7u8; n];
                        let fits = at as usize + n <= model.len();
                        prop_assert_eq!(sparse.read(at, &mut out).is_ok(), fits);
                        if fits {
                            prop_assert_eq!(&out[..], &model[at as usize..at as usize + n]);
                        }
                    }
                }
                prop_assert_eq!(sparse.len().unwrap(), model.len() as u64);
            }
        }
    }

    #[test]
    fn only_written_chunks_take_memory() {
        let sparse = SparseMemory::default();
        sparse.set_len(1 << 30).unwrap();
        sparse.write(5 * CHUNK as u64 - 2, &[1, 2, 3, 4]).unwrap();
        let c = sparse.0.read().unwrap();
        assert_eq!(c.chunks.iter().filter(|c| c.is_some()).count(), 2, "a write across a boundary");
    }
}
