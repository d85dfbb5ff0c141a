//! The overview with 10,000 metering ids: building one page (filter, sort, cut) from the
//! counters, as `GET /ui/api/overview` does, and serialising it to JSON; and the same with a
//! gateway queue of 100,000 items (a real spool on disk), its tally read as each refresh
//! reads it.

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use tollgate_console::{OverviewQuery, RouteLimit, SortKey, Sources, overview};
use tollgate_gateway::{Item, State};
use tollgate_policy::PolicySet;
use tollgate_quota::{CounterInfo, MeteringId, TimeUnit, WindowKind};

fn counters(n: usize) -> Vec<CounterInfo> {
    let now = Timestamp::now();
    (0..n)
        .map(|i| CounterInfo {
            identifier: MeteringId::new(&format!("Route{}:PARTNER{i:05}", i % 20)).unwrap(),
            interval: 1,
            unit: TimeUnit::Day,
            window: WindowKind::Calendar,
            start: None,
            used: (i as u64 * 7919) % 1200,
            exceed_count: 0,
            total_exceed_count: 0,
            window_start: Some(now),
            window_end: Some(now + SignedDuration::from_secs(3600)),
        })
        .collect()
}

fn routes() -> Vec<RouteLimit> {
    (0..20)
        .map(|i| RouteLimit {
            name: format!("Route{i}"),
            documents: vec!["214".into()],
            metering_id: "{route}:{partner}".into(),
            limit: 1000,
            interval: 1,
            unit: TimeUnit::Day,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let counters = counters(10_000);
    let routes = routes();
    let policies = PolicySet::default();
    let now = Timestamp::now();
    let mut g = c.benchmark_group("overview_10k_ids");
    g.bench_function("first_page_by_id", |b| {
        let q = OverviewQuery::default();
        b.iter(|| {
            serde_json::to_vec(&overview(
                Sources { counters: &counters, policies: &policies, routes: &routes, queue: &[] },
                now,
                &q,
            ))
            .unwrap()
        })
    });
    g.bench_function("near_filter_sorted_by_share", |b| {
        let q = OverviewQuery {
            sort: SortKey::Percent,
            desc: true,
            partner: Some("partner0".into()),
            ..Default::default()
        };
        b.iter(|| {
            serde_json::to_vec(&overview(
                Sources { counters: &counters, policies: &policies, routes: &routes, queue: &[] },
                now,
                &q,
            ))
            .unwrap()
        })
    });
    g.finish();

    // 100,000 queue items over 1,000 of the ids, in five states, committed to a real spool.
    let dir = tempfile::tempdir().unwrap();
    let spool = tollgate_gateway::bench::Spool::open(dir.path(), Default::default()).unwrap();
    let states = [State::Held, State::Held, State::Delivered, State::Duplicate, State::Rejected];
    for chunk in 0..100u64 {
        let put = (0..1000u64)
            .map(|k| {
                let n = chunk * 1000 + k;
                let partner = format!("PARTNER{:05}", (n % 1000) * 10);
                let route = format!("Route{}", (n % 1000) * 10 % 20);
                item(n, &route, &partner, states[(n % 5) as usize])
            })
            .collect();
        let change = tollgate_gateway::bench::Change { put, ..Default::default() };
        spool.commit(&change).unwrap();
    }
    let tally = spool.tally().clone();
    let q = OverviewQuery { sort: SortKey::Held, desc: true, ..Default::default() };
    let refresh = || {
        let queue = tally.snapshot();
        let src =
            Sources { counters: &counters, policies: &policies, routes: &routes, queue: &queue };
        serde_json::to_vec(&overview(src, now, &q)).unwrap()
    };
    eprintln!("overview page with 100,000 queue items: {} bytes of JSON", refresh().len());
    let mut g = c.benchmark_group("overview_10k_ids_100k_queue_items");
    g.bench_function("first_page_by_held", |b| b.iter(refresh));
    g.finish();
}

fn item(n: u64, route: &str, partner: &str, state: State) -> Item {
    Item {
        id: format!("{:013}-000000-{n}", 1_764_000_000_000u64 + n),
        state,
        spool_file: "F".into(),
        start: 0,
        end: 100,
        partner: partner.into(),
        sender: format!("ZZ:{partner}"),
        receiver: "ZZ:ACME".into(),
        control_number: n.to_string(),
        document: "214".into(),
        route: Some(route.into()),
        metering_id: Some(MeteringId::new(&format!("{route}:{partner}")).unwrap()),
        weight: 3,
        received_at: 1_764_000_000_000 + n as i64,
        next_attempt_at: None,
        attempts: 0,
        reason: None,
        layout: None,
        held_at: Some(1_764_000_000_000),
        delivered_at: None,
        duplicate_of: None,
        charge: None,
        part_charges: Vec::new(),
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
