//! `tollgate simulate` and `tollgate advise` through the real binary: bad input is named by
//! file, line and field (exit 1, no panic), and good input gives the report and, for advise,
//! nothing but TOML on stdout, which the gateway enforces once pasted into its config.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn tollgate(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("the tollgate binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const TINY: &str = r#"days = 0.25
[backend]
capacity = 50
[[partner]]
name = "Calm"
documents = ["214"]
rate_per_hour = 20
[[partner]]
name = "Loud"
documents = ["214"]
rate_per_hour = 5
[[burst]]
partner = "Loud"
start_hours = 1
minutes = 5
count = 300
[gateway]
[[gateway.route]]
name = "Status"
documents = ["214"]
limit = 100
unit = "hour"
deliver = "dir:./out"
"#;

#[test]
fn a_malformed_scenario_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = TINY.replace("rate_per_hour = 5", "rate_per_hour = \"often\"");
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    let out = tollgate(&["simulate", "bad.toml", "--out", "r"], dir.path());
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.toml:11: rate_per_hour:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!dir.path().join("r").exists(), "no report for a bad scenario");

    let bad = TINY.replace("start_hours = 1", "start_hours = 99");
    std::fs::write(dir.path().join("late.toml"), bad).unwrap();
    let out = tollgate(&["simulate", "late.toml"], dir.path());
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("late.toml:14: start_hours:") && err.contains("99"), "{err}");
}

#[test]
fn a_malformed_history_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let csv = "partner,time,records,document\nA,2026-01-01T00:00:00Z,2,214\nA,2026-01-01T00:05:00Z,-4,214\n";
    std::fs::write(dir.path().join("h.csv"), csv).unwrap();
    let out = tollgate(&["advise", "--history", "h.csv"], dir.path());
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("h.csv:3: records:") && err.contains("-4"), "{err}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", text(&out.stdout));
    assert!(!err.contains("panicked"), "{err}");

    std::fs::write(dir.path().join("nohead.csv"), "when,partner,records\n").unwrap();
    let out = tollgate(&["advise", "--history", "nohead.csv"], dir.path());
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nohead.csv:1: time:"), "{err}");
}

#[test]
fn simulate_writes_the_report_and_prints_the_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.toml"), TINY).unwrap();
    let out = tollgate(&["simulate", "tiny.toml", "--out", "report", "--seed", "3"], dir.path());
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("Calm") && stdout.contains("Loud *"), "{stdout}");
    assert!(stdout.contains("backend peak per hour"), "{stdout}");
    for f in ["report.html", "report.json", "report.svg", "backend.svg", "held.svg"] {
        assert!(dir.path().join("report").join(f).is_file(), "{f} missing");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report/report.json")).unwrap())
            .unwrap();
    let loud = &json["cases"][0]["figures"]["partners"][1];
    assert_eq!(loud["partner"], "Loud");
    assert!(loud["ever_held"].as_u64().unwrap() > 0, "{loud}");
    // A sentence says what is still held at the end, in the summary and atop the report.
    let held = json["cases"][0]["figures"]["total"]["held"].as_u64().unwrap();
    let sentence = if held == 0 {
        "At the end nothing is held".to_owned()
    } else {
        // Digits in groups of three, as people read them.
        let digits = held.to_string();
        let grouped: String = digits
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let comma = i > 0 && (digits.len() - i).is_multiple_of(3);
                comma.then_some(',').into_iter().chain([c])
            })
            .collect();
        format!("At the end {grouped} interchange")
    };
    assert!(stdout.contains(&sentence), "{sentence:?} in {stdout}");
    let html = std::fs::read_to_string(dir.path().join("report/report.html")).unwrap();
    assert!(html.contains(&sentence), "{sentence:?} in the report");

    let out = tollgate(
        &["simulate", "tiny.toml", "--out", "sweep", "--sweep", "Status.limit=50,400"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("== Status.limit=400"), "{}", text(&out.stdout));
    assert!(dir.path().join("sweep/tradeoff.svg").is_file());
    let out = tollgate(&["simulate", "tiny.toml", "--sweep", "Nope.limit=5"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Nope"), "{}", text(&out.stderr));
}

/// `dir/h.csv`: two days of partner Calm sending three 214s an hour, 3 records each.
fn calm_history(dir: &Path) {
    let mut csv = String::from("time,partner,document,records\n");
    for h in 0..48 {
        for m in [5, 25, 45] {
            csv.push_str(&format!("2026-02-0{}T{:02}:{m:02}:00Z,Calm,214,3\n", 1 + h / 24, h % 24));
        }
    }
    std::fs::write(dir.join("h.csv"), csv).unwrap();
}

#[test]
fn advise_prints_only_toml_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    calm_history(dir.path());
    let out = tollgate(&["advise", "--history", "h.csv", "--out", "advice"], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: toml::Table = toml::from_str(&stdout).expect("stdout is TOML");
    let policy = &doc["policy"][0];
    assert_eq!(policy["match"].as_str(), Some("doc-214:Calm"));
    assert_eq!(policy["limit"].as_integer(), Some(14), "9 records an hour x 1.5: {stdout}");
    for line in stdout.lines().filter(|l| l.contains('=')) {
        assert!(line.contains('#'), "every line says its basis: {line}");
    }
    assert!(dir.path().join("advice/report.html").is_file());
}

/// With `--config`, each proposal carries the config's route and metering id, and the limit
/// in force beside it: the route's, or an overriding `[[policy]]`'s.
#[test]
fn advise_with_a_config_names_its_routes_and_shows_the_limit_in_force() {
    let dir = tempfile::tempdir().unwrap();
    calm_history(dir.path());
    let config = format!(
        "[[policy]]\nmatch = \"ShipmentStatus:Calm\"\nlimit = 2400\ninterval = 1\nunit = \"day\"\n\
         override = true\n\n[gateway]\n\n[[gateway.route]]\nname = \"ShipmentStatus\"\n\
         documents = [\"214\"]\nlimit = 1000\nunit = \"hour\"\ndeliver = \"dir:{}\"\n",
        dir.path().join("out").display()
    );
    std::fs::write(dir.path().join("serve.toml"), &config).unwrap();
    let out = tollgate(
        &["advise", "--history", "h.csv", "--out", "advice", "--config", "serve.toml"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let doc: toml::Table = toml::from_str(&stdout).expect("stdout is TOML");
    assert_eq!(doc["policy"][0]["match"].as_str(), Some("ShipmentStatus:Calm"), "{stdout}");
    assert!(
        stdout.contains(
            "# in force: 2,400 per 1 day (the policy's), about 100.0 per hour; \
         proposed 14 per hour, 0.14 x that"
        ),
        "{stdout}"
    );
    // Without the policy, the route's limit is in force.
    let route_only = config.split("[gateway]").nth(1).unwrap();
    std::fs::write(dir.path().join("route.toml"), format!("[gateway]{route_only}")).unwrap();
    let out = tollgate(
        &["advise", "--history", "h.csv", "--out", "advice", "--config", "route.toml"],
        dir.path(),
    );
    assert!(
        text(&out.stdout).contains("# in force: 1,000 per 1 hour (the route's)"),
        "{}",
        text(&out.stdout)
    );
    // A config that does not parse is named.
    std::fs::write(dir.path().join("bad.toml"), "[gateway\n").unwrap();
    let out = tollgate(&["advise", "--history", "h.csv", "--config", "bad.toml"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("bad.toml"), "{}", text(&out.stderr));
}

/// What `advise` prints, pasted into the config of a real `tollgate serve`, is what its
/// gateway enforces: the proposed 14 an hour holds the 15th and 16th interchange, although
/// the route asks 1,000.
#[test]
fn advice_pasted_into_the_config_is_enforced_by_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    calm_history(dir.path());
    let out = tollgate(&["advise", "--history", "h.csv", "--out", "advice"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let advice = text(&out.stdout);
    assert!(advice.contains("limit = 14"), "{advice}");
    let config = format!(
        "{advice}\n[gateway]\n\n[[gateway.partner]]\nname = \"Calm\"\nids = [\"ZZ:CALM\"]\n\n\
         [[gateway.route]]\nname = \"doc-214\"\ndocuments = [\"214\"]\nlimit = 1000\nunit = \"hour\"\n\
         deliver = \"dir:{}\"\n",
        dir.path().join("out").display()
    );
    std::fs::write(dir.path().join("serve.toml"), config).unwrap();
    let data = dir.path().join("data");
    let cfg = dir.path().join("serve.toml");
    let server = common::Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    for n in 1..=16 {
        let body = common::Status214::new("CALM", n).build();
        let answer = server.request("POST", "/v1/interchanges", &[], &body);
        assert_eq!(answer.status, 202, "{}", answer.text());
    }
    let count = |state: &str| {
        let answer = server.request("GET", &format!("/v1/queue?state={state}"), &[], b"");
        answer.json().as_array().map_or(0, Vec::len)
    };
    common::wait_until("all 16 metered", std::time::Duration::from_secs(30), || {
        count("delivered") + count("held") == 16
    });
    assert_eq!((count("delivered"), count("held")), (14, 2));
}

/// A scenario's `[[policy]]` decides in the simulation as in `tollgate serve`: an override of
/// 5 an hour beats the route's 100, so the calm partner, never held under the route's limit,
/// is held under the policy's.
#[test]
fn a_scenario_policy_overrides_the_route_limit_in_the_simulation() {
    let dir = tempfile::tempdir().unwrap();
    let calm_held = |file: &str, scenario: &str| {
        std::fs::write(dir.path().join(file), scenario).unwrap();
        let report = format!("report-{file}");
        let out = tollgate(&["simulate", file, "--out", &report, "--seed", "3"], dir.path());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join(&report).join("report.json")).unwrap(),
        )
        .unwrap();
        let calm = json["cases"][0]["figures"]["partners"][0].clone();
        assert_eq!(calm["partner"], "Calm");
        calm["ever_held"].as_u64().unwrap()
    };
    assert_eq!(calm_held("plain.toml", TINY), 0, "the route's 100 an hour holds nothing of Calm");
    let policy = "\n[[policy]]\nmatch = \"*\"\nlimit = 5\nunit = \"hour\"\noverride = true\n";
    let held = calm_held("policy.toml", &format!("{TINY}{policy}"));
    assert!(held > 0, "the override of 5 an hour held nothing of Calm's 20 an hour");
}
