//! The shipped dashboard (`deploy/grafana/tollgate.json`) and alert rules
//! (`deploy/prometheus/alerts.yml`) name only metrics a running server exports: a real
//! `tollgate serve` with a gateway gets quota checks and interchanges (one delivered, one held
//! over quota), then every metric name parsed out of the PromQL expressions of both files must
//! appear in its `/metrics` scrape. A histogram or summary counts through its `_bucket`, `_sum`
//! or `_count` series. And the held gauges follow an operator's release.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{Server, Status214};

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Words of PromQL that are neither functions (followed by `(`) nor metric names: keywords,
/// and aggregation operators (followed by `by (…)` or `without (…)` as often as by `(`).
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// The metric names an expression selects: identifiers outside label matchers `{…}`, range
/// brackets `[…]`, string literals and grouping lists (`by (…)`, `on (…)`, …), that are not
/// keywords and not followed by `(` (functions and aggregations).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut grouping = false; // the last word was by/without/on/ignoring/group_*
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' || (c == '(' && grouping) {
            let close = match c {
                '{' => '}',
                '[' => ']',
                _ => ')',
            };
            while i < chars.len() && chars[i] != close {
                i += 1;
            }
            i += 1;
            grouping = false;
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (5m, 1e-9): never a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let call = j < chars.len() && chars[j] == '(';
            let lower = word.to_ascii_lowercase();
            if ["by", "without", "on", "ignoring", "group_left", "group_right"]
                .contains(&lower.as_str())
            {
                grouping = true;
            } else if !call && !KEYWORDS.contains(&lower.as_str()) {
                names.insert(word);
            }
        } else {
            if !c.is_whitespace() {
                grouping = false;
            }
            i += 1;
        }
    }
    names
}

#[test]
fn the_promql_parser_finds_metric_names_only() {
    let e = r#"max(x) + sum by (partner, route) (rate(a_total{partner=~"$p", x="by(y)"}[$__rate_interval]))
        / clamp_min(sum(rate(b_sum[5m] offset 1h)), 1e-9) and on (partner) c == 0
        or histogram_quantile(0.99, sum by (le) (rate(d_bucket[1m]))) > bool 2"#;
    let want: BTreeSet<String> =
        ["a_total", "b_sum", "c", "d_bucket", "x"].map(String::from).into();
    assert_eq!(metric_names(e), want);
}

/// Every PromQL expression in the dashboard: panel targets and the variables' `label_values`.
fn dashboard_exprs(json: &str) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        ("query" | "definition", serde_json::Value::String(q))
                            if q.starts_with("label_values(") =>
                        {
                            // label_values(METRIC, LABEL): only the first argument is a metric.
                            let inner = &q["label_values(".len()..];
                            out.push(inner.split(',').next().unwrap_or("").to_owned());
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let v: serde_json::Value = serde_json::from_str(json).expect("the dashboard is valid JSON");
    let mut out = Vec::new();
    walk(&v, &mut out);
    out
}

/// Every `expr:` of the rules file (a plain value or a `|` block), without a YAML library.
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        if let Some(rest) = line.trim_start().strip_prefix("expr:") {
            let rest = rest.trim();
            if rest == "|" || rest == ">" || rest.starts_with("|-") || rest.starts_with(">-") {
                let mut block = String::new();
                i += 1;
                while i < lines.len() {
                    let l = lines[i];
                    let li = l.len() - l.trim_start().len();
                    if !l.trim().is_empty() && li <= indent {
                        break;
                    }
                    block.push_str(l.trim());
                    block.push('\n');
                    i += 1;
                }
                out.push(block);
                continue;
            }
            out.push(rest.to_owned());
        }
        i += 1;
    }
    out
}

/// Metric names in a Prometheus text scrape; `X_bucket`, `X_sum` and `X_count` also give `X`.
fn exported(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..end];
        names.insert(name.to_owned());
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                names.insert(base.to_owned());
            }
        }
    }
    names
}

fn quota(addr: &str, id: &str) -> u16 {
    let headers = [("metering-id", id), ("quota-limit", "1"), ("quota-timeunit", "day")];
    common::request_at(addr, "GET", "/v1/quota", &headers, b"").status
}

/// Every metric name the dashboard and the alert rules use, with the file that uses it.
fn used_names() -> Vec<(String, &'static str)> {
    let mut used: Vec<(String, &str)> = Vec::new();
    for e in dashboard_exprs(&repo_file("deploy/grafana/tollgate.json")) {
        used.extend(metric_names(&e).into_iter().map(|n| (n, "deploy/grafana/tollgate.json")));
    }
    let rules = rule_exprs(&repo_file("deploy/prometheus/alerts.yml"));
    assert!(rules.len() >= 6, "expected the six alerts at least, found {}", rules.len());
    for e in rules {
        used.extend(metric_names(&e).into_iter().map(|n| (n, "deploy/prometheus/alerts.yml")));
    }
    assert!(used.len() >= 20, "too few metric names parsed: {used:?}");
    used
}

/// Fails naming every used metric the scrape lacks.
fn assert_all_exported(scrape: &str, used: &[(String, &str)]) {
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    let have = exported(scrape);
    let missing: Vec<String> = used
        .iter()
        .filter(|(name, _)| !have.contains(name))
        .map(|(name, file)| format!("{name} (used in {file})"))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(missing.is_empty(), "not exported by a running server: {missing:#?}\n{scrape}");
}

/// `serve` with a gateway whose route admits one interchange a day from CarrierXYZ.
fn start(dir: &Path) -> (Server, std::path::PathBuf) {
    let (landing, out) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&landing).unwrap();
    let partner = "[[gateway.partner]]\nname = \"CarrierXYZ\"\nids = [\"ZZ:CARRIERXYZ\"]\n";
    let text =
        common::gateway_toml(&landing, &out, partner, "").replace("limit = 1000", "limit = 1");
    let conf = dir.join("tollgate.toml");
    std::fs::write(&conf, text).unwrap();
    let data = dir.join("data");
    let s = Server::start(&["--config", conf.to_str().unwrap(), "--data", data.to_str().unwrap()]);
    (s, landing)
}

/// A dashboard or an alert must not read "no data" on a fresh server: every series exists,
/// at zero, before the first request.
#[test]
fn every_metric_of_the_dashboard_and_the_alerts_exists_right_after_start() {
    let used = used_names();
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = start(dir.path());
    assert_all_exported(&s.get("/metrics"), &used);
}

#[test]
fn every_metric_of_the_dashboard_and_the_alerts_is_exported() {
    let used = used_names();
    // The first interchange is delivered, the second held. Plus quota checks: one allowed,
    // one exceeded.
    let dir = tempfile::tempdir().unwrap();
    let (s, landing) = start(dir.path());
    assert_eq!(quota(&s.addr, "Scrape:A"), 200);
    assert_eq!(quota(&s.addr, "Scrape:A"), 429);
    for control in [1, 2] {
        let tmp = landing.join(format!("{control}.part"));
        std::fs::write(&tmp, Status214::new("CARRIERXYZ", control).build()).unwrap();
        std::fs::rename(&tmp, landing.join(format!("{control}.edi"))).unwrap();
    }
    common::wait_until("one delivered and one held", Duration::from_secs(20), || {
        let m = s.get("/metrics");
        m.contains(
            "tollgate_gateway_delivered_total{partner=\"CarrierXYZ\",route=\"ShipmentStatus\"} 1",
        ) && m.contains("tollgate_gateway_held{partner=\"CarrierXYZ\",route=\"ShipmentStatus\"} 1")
    });
    assert_all_exported(&s.get("/metrics"), &used);
}

/// The held gauges follow an operator: an interchange released from behind the head of its
/// partner's queue (kept in the spool only, not in memory) leaves the held count at once.
#[test]
fn an_interchange_released_from_behind_the_head_leaves_the_held_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let (s, landing) = start(dir.path());
    for control in 1..=4 {
        let tmp = landing.join(format!("{control}.part"));
        std::fs::write(&tmp, Status214::new("CARRIERXYZ", control).build()).unwrap();
        std::fs::rename(&tmp, landing.join(format!("{control}.edi"))).unwrap();
    }
    let held_gauge = "tollgate_gateway_held{partner=\"CarrierXYZ\",route=\"ShipmentStatus\"}";
    let counts = |m: &str| {
        (
            common::metric(m, "tollgate_gateway_delivered_total"),
            common::metric(m, "tollgate_gateway_queue_depth{state=\"held\"}"),
            common::metric(m, held_gauge),
        )
    };
    common::wait_until("one delivered and three held", Duration::from_secs(20), || {
        counts(&s.get("/metrics")) == (Some(1.0), Some(3.0), Some(3.0))
    });
    let page = s.request("GET", "/v1/queue?state=held", &[], b"");
    let held: Vec<serde_json::Value> = serde_json::from_slice(&page.body).unwrap();
    let third = held.iter().find(|i| i["control_number"] == "000000003").unwrap();
    let id = third["id"].as_str().unwrap();
    let released = s.request("POST", &format!("/v1/queue/{id}/release"), &[], b"");
    assert_eq!(released.status, 200, "{}", String::from_utf8_lossy(&released.body));
    common::wait_until("the released one delivered, two held", Duration::from_secs(20), || {
        counts(&s.get("/metrics")) == (Some(2.0), Some(2.0), Some(2.0))
    });
}
