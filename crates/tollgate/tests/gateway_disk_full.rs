//! A full disk under the gateway of the real `tollgate serve` (a real tmpfs, filled): a failed
//! write leaves nothing behind, neither in the spool (uploads, landing files) nor in a `dir:`
//! target (`.<id>.edi.tmp`), `/readyz` says the spool cannot be written, and once space is
//! freed intake, uploads, deliveries and `/readyz` recover by themselves, without a restart.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Server, Status214, delivered, metric, wait_until};
use tollgate_testkit::SmallDisk;

const POLL_MS: u64 = 200;

/// A config file in `dir`: data in `data`, landing dir `dir/in`, deliveries to `out`.
fn config(dir: &Path, data: &Path, out: &Path) -> PathBuf {
    let file = dir.join("tollgate.toml");
    std::fs::write(
        &file,
        format!(
            "[server]\ndata = \"{data}\"\n\n[gateway]\ninbound = [\"{landing}\"]\n\
             poll_ms = {POLL_MS}\nsettle_ms = 0\n\n[[gateway.route]]\nname = \"Status\"\n\
             documents = [\"214\"]\nlimit = 100000\nunit = \"day\"\ndeliver = \"dir:{out}\"\n",
            data = data.display(),
            landing = dir.join("in").display(),
            out = out.display(),
        ),
    )
    .unwrap();
    file
}

/// Writes a landing file under a partial name, then renames it in.
fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let landing = dir.join("in");
    std::fs::create_dir_all(&landing).unwrap();
    let tmp = landing.join(format!("{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, landing.join(name)).unwrap();
}

/// The names of the entries of `dir` (none when it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_full_data_disk_leaves_no_litter_and_recovers_without_a_restart() {
    let Some(disk) = SmallDisk::mount("8m") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (data, out, log) =
        (disk.path().join("data"), dir.path().join("out"), dir.path().join("log"));
    let file = config(dir.path(), &data, &out);
    let s = Server::start_logging(&["--config", file.to_str().unwrap()], &log);
    let spool = data.join("spool");
    drop_file(dir.path(), "first.edi", &Status214::new("CARRIERA", 1).build());
    wait_until("the first file delivered", Duration::from_secs(10), || delivered(&out) == 1);
    wait_until("its spool file removed", Duration::from_secs(10), || names(&spool).is_empty());

    let filler = disk.fill();
    let answer = s.request("POST", "/v1/interchanges", &[], &Status214::new("CARRIERA", 2).build());
    assert_eq!(answer.status, 503, "{}", answer.text());
    assert_eq!(names(&spool), Vec::<String>::new(), "the refused upload left a spool file");
    for i in 0..5 {
        drop_file(dir.path(), &format!("f{i}.edi"), &Status214::new("CARRIERA", 10 + i).build());
    }
    wait_until("/readyz to report the spool", Duration::from_secs(10), || {
        let ready = s.get("/readyz");
        ready.starts_with("HTTP/1.1 503") && ready.contains("gateway_spool")
    });
    // A measuring window, not a synchronisation: over ten poll periods of a full disk, the
    // poller's attempts must leave nothing behind.
    std::thread::sleep(Duration::from_millis(10 * POLL_MS));
    assert_eq!(names(&spool), Vec::<String>::new(), "failed attempts left spool files");
    let scrape = s.get("/metrics");
    let errors = metric(&scrape, "tollgate_gateway_spool_errors_total");
    assert!(errors.is_some_and(|n| n >= 1.0), "spool errors not counted: {errors:?}");
    assert_eq!(metric(&scrape, "tollgate_gateway_spool_failing"), Some(1.0));

    std::fs::remove_file(filler).unwrap();
    wait_until("/readyz ready again", Duration::from_secs(10), || {
        s.get("/readyz").starts_with("HTTP/1.1 200")
    });
    let answer = s.request("POST", "/v1/interchanges", &[], &Status214::new("CARRIERA", 3).build());
    assert_eq!(answer.status, 202, "{}", answer.text());
    wait_until("the waiting files and the upload delivered", Duration::from_secs(10), || {
        delivered(&out) == 7
    });
    wait_until("the spool emptied", Duration::from_secs(10), || names(&spool).is_empty());
    assert_eq!(metric(&s.get("/metrics"), "tollgate_gateway_spool_failing"), Some(0.0));
    assert_eq!(names(&dir.path().join("in")), [".tollgate-taken"], "{}", log_of(&log));
}

#[test]
fn a_full_outbound_disk_leaves_no_temp_files_and_delivers_once_space_is_back() {
    let Some(disk) = SmallDisk::mount("1m") else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = disk.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let file = config(dir.path(), &dir.path().join("data"), &out);
    let s = Server::start(&["--config", file.to_str().unwrap()]);
    let filler = disk.fill();
    for i in 0..3 {
        drop_file(dir.path(), &format!("f{i}.edi"), &Status214::new("CARRIERA", 20 + i).build());
    }
    wait_until("failed deliveries", Duration::from_secs(20), || {
        metric(&s.get("/metrics"), "tollgate_gateway_delivery_errors_total")
            .is_some_and(|n| n >= 6.0)
    });
    let left: Vec<String> = names(&out).into_iter().filter(|n| n.ends_with(".tmp")).collect();
    assert_eq!(left, Vec::<String>::new(), "failed deliveries left temp files");

    std::fs::remove_file(filler).unwrap();
    wait_until("the three delivered", Duration::from_secs(20), || delivered(&out) == 3);
    let left: Vec<String> = names(&out).into_iter().filter(|n| n.ends_with(".tmp")).collect();
    assert_eq!(left, Vec::<String>::new());
}
