//! The detector stepped through episodes on a made-up clock.

use super::*;

const T0: i64 = 1_800_000_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_millisecond(T0 + seconds * 1000).unwrap()
}

fn rules() -> Rules {
    Rules {
        backlog_threshold: 100,
        min_interval: Duration::from_secs(300),
        duplicates_quiet: Duration::from_secs(600),
    }
}

/// A group of `partner` metered as `Route:<partner>`.
fn g(partner: &str, held: u64, held_units: u64, duplicates: u64) -> (String, String, [u64; 3]) {
    (partner.to_owned(), format!("Route:{partner}"), [held, held_units, duplicates])
}

/// Events as (kind, partner) pairs.
type Said = Vec<(EventKind, String)>;

/// Observes `groups` at `seconds`: the kinds and partners sent, and the suppressed ones.
fn step(d: &mut Detector, seconds: i64, groups: &[(String, String, [u64; 3])]) -> (Said, Said) {
    let o = d.observe(
        groups.iter().map(|(p, id, [held, held_units, duplicates])| Group {
            partner: p,
            metering_id: Some(id),
            held: *held,
            held_units: *held_units,
            duplicates: *duplicates,
        }),
        at(seconds),
    );
    let names = |v: &[Event]| {
        v.iter().map(|e| (e.event, e.partner.clone().unwrap_or_default())).collect::<Vec<_>>()
    };
    (names(&o.send), names(&o.suppressed))
}

use EventKind::*;

fn ev(kind: EventKind, partner: &str) -> (EventKind, String) {
    (kind, partner.to_owned())
}

#[test]
fn the_first_snapshot_is_the_baseline() {
    let mut d = Detector::new(rules());
    assert_eq!(step(&mut d, 0, &[g("A", 5, 500, 3)]), (vec![], vec![]));
    // Still held, over, no new duplicates: nothing.
    assert_eq!(step(&mut d, 1, &[g("A", 6, 600, 3)]), (vec![], vec![]));
    // Released: reported, with the id it was held on.
    assert_eq!(step(&mut d, 2, &[]), (vec![ev(PartnerReleased, "A")], vec![]));
}

#[test]
fn one_held_event_per_partner_episode_and_one_release() {
    let mut d = Detector::new(rules());
    step(&mut d, 0, &[]);
    let (sent, _) = step(&mut d, 1, &[g("A", 1, 1, 0), g("B", 2, 2, 0)]);
    assert_eq!(sent, [ev(PartnerHeld, "A"), ev(PartnerHeld, "B")]);
    // More held: the same episode.
    for s in 2..100 {
        assert_eq!(step(&mut d, s, &[g("A", s as u64, 5, 0), g("B", 2, 2, 0)]), (vec![], vec![]));
    }
    // A is released (gone from the tally), B stays held.
    assert_eq!(step(&mut d, 100, &[g("B", 2, 2, 0)]), (vec![ev(PartnerReleased, "A")], vec![]));
    assert_eq!(step(&mut d, 101, &[g("B", 2, 2, 0)]), (vec![], vec![]));
    // B released by its held count falling to 0 while its group remains (its duplicates
    // grew at the same time: both are said).
    let (sent, _) = step(&mut d, 102, &[g("B", 0, 0, 1)]);
    assert_eq!(sent, [ev(PartnerReleased, "B"), ev(DuplicatesStarted, "B")]);
}

#[test]
fn a_flapping_partner_is_reported_once_per_interval() {
    let mut d = Detector::new(rules());
    step(&mut d, 0, &[]);
    assert_eq!(step(&mut d, 1, &[g("A", 1, 1, 0)]).0, [ev(PartnerHeld, "A")]);
    assert_eq!(step(&mut d, 2, &[]).0, [ev(PartnerReleased, "A")]);
    // Held again 2 s later: the episode is real, the event suppressed.
    assert_eq!(step(&mut d, 3, &[g("A", 1, 1, 0)]), (vec![], vec![ev(PartnerHeld, "A")]));
    assert_eq!(step(&mut d, 4, &[]), (vec![], vec![ev(PartnerReleased, "A")]));
    // 300 s after the first one was sent, a new episode is reported again.
    assert_eq!(step(&mut d, 301, &[g("A", 1, 1, 0)]).0, [ev(PartnerHeld, "A")]);
    // The suppression is per partner: B is not affected by A.
    assert_eq!(step(&mut d, 302, &[g("A", 1, 1, 0), g("B", 1, 1, 0)]).0, [ev(PartnerHeld, "B")]);
}

#[test]
fn duplicates_start_after_a_quiet_period() {
    let mut d = Detector::new(rules());
    step(&mut d, 0, &[g("A", 0, 0, 4)]);
    // The first growth since the start is a start.
    assert_eq!(step(&mut d, 10, &[g("A", 0, 0, 5)]).0, [ev(DuplicatesStarted, "A")]);
    // Growing every minute: one episode.
    for m in 1..30 {
        let (sent, suppressed) = step(&mut d, 10 + m * 60, &[g("A", 0, 0, 5 + m as u64)]);
        assert!(sent.is_empty() && suppressed.is_empty(), "minute {m}");
    }
    let last_growth = 10 + 29 * 60;
    // Pruned below (a count that falls is no growth), then quiet for 9 min 59 s: same episode.
    step(&mut d, last_growth + 100, &[g("A", 0, 0, 1)]);
    assert_eq!(step(&mut d, last_growth + 599, &[g("A", 0, 0, 2)]).0, []);
    // That growth restarted the quiet period; 10 min after it, a new episode starts.
    assert_eq!(
        step(&mut d, last_growth + 1199, &[g("A", 0, 0, 3)]).0,
        [ev(DuplicatesStarted, "A")]
    );
}

#[test]
fn backlog_crosses_the_threshold_upward_once() {
    let mut d = Detector::new(rules());
    step(&mut d, 0, &[]);
    let (sent, _) = step(&mut d, 1, &[g("A", 10, 99, 0)]);
    assert_eq!(sent, [ev(PartnerHeld, "A")]);
    assert_eq!(step(&mut d, 2, &[g("A", 11, 100, 0)]).0, [ev(BacklogExceeded, "A")]);
    assert_eq!(step(&mut d, 3, &[g("A", 50, 5000, 0)]).0, []);
    // Below and above again within the interval: suppressed; after it: sent.
    step(&mut d, 4, &[g("A", 5, 50, 0)]);
    assert_eq!(step(&mut d, 5, &[g("A", 11, 100, 0)]), (vec![], vec![ev(BacklogExceeded, "A")]));
    step(&mut d, 400, &[g("A", 5, 50, 0)]);
    assert_eq!(step(&mut d, 401, &[g("A", 11, 100, 0)]).0, [ev(BacklogExceeded, "A")]);
    // Both at once, held first.
    let (sent, _) = step(&mut d, 402, &[g("A", 11, 100, 0), g("B", 1, 1000, 0)]);
    assert_eq!(sent, [ev(PartnerHeld, "B"), ev(BacklogExceeded, "B")]);
}

#[test]
fn a_partner_is_summed_over_its_groups_and_named_by_its_most_held_id() {
    let mut d = Detector::new(rules());
    d.observe([], at(0));
    let groups = [
        Group { partner: "A", metering_id: None, held: 9, held_units: 60, duplicates: 0 },
        Group { partner: "A", metering_id: Some("R1:A"), held: 2, held_units: 20, duplicates: 1 },
        Group { partner: "A", metering_id: Some("R2:A"), held: 3, held_units: 30, duplicates: 0 },
        Group { partner: "A", metering_id: Some("R3:A"), held: 3, held_units: 30, duplicates: 0 },
    ];
    let o = d.observe(groups, at(1));
    let held = &o.send[0];
    assert_eq!(held.event, PartnerHeld);
    assert_eq!((held.held, held.held_units, held.duplicates), (17, 140, 1));
    // The unrouted group has no id; of R2 and R3 (3 each), the first.
    assert_eq!(held.metering_id.as_deref(), Some("R2:A"));
    assert_eq!(held.at, at(1));
    let dup = o.send.iter().find(|e| e.event == DuplicatesStarted).unwrap();
    assert_eq!(dup.metering_id.as_deref(), Some("R1:A"));
    assert!(o.send.iter().any(|e| e.event == BacklogExceeded));
    // Released: the id it was held on, and zero counts.
    let o = d.observe([], at(2));
    assert_eq!(o.send.len(), 1);
    let released = &o.send[0];
    assert_eq!(released.event, PartnerReleased);
    assert_eq!(released.metering_id.as_deref(), Some("R2:A"));
    assert_eq!((released.held, released.held_units), (0, 0));
}

#[test]
fn idle_partners_and_old_send_times_are_forgotten() {
    let mut d = Detector::new(rules());
    step(&mut d, 0, &[]);
    for i in 0..1000 {
        step(&mut d, 1, &[g(&format!("P{i}"), 1, 1, 0)]);
        step(&mut d, 2, &[]);
    }
    assert!(d.partners.is_empty());
    step(&mut d, 1000, &[]);
    assert!(d.sent.is_empty());
    // A partner whose duplicates grew is kept through the quiet period, then forgotten.
    step(&mut d, 1001, &[g("D", 0, 0, 1)]);
    step(&mut d, 1002, &[]);
    assert_eq!(d.partners.len(), 1);
    step(&mut d, 1602, &[]);
    assert!(d.partners.is_empty());
}
