//! Resolution: which limit is in force, and whose it is.

use super::*;

fn set(src: &str) -> PolicySet {
    #[derive(serde::Deserialize)]
    struct File {
        policy: Vec<PolicyRule>,
    }
    PolicySet::new(toml::from_str::<File>(src).unwrap().policy)
}

fn id(s: &str) -> MeteringId {
    MeteringId::new(s).unwrap()
}

fn route(limit: u64) -> Asked {
    Asked::spec(&QuotaSpec::new(limit, 1, TimeUnit::Hour).unwrap())
}

#[test]
fn an_override_policy_beats_a_route_and_says_so() {
    let s = set("[[policy]]\nmatch = \"S:*\"\nlimit = 1\noverride = true\n");
    let r = s.resolve(&id("S:RR"), &route(1000), LimitSource::Route).unwrap();
    assert_eq!((r.spec.limit, r.source), (1, LimitSource::Policy));
    assert_eq!(r.spec.unit, TimeUnit::Hour, "the route fills what the policy leaves out");
    assert_eq!(r.policy.as_deref(), Some("S:*"));
}

#[test]
fn a_filling_policy_leaves_a_route_its_limit() {
    let s = set("[[policy]]\nmatch = \"S:*\"\nlimit = 1\n");
    let r = s.resolve(&id("S:RR"), &route(1000), LimitSource::Route).unwrap();
    assert_eq!((r.spec.limit, r.source), (1000, LimitSource::Route));
    let other = s.resolve(&id("T:RR"), &route(7), LimitSource::Route).unwrap();
    assert_eq!((other.spec.limit, other.source, other.policy), (7, LimitSource::Route, None));
}

#[test]
fn a_policy_fills_a_request_without_a_limit() {
    let s = set("[[policy]]\nmatch = \"*\"\nlimit = 5\nunit = \"minute\"\n");
    let asked = Asked { limit: None, ..Asked::default() };
    let r = s.resolve(&id("a"), &asked, LimitSource::Request).unwrap();
    assert_eq!((r.spec.limit, r.spec.unit, r.source), (5, TimeUnit::Minute, LimitSource::Policy));
    let asked = Asked { limit: Some(9), ..Asked::default() };
    let r = s.resolve(&id("a"), &asked, LimitSource::Request).unwrap();
    assert_eq!((r.spec.limit, r.source), (9, LimitSource::Request));
}

#[test]
fn nothing_to_resolve_from_names_what_is_missing() {
    let s = PolicySet::default();
    let e = s.resolve(&id("a"), &Asked::default(), LimitSource::Request).unwrap_err();
    assert_eq!(e, ResolveError::MissingLimit(id("a")));
    let asked = Asked { limit: Some(1), ..Asked::default() };
    let e = s.resolve(&id("a"), &asked, LimitSource::Request).unwrap_err();
    assert_eq!(e, ResolveError::MissingUnit(id("a")));
}

#[test]
fn a_handle_shows_the_set_installed_last() {
    let h = PolicyHandle::default();
    assert!(h.current().rules().is_empty());
    let other = h.clone();
    h.install(set("[[policy]]\nmatch = \"*\"\nlimit = 5\n"));
    assert_eq!(other.current().rules().len(), 1);
}

#[test]
fn a_unit_or_window_of_null_is_refused() {
    let r: Result<PolicyRule, _> = serde_json::from_str(r#"{"match":"a","unit":null}"#);
    assert!(r.is_err());
    let r: Result<PolicyRule, _> = serde_json::from_str(r#"{"match":"a","window":null}"#);
    assert!(r.is_err());
    let r: PolicyRule =
        serde_json::from_str(r#"{"match":"a","unit":"HOURS","window":"rolling"}"#).unwrap();
    assert_eq!((r.unit, r.window), (Some(TimeUnit::Hour), Some(WindowKind::Rolling)));
}
