//! SFTP into the landing directory of the real `tollgate serve`, through Debian's OpenSSH
//! (`sshd` on a loopback port, uploads with `sftp -b`): a plain put, a put to a temporary name
//! then a rename, puts that stall inside an interchange or between two (throttled with
//! `-B 1024 -l 8`: one KiB a second, each pause far longer than `settle_ms`), and a resumed put
//! (`reput`). Each interchange reaches the route's `dir:` target whole, once, and nothing is
//! rejected. Resuming a file under its final name after a pause at an interchange boundary is
//! the one unsafe habit: the gateway has taken the finished part, the `reput` fails and the
//! sender's full resend is caught as a duplicate; resuming a temporary name is safe.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::{Server, Status214, gateway_toml};
use tollgate_testkit::SftpServer;

/// One KiB per write and 8 kbit/s: a write about every second, each a stall of ~20 settle times.
const SLOW: [&str; 4] = ["-B", "1024", "-l", "8"];

/// A gateway whose landing directory is the SFTP server's upload directory.
struct Rig {
    dir: tempfile::TempDir,
    landing: PathBuf,
    out: PathBuf,
    log: PathBuf,
    server: Server,
    sftp: SftpServer,
}

impl Rig {
    /// `None` (after a notice) when OpenSSH is missing and `CI` is not set.
    fn start() -> Option<Rig> {
        let dir = tempfile::tempdir().unwrap();
        let (landing, out) = (dir.path().join("landing"), dir.path().join("out"));
        std::fs::create_dir_all(&landing).unwrap();
        std::fs::create_dir_all(dir.path().join("local")).unwrap();
        let sftp = SftpServer::start(&landing)?;
        let data = format!("[server]\ndata = \"{}\"\n", dir.path().join("data").display());
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, gateway_toml(&landing, &out, "", &data)).unwrap();
        let log = dir.path().join("serve.log");
        let server = Server::start_logging(&["--config", cfg.to_str().unwrap()], &log);
        Some(Rig { dir, landing, out, log, server, sftp })
    }

    /// Writes `bytes` to a local file `name` for `sftp` to upload; its path.
    fn local(&self, name: &str, bytes: &[u8]) -> String {
        let p = self.dir.path().join("local").join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    }

    /// Runs the batch; fails the test with sftp's and sshd's output when it fails.
    fn upload(&self, commands: &str, options: &[&str]) {
        let o = self.sftp.sftp(commands, options);
        assert!(o.status.success(), "sftp failed: {o:?}\nsshd: {}", self.sftp.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the gateway has logged `what` about the landing file `name`.
    fn wait_for_log(&self, name: &str, what: &str) {
        let path = self.landing.join(name).display().to_string();
        common::wait_until(&format!("{what} ({name})"), Duration::from_secs(30), || {
            self.log().lines().any(|l| l.contains(what) && l.contains(&path))
        });
    }

    /// Items in `state` in the gateway's queue.
    fn count(&self, state: &str) -> usize {
        let answer = self.server.get(&format!("/v1/queue?state={state}&limit=1000"));
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(body)
            .unwrap_or_default()
            .as_array()
            .map_or(0, Vec::len)
    }

    /// The delivered interchanges: ISA13 → the text of each delivery of it.
    fn delivered(&self) -> BTreeMap<u32, Vec<String>> {
        let mut got: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for e in std::fs::read_dir(&self.out).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap();
            got.entry(control(text.as_bytes())).or_default().push(text);
        }
        got
    }

    /// Waits until the queue is quiet (every interchange of `want` delivered and recorded so,
    /// nothing received or admitted left, the landing directory empty but for the gateway's
    /// hidden folder), then checks that each was delivered once and whole, and nothing else.
    /// A delivery starts while the commit that records its item runs, so a delivered file can
    /// appear before the item is in the queue in any state: the queue's count is waited for.
    fn expect_each_once(&self, want: &[&[u8]], duplicates: usize) {
        let want: BTreeMap<u32, String> =
            want.iter().map(|i| (control(i), String::from_utf8_lossy(i).into_owned())).collect();
        common::wait_until("every interchange delivered", Duration::from_secs(60), || {
            // A part of a file taken as if whole is rejected: fail at once, with the log.
            assert_eq!(self.count("rejected"), 0, "a part of a file was taken: {}", self.log());
            self.delivered().keys().eq(want.keys())
        });
        common::wait_until(
            "the queue and the landing directory quiet",
            Duration::from_secs(30),
            || {
                self.count("received") + self.count("admitted") == 0
                    && self.count("delivered") == want.len()
                    && std::fs::read_dir(&self.landing)
                        .unwrap()
                        .flatten()
                        .all(|e| e.file_name().to_string_lossy().starts_with('.'))
            },
        );
        for (c, copies) in self.delivered() {
            assert_eq!(copies.len(), 1, "interchange {c} delivered {} times", copies.len());
            assert_eq!(copies[0].trim(), want[&c].trim(), "interchange {c} is not whole");
        }
        assert_eq!(self.count("delivered"), want.len());
        assert_eq!(self.count("rejected"), 0, "a part of a file was taken: {}", self.log());
        assert_eq!(self.count("duplicate"), duplicates);
    }
}

/// The ISA13 control number of an interchange.
fn control(bytes: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(bytes);
    text.split('*').nth(13).and_then(|c| c.trim().parse().ok()).unwrap_or_else(|| {
        panic!("no ISA13 in {text:?}");
    })
}

/// A 214 of about `bytes` bytes with ISA13 `c`.
fn interchange(c: u32, bytes: usize) -> Vec<u8> {
    Status214::new("CARRIERXYZ", c).padded_to(bytes).build()
}

/// `parts` joined by line breaks, as one file.
fn file(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(&b"\n"[..])
}

/// `first`, then line breaks up to exactly `len` bytes: an interchange ending on a write
/// boundary of a `-B 1024` upload, followed by whitespace only.
fn ending_at(first: &[u8], len: usize) -> Vec<u8> {
    assert!(first.len() < len, "{} bytes do not fit in {len}", first.len());
    let mut v = first.to_vec();
    v.resize(len, b'\n');
    v
}

#[test]
fn a_plain_put_is_taken_whole_once() {
    let Some(rig) = Rig::start() else { return };
    let small: Vec<Vec<u8>> = (1..=3).map(|c| interchange(c, 2_000)).collect();
    let big: Vec<Vec<u8>> = (10..50).map(|c| interchange(c, 50_000)).collect();
    let small_refs: Vec<&[u8]> = small.iter().map(Vec::as_slice).collect();
    let big_refs: Vec<&[u8]> = big.iter().map(Vec::as_slice).collect();
    let a = rig.local("small.edi", &file(&small_refs));
    let b = rig.local("big.edi", &file(&big_refs));
    rig.upload(&format!("put {a} small.edi\nput {b} big.edi\n"), &[]);
    rig.expect_each_once(&[small_refs, big_refs].concat(), 0);
}

#[test]
fn a_put_to_a_temporary_name_then_a_rename_is_taken_whole_once() {
    let Some(rig) = Rig::start() else { return };
    let (one, two) = (interchange(1, 3_000), interchange(2, 3_000));
    let a = rig.local("one.edi", &one);
    let b = rig.local("two.edi", &two);
    // Slowly, so the temporary names sit half written through many settle times.
    rig.upload(
        &format!(
            "put {a} one.edi.part\nrename one.edi.part one.edi\nput {b} .two.edi\n\
             rename .two.edi two.edi\n"
        ),
        &SLOW,
    );
    rig.expect_each_once(&[&one, &two], 0);
    assert!(!rig.log().contains(".part"), "a temporary name is not even looked at");
}

#[test]
fn a_put_that_stalls_inside_an_interchange_is_taken_once_finished() {
    let Some(rig) = Rig::start() else { return };
    let one = interchange(1, 3_500);
    let a = rig.local("one.edi", &one);
    rig.upload(&format!("put {a} stalled.edi\n"), &SLOW);
    rig.expect_each_once(&[&one], 0);
    // The gateway did read the half-written file during a stall, and waited.
    rig.wait_for_log("stalled.edi", "last interchange has no trailer yet");
}

#[test]
fn a_put_that_stalls_between_interchanges_loses_nothing() {
    let Some(rig) = Rig::start() else { return };
    let (one, two) = (interchange(1, 1_500), interchange(2, 1_500));
    // The first interchange ends on the second write: the stall after it shows a finished
    // file, which is taken; the bytes written after it are taken as a new file.
    let a = rig.local("both.edi", &file(&[&ending_at(&one, 2_048), &two]));
    rig.upload(&format!("put {a} both.edi\n"), &SLOW);
    rig.expect_each_once(&[&one, &two], 0);
    assert!(
        rig.log().contains("bytes appended to a taken landing file are taken as a new file"),
        "the stall between the interchanges was not seen: {}",
        rig.log()
    );
}

#[test]
fn a_put_resumed_with_reput_after_a_pause_is_taken_whole_once() {
    let Some(rig) = Rig::start() else { return };
    let one = interchange(1, 4_000);
    let half = rig.local("half.edi", &one[..one.len() / 2]);
    let whole = rig.local("whole.edi", &one);
    rig.upload(&format!("put {half} resumed.edi\n"), &[]);
    // The connection is gone and the file half written: the gateway reads it and waits.
    rig.wait_for_log("resumed.edi", "last interchange has no trailer yet");
    rig.upload(&format!("reput {whole} resumed.edi\n"), &[]);
    rig.expect_each_once(&[&one], 0);
}

#[test]
fn resuming_is_safe_under_a_temporary_name_and_caught_under_the_final_one() {
    let Some(rig) = Rig::start() else { return };
    let (one, two) = (interchange(1, 1_500), interchange(2, 1_500));
    let first = rig.local("first.edi", &one);
    let whole = rig.local("whole.edi", &file(&[&one, &two]));

    // Under a temporary name: nothing is taken before the rename, however long the pause.
    rig.upload(&format!("put {first} safe.edi.part\n"), &[]);
    std::thread::sleep(Duration::from_millis(500)); // ten settle times
    rig.upload(&format!("reput {whole} safe.edi.part\nrename safe.edi.part safe.edi\n"), &[]);
    rig.expect_each_once(&[&one, &two], 0);

    // Under the final name, paused at an interchange boundary: the finished first interchange
    // is taken, so the resume finds no file and fails (the sender is told), and the sender's
    // full resend delivers the second while the first is quarantined as a duplicate.
    let (three, four) = (interchange(3, 1_500), interchange(4, 1_500));
    let first = rig.local("third.edi", &three);
    let whole = rig.local("whole2.edi", &file(&[&three, &four]));
    rig.upload(&format!("put {first} final.edi\n"), &[]);
    common::wait_until("the first part taken", Duration::from_secs(30), || {
        rig.delivered().contains_key(&3)
    });
    let o = rig.sftp.sftp(&format!("reput {whole} final.edi\n"), &[]);
    assert!(!o.status.success(), "the resume of a taken file must fail: {o:?}");
    rig.upload(&format!("put {whole} final.edi\n"), &[]);
    rig.expect_each_once(&[&one, &two, &three, &four], 1);
}
