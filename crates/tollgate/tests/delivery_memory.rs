//! What a slow target costs in memory: an item's bytes are read from the spool only once a
//! delivery slot of its target is free, so with `max_concurrency = 1` and 32 partners waiting,
//! one interchange is in memory, not 32. The real `tollgate serve`, a target that
//! holds every request until released, and the server's resident memory from `/proc`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

const PARTNERS: usize = 32;
const BYTES: usize = 8 << 20;

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

#[test]
fn waiting_lanes_hold_no_interchange_in_memory() {
    let released = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(AtomicUsize::new(0));
    let (hold, count) = (Arc::clone(&released), Arc::clone(&asked));
    let target = HttpStub::start(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(60);
        while !hold.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        Message::reply(200, "")
    });
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    let cfg = gateway_toml(&landing, &out, "", "")
        .replace("limit = 1000", "limit = 1000000000\nmax_concurrency = 1")
        .replace(&format!("dir:{}", out.display()), &format!("{}/edi", target.url()));
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, cfg).unwrap();
    let gw = common::usage::serve("memory", &dir.path().join("data"), file.to_str().unwrap());
    let before = rss(gw.pid());
    for p in 0..PARTNERS {
        let bytes = Status214::new(&format!("CARRIER{p:02}"), 1).padded_to(BYTES).build();
        std::fs::write(landing.join(format!("{p}.edi")), bytes).unwrap();
    }
    // Every item metered, the first delivery held by the target, the rest waiting.
    wait_until("all items metered", Duration::from_secs(60), || {
        let counters = gw.get("/v1/counters");
        (0..PARTNERS).all(|p| counters.contains(&format!("CARRIER{p:02}")))
    });
    wait_until("the first delivery", Duration::from_secs(30), || asked.load(Ordering::SeqCst) > 0);
    std::thread::sleep(Duration::from_secs(1));
    let grown = rss(gw.pid()).saturating_sub(before);
    assert_eq!(asked.load(Ordering::SeqCst), 1, "max_concurrency = 1");
    released.store(true, Ordering::SeqCst);
    wait_until("every delivery", Duration::from_secs(60), || {
        asked.load(Ordering::SeqCst) == PARTNERS
    });
    // The waiting lanes' interchanges alone are 248 MiB, so a build in which each lane read
    // its own before waiting (354-370 MiB grown) cannot pass. One in memory, with the copies
    // its attempt makes and what the allocator keeps of the intake's buffers: 58-170 MiB.
    let waiting = ((PARTNERS - 1) * BYTES) as u64;
    assert!(grown < waiting, "resident memory grew by {} MiB", grown >> 20);
}
