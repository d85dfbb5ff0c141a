//! The recipes in `docs/integrations/` run against a real `tollgate serve`: the Python and
//! Node.js clients, the Groovy script for SAP CPI (with its stand-in message, by Debian's
//! `groovy`), the Java class for SAP PI (compiled with `javac`), and the Envoy configuration
//! (checked against Envoy's v3 messages by the `envoy-data-plane` package). Each client proves
//! the rule: 200 forwards, 429 holds for `Retry-After`, and a dead port carries on.
//!
//! A missing tool (python3, node, groovy, javac/java, or a Python with `envoy-data-plane` and
//! `pyyaml`, named by `TOLLGATE_INTEGRATIONS_PYTHON`) fails the test when `CI` is set — `.ci/run`
//! installs them — and prints a notice otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{Server, free_port};

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/integrations")
}

/// True when `program` runs (`program arg`); otherwise fails under CI or prints a notice.
fn have(program: &str, arg: &str) -> bool {
    let ok = Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let msg = format!("the integration recipes' test needs `{program}` (.ci/run installs it)");
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!!!!! NOTICE: {msg}; NOT RUN !!!!!!!!\n");
    }
    ok
}

/// Runs a recipe's client as `cmd URL METERING_ID 1 RECORDS REQUEST_ID` and returns its first
/// output line and exit code.
fn ask(cmd: &[&str], url: &str, id: &str, request_id: &str, stdin: &[u8]) -> (String, i32) {
    use std::io::Write;
    let mut child = Command::new(cmd[0])
        .args(&cmd[1..])
        .args([url, id, "1"])
        .args(if cmd.iter().any(|a| a.ends_with("run_locally.groovy")) {
            vec![request_id]
        } else {
            vec!["1", request_id]
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let Output { status, stdout, stderr } = child.wait_with_output().unwrap();
    let line = String::from_utf8_lossy(&stdout).lines().next().unwrap_or_default().to_owned();
    assert!(!line.is_empty(), "{cmd:?} printed nothing: {}", String::from_utf8_lossy(&stderr));
    (line, status.code().unwrap_or(-1))
}

/// The rule every recipe follows, against `server` (limit 1 a day for a fresh id) and a port
/// where nothing listens.
fn prove(name: &str, cmd: &[&str], server: &Server) {
    let id = format!("Recipe:{name}");
    let batch = b"ISA*00*~ST*214*0001~SE*2*0001~";
    let (line, code) = ask(cmd, &server.url, &id, &format!("{name}-1"), batch);
    assert_eq!((line.as_str(), code), ("forward", 0), "{name}: the first batch fits");
    let (line, code) = ask(cmd, &server.url, &id, &format!("{name}-2"), batch);
    assert_eq!(code, 3, "{name}: {line}");
    let wait: u64 = line
        .strip_prefix("hold ")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: {line}"));
    assert!((1..=86_400).contains(&wait), "{name}: Retry-After {wait}");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (line, code) = ask(cmd, &dead, &id, &format!("{name}-3"), batch);
    assert_eq!(code, 0, "{name}: {line}");
    assert!(line.starts_with("forward (fail-open"), "{name}: {line}");
    // The server counted the first batch only.
    let m = server.request("GET", "/v1/counters", &[], b"");
    assert!(m.text().contains(&format!("\"identifier\":\"{id}\"")), "{}", m.text());
}

fn server() -> Server {
    Server::start(&["--store", "memory"])
}

#[test]
fn the_python_client_forwards_holds_and_fails_open() {
    let script = docs().join("python/tollgate_check.py");
    if have("python3", "--version") {
        prove("python", &["python3", script.to_str().unwrap()], &server());
    }
}

#[test]
fn the_node_client_forwards_holds_and_fails_open() {
    let script = docs().join("node/tollgate-check.mjs");
    if have("node", "--version") {
        prove("node", &["node", script.to_str().unwrap()], &server());
    }
}

#[test]
fn the_sap_cpi_groovy_script_forwards_holds_and_fails_open() {
    let runner = docs().join("sap-cpi/run_locally.groovy");
    if have("groovy", "--version") {
        prove("cpi", &["groovy", runner.to_str().unwrap()], &server());
    }
}

#[test]
fn the_sap_pi_java_class_compiles_and_forwards_holds_and_fails_open() {
    if !(have("javac", "-version") && have("java", "-version")) {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let compiled = Command::new("javac")
        .args(["-Xlint:all", "-Werror", "-d", out.path().to_str().unwrap()])
        .arg(docs().join("sap-pi/TollgateCheck.java"))
        .output()
        .unwrap();
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));
    let cp = out.path().to_str().unwrap();
    prove("pi", &["java", "-cp", cp, "TollgateCheck"], &server());
}

#[test]
fn the_envoy_configuration_is_a_valid_bootstrap_wired_to_the_rls() {
    let python = std::env::var("TOLLGATE_INTEGRATIONS_PYTHON").unwrap_or_else(|_| "python3".into());
    let ready = Command::new(&python)
        .args(["-c", "import envoy_data_plane, yaml"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        let msg = format!(
            "the Envoy recipe's check needs a Python with envoy-data-plane and pyyaml \
             (TOLLGATE_INTEGRATIONS_PYTHON, now {python:?}; .ci/run makes one)"
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!!!!! NOTICE: {msg}; NOT RUN !!!!!!!!\n");
        return;
    }
    let check = docs().join("envoy/check_envoy_config.py");
    let good =
        Command::new(&python).arg(&check).arg(docs().join("envoy/envoy.yaml")).output().unwrap();
    assert!(good.status.success(), "{}", String::from_utf8_lossy(&good.stderr));
    assert!(String::from_utf8_lossy(&good.stdout).contains("descriptors ['partner', 'document']"));
    // The check can fail: a misspelt key, or a failure mode that denies, is refused.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(docs().join("envoy/envoy.yaml")).unwrap();
    for (from, to) in [
        ("descriptor_key: partner", "descriptor_kee: partner"),
        ("failure_mode_deny: false", "failure_mode_deny: true"),
    ] {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, text.replace(from, to)).unwrap();
        let out = Command::new(&python).arg(&check).arg(&bad).output().unwrap();
        assert!(!out.status.success(), "{to}: accepted");
    }
}
