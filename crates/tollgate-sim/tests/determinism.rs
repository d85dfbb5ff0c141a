//! The same scenario and seed give the same report, byte for byte, whatever the output
//! directory; another seed gives another one.

use tollgate_sim::{Scenario, simulate, write_report};

const SCENARIO: &str = r#"
name = "Determinism"
days = 0.5
bucket_minutes = 15

[backend]
capacity = 200

[[partner]]
name = "Calm"
documents = ["214", "IFTSTA"]
rate_per_hour = 30
records = [1, 3]

[[partner]]
name = "Loud"
documents = ["214"]
rate_per_hour = 20
records = [1, 2]

[[burst]]
partner = "Loud"
start_hours = 2
minutes = 10
count = 1500
copies = 0.2
invalid = 0.1

[gateway]
[[gateway.route]]
name = "Status"
documents = ["214", "IFTSTA"]
limit = 300
unit = "hour"
split = true
deliver = "dir:./out"
"#;

fn report(seed: u64, dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let s = Scenario::parse("determinism.toml", SCENARIO).unwrap();
    let table = s.gateway.clone().unwrap();
    let sim = simulate(&s, &table, seed, None, &|_| {}, &mut |_| {}).unwrap();
    write_report(&sim, dir).unwrap();
    let read = |n: &str| std::fs::read(dir.join(n)).unwrap();
    (read("report.html"), read("report.json"), read("report.svg"))
}

#[test]
fn same_seed_same_bytes_whatever_the_folder() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let one = report(11, &a.path().join("first"));
    let two = report(11, &b.path().join("second/nested"));
    assert!(one.0 == two.0, "report.html differs between two runs with the same seed");
    assert!(one.1 == two.1, "report.json differs between two runs with the same seed");
    assert!(one.2 == two.2, "report.svg differs between two runs with the same seed");
    let html = String::from_utf8(one.0.clone()).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&one.1).unwrap();
    // Something was held and released (the jitter draws were exercised), and nothing in the
    // report names the folder or the machine.
    assert!(json["cases"][0]["figures"]["total"]["ever_held"].as_u64().unwrap() > 0, "{json}");
    for needle in [a.path().to_str().unwrap(), "/tmp/", &hostname()] {
        assert!(needle.len() < 6 || !html.contains(needle), "the report contains {needle:?}");
    }
    for asset in ["<script", "src=", "href=", "url("] {
        assert!(!html.contains(asset), "the report loads something: {asset}");
    }
    let other = report(12, &a.path().join("third"));
    assert!(other.1 != one.1, "another seed gives other traffic");
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "no-such-host-name".into())
}
