//! The overview's rows, states, filters and pages.
use super::*;
use tollgate_policy::PolicyRule;

fn counter(id: &str, used: u64) -> CounterInfo {
    let now = Timestamp::now();
    CounterInfo {
        identifier: MeteringId::new(id).unwrap(),
        interval: 1,
        unit: TimeUnit::Day,
        window: WindowKind::Calendar,
        start: None,
        used,
        exceed_count: 0,
        total_exceed_count: 0,
        window_start: Some(now),
        window_end: Some(now + jiff::SignedDuration::from_secs(3600)),
    }
}

fn route() -> RouteLimit {
    RouteLimit {
        name: "ShipmentStatus".into(),
        documents: vec!["214".into()],
        metering_id: "{route}:{partner}".into(),
        limit: 10,
        interval: 1,
        unit: TimeUnit::Day,
    }
}

fn src<'a>(
    counters: &'a [CounterInfo],
    policies: &'a PolicySet,
    routes: &'a [RouteLimit],
) -> Sources<'a> {
    Sources { counters, policies, routes, queue: &[] }
}

fn policies(toml: &str) -> PolicySet {
    #[derive(Deserialize)]
    struct F {
        policy: Vec<PolicyRule>,
    }
    PolicySet::new(toml_rules::<F>(toml).policy)
}

fn toml_rules<T: for<'de> Deserialize<'de>>(text: &str) -> T {
    serde_json::from_str(text).unwrap()
}

#[test]
fn a_route_row_shows_the_limit_in_force_and_whose_it_is() {
    let over = policies(r#"{"policy":[{"match":"ShipmentStatus:*","limit":3,"override":true}]}"#);
    let fill = policies(r#"{"policy":[{"match":"ShipmentStatus:*","limit":3}]}"#);
    let counters = [counter("ShipmentStatus:ACME", 3)];
    let row = |set: &PolicySet| {
        let page = overview(src(&counters, set, &[route()]), Timestamp::now(), &Default::default());
        let r = &page.rows[0];
        (r.limit, r.limit_source, r.state)
    };
    assert_eq!(row(&over), (Some(3), Some(LimitSource::Policy), RowState::Exceeded));
    assert_eq!(row(&fill), (Some(10), Some(LimitSource::Route), RowState::Ok));
    assert_eq!(row(&PolicySet::default()), (Some(10), Some(LimitSource::Route), RowState::Ok));
}

#[test]
fn states_follow_the_limit_and_the_policy_mode() {
    let set = policies(r#"{"policy":[{"match":"Quiet:*","limit":4,"mode":"shadow"}]}"#);
    let counters = [
        counter("ShipmentStatus:ACME", 2),
        counter("ShipmentStatus:BETA", 8),
        counter("ShipmentStatus:<script>", 10),
        counter("Quiet:x", 5),
        counter("Other", 7),
    ];
    let page = overview(src(&counters, &set, &[route()]), Timestamp::now(), &Default::default());
    let states: Vec<(&str, RowState, &str)> =
        page.rows.iter().map(|r| (r.metering_id.as_str(), r.state, r.partner.as_str())).collect();
    assert_eq!(
        states,
        [
            ("Other", RowState::Ok, "Other"),
            ("Quiet:x", RowState::Shadow, "x"),
            ("ShipmentStatus:<script>", RowState::Exceeded, "<script>"),
            ("ShipmentStatus:ACME", RowState::Ok, "ACME"),
            ("ShipmentStatus:BETA", RowState::Near, "BETA"),
        ]
    );
    assert!(page.rows[2].resets_in_s.is_some_and(|s| (3590..=3600).contains(&s)));
}

#[test]
fn rows_filter_sort_and_page() {
    let counters: Vec<CounterInfo> =
        (0..250).map(|i| counter(&format!("ShipmentStatus:P{i:03}"), i % 11)).collect();
    let q =
        OverviewQuery { page: Some(3), sort: SortKey::Partner, desc: true, ..Default::default() };
    let page = overview(src(&counters, &PolicySet::default(), &[route()]), Timestamp::now(), &q);
    assert_eq!((page.total, page.pages, page.page, page.rows.len()), (250, 3, 3, 50));
    assert_eq!(page.rows[0].partner, "P049");
    let q = OverviewQuery { state: Some(RowState::Exceeded), ..Default::default() };
    let page = overview(src(&counters, &PolicySet::default(), &[route()]), Timestamp::now(), &q);
    assert!(page.rows.iter().all(|r| r.used == 10) && page.total == 22, "{}", page.total);
    let q = OverviewQuery { partner: Some("p12".into()), ..Default::default() };
    let page = overview(src(&counters, &PolicySet::default(), &[route()]), Timestamp::now(), &q);
    assert_eq!(page.total, 10, "P120 … P129");
    let q = OverviewQuery { page: Some(99), ..Default::default() };
    assert_eq!(overview(src(&[], &PolicySet::default(), &[]), Timestamp::now(), &q).page, 1);
}

/// The prefix read for a route filter keeps every id the filter keeps: the template's text
/// before `{partner}` and, for ids of no route, the route before the first `:`.
#[test]
fn a_route_filter_reads_the_ids_its_rows_may_have() {
    let q = |route: &str| OverviewQuery {
        page: None,
        per_page: Some(MAX_PER_PAGE),
        sort: SortKey::Id,
        desc: false,
        partner: None,
        route: Some(route.to_owned()),
        state: None,
    };
    let custom = RouteLimit { metering_id: "{route}-in:{partner}:x".into(), ..route() };
    let tagged = RouteLimit { metering_id: "tenant/{route}/{partner}".into(), ..route() };
    assert_eq!(q("").id_prefix(&[route()]), "");
    assert_eq!(q("ShipmentStatus").id_prefix(&[route()]), "ShipmentStatus:");
    assert_eq!(q("ShipmentStatus").id_prefix(std::slice::from_ref(&custom)), "ShipmentStatus");
    assert_eq!(q("ShipmentStatus").id_prefix(std::slice::from_ref(&tagged)), "");
    assert_eq!(q("Invoice").id_prefix(&[route()]), "Invoice:");
    // Whatever the templates, the rows of a route filter are the same from the prefix's ids.
    let ids = [
        "ShipmentStatus:A",
        "ShipmentStatus-in:B:x",
        "tenant/ShipmentStatus/C",
        "ShipmentStatusX:D",
        "Invoice:E",
        "plain",
    ];
    let counters: Vec<CounterInfo> = ids.iter().map(|id| counter(id, 1)).collect();
    let none = PolicySet::default();
    let now = Timestamp::now();
    let mut listed = 0;
    for routes in [vec![route()], vec![custom], vec![tagged], vec![]] {
        for name in ["ShipmentStatus", "ShipmentStatusX", "Invoice", "tenant"] {
            let query = q(name);
            let prefix = query.id_prefix(&routes);
            let read: Vec<CounterInfo> = counters
                .iter()
                .filter(|c| c.identifier.as_str().starts_with(&prefix))
                .cloned()
                .collect();
            let rows = |cs: &[CounterInfo]| -> Vec<String> {
                let page = overview(src(cs, &none, &routes), now, &query);
                page.rows.into_iter().map(|r| r.metering_id).collect()
            };
            assert_eq!(rows(&read), rows(&counters), "route {name}, prefix {prefix:?}");
            listed += rows(&counters).len();
        }
    }
    // Under each set of routes: "ShipmentStatus:A", "ShipmentStatusX:D" and "Invoice:E" (of
    // no route, or of the default template), and the custom and tagged templates' own ids.
    assert_eq!(listed, 14);
}
