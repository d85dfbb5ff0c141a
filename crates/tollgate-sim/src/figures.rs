//! The figures of a run: the per-partner table, the time series behind the charts and the
//! delay distribution, computed from what the gateway recorded for every item. Everything
//! here is ordered (vectors and `BTreeMap`s), so the same run gives the same bytes.

use std::collections::BTreeMap;

use serde::Serialize;
use tollgate_gateway::State;

use crate::run::RunOutput;
use crate::scenario::{CapacityUnit, Scenario};
use crate::traffic::Kind;

/// One partner's line of the table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartnerRow {
    /// The partner's name.
    pub partner: String,
    /// True when the scenario has a burst for it.
    pub bursts: bool,
    /// Interchanges offered.
    pub offered: u64,
    /// Interchanges delivered (every part of a split one).
    pub delivered: u64,
    /// Interchanges still held (or not yet delivered) at the end.
    pub held: u64,
    /// Interchanges held at some time.
    pub ever_held: u64,
    /// The longest time an item waited held, in seconds (still held ones count to the end).
    pub longest_hold_s: u64,
    /// Duplicates removed.
    pub duplicates: u64,
    /// Rejected by the parser or the routes, or dead-lettered.
    pub rejected: u64,
    /// Records offered.
    pub offered_records: u64,
    /// Records delivered.
    pub delivered_records: u64,
}

/// How long the delivered interchanges of partners that never burst waited, as counts per
/// range and percentiles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Delay {
    /// `(label, count)` per range.
    pub histogram: Vec<(String, u64)>,
    /// Median added delay, milliseconds.
    pub p50_ms: i64,
    /// 99th percentile, milliseconds.
    pub p99_ms: i64,
    /// The longest, milliseconds.
    pub max_ms: i64,
    /// Interchanges counted.
    pub count: u64,
}

/// `1234567` as `1,234,567`, for sentences people read.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Figures {
    /// One sentence on what the run leaves behind: how many interchanges are still held at
    /// the end, and whose (the largest first), or that nothing is.
    pub fn end_state(&self) -> String {
        if self.total.held == 0 {
            return "At the end nothing is held: every interchange admitted was delivered.".into();
        }
        let mut whose: Vec<&PartnerRow> = self.partners.iter().filter(|r| r.held > 0).collect();
        whose.sort_by(|a, b| b.held.cmp(&a.held).then(a.partner.cmp(&b.partner)));
        let names: Vec<String> =
            whose.iter().map(|r| format!("{} {}", r.partner, grouped(r.held))).collect();
        format!(
            "At the end {} interchange{} still held ({}): they go on as their partners' windows \
             reset, or an operator releases or purges them.",
            grouped(self.total.held),
            if self.total.held == 1 { " is" } else { "s are" },
            names.join(", ")
        )
    }
}

/// Every figure of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// The charts' time step, minutes.
    pub bucket_minutes: u32,
    /// The table, one row per partner, in scenario order.
    pub partners: Vec<PartnerRow>,
    /// Totals over all partners.
    pub total: PartnerRow,
    /// Interchanges offered per bucket, per partner.
    pub offered: BTreeMap<String, Vec<u64>>,
    /// Interchanges delivered per bucket, per partner (split parts count one each).
    pub delivered: BTreeMap<String, Vec<u64>>,
    /// The backend's capacity per hour and its unit.
    pub capacity_per_hour: u64,
    /// `documents` or `records`.
    pub capacity_unit: CapacityUnit,
    /// Backend inbound per hour with Tollgate (what was delivered), in the capacity's unit.
    pub backend_with: Vec<u64>,
    /// Backend inbound per hour without Tollgate (everything offered, as it arrived).
    pub backend_without: Vec<u64>,
    /// Ordinary traffic per hour (partners' non-burst arrivals), in the capacity's unit.
    pub ordinary_per_hour: Vec<u64>,
    /// The highest hour with Tollgate.
    pub peak_with: u64,
    /// The highest hour without Tollgate.
    pub peak_without: u64,
    /// Hours over capacity with Tollgate.
    pub hours_over_with: u64,
    /// Hours over capacity without Tollgate.
    pub hours_over_without: u64,
    /// Items held at the end of each bucket.
    pub held_backlog: Vec<u64>,
    /// Held items released (delivered) during each bucket.
    pub released: Vec<u64>,
    /// Items of partners that never burst that were ever held.
    pub ordinary_held: u64,
    /// Added delay of partners that never burst.
    pub delay: Delay,
}

fn bucket(ms: i64, width_ms: i64, n: usize) -> usize {
    usize::try_from(ms.max(0) / width_ms).unwrap_or(0).min(n.saturating_sub(1))
}

/// Computes the figures of `out`, a run of `s`.
pub(crate) fn compute(s: &Scenario, out: &RunOutput) -> Figures {
    let width = i64::from(s.bucket_minutes) * 60_000;
    let n = usize::try_from((s.length_ms + width - 1) / width).unwrap_or(1).max(1);
    let hours = usize::try_from((s.length_ms + 3_599_999) / 3_600_000).unwrap_or(1).max(1);
    let names: Vec<String> = s.partners.iter().map(|p| p.name.get_ref().clone()).collect();
    let by_records = s.backend.unit == CapacityUnit::Records;
    let mut f = Figures {
        bucket_minutes: s.bucket_minutes,
        capacity_per_hour: *s.backend.capacity.get_ref(),
        capacity_unit: s.backend.unit,
        backend_with: vec![0; hours],
        backend_without: vec![0; hours],
        ordinary_per_hour: vec![0; hours],
        held_backlog: vec![0; n],
        released: vec![0; n],
        ..Default::default()
    };
    let mut rows: Vec<PartnerRow> = names
        .iter()
        .enumerate()
        .map(|(i, name)| PartnerRow {
            partner: name.clone(),
            bursts: s.bursts_for(i),
            ..Default::default()
        })
        .collect();
    for name in &names {
        f.offered.insert(name.clone(), vec![0; n]);
        f.delivered.insert(name.clone(), vec![0; n]);
    }
    for a in &out.arrivals {
        let row = &mut rows[a.partner];
        row.offered += 1;
        row.offered_records += u64::from(a.records);
        if let Some(v) = f.offered.get_mut(&names[a.partner]) {
            v[bucket(a.at_ms, width, n)] += 1;
        }
        let units = if by_records { u64::from(a.records) } else { 1 };
        f.backend_without[bucket(a.at_ms, 3_600_000, hours)] += units;
        if a.kind == Kind::Ordinary {
            f.ordinary_per_hour[bucket(a.at_ms, 3_600_000, hours)] += units;
        }
    }
    // Held intervals: +1 at the bucket the hold starts, -1 at the bucket it ends.
    let mut backlog_delta = vec![0i64; n + 1];
    let mut delays = Vec::new();
    for fate in &out.fates {
        let a = &out.arrivals[fate.arrival];
        let ordinary_partner = !rows[a.partner].bursts;
        let row = &mut rows[a.partner];
        if fate.whole {
            match fate.state {
                State::Delivered => row.delivered += 1,
                State::Held | State::Admitted | State::Received => row.held += 1,
                State::Duplicate => row.duplicates += 1,
                State::Rejected | State::Dead => row.rejected += 1,
            }
        }
        if let Some(d) = fate.delivered_ms {
            row.delivered_records += fate.weight;
            if let Some(v) = f.delivered.get_mut(&names[a.partner]) {
                v[bucket(d, width, n)] += 1;
            }
            let units = if by_records { fate.weight } else { 1 };
            f.backend_with[bucket(d, 3_600_000, hours)] += units;
            if ordinary_partner && fate.whole {
                delays.push(d - fate.received_ms);
            }
        }
        if let Some(h) = fate.held_ms {
            if fate.whole {
                row.ever_held += 1;
                if ordinary_partner {
                    f.ordinary_held += 1;
                }
            }
            let end = fate.delivered_ms.unwrap_or(s.length_ms);
            row.longest_hold_s =
                row.longest_hold_s.max(u64::try_from((end - h) / 1000).unwrap_or(0));
            // Sampled at bucket ends: held during bucket k's end if h <= end_k < release.
            let from = usize::try_from(h / width).unwrap_or(0).min(n);
            backlog_delta[from] += 1;
            if let Some(d) = fate.delivered_ms {
                backlog_delta[usize::try_from(d / width).unwrap_or(0).min(n)] -= 1;
                f.released[bucket(d, width, n)] += 1;
            } else if !matches!(fate.state, State::Held | State::Admitted | State::Received) {
                let e = fate.received_ms.max(h);
                backlog_delta[usize::try_from(e / width).unwrap_or(0).min(n)] -= 1;
            }
        }
    }
    let mut level = 0i64;
    for (k, d) in backlog_delta.iter().take(n).enumerate() {
        level += d;
        f.held_backlog[k] = u64::try_from(level).unwrap_or(0);
    }
    let cap = f.capacity_per_hour;
    f.peak_with = f.backend_with.iter().copied().max().unwrap_or(0);
    f.peak_without = f.backend_without.iter().copied().max().unwrap_or(0);
    f.hours_over_with = f.backend_with.iter().filter(|&&v| v > cap).count() as u64;
    f.hours_over_without = f.backend_without.iter().filter(|&&v| v > cap).count() as u64;
    f.delay = delay(delays);
    let mut total = PartnerRow { partner: "all".into(), ..Default::default() };
    for r in &rows {
        total.bursts |= r.bursts;
        total.offered += r.offered;
        total.delivered += r.delivered;
        total.held += r.held;
        total.ever_held += r.ever_held;
        total.longest_hold_s = total.longest_hold_s.max(r.longest_hold_s);
        total.duplicates += r.duplicates;
        total.rejected += r.rejected;
        total.offered_records += r.offered_records;
        total.delivered_records += r.delivered_records;
    }
    f.total = total;
    f.partners = rows;
    f
}

fn delay(mut v: Vec<i64>) -> Delay {
    v.sort_unstable();
    let ranges: [(&str, i64); 7] = [
        ("none", 0),
        ("up to 1 s", 1_000),
        ("up to 1 min", 60_000),
        ("up to 10 min", 600_000),
        ("up to 1 h", 3_600_000),
        ("up to 6 h", 21_600_000),
        ("over 6 h", i64::MAX),
    ];
    let mut histogram: Vec<(String, u64)> =
        ranges.iter().map(|(l, _)| ((*l).to_owned(), 0)).collect();
    for &d in &v {
        let k = ranges.iter().position(|&(_, hi)| d <= hi).unwrap_or(ranges.len() - 1);
        histogram[k].1 += 1;
    }
    let pct = |p: f64| -> i64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i.min(v.len() - 1)]
    };
    Delay {
        histogram,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        max_ms: v.last().copied().unwrap_or(0),
        count: v.len() as u64,
    }
}
