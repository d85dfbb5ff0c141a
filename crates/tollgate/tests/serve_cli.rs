//! The real `tollgate` binary: `serve` start-up and shutdown, bad configs, `check` exit codes
//! and `counters list|reset`, each as a child process talking HTTP on a free loopback port.

mod common;

use std::process::{Command, Output};

use common::{BIN, Server};
use serde_json::Value;

fn tollgate(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("TOLLGATE_ADMIN_TOKEN").output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout_json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn check_exit_codes_allowed_exceeded_usage_error() {
    let s = Server::start(&["--store", "memory"]);
    let args = |w: &'static str| {
        ["check", "--url", &s.url, "--id", "Cli:1", "--limit", "2", "--unit", "day", "--weight", w]
            .map(str::to_owned)
    };
    let a = args("1");
    let o = tollgate(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&o), 0, "{o:?}");
    let j = stdout_json(&o);
    assert_eq!(j["allowed"], true);
    assert_eq!(j["used"], 1);

    let o = tollgate(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&o), 0);
    let o = tollgate(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&o), 3, "exceeded");
    assert_eq!(stdout_json(&o)["allowed"], false);

    // A value the service refuses (400) is a usage error.
    let o = tollgate(&[
        "check",
        "--url",
        &s.url,
        "--id",
        "Cli:1",
        "--limit",
        "2",
        "--unit",
        "fortnight",
    ]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("quota-timeunit"));
    // So is a bad command line.
    let o = tollgate(&["check", "--url", &s.url]);
    assert_eq!(code(&o), 2);
    let o = tollgate(&["check", "--url", &s.url, "--id", "x", "--limit", "-3"]);
    assert_eq!(code(&o), 2);
    drop(s);

    // Nobody listening: an error.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let o = tollgate(&["check", "--url", &url, "--id", "x", "--limit", "1", "--unit", "day"]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot reach"));
}

#[test]
fn check_exit_code_1_on_a_5xx() {
    // A tiny HTTP server answering 503 to anything.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = l.accept() {
            use std::io::{Read, Write};
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            );
        }
    });
    let o = tollgate(&["check", "--url", &url, "--id", "x", "--limit", "1", "--unit", "day"]);
    assert_eq!(code(&o), 1, "{o:?}");
}

#[test]
fn bad_config_exits_2_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[[policy]]\nmatch = \"A:*\"\nunit = \"fortnight\"\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--store", "memory", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    let want = format!("{}:6:8: ", file.display());
    assert!(err.contains(&want), "want {want} in {err}");
    assert!(err.contains("fortnight"), "{err}");

    // Unknown keys are refused too.
    std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:0\"\nport = 80\n").unwrap();
    let o = Command::new(BIN).args(["serve", "--config"]).arg(&file).output().unwrap();
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("{}:3:1: ", file.display())));

    // Mistakes found while opening the store or reading the users exit 2 too, so that systemd
    // (RestartPreventExitStatus=2) does not restart them in a loop.
    std::fs::write(
        &file,
        "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1/1\"\ncluster = true\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains("only database 0, the url names database 1"), "{err}");

    // A missing file as well.
    let o = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(dir.path().join("absent.toml"))
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
}

#[test]
fn an_invalid_weight_rule_exits_2_with_its_position_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.toml");
    let inbound = dir.path().join("in");
    for (weight, line) in [("segs", 9), ("segment:at7", 9), ("segment:ABCD", 9)] {
        std::fs::write(
            &file,
            format!(
                "[gateway]\ninbound = [{inbound:?}]\n\n[[gateway.route]]\nname = \"S\"\n\
                 documents = [\"214\"]\nlimit = 10\nunit = \"day\"\nweight = \"{weight}\"\n\
                 deliver = \"dir:{}\"\n",
                dir.path().join("out").display()
            ),
        )
        .unwrap();
        let o = Command::new(BIN)
            .args(["serve", "--store", "memory", "--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .arg("--data")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 2, "{weight}: {err}");
        let want = format!(
            "{}:{line}:10: [[gateway.route]] #1 (name = \"S\") weight = \"{weight}\": ",
            file.display()
        );
        assert!(err.contains(&want), "want {want} in {err}");
        assert!(!dir.path().join("data").exists(), "nothing started: {err}");
    }
}

#[test]
fn flags_beat_the_file_and_policies_come_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:1\"\n[store]\nkind = \"embedded\"\n[[policy]]\nmatch = \"F:*\"\nlimit = 1\nunit = \"day\"\n",
    )
    .unwrap();
    // --listen (set by Serve::start) beats the file's port 1; --store memory beats embedded.
    let s = Server::start(&["--store", "memory", "--config", file.to_str().unwrap()]);
    let ready: serde_json::Value =
        serde_json::from_str(&get(&format!("{}/readyz", s.url))).unwrap();
    assert_eq!(ready["store"], "memory");
    assert_eq!(ready["policies"]["count"], 1);
    let o = tollgate(&["check", "--url", &s.url, "--id", "F:1"]);
    assert_eq!(code(&o), 0, "{o:?}");
    let o = tollgate(&["check", "--url", &s.url, "--id", "F:1"]);
    assert_eq!(code(&o), 3);
    assert!(!dir.path().join("tollgate-data").exists());
}

#[test]
fn counters_list_and_reset_with_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start_with_env(
        &["--store", "memory", "--data", data.to_str().unwrap()],
        &[("TOLLGATE_ADMIN_TOKEN", "t0ken")],
    );
    for id in ["Cnt:a", "Cnt:b", "Other:c"] {
        let o = tollgate(&["check", "--url", &s.url, "--id", id, "--limit", "1", "--unit", "day"]);
        assert_eq!(code(&o), 0);
    }
    // Without the token: refused.
    let o = tollgate(&["counters", "list", "--url", &s.url]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("401"));

    let o = tollgate(&[
        "counters", "list", "--url", &s.url, "--token", "t0ken", "--prefix", "Cnt:", "--json",
    ]);
    assert_eq!(code(&o), 0, "{o:?}");
    let j = stdout_json(&o);
    assert_eq!(j["count"], 2);
    // One counter per request: the table follows `next` through three pages.
    let o = Command::new(BIN)
        .args(["counters", "list", "--url", &s.url, "--limit", "1"])
        .env("TOLLGATE_ADMIN_TOKEN", "t0ken")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0);
    let table = String::from_utf8_lossy(&o.stdout);
    let ids: Vec<&str> = table.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(ids, ["IDENTIFIER", "Cnt:a", "Cnt:b", "Other:c", "3"], "{table}");
    assert!(table.ends_with("3 counter(s)\n"), "{table}");
    // Without --limit the table asks for the most a page holds, which the server takes.
    let o = tollgate(&["counters", "list", "--url", &s.url, "--token", "t0ken"]);
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).ends_with("3 counter(s)\n"), "{o:?}");
    // One page as JSON, then the next from its `next`.
    let page = |after: &str| {
        let args = ["counters", "list", "--url", &s.url, "--token", "t0ken", "--json"];
        stdout_json(&tollgate(&[&args[..], &["--limit", "2", "--after", after]].concat()))
    };
    let first = page("");
    assert_eq!(first["count"], 2, "{first}");
    let next = first["next"].as_str().expect("a next page");
    let second = page(next);
    assert_eq!(second["counters"][0]["identifier"], "Other:c", "{second}");
    assert_eq!(second["next"], Value::Null);

    let o = tollgate(&["counters", "reset", "Cnt:a", "--url", &s.url, "--token", "t0ken"]);
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 counter(s) reset"));
    let o = tollgate(&["check", "--url", &s.url, "--id", "Cnt:a", "--limit", "1", "--unit", "day"]);
    assert_eq!(code(&o), 0, "the reset counter admits again");
    // The reset is in the audit log, in the data directory (the memory store writes nothing
    // else there).
    let audit = std::fs::read_to_string(data.join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"counter.reset\"") && audit.contains("Cnt:a"), "{audit}");
}

#[test]
fn admin_without_token_is_refused_on_a_non_loopback_listener() {
    let s = Server::start(&["--store", "memory", "--listen", "0.0.0.0:0"]);
    let port = s.url.rsplit(':').next().unwrap().to_owned();
    assert!(s.url.starts_with("http://0.0.0.0:"), "{}", s.url);
    let url = format!("http://127.0.0.1:{port}");
    let o = tollgate(&["counters", "list", "--url", &url]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("403"), "{o:?}");
    // The quota API itself stays open.
    let o = tollgate(&["check", "--url", &url, "--id", "L:1", "--limit", "1", "--unit", "day"]);
    assert_eq!(code(&o), 0);
}

/// Output that nobody reads (`| head`) ends the command quietly with 0; output that cannot be
/// written (a full disk) ends it with 1 and says so. Neither panics (exit 101 before).
#[test]
fn a_closed_or_full_standard_output_ends_the_command_without_a_panic() {
    let s = Server::start(&["--store", "memory"]);
    for id in ["Out:a", "Out:b", "Out:c"] {
        let o = tollgate(&["check", "--url", &s.url, "--id", id, "--limit", "1", "--unit", "day"]);
        assert_eq!(code(&o), 0);
    }
    let list = ["counters", "list", "--url", &s.url, "--limit", "1"];
    let run = |stdout: std::process::Stdio| {
        Command::new(BIN)
            .args(list)
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .stdout(stdout)
            .output()
            .unwrap()
    };
    // The reader is gone before the first line: every write meets a closed pipe.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = run(writer.into());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = run(full.into());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 1, "{stderr}");
    assert!(stderr.contains("cannot write to standard output"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The same table still reaches a reader that reads it.
    let o = run(std::process::Stdio::piped());
    assert!(String::from_utf8_lossy(&o.stdout).ends_with("3 counter(s)\n"), "{o:?}");
    // `check` answers with its exit code, read or not: exceeded stays 3.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(BIN)
        .args(["check", "--url", &s.url, "--id", "Out:a", "--limit", "1", "--unit", "day"])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let s = Server::start(&["--store", "memory"]);
    let status = s.sigterm();
    assert_eq!(status.code(), Some(0));
}

/// A plain GET returning the body (the std library has no HTTP client; keep it tiny).
fn get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap();
    common::request_at(host, "GET", &path, &[], b"").text()
}
