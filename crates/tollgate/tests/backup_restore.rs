//! `tollgate backup` against a running server with the embedded store and a gateway, then a
//! restore: the backup's files copied into a new, empty data directory and a server started on
//! it finds the counters (`GET /v1/quota` shows the used amount) and the queue (the held item in
//! `GET /v1/queue`) as they were when the backup was taken; what happened after it is not in
//! it. A backup never overwrites a directory, and one without a store file says so.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Server, Status214, check};

fn held(s: &Server) -> Vec<serde_json::Value> {
    let answer = s.get("/v1/queue?state=held");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str::<Vec<serde_json::Value>>(body).unwrap_or_default()
}

fn drop_214(landing: &Path, control: u32) {
    let tmp = landing.join(format!("{control}.part"));
    std::fs::write(&tmp, Status214::new("CARRIERXYZ", control).build()).unwrap();
    std::fs::rename(&tmp, landing.join(format!("{control}.edi"))).unwrap();
}

fn backup(s: &Server, to: &Path) -> std::process::Output {
    common::exit_within(
        &["backup", "--url", &s.url, "--to", to.to_str().unwrap()],
        Duration::from_secs(30),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn a_restored_backup_has_the_counters_and_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    let partner = "[[gateway.partner]]\nname = \"CarrierXYZ\"\nids = [\"ZZ:CARRIERXYZ\"]\n";
    // One interchange a day: the first is delivered, the second held.
    let text =
        common::gateway_toml(&landing, &out, partner, "").replace("limit = 1000", "limit = 1");
    let conf = dir.path().join("tollgate.toml");
    std::fs::write(&conf, text).unwrap();
    let serve = |data: &Path| {
        Server::start(&["--config", conf.to_str().unwrap(), "--data", data.to_str().unwrap()])
    };

    let data = dir.path().join("data");
    let s = serve(&data);
    assert_eq!(check(&s, "Backup:A", 3), (0, 3));
    drop_214(&landing, 1);
    common::wait_until("the first interchange delivered", Duration::from_secs(20), || {
        std::fs::read_dir(&out).map(|d| d.count() > 0).unwrap_or(false)
    });
    drop_214(&landing, 2);
    common::wait_until("the second interchange held", Duration::from_secs(20), || {
        held(&s).len() == 1
    });
    let held_before = held(&s);

    // An audited change before the backup: its record is in the backup too.
    let o = common::exit_within(
        &["counters", "reset", "Audit:gone", "--url", &s.url],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    let to = dir.path().join("backups").join("b1");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let o = backup(&s, &to);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["counters"], "counters.redb", "{report}");
    assert_eq!(report["gateway"]["spool_files"], 1, "only the held item's file: {report}");
    assert_eq!(report["audit"], serde_json::json!(["audit.jsonl"]), "{report}");
    assert_eq!(report["usage"], "usage.redb", "{report}");
    for f in ["counters.redb", "gateway.redb", "usage.redb", "backup.json"] {
        assert!(to.join(f).is_file(), "{f} missing from the backup");
    }

    // After the backup: not in it.
    assert_eq!(check(&s, "Backup:A", 1), (0, 4));
    // A backup never overwrites.
    let again = backup(&s, &to);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("must not exist"), "{again:?}");
    s.sigkill();

    // Restore into a new, empty data directory.
    let restored = dir.path().join("restored");
    copy_dir(&to, &restored);
    let s = serve(&restored);
    assert_eq!(check(&s, "Backup:A", 0), (0, 3), "the counter as it was at the backup");
    // The usage history came back: the 3 units admitted before the backup (not the 1 after).
    let usage = s.get("/v1/usage?metering_id=Backup:A");
    let body = usage.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_str(body).unwrap();
    let admitted: u64 =
        answer["buckets"].as_array().unwrap().iter().filter_map(|b| b["admitted"].as_u64()).sum();
    assert_eq!(admitted, 3, "{body}");
    let held_after = held(&s);
    assert_eq!(held_after.len(), 1, "{held_after:?}");
    for key in ["id", "partner", "route", "metering_id", "weight", "received_at"] {
        assert_eq!(held_after[0][key], held_before[0][key], "{key}");
    }
    // The gateway's counter came back too: the held item stays held (1 a day, 1 used).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(held(&s).len(), 1);
    // Its bytes are in the restored spool: released, it is delivered.
    let id = held_after[0]["id"].as_str().unwrap().to_owned();
    let o =
        common::exit_within(&["queue", "release", &id, "--url", &s.url], Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    common::wait_until("the released item delivered", Duration::from_secs(20), || {
        std::fs::read_dir(&out).map(|d| d.count() == 2).unwrap_or(false)
    });
    // The audit log came back, and goes on.
    let audit = s.get("/v1/audit");
    let body = audit.split("\r\n\r\n").nth(1).unwrap_or_default();
    let records: Vec<serde_json::Value> = serde_json::from_str(body).unwrap();
    let actions: Vec<&str> = records.iter().filter_map(|r| r["action"].as_str()).collect();
    assert_eq!(actions, ["queue.release", "counter.reset"], "{body}");
}

#[test]
fn a_backup_of_a_memory_store_says_nothing_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&["--store", "memory"]);
    let to = dir.path().join("b");
    let o = backup(&s, &to);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["counters"].as_str().unwrap().contains("memory store"), "{report}");
    assert!(report["gateway"].is_null());
    let o = common::exit_within(
        &["backup", "--url", &s.url, "--to", "relative/dir"],
        Duration::from_secs(10),
    );
    // The command makes the path absolute (on this host) before sending it.
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

/// A data directory whose audit log is `mib` MiB (valid records), so that writing a backup
/// takes long enough for a second request, or a kill, to land while it runs.
fn large_data_dir(data: &Path, mib: usize) {
    use std::io::Write;
    std::fs::create_dir_all(data).unwrap();
    let record = serde_json::json!({
        "at": jiff_now(), "who": "admin", "role": "admin", "action": "counter.reset",
        "target": "Fill:1", "before": "x".repeat(4000), "after": null,
    })
    .to_string();
    let mut f = std::io::BufWriter::new(std::fs::File::create(data.join("audit.jsonl")).unwrap());
    for _ in 0..(mib << 20) / (record.len() + 1) {
        writeln!(f, "{record}").unwrap();
    }
    f.flush().unwrap();
}

/// Now, as RFC 3339 (from the system clock, via `date`).
fn jiff_now() -> String {
    let o = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

fn post_backup(addr: &str, to: &Path) -> common::Message {
    common::call_at(addr, "POST", &format!("/v1/admin/backup?to={}", to.display()), &[], "")
}

#[test]
fn two_backups_at_once_give_one_201_and_one_409() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    large_data_dir(&data, 48);
    let s = Server::start(&["--data", data.to_str().unwrap()]);
    let backups = dir.path().join("backups");
    std::fs::create_dir_all(&backups).unwrap();
    for round in 0..20 {
        let (a, b) = (backups.join(format!("{round}-a")), backups.join(format!("{round}-b")));
        let start = std::sync::Barrier::new(2);
        let (ra, rb) = std::thread::scope(|scope| {
            let one = scope.spawn(|| {
                start.wait();
                post_backup(&s.addr, &a)
            });
            let two = scope.spawn(|| {
                start.wait();
                std::thread::sleep(Duration::from_millis(common::jitter(round) % 20));
                post_backup(&s.addr, &b)
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        let mut statuses = [ra.status, rb.status];
        statuses.sort();
        assert_eq!(statuses, [201, 409], "round {round}: {ra:?}\n{rb:?}");
        let (done, refused, refused_dir) =
            if ra.status == 201 { (&a, &rb, &b) } else { (&b, &ra, &a) };
        assert_eq!(refused.json()["type"], "https://tollgate.dev/problems/backup-running");
        assert!(done.join("backup.complete").is_file(), "round {round}");
        assert!(!done.join("backup.partial").exists(), "round {round}");
        assert!(done.join("audit.jsonl").is_file() && done.join("counters.redb").is_file());
        assert!(!refused_dir.exists(), "round {round}: the refused backup made nothing");
        let names: Vec<String> = std::fs::read_dir(&backups)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), round as usize + 1, "no temporary directory left: {names:?}");
    }
}

#[test]
fn a_backup_cut_by_a_kill_is_refused_as_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    large_data_dir(&data, 48);
    let backups = dir.path().join("backups");
    std::fs::create_dir_all(&backups).unwrap();
    let mut cut = 0;
    for round in 0..20u64 {
        let s = Server::start(&["--data", data.to_str().unwrap()]);
        let to = backups.join(format!("b{round}"));
        let addr = s.addr.clone();
        let target = to.clone();
        std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(|| post_backup(&addr, &target));
        });
        // Whatever directory the backup is writing, once something is in it.
        let written = || {
            std::fs::read_dir(&backups).unwrap().filter_map(|e| e.ok()).find(|e| {
                std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_some())
                    && !e.file_name().to_string_lossy().starts_with("cut-")
            })
        };
        common::wait_until("the backup started", Duration::from_secs(20), || written().is_some());
        std::thread::sleep(Duration::from_millis(common::jitter(round) % 30));
        s.sigkill();
        let left = written().unwrap().path();
        // Keep what the kill left under a name of our own, out of the next round's way.
        let kept = backups.join(format!("cut-{round}"));
        std::fs::rename(&left, &kept).unwrap();
        if kept.join("backup.complete").exists() {
            // Finished before the kill: a complete backup, served as usual.
            continue;
        }
        cut += 1;
        assert!(!to.exists(), "round {round}: an unfinished backup never has the name asked for");
        let o = common::exit_within(
            &["serve", "--listen", "127.0.0.1:0", "--data", kept.to_str().unwrap()],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "round {round}: {err}");
        assert!(err.contains(kept.to_str().unwrap()), "names the directory: {err}");
        assert!(err.contains("backup.complete"), "names the missing marker: {err}");
    }
    // Every cut round is checked above; half of them cut is enough to show the kill lands
    // mid-backup (a loaded machine finishes some backups before the kill).
    assert!(cut >= 10, "the kill landed during the backup in only {cut} of 20 rounds");
}
