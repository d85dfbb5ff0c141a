//! The overview with 10,000 metering ids: building one page (filter, sort, cut) from the
//! counters, as `GET /ui/api/overview` does, and serialising it to JSON.

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use tollgate_console::{OverviewQuery, RouteLimit, SortKey, Sources, overview};
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
