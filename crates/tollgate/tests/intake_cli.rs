//! The real `tollgate serve` with a gateway: bad `[[client]]` keys and a bad `inbound` path
//! refused at start-up with the reason, landing entries it will not take reported once in the
//! log, and uploads refused without credentials.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn empty_and_duplicate_client_keys_are_refused_at_load_without_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    let shown = file.display().to_string();
    // An empty key is refused as it is read, at its position (the second client's key); a
    // key used twice is a rule over two tables, named by position and client names.
    let cases = [
        (
            "[[client]]\nkey = \"k-1\"\nname = \"a\"\n[[client]]\nkey = \"\"\nname = \"b\"\n",
            vec![format!(
                "{shown}:5:7: [[client]] #2 (name = \"b\") key = (hidden): must not be empty"
            )],
        ),
        (
            "[[client]]\nkey = \"Sup3rSecret\"\nname = \"a\"\n[[client]]\nkey = \"Sup3rSecret\"\n\
             name = \"b\"\n",
            vec![format!("{shown}: [[client]] #2"), "#1".to_owned(), "\"b\"".to_owned()],
        ),
    ];
    for (text, needles) in cases {
        std::fs::write(&file, text).unwrap();
        let o = exit_within(
            &["serve", "--config", file.to_str().unwrap(), "--store", "memory"],
            Duration::from_secs(10),
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        for needle in &needles {
            assert!(err.contains(needle.as_str()), "want {needle} in {err}");
        }
        assert!(!err.contains("Sup3rSecret"), "the secret is never echoed: {err}");
    }
}

#[test]
fn an_inbound_path_that_is_a_file_fails_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let landing = dir.path().join("landing-is-a-file");
    std::fs::write(&landing, b"").unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, gateway_toml(&landing, &dir.path().join("out"), "", "")).unwrap();
    let data = dir.path().join("data");
    let o = exit_within(
        &[
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--store",
            "memory",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(landing.to_str().unwrap()), "names the path: {err}");
    assert!(err.contains("not a directory"), "{err}");
}

fn count(log: &str, needle: &str, also: &str) -> usize {
    log.lines().filter(|l| l.contains(needle) && l.contains(also)).count()
}

#[cfg(unix)]
#[test]
fn landing_entries_that_are_not_taken_are_reported_once_and_nothing_is_lost() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let (landing, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    let outside = dir.path().join("outside.edi");
    std::fs::write(&outside, Status214::new("OUTSIDE", 1).build()).unwrap();
    // A symlink (skipped), a non-UTF-8 name (taken), a file over max_file_bytes that cannot be
    // moved aside because too-large/ is a dangling symlink (retried with backoff, kept).
    std::os::unix::fs::symlink(&outside, landing.join("link.edi")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), landing.join("too-large")).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.edi");
    std::fs::write(landing.join(odd), Status214::new("ODD", 2).build()).unwrap();
    let mut big = Vec::new();
    for c in 3..10 {
        big.extend(Status214::new("BIG", c).build());
    }
    std::fs::write(landing.join("big.edi"), &big).unwrap();

    let file = dir.path().join("t.toml");
    std::fs::write(&file, gateway_toml(&landing, &out, "max_file_bytes = 1000", "")).unwrap();
    let log = dir.path().join("serve.log");
    let data = dir.path().join("data");
    let serve = Server::start_logging(
        &[
            "--config",
            file.to_str().unwrap(),
            "--store",
            "memory",
            "--data",
            data.to_str().unwrap(),
        ],
        &log,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0) < 1 {
        assert!(Instant::now() < deadline, "the non-UTF-8 file is delivered");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500)); // many polls
    serve.sigkill();
    let log = std::fs::read_to_string(&log).unwrap();

    let delivered: Vec<Vec<u8>> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(
        delivered,
        vec![Status214::new("ODD", 2).build()],
        "only the non-UTF-8 one is taken"
    );
    assert_eq!(count(&log, "link.edi", "symlink"), 1, "{log}");
    assert_eq!(count(&log, "too-large", "symlink"), 1, "{log}");
    assert_eq!(count(&log, "caf\u{fffd}.edi", "not UTF-8"), 1, "{log}");
    assert_eq!(count(&log, "big.edi", "cannot take landing file"), 1, "{log}");
    assert_eq!(std::fs::read(landing.join("big.edi")).unwrap(), big, "kept whole");
    assert!(landing.join("link.edi").exists() && outside.exists());
}

/// One raw HTTP/1.1 POST; returns the status code.
fn post(addr: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    common::try_request_at(addr, "POST", "/v1/interchanges", headers, body).map_or(0, |m| m.status)
}

#[test]
fn uploads_to_a_server_with_client_keys_need_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    let clients = "[[client]]\nkey = \"portal-key\"\nname = \"portal\"\npartners = [\"ZZ:XYZ\"]\n";
    std::fs::write(
        &file,
        gateway_toml(&dir.path().join("in"), &dir.path().join("out"), "", clients),
    )
    .unwrap();
    let data = dir.path().join("data");
    let serve = Server::start(&[
        "--config",
        file.to_str().unwrap(),
        "--store",
        "memory",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(post(&serve.addr, &[], &Status214::new("XYZ", 1).build()), 401);
    assert_eq!(post(&serve.addr, &[("x-api-key", "")], &Status214::new("XYZ", 1).build()), 401);
    assert_eq!(
        post(&serve.addr, &[("x-api-key", "portal-key")], &Status214::new("OTHER", 2).build()),
        403
    );
    assert_eq!(
        post(&serve.addr, &[("x-api-key", "portal-key")], &Status214::new("XYZ", 3).build()),
        202
    );
    serve.sigkill();
}
