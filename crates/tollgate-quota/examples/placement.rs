//! Where a counter's state sits, measured apart from the rest of a check: the lane's layout
//! (an index of 4-byte slot numbers over dense 64-byte slots, as in `counter/cells.rs` and
//! `counter/index.rs`) against the same 64-byte slots placed by hash in a `hashbrown` table
//! (one control byte a key, the layout governor's map has), and a map of 40-byte buckets
//! (a 32-byte key beside an 8-byte state, governor's bucket size).
//!
//! Run: `cargo run --release -p tollgate-quota --example placement [-- KEYS STEP ROUNDS]`
//! (defaults 100,000 keys, every 7,919th, 5 rounds). Each lookup hashes the id, finds its
//! state and adds one to it atomically; the three layouts take turns every 50,000 lookups
//! and each side's CPU time is read from `/proc/thread-self/schedstat`. `SHUFFLE=1` inserts
//! the keys in a shuffled order, so that a key's slot is no longer next to the slot of the
//! key made after it (the dense layout fills its slots in insertion order; traffic does not
//! come in that order).

use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

/// A counter's state beside its id, one cache line, as in the lane.
#[repr(align(64))]
struct Slot {
    cell: AtomicU64,
    len: u16,
    key: [u8; 40],
}

impl Slot {
    fn new(id: &[u8]) -> Self {
        let mut key = [0; 40];
        key[..id.len()].copy_from_slice(id);
        Self { cell: AtomicU64::new(0), len: id.len() as u16, key }
    }

    fn id(&self) -> &[u8] {
        &self.key[..usize::from(self.len)]
    }
}

/// The lane's layout: tagged slot numbers, probed linearly, over slots in insertion order.
struct Dense {
    entries: Box<[u32]>,
    slots: Vec<Slot>,
}

impl Dense {
    fn new(keys: usize) -> Self {
        let size = (keys * 8).div_ceil(7).next_power_of_two().max(16);
        Self { entries: vec![0; size].into_boxed_slice(), slots: Vec::with_capacity(keys) }
    }

    fn insert(&mut self, hash: u64, id: &[u8]) {
        let n = self.slots.len() as u32;
        self.slots.push(Slot::new(id));
        let mask = self.entries.len() - 1;
        let mut i = hash as usize & mask;
        while self.entries[i] != 0 {
            i = (i + 1) & mask;
        }
        self.entries[i] = ((hash >> 56) as u32) << 24 | (n + 1);
    }

    fn find(&self, hash: u64, id: &[u8]) -> Option<&Slot> {
        let mask = self.entries.len() - 1;
        let tag = (hash >> 56) as u32;
        let mut i = hash as usize & mask;
        loop {
            let e = self.entries[i];
            if e == 0 {
                return None;
            }
            if e >> 24 == tag {
                let slot = self.slots.get(((e & 0xff_ffff) - 1) as usize)?;
                if slot.id() == id {
                    return Some(slot);
                }
            }
            i = (i + 1) & mask;
        }
    }
}

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let arg = |n: usize, default: usize| {
        std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let (keys, step, rounds) = (arg(1, 100_000).max(1), arg(2, 7_919), arg(3, 5));
    let hasher = DefaultHashBuilder::default();
    let ids: Vec<String> = (0..keys).map(|i| format!("ShipmentStatus:Carrier{i:06}")).collect();
    let mut order: Vec<usize> = (0..keys).collect();
    if std::env::var_os("SHUFFLE").is_some() {
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for i in (1..keys).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
    }
    let mut dense = Dense::new(keys);
    let mut table: HashTable<Slot> = HashTable::new();
    let mut map: HashMap<[u8; 32], AtomicU64> = HashMap::new();
    let key32 = |id: &[u8]| {
        let mut k = [0u8; 32];
        k[..id.len()].copy_from_slice(id);
        k
    };
    for &o in &order {
        let id = ids[o].as_bytes();
        let hash = hasher.hash_one(id);
        dense.insert(hash, id);
        table.insert_unique(hash, Slot::new(id), |s| hasher.hash_one(s.id()));
        map.insert(key32(id), AtomicU64::new(0));
    }
    const LOOKUPS: u64 = 5_000_000;
    const CHUNK: u64 = 50_000;
    println!("{keys} keys, step {step}: ns per lookup (CPU time)");
    println!("{:>12} {:>16} {:>16}", "dense", "placed by hash", "40-byte map");
    for _ in 0..rounds {
        let mut ns = [0u64; 3];
        let mut at = [0usize; 3];
        let mut done = 0;
        while done < LOOKUPS {
            for (side, (ns, at)) in ns.iter_mut().zip(&mut at).enumerate() {
                let start = cpu_ns();
                for _ in 0..CHUNK {
                    *at = (*at + step) % keys;
                    let id = ids[*at].as_bytes();
                    let cell = match side {
                        0 => dense.find(hasher.hash_one(id), id).map(|s| &s.cell),
                        1 => table.find(hasher.hash_one(id), |s| s.id() == id).map(|s| &s.cell),
                        _ => map.get(&key32(id)),
                    };
                    if let Some(cell) = cell {
                        black_box(cell.fetch_add(1, Ordering::Relaxed));
                    }
                }
                *ns += cpu_ns() - start;
            }
            done += CHUNK;
        }
        let per = |n: u64| n as f64 / LOOKUPS as f64;
        println!("{:>12.1} {:>16.1} {:>16.1}", per(ns[0]), per(ns[1]), per(ns[2]));
    }
}
