//! An idle gateway inside the real `tollgate serve` costs almost nothing: with an empty landing
//! directory it lists it about once per `poll_ms` (its own listing must not wake it again), it
//! reads its config file only at the 2 s poll (its own read must not look like an edit), and a
//! file dropped in is still taken at once. The listings and reads are counted from outside,
//! with the test's own inotify watch (each opens the directory or the file), and the listings
//! also from the gateway's `tollgate_gateway_landing_scans_total`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Server, Status214, metric, wait_until};
use notify::Watcher;

const POLL_MS: u64 = 200;

/// Counts the opens of `path`: a directory itself (a listing opens it, not the entries inside
/// it), or a file (watched through its directory).
fn count_opens(path: &Path) -> (notify::RecommendedWatcher, Arc<AtomicU64>) {
    let opens = Arc::new(AtomicU64::new(0));
    let (seen, target) = (Arc::clone(&opens), path.to_path_buf());
    let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        if let Ok(e) = e
            && matches!(e.kind, notify::EventKind::Access(notify::event::AccessKind::Open(_)))
            && e.paths.iter().any(|p| p == &target)
        {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    })
    .unwrap();
    let watched = if path.is_dir() { path } else { path.parent().unwrap() };
    watcher.watch(watched, notify::RecursiveMode::NonRecursive).unwrap();
    (watcher, opens)
}

fn scans(s: &Server) -> f64 {
    metric(&s.get("/metrics"), "tollgate_gateway_landing_scans_total").unwrap_or(-1.0)
}

#[test]
fn an_idle_gateway_lists_its_landing_directory_once_per_poll_period() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\ndata = \"{data}\"\n\n[gateway]\ninbound = [\"{landing}\"]\n\
             poll_ms = {POLL_MS}\nsettle_ms = 50\n\n[[gateway.route]]\nname = \"Status\"\n\
             documents = [\"214\"]\nlimit = 1000\nunit = \"day\"\ndeliver = \"dir:{out}\"\n",
            data = dir.path().join("data").display(),
            landing = landing.display(),
            out = out.display(),
        ),
    )
    .unwrap();
    let (_watch, opens) = count_opens(&landing);
    let (_watch_config, reads) = count_opens(&file);
    let s = Server::start(&["--config", file.to_str().unwrap()]);
    wait_until("the first listing", Duration::from_secs(10), || opens.load(Ordering::Relaxed) > 0);

    let (started, opened_before, scanned_before, read_before) =
        (Instant::now(), opens.load(Ordering::Relaxed), scans(&s), reads.load(Ordering::Relaxed));
    // A measuring window, not a synchronisation: the counts over it are what is checked, and
    // a slow machine only lists less.
    std::thread::sleep(Duration::from_secs(3));
    let opened = opens.load(Ordering::Relaxed) - opened_before;
    let scanned = scans(&s) - scanned_before;
    let read = reads.load(Ordering::Relaxed) - read_before;
    let periods = started.elapsed().as_millis() as u64 / POLL_MS;
    // The config file is polled every 2 s (in case events are lost).
    let config_polls = started.elapsed().as_secs() / 2;
    assert!(
        read <= config_polls + 2,
        "the config file was read {read} times in {config_polls} polls"
    );
    assert!(
        opened <= periods + 3,
        "the idle landing directory was opened {opened} times in {periods} poll periods"
    );
    assert!(
        scanned_before >= 0.0 && (0.0..=(periods + 3) as f64).contains(&scanned),
        "tollgate_gateway_landing_scans_total grew by {scanned} in {periods} poll periods"
    );

    // Still woken by what matters: a file renamed in is taken and delivered.
    let tmp = landing.join("a.edi.part");
    std::fs::write(&tmp, Status214::new("CARRIERA", 1).build()).unwrap();
    std::fs::rename(&tmp, landing.join("a.edi")).unwrap();
    wait_until("the dropped file delivered", Duration::from_secs(10), || {
        std::fs::read_dir(&out).into_iter().flatten().flatten().any(|e| {
            let name = e.file_name();
            name.to_string_lossy().ends_with(".edi") && !name.to_string_lossy().starts_with('.')
        })
    });
}
