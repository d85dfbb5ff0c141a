//! A run longer than the dedup window: the gateway prunes delivered items once a day, the last
//! time at the run's very end, and every interchange still ends with its fate as it last was.

use tollgate_gateway::State;
use tollgate_sim::{RunOutput, Scenario, simulate};

/// Three days with a one-day dedup window. The burst just before the end of day 2 is held and
/// released after midnight, so its items are delivered on day 3 and pruned at the end.
const SCENARIO: &str = r#"
name = "Prunes"
days = 3
bucket_minutes = 60

[backend]
capacity = 500

[[partner]]
name = "Calm"
documents = ["214"]
rate_per_hour = 20
records = [1, 2]

[[partner]]
name = "Loud"
documents = ["214"]
rate_per_hour = 10
records = [1, 1]

[[burst]]
partner = "Loud"
start_hours = 47.5
minutes = 10
count = 300

[gateway]
dedup_days = 1
[[gateway.route]]
name = "Status"
documents = ["214"]
limit = 100
unit = "hour"
deliver = "dir:./out"
"#;

#[test]
fn items_pruned_within_the_run_keep_their_last_fate() {
    let s = Scenario::parse("prunes.toml", SCENARIO).unwrap();
    let table = s.gateway.clone().unwrap();
    let mut runs: Vec<RunOutput> = Vec::new();
    simulate(&s, &table, 7, None, &|_| {}, &mut |o| runs.push(o.clone())).unwrap();
    let out = &runs[0];

    let mut whole = vec![0usize; out.arrivals.len()];
    for f in out.fates.iter().filter(|f| f.whole) {
        whole[f.arrival] += 1;
    }
    let lost: Vec<usize> = (0..whole.len()).filter(|&i| whole[i] != 1).collect();
    assert!(
        lost.is_empty(),
        "{} arrivals without exactly one fate, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );

    let burst_start = 47 * 3_600_000 + 1_800_000;
    let burst: Vec<_> = out
        .fates
        .iter()
        .filter(|f| f.received_ms >= burst_start && f.received_ms < burst_start + 600_000)
        .collect();
    assert!(burst.iter().filter(|f| f.held_ms.is_some()).count() > 100, "the burst was not held");
    let stale: Vec<_> = burst.iter().filter(|f| f.state != State::Delivered).collect();
    assert!(
        stale.is_empty(),
        "{} burst items not delivered by the end, e.g. {:?}",
        stale.len(),
        stale.first()
    );
    let after_midnight =
        burst.iter().filter(|f| f.delivered_ms.is_some_and(|d| d >= 48 * 3_600_000)).count();
    assert!(after_midnight > 100, "only {after_midnight} burst items were released on day 3");
}
