//! "Bursting now": the metering ids whose traffic is out of the ordinary, worst first — held
//! items and how long they take to drain, a rate far above the partner's usual, or a partner
//! gone silent.
//!
//! Severity, highest first:
//! - **3 held**: the gateway holds some of the id's items (its backlog, since when, and the
//!   windows it takes to drain at the limit);
//! - **2 exceeded** or a last-hour rate at least [`SURGE`] × the usual hourly rate;
//! - **1 near** the limit, a rate at least 2 × the usual, or **silent**: nothing in the last
//!   24 hours from an id that usually sends.
//!
//! Within a severity, larger backlogs and higher ratios come first. Rates come from the usage
//! history through a [`TrafficSource`]; at most [`MAX_EXAMINED`] ids are asked for theirs (the
//! ids with held items, the most used ones and the configured partners of each route, in that
//! order).

use std::future::Future;
use std::pin::Pin;

use jiff::Timestamp;
use serde::Serialize;

use crate::overview::{Row, RowState};

/// A last-hour rate this many times the usual counts as a surge.
pub const SURGE: f64 = 5.0;
/// The most ids whose traffic one answer reads.
pub const MAX_EXAMINED: usize = 2_000;

/// Units one metering id was offered recently (admitted, refused, held and duplicate).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Traffic {
    /// In the last hour.
    pub last_hour: u64,
    /// In the last 24 hours.
    pub last_day: u64,
    /// Per hour on average over the 7 days before the last hour (0 when nothing was seen).
    pub usual_per_hour: f64,
}

/// Where the bursting view reads recent traffic: the server's usage history.
pub trait TrafficSource: Send + Sync + 'static {
    /// The traffic of each of `ids` at `now`, in the same order.
    fn traffic<'a>(
        &'a self,
        ids: &'a [String],
        now: Timestamp,
    ) -> Pin<Box<dyn Future<Output = Vec<Traffic>> + Send + 'a>>;
}

/// One line of the view.
#[derive(Debug, Clone, Serialize)]
pub struct Burst {
    /// 3 held, 2 exceeded or surging, 1 near, rising or silent.
    pub severity: u8,
    /// The metering id (partner text).
    pub metering_id: String,
    /// The partner part of the id.
    pub partner: String,
    /// The route part of the id.
    pub route: String,
    /// The overview's state.
    pub state: RowState,
    /// Units used in the current window, and the limit.
    pub used: u64,
    /// The limit in force, when known.
    pub limit: Option<u64>,
    /// Items held, their units, and since when.
    pub held: u64,
    /// Units held.
    pub held_units: u64,
    /// Since when some are held.
    pub held_since: Option<Timestamp>,
    /// Seconds until the backlog is through at the limit (whole windows; `None` without a
    /// limit or backlog).
    pub drain_s: Option<u64>,
    /// Recent traffic.
    pub last_hour: u64,
    /// Usual units per hour.
    pub usual_per_hour: f64,
    /// `last_hour / usual_per_hour`, when there is a usual.
    pub ratio: Option<f64>,
    /// Nothing in the last 24 hours, although the id usually sends.
    pub silent: bool,
}

/// The ids to examine, most telling first, at most [`MAX_EXAMINED`]: those with held items,
/// then by use, then `expected` ids (configured route × partner) the store does not know.
pub(crate) fn candidates(rows: &mut [Row], expected: &[String]) -> Vec<String> {
    rows.sort_unstable_by(|a, b| {
        (b.held_units, b.used).cmp(&(a.held_units, a.used)).then(a.metering_id.cmp(&b.metering_id))
    });
    let mut ids: Vec<String> = rows.iter().map(|r| r.metering_id.clone()).collect();
    let known: std::collections::HashSet<&str> =
        rows.iter().map(|r| r.metering_id.as_str()).collect();
    ids.extend(expected.iter().filter(|e| !known.contains(e.as_str())).cloned());
    ids.truncate(MAX_EXAMINED);
    ids
}

/// The view: every examined id that is bursting or silent, worst first. `ids` are the
/// [`candidates`], `traffic` theirs in the same order; an id without a row (a configured
/// partner the store does not know) counts as unused.
pub(crate) fn bursting(rows: &[Row], ids: &[String], traffic: &[Traffic]) -> Vec<Burst> {
    let by_id: std::collections::HashMap<&str, &Row> =
        rows.iter().map(|r| (r.metering_id.as_str(), r)).collect();
    let mut out: Vec<Burst> = ids
        .iter()
        .zip(traffic)
        .filter_map(|(id, t)| burst(id, by_id.get(id.as_str()).copied(), t))
        .collect();
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(b.held_units.cmp(&a.held_units))
            .then(b.ratio.unwrap_or(0.0).total_cmp(&a.ratio.unwrap_or(0.0)))
            .then(a.metering_id.cmp(&b.metering_id))
    });
    out
}

fn burst(id: &str, row: Option<&Row>, t: &Traffic) -> Option<Burst> {
    let ratio = (t.usual_per_hour > 0.0).then(|| t.last_hour as f64 / t.usual_per_hour);
    let silent = t.last_day == 0 && t.usual_per_hour > 0.0;
    let held_units = row.map_or(0, |r| r.held_units);
    let state = row.map_or(RowState::Ok, |r| r.state);
    let surging = ratio.is_some_and(|x| x >= SURGE);
    let rising = ratio.is_some_and(|x| x >= 2.0);
    let severity = if held_units > 0 {
        3
    } else if state == RowState::Exceeded || surging {
        2
    } else if state == RowState::Near || rising || silent {
        1
    } else {
        return None;
    };
    let (partner, route) = match row {
        Some(r) => (r.partner.clone(), r.route.clone()),
        None => match id.split_once(':') {
            Some((a, b)) => (b.to_owned(), a.to_owned()),
            None => (id.to_owned(), String::new()),
        },
    };
    let limit = row.and_then(|r| r.limit);
    let drain_s = match (limit, row) {
        (Some(l), Some(r)) if l > 0 && held_units > 0 => {
            Some(held_units.div_ceil(l).saturating_mul(r.window_s))
        }
        _ => None,
    };
    Some(Burst {
        severity,
        metering_id: id.to_owned(),
        partner,
        route,
        state,
        used: row.map_or(0, |r| r.used),
        limit,
        held: row.map_or(0, |r| r.held),
        held_units,
        held_since: row.and_then(|r| r.held_since),
        drain_s,
        last_hour: t.last_hour,
        usual_per_hour: t.usual_per_hour,
        ratio,
        silent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, used: u64, held_units: u64, state: RowState) -> Row {
        let (route, partner) = id.split_once(':').unwrap();
        Row {
            metering_id: id.into(),
            partner: partner.into(),
            route: route.into(),
            used,
            limit: Some(100),
            limit_source: None,
            resets_in_s: Some(60),
            refused: 0,
            state,
            window_s: 3600,
            held: held_units / 10,
            held_units,
            held_since: None,
            delivered: 0,
            duplicate: 0,
            rejected: 0,
        }
    }

    #[test]
    fn held_first_then_surges_then_silence_and_the_ordinary_left_out() {
        let mut rows = vec![
            row("S:QUIET", 10, 0, RowState::Ok),
            row("S:HELD", 100, 250, RowState::Exceeded),
            row("S:SURGE", 40, 0, RowState::Ok),
            row("S:FULL", 100, 0, RowState::Exceeded),
        ];
        let ids = candidates(&mut rows, &["S:GONE".into(), "S:HELD".into()]);
        assert_eq!(ids, ["S:HELD", "S:FULL", "S:SURGE", "S:QUIET", "S:GONE"]);
        let t = |h, d, u| Traffic { last_hour: h, last_day: d, usual_per_hour: u };
        let traffic =
            [t(300, 900, 10.0), t(100, 600, 30.0), t(60, 80, 6.0), t(5, 50, 4.0), t(0, 0, 2.0)];
        let view = bursting(&rows, &ids, &traffic);
        let got: Vec<(&str, u8)> =
            view.iter().map(|b| (b.metering_id.as_str(), b.severity)).collect();
        assert_eq!(got, [("S:HELD", 3), ("S:SURGE", 2), ("S:FULL", 2), ("S:GONE", 1)]);
        assert_eq!(view[0].drain_s, Some(3 * 3600), "250 units at 100 per hour: three windows");
        assert!(view[3].silent && view[3].partner == "GONE");
        assert_eq!(view[1].ratio, Some(10.0));
    }
}
