//! The embedded store through the real binary: counters survive a graceful stop (SIGTERM), a
//! SIGKILL after the flush interval, and, with `durability = "strict"`, a SIGKILL right after
//! the answer, also under concurrent load. A damaged counters file is refused at start-up
//! (naming it), unless `--move-aside-corrupt` asks to rename it and start empty.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Server, check, wait_until};

fn start(data: &Path, config: &Path) -> Server {
    let (data, config) = (data.to_str().unwrap(), config.to_str().unwrap());
    Server::start(&["--store", "embedded", "--data", data, "--config", config])
}

fn config(dir: &Path, store: &str) -> std::path::PathBuf {
    let file = dir.join("tollgate.toml");
    std::fs::write(&file, format!("[store]\n{store}\n")).unwrap();
    file
}

#[test]
fn counter_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    // A flush interval far longer than the test: only the shutdown flush can save the count.
    let conf = config(dir.path(), "flush_interval_ms = 60000");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Restart:A", 3), (0, 3));
    assert_eq!(s.sigterm().code(), Some(0));
    assert!(data.join("counters.redb").exists());

    let s = start(&data, &conf);
    assert_eq!(
        check(&s, "Restart:A", 0),
        (0, 3),
        "the probe sees the 3 counted before the restart"
    );
    assert_eq!(check(&s, "Restart:A", 3).0, 3, "3 + 3 > 5");
    assert_eq!(check(&s, "Restart:A", 2), (0, 5));
}

#[test]
fn counter_survives_sigkill_after_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "flush_interval_ms = 50");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Crash:A", 4), (0, 4));
    // Many flush intervals pass before the kill (a busy machine may delay a flush's fsync).
    std::thread::sleep(Duration::from_millis(2_000));
    s.sigkill();

    let s = start(&data, &conf);
    assert_eq!(check(&s, "Crash:A", 0), (0, 4));
    assert_eq!(check(&s, "Crash:A", 2).0, 3, "4 + 2 > 5");
}

#[test]
fn strict_durability_survives_sigkill_right_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "durability = \"strict\"\nflush_interval_ms = 1000");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Strict:A", 5), (0, 5));
    s.sigkill();

    let s = start(&data, &conf);
    assert_eq!(check(&s, "Strict:A", 1).0, 3, "the 5 were on disk before the answer");
}

/// `tollgate serve` on `data` that must exit by itself within 20 s: (exit code, stderr).
fn serve_expecting_exit(data: &Path, config: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "embedded"])
        .args(["--data", data.to_str().unwrap(), "--config", config.to_str().unwrap()])
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tollgate serve started on a damaged counters file instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code(), stderr)
}

/// A zero-length counters.redb used to start silently empty (a whole extra limit admitted),
/// and flipped bytes made redb panic. Each is now refused with an error naming the file and the
/// way out; the file is left as it was. `--move-aside-corrupt` renames it and starts empty.
#[test]
fn a_damaged_counters_file_is_refused_unless_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "flush_interval_ms = 50");
    let data = dir.path().join("data");
    let file = data.join("counters.redb");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Damaged:A", 5), (0, 5));
    assert_eq!(s.sigterm().code(), Some(0));
    let good = std::fs::read(&file).unwrap();

    let mut flipped = good.clone();
    flipped[4096..].iter_mut().for_each(|b| *b ^= 0x5A);
    for (what, bytes) in [
        ("zero-length", Vec::new()),
        ("flipped", flipped),
        ("half", good[..good.len() / 2].to_vec()),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        let (code, stderr) = serve_expecting_exit(&data, &conf);
        assert_eq!(code, Some(1), "{what}: {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{what}: {stderr}");
        assert!(
            stderr.contains("corrupt") && stderr.contains("--move-aside-corrupt"),
            "{what}: {stderr}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "{what}: the file was changed");
    }

    // The explicit flag: renamed, started empty, and the damaged bytes kept.
    let (data_s, conf_s) = (data.to_str().unwrap(), conf.to_str().unwrap());
    let s = Server::start(&[
        "--store",
        "embedded",
        "--data",
        data_s,
        "--config",
        conf_s,
        "--move-aside-corrupt",
    ]);
    assert_eq!(check(&s, "Damaged:A", 1), (0, 1), "started with empty counters");
    assert_eq!(s.sigterm().code(), Some(0));
    let aside: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("counters.redb.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(data.join(&aside[0])).unwrap().len(), good.len() / 2);
    // The new file is healthy: a plain restart keeps its count.
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Damaged:A", 0), (0, 1));
}

/// `tollgate check` against this server: the exit code only (0 allowed, 1 store error).
fn check_code(s: &Server, id: &str) -> i32 {
    let o = Command::new(BIN)
        .args(["check", "--url", &s.url, "--id", id, "--limit", "5", "--unit", "day"])
        .output()
        .unwrap();
    o.status.code().unwrap_or(-1)
}

/// A full disk under `--data` (a real tmpfs, filled): checks answer 503 `store-unavailable`
/// (the default `store_unavailable = "local"` refuses rather than admitting unsaved) and
/// `/readyz` answers 503; once the filler is removed both recover without a restart, and what
/// was admitted survives one.
#[test]
fn a_full_disk_is_not_ready_and_recovers_without_a_restart() {
    let Some(disk) = tollgate_testkit::SmallDisk::mount("4m") else { return };
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "flush_interval_ms = 20");
    let data = disk.path().join("data");
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Full:A", 2), (0, 2));
    assert!(s.get("/readyz").starts_with("HTTP/1.1 200"));

    let filler = disk.fill();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    // New long ids need new pages until a commit fails; then checks are refused.
    while check_code(&s, &format!("Full:{i:05}:{}", "x".repeat(200))) == 0 {
        assert!(Instant::now() < deadline, "checks kept being admitted on a full disk");
        i += 1;
    }
    let ready = s.get("/readyz");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(ready.contains("counters_file"), "{ready}");
    assert_eq!(check_code(&s, "Full:A"), 1, "no admission while nothing is saved");

    std::fs::remove_file(filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.get("/readyz").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "not ready 10 s after space was freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(check(&s, "Full:A", 1), (0, 3));
    assert_eq!(s.sigterm().code(), Some(0));
    let s = start(&data, &conf);
    assert_eq!(check(&s, "Full:A", 0), (0, 3));
}

/// One `GET /v1/quota` (weight 1, a limit never reached) on a fresh connection: true on a 200.
/// Any error (the server was killed) is false.
fn admitted(addr: &str, id: &str) -> bool {
    let headers = [
        ("metering-id", id),
        ("quota-limit", "1000000000"),
        ("quota-interval", "24"),
        ("quota-timeunit", "hours"),
        ("message-weight", "1"),
    ];
    common::try_request_at(addr, "GET", "/v1/quota", &headers, b"").is_some_and(|m| m.status == 200)
}

/// Units counted for ids under `prefix`, from `GET /v1/counters`.
fn used_under(s: &Server, prefix: &str) -> u64 {
    let answer = s.get(&format!("/v1/counters?prefix={prefix}"));
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let j: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    j["counters"].as_array().unwrap().iter().map(|c| c["used"].as_u64().unwrap()).sum()
}

/// Strict answers only after the group commit holding the check: with 8 clients hammering a few
/// ids and the process killed (SIGKILL) the moment 300 answers are in, while checks are still
/// in flight, every unit answered 200 (also those read after the kill) is counted after the
/// restart. The flush interval is long (10 s), so buffered checks would all be lost here.
#[test]
fn strict_loses_no_answered_check_in_a_sigkill_under_concurrent_load() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let conf = config(dir.path(), "durability = \"strict\"\nflush_interval_ms = 10000");
    let data = dir.path().join("data");
    let s = start(&data, &conf);
    let answered = Arc::new(AtomicU64::new(0));
    let dead = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|t| {
            let (addr, answered, dead) = (s.addr.clone(), answered.clone(), dead.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !dead.load(Ordering::SeqCst) {
                    if admitted(&addr, &format!("Kill:{}", (t + i) % 3)) {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    wait_until("300 strict answers", Duration::from_secs(60), || {
        answered.load(Ordering::SeqCst) >= 300
    });
    s.sigkill();
    dead.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let answered = answered.load(Ordering::SeqCst);

    let s = start(&data, &conf);
    let kept = used_under(&s, "Kill:");
    assert!(kept >= answered, "{answered} answered 200, only {kept} counted after the restart");
}
