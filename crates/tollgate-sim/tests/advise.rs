//! `advise` on a generated 30-day history with one burst: the proposed limits hold none of
//! the ordinary traffic when the history is replayed through the real gateway, and cap the
//! burst.

use tollgate_sim::parse_csv;
use tollgate_sim::{propose, replay};

/// A small deterministic generator (xorshift), so the history is the same on every run.
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// 30 days from 2026-03-01: Alpha about 4 an hour (1-3 records), Beta 2 an hour (2
/// records), Gamma 3 an hour (1-2 records) and 1,500 single-record ones within 20 minutes on
/// day 12. Rows are written out of order, with the columns shuffled.
fn history() -> String {
    let mut g = Gen(0x5eed_1234_abcd);
    let start = 1_772_323_200_000i64; // 2026-03-01T00:00:00Z
    let mut rows = Vec::new();
    for hour in 0..720i64 {
        for (partner, per_hour, lo, hi) in
            [("Alpha", 4, 1, 3), ("Beta", 2, 2, 2), ("Gamma", 3, 1, 2)]
        {
            let n = per_hour - 1 + g.below(3);
            for _ in 0..n {
                let at = start + hour * 3_600_000 + i64::try_from(g.below(3_600_000)).unwrap();
                rows.push((at, partner, lo + g.below(hi - lo + 1)));
            }
        }
    }
    let burst = start + (11 * 24 + 14) * 3_600_000;
    for _ in 0..1500 {
        rows.push((burst + i64::try_from(g.below(1_200_000)).unwrap(), "Gamma", 1));
    }
    // Any order of rows.
    for i in (1..rows.len()).rev() {
        let j = usize::try_from(g.below(i as u64 + 1)).unwrap();
        rows.swap(i, j);
    }
    let mut csv = String::from("records,document,partner,time\n");
    for (at, partner, records) in rows {
        let t = jiff::Timestamp::from_millisecond(at).unwrap();
        csv.push_str(&format!("{records},214,{partner},{t}\n"));
    }
    csv
}

#[test]
fn advised_limits_hold_no_ordinary_traffic_and_cap_the_burst() {
    let rows = parse_csv("history.csv", history().as_bytes()).unwrap();
    let proposals = propose(&rows, 0.001, 1.5);
    assert_eq!(proposals.len(), 3, "{proposals:?}");
    let gamma = proposals.iter().find(|p| p.partner == "Gamma").unwrap();
    assert!(gamma.excluded >= 1, "the burst hour is left out: {gamma:?}");
    assert!(gamma.limit < 50, "the burst does not inflate Gamma's limit: {gamma:?}");
    for p in &proposals {
        assert!(p.limit >= 2, "{p:?}");
        if p.partner != "Gamma" {
            assert_eq!(p.excluded, 0, "ordinary partners have no burst hour: {p:?}");
        }
    }

    let sim = replay(&rows, &proposals, 1, &|_| {}).unwrap();
    let f = &sim.cases[0].figures;
    assert_eq!(sim.bursting, vec!["Gamma".to_owned()]);
    // None of the ordinary traffic is held: Alpha and Beta never, Gamma not before its burst.
    for row in &f.partners {
        assert_eq!(
            row.offered,
            row.delivered + row.held + row.duplicates + row.rejected,
            "{row:?}"
        );
        if row.partner != "Gamma" {
            assert_eq!(row.ever_held, 0, "{row:?}");
            assert_eq!(row.delivered, row.offered, "{row:?}");
        } else {
            assert!(row.ever_held >= 1, "the burst is held: {row:?}");
        }
    }
    assert_eq!(f.ordinary_held, 0);
    // The burst is capped: Gamma's deliveries in any hour stay within its limit, so the
    // backend never gets more than the sum of the limits.
    let limit_sum: u64 = proposals.iter().map(|p| p.limit).sum();
    assert!(f.backend_with.iter().all(|&h| h <= limit_sum), "{:?}", f.backend_with);
    assert!(f.peak_without > limit_sum, "without Tollgate the burst hour exceeds the limits");
}
