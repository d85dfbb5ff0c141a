//! Policy matching, validation and whole-set reload.

use super::*;
use crate::headers::{QuotaRequest, unresolved};
use axum::http::{HeaderMap, HeaderValue};
use tollgate_http::problem::Problem;
use tollgate_policy::{LimitSource, PolicyMode, Resolved};
use tollgate_quota::TimeUnit;

/// Resolves a request as `GET /v1/quota` does, with the refusal as its problem.
fn resolve(set: &PolicySet, r: &QuotaRequest) -> Result<Resolved, Problem> {
    set.resolve(&r.id, &r.asked, LimitSource::Request).map_err(|e| unresolved(&e))
}

fn set(src: &str) -> PolicySet {
    parse_policies(Path::new("p.toml"), src).unwrap()
}

fn req(pairs: &[(&'static str, &str)]) -> QuotaRequest {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    QuotaRequest::from_headers(&h).unwrap()
}

const TWO: &str = r#"
[[policy]]
match = "ShipmentStatus:*"
limit = 1000
interval = 24
unit = "hour"

[[policy]]
match = "*"
limit = 5
unit = "minute"
override = true
mode = "shadow"
"#;

#[test]
fn first_match_wins() {
    let s = set(TWO);
    assert_eq!(s.find("ShipmentStatus:X").unwrap().limit, Some(1000));
    assert_eq!(s.find("Invoice:X").unwrap().limit, Some(5));
}

#[test]
fn fill_mode_lets_headers_win() {
    let s = set(TWO);
    let r =
        resolve(&s, &req(&[("metering-id", "ShipmentStatus:A"), ("quota-limit", "7")])).unwrap();
    assert_eq!(r.spec.limit, 7);
    assert_eq!(r.spec.interval, 24);
    assert_eq!(r.spec.unit, TimeUnit::Hour);
    assert_eq!(r.mode, PolicyMode::Enforce);
    assert_eq!(r.policy.as_deref(), Some("ShipmentStatus:*"));
}

#[test]
fn override_mode_beats_headers_but_headers_fill_its_gaps() {
    let s = set(TWO);
    let r = resolve(
        &s,
        &req(&[
            ("metering-id", "Invoice:A"),
            ("quota-limit", "7"),
            ("quota-timeunit", "day"),
            ("quota-interval", "3"),
        ]),
    )
    .unwrap();
    assert_eq!(r.spec.limit, 5);
    assert_eq!(r.spec.unit, TimeUnit::Minute);
    assert_eq!(r.spec.interval, 3);
    assert_eq!(r.mode, PolicyMode::Shadow);
}

#[test]
fn missing_limit_or_unit_without_policy_names_the_header() {
    let s = PolicySet::default();
    let p = resolve(&s, &req(&[("metering-id", "a"), ("quota-timeunit", "day")])).unwrap_err();
    assert_eq!(p.body()["invalid_header"], "quota-limit");
    assert_eq!(p.body()["value"], serde_json::Value::Null);
    let p = resolve(&s, &req(&[("metering-id", "a"), ("quota-limit", "1")])).unwrap_err();
    assert_eq!(p.body()["invalid_header"], "quota-timeunit");
}

#[test]
fn start_with_non_calendar_window_is_refused() {
    let p = resolve(
        &PolicySet::default(),
        &req(&[
            ("metering-id", "a"),
            ("quota-limit", "1"),
            ("quota-timeunit", "day"),
            ("quota-window", "flexi"),
            ("quota-start", "2026-01-01T00:00:00Z"),
        ]),
    )
    .unwrap_err();
    assert_eq!(p.body()["invalid_header"], "quota-start");
}

#[test]
fn policy_windows_beyond_a_century_and_huge_limits_are_located_and_name_the_key() {
    for (src, needles) in [
        (
            "[[policy]]\nmatch = \"Long:*\"\ninterval = 1201\nunit = \"month\"\n",
            &["p.toml:1:", "\"Long:*\"", "interval", "1201 month", "100 years"][..],
        ),
        (
            "[[policy]]\nmatch = \"*\"\ninterval = 3155760001\n",
            &["p.toml:1:", "interval", "3155760001", "in seconds"][..],
        ),
        (
            "[[policy]]\nmatch = \"*\"\nlimit = 9223372036854775808\n",
            &["p.toml:", "limit 9223372036854775808 is too large"][..],
        ),
    ] {
        let err = parse_policies(Path::new("p.toml"), src).unwrap_err();
        for n in needles {
            assert!(err.contains(n), "{n} not in {err}");
        }
    }
    // The longest window of each kind is accepted.
    assert!(
        parse_policies(
            Path::new("p.toml"),
            "[[policy]]\nmatch = \"*\"\ninterval = 1200\nunit = \"month\"\n"
        )
        .is_ok()
    );
    // A header interval too long for the policy's unit names quota-interval.
    let s = set("[[policy]]\nmatch = \"*\"\nlimit = 1\nunit = \"month\"\n");
    let p = resolve(&s, &req(&[("metering-id", "a"), ("quota-interval", "1201")])).unwrap_err();
    assert_eq!(p.body()["invalid_header"], "quota-interval");
    assert_eq!(p.body()["value"], "1201");
    // A header unit that makes the policy's interval too long names quota-timeunit.
    let s = set("[[policy]]\nmatch = \"*\"\nlimit = 1\ninterval = 6000\n");
    let p = resolve(&s, &req(&[("metering-id", "a"), ("quota-timeunit", "weeks")])).unwrap_err();
    assert_eq!(p.body()["invalid_header"], "quota-timeunit");
    assert_eq!(p.body()["value"], "week");
}

#[test]
fn reload_keeps_old_set_on_invalid_file_and_takes_valid_edit() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.toml");
    std::fs::write(&f, TWO).unwrap();
    let p = Policies::from_file(&f).unwrap();
    assert_eq!(p.reload(), Ok(false));
    std::fs::write(&f, "[[policy]]\nmatch = \"*\"\nunit = \"fortnight\"\n").unwrap();
    let err = p.reload().unwrap_err();
    assert!(err.contains("t.toml:3:"), "{err}");
    assert_eq!(p.current().rules().len(), 2);
    assert_eq!(p.status().last_error.as_deref(), Some(err.as_str()));
    std::fs::write(&f, "[[policy]]\nmatch = \"*\"\nlimit = 3\n").unwrap();
    assert_eq!(p.reload(), Ok(true));
    assert_eq!(p.current().rules().len(), 1);
    assert_eq!(p.status().last_error, None);
}

#[test]
fn replace_rewrites_the_file_keeping_other_sections() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.toml");
    std::fs::write(&f, format!("[server]\nlisten = \"127.0.0.1:9\"\n{TWO}")).unwrap();
    let p = Policies::from_file(&f).unwrap();
    p.replace(set("[[policy]]\nmatch = \"X:*\"\nlimit = 9\nunit = \"day\"\n")).unwrap();
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(text.contains("127.0.0.1:9"), "{text}");
    let again = parse_policies(&f, &text).unwrap();
    assert_eq!(again.rules().len(), 1);
    assert_eq!(again.rules()[0].limit, Some(9));
    assert_eq!(p.reload(), Ok(false), "own write is not a new reload");
}

/// A replace never overwrites an edit on disk that is not loaded yet (the watcher waits for
/// quiet; a save may be half done), and never writes into a file refused as a whole: both are
/// a conflict, and the file and the set in force stay as they were.
#[test]
fn replace_refuses_a_file_changed_on_disk_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.toml");
    std::fs::write(&f, TWO).unwrap();
    let refuse_unit_fortnight: FileValidator = Arc::new(|file: &Path, source: &str| {
        if source.contains("fortnight") {
            return Err(format!("{}: fortnight is not a unit", file.display()));
        }
        parse_policies(file, source).map(|policies| FileCheck { policies, restart_needed: vec![] })
    });
    let p =
        Policies::with_checked_file(parse_policies(&f, TWO).unwrap(), &f, refuse_unit_fortnight);
    let edited = format!("[server]\nlisten = \"127.0.0.1:9\"\n{TWO}");
    std::fs::write(&f, &edited).unwrap();
    let new = || set("[[policy]]\nmatch = \"X:*\"\nlimit = 9\nunit = \"day\"\n");
    let err = p.replace_if(new(), None, |_, _| Ok(())).unwrap_err();
    assert!(matches!(&err, ReplaceError::Conflict(m) if m.contains("changed on disk")), "{err:?}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), edited, "the edit on disk stays");
    assert_eq!(p.current().rules().len(), 2);
    // Once reloaded, the edit is what a replace rewrites.
    assert_eq!(p.reload(), Ok(true));
    p.replace_if(new(), None, |_, _| Ok(())).unwrap();
    assert!(std::fs::read_to_string(&f).unwrap().contains("127.0.0.1:9"));
    // A file refused as a whole stays refused: a replace does not write into it.
    let bad = "[other]\nunit = \"fortnight\"\n[[policy]]\nmatch = \"*\"\nlimit = 1\n";
    std::fs::write(&f, bad).unwrap();
    assert!(p.reload().is_err());
    let err = p.replace_if(new(), None, |_, _| Ok(())).unwrap_err();
    assert!(matches!(&err, ReplaceError::Conflict(m) if m.contains("fortnight")), "{err:?}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), bad);
    assert!(p.status().last_error.is_some(), "the refusal is still reported");
}
