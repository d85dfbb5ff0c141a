//! Limit advice: from a traffic history, the smallest hourly limit per partner and document
//! at which the partner's ordinary traffic would have been held in at most a target share of
//! the hours, times a headroom factor; then a replay of the history under those limits
//! through the real gateway (see [`crate::run`]), reported like a simulation.
//!
//! Bursts must not raise a limit, so the hours that are outliers for that partner and
//! document are left out first, robustly: an hour is a burst hour when its records exceed
//! the median hour by more than [`OUTLIER_DEVIATIONS`] robust deviations (1.4826 × the
//! median absolute deviation, and at least √(p90 + 1) so that sparse traffic is not called a
//! burst). The median and MAD are not moved by a few huge hours, unlike a mean and a standard
//! deviation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::path::Path;

use crate::history::{self, Row};
use crate::run::{self, Fate, RunOutput};
use crate::scenario::{Backend, CapacityUnit, Partner, Records, Scenario};
use crate::traffic::{Arrival, Kind};
use crate::{Case, Simulation, figures};

mod in_force;
pub use in_force::InForce;
use in_force::read_in_force;

/// How many robust deviations above the median make an hour a burst hour.
pub(crate) const OUTLIER_DEVIATIONS: f64 = 8.0;

/// A proposed limit for one partner's document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The partner.
    pub partner: String,
    /// The document type.
    pub document: String,
    /// The route of its document: the config's (`--config`), else `doc-<document>`.
    pub route: String,
    /// The proposed records per hour.
    pub limit: u64,
    /// The quantile of ordinary hours the limit is based on.
    pub basis: u64,
    /// Hours in the history.
    pub hours: usize,
    /// Burst hours left out.
    pub excluded: usize,
    /// The largest hour left out (0 when none).
    pub largest_excluded: u64,
    /// The limit in force for the partner's document, when a config was given and one of its
    /// routes takes the document.
    pub in_force: Option<InForce>,
}

fn route_of(document: &str) -> String {
    format!("doc-{document}")
}

/// Parses `--target-held`: `0.1%` or `0.1` (percent), in (0, 50].
pub(crate) fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("--target-held {s:?}: expected a percentage such as 0.1%"))?;
    if !(v > 0.0 && v <= 50.0) {
        return Err(format!("--target-held {s:?}: give a percentage in (0, 50]"));
    }
    Ok(v / 100.0)
}

fn hour_of(ms: i64) -> i64 {
    ms.div_euclid(3_600_000)
}

/// The hourly records of every (partner, document), from the first row's hour to the last's.
fn hourly(rows: &[Row]) -> (i64, usize, BTreeMap<(String, String), Vec<u64>>) {
    let first = hour_of(rows.first().map_or(0, |r| r.at_ms));
    let last = hour_of(rows.last().map_or(0, |r| r.at_ms));
    let n = usize::try_from(last - first + 1).unwrap_or(1);
    let mut out: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for r in rows {
        let v = out.entry((r.partner.clone(), r.document.clone())).or_insert_with(|| vec![0; n]);
        let h = usize::try_from(hour_of(r.at_ms) - first).unwrap_or(0);
        v[h.min(n - 1)] += u64::from(r.records);
    }
    (first, n, out)
}

fn median(sorted: &[u64]) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let m = sorted.len() / 2;
    if sorted.len() % 2 == 1 { sorted[m] as f64 } else { (sorted[m - 1] + sorted[m]) as f64 / 2.0 }
}

/// The burst threshold of a series of hourly records (see the module doc).
pub(crate) fn burst_threshold(hours: &[u64]) -> f64 {
    let mut s = hours.to_vec();
    s.sort_unstable();
    let med = median(&s);
    let mut dev: Vec<u64> = s.iter().map(|&v| (v as f64 - med).abs().round() as u64).collect();
    dev.sort_unstable();
    let mad = median(&dev);
    let p90 = s[((s.len() as f64 - 1.0) * 0.9).round() as usize] as f64;
    let scale = (1.4826 * mad).max((p90 + 1.0).sqrt());
    med + OUTLIER_DEVIATIONS * scale
}

fn sp<T>(v: T) -> toml::Spanned<T> {
    toml::Spanned::new(0..0, v)
}

/// The proposals, in (partner, document) order.
pub fn propose(rows: &[Row], target_held: f64, headroom: f64) -> Vec<Proposal> {
    let (_, n, series) = hourly(rows);
    series
        .into_iter()
        .map(|((partner, document), hours)| {
            let threshold = burst_threshold(&hours);
            let mut ordinary: Vec<u64> =
                hours.iter().copied().filter(|&v| v as f64 <= threshold).collect();
            let excluded: Vec<u64> =
                hours.iter().copied().filter(|&v| v as f64 > threshold).collect();
            ordinary.sort_unstable();
            // The smallest L with (ordinary hours above L) <= target × hours.
            let allowed = (target_held * ordinary.len() as f64).floor() as usize;
            let basis = ordinary.len().checked_sub(allowed + 1).map_or(0, |i| ordinary[i]);
            let limit = ((basis as f64 * headroom).ceil() as u64).max(1);
            Proposal {
                route: route_of(&document),
                partner,
                document,
                limit,
                basis,
                hours: n,
                excluded: excluded.len(),
                largest_excluded: excluded.iter().copied().max().unwrap_or(0),
                in_force: None,
            }
        })
        .collect()
}

fn pct_label(target_held: f64) -> String {
    let q = 100.0 - target_held * 100.0;
    let s = format!("{q:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("p{s}")
}

/// The proposal as TOML, a comment on each line giving its basis.
pub(crate) fn to_toml(
    ps: &[Proposal],
    source: &str,
    rows: &[Row],
    target_held: f64,
    headroom: f64,
) -> String {
    let mut o = String::new();
    let from =
        jiff::Timestamp::from_millisecond(rows.first().map_or(0, |r| r.at_ms)).unwrap_or_default();
    let to =
        jiff::Timestamp::from_millisecond(rows.last().map_or(0, |r| r.at_ms)).unwrap_or_default();
    let partners: BTreeSet<&str> = rows.iter().map(|r| r.partner.as_str()).collect();
    let _ = writeln!(
        o,
        "# tollgate advise: limits from {source}: {} interchanges from {} partner(s), {from} to {to}.",
        rows.len(),
        partners.len()
    );
    let _ = writeln!(
        o,
        "# Each limit is the smallest hourly limit at which the partner's ordinary traffic would have been held"
    );
    let _ = writeln!(
        o,
        "# in at most {}% of the hours, times a headroom of {headroom}. Burst hours (above the median by more than",
        target_held * 100.0
    );
    let _ = writeln!(
        o,
        "# {OUTLIER_DEVIATIONS} robust deviations, median/MAD) are left out, so a burst does not raise a limit."
    );
    let _ = writeln!(
        o,
        "# Paste as [[policy]] of the quota service (override beats the route's limit), or use as route limits."
    );
    let q = pct_label(target_held);
    for p in ps {
        let days = p.hours as f64 / 24.0;
        let burst = match p.excluded {
            0 => "no burst hour".to_owned(),
            1 => format!("1 burst hour excluded (largest {})", p.largest_excluded),
            k => format!("{k} burst hours excluded (largest {})", p.largest_excluded),
        };
        let _ = writeln!(o);
        let _ = writeln!(o, "[[policy]]");
        let id = p
            .in_force
            .as_ref()
            .map_or_else(|| format!("{}:{}", p.route, p.partner), |f| f.metering_id.clone());
        let _ = writeln!(
            o,
            "match = {id:?}  # route {} ({} documents), partner {}",
            p.route, p.document, p.partner
        );
        if let Some(f) = &p.in_force {
            let per_hour = f.per_hour();
            let change = if per_hour > 0.0 { p.limit as f64 / per_hour } else { f64::INFINITY };
            let _ = writeln!(
                o,
                "# in force: {} per {} {} (the {}'s), about {:.1} per hour; proposed {} per hour, {:.2} x that",
                figures::grouped(f.limit),
                f.interval,
                f.unit,
                f.source,
                per_hour,
                figures::grouped(p.limit),
                change
            );
        }
        let _ = writeln!(
            o,
            "limit = {}  # {q} of hourly records over {days:.1} days: {}, {burst}; x {headroom} headroom",
            p.limit, p.basis
        );
        let _ = writeln!(o, "interval = 1  # one window per hour, as the history was counted");
        let _ = writeln!(o, "unit = \"hour\"  # calendar hours");
        let _ = writeln!(o, "override = true  # beats a limit sent by the route or the request");
    }
    o
}

/// The replay: the history's interchanges offered at their times to the real gateway, each
/// partner's documents limited as proposed. Partners never share a counter, a hold group or
/// a delivery lane, so partners with the same limits run together and the runs are merged.
pub fn replay(
    rows: &[Row],
    ps: &[Proposal],
    seed: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Simulation, crate::SimError> {
    let (first_hour, n, series) = hourly(rows);
    let start_ms = first_hour * 3_600_000;
    let partners: Vec<String> =
        rows.iter().map(|r| r.partner.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let docs_of = |p: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r.partner == p)
            .map(|r| r.document.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    let all_docs: Vec<String> =
        rows.iter().map(|r| r.document.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let mut burst_hours: BTreeMap<(String, String), BTreeSet<usize>> = BTreeMap::new();
    for ((p, d), hours) in &series {
        let t = burst_threshold(hours);
        let set =
            hours.iter().enumerate().filter(|(_, v)| **v as f64 > t).map(|(i, _)| i).collect();
        burst_hours.insert((p.clone(), d.clone()), set);
    }
    let marked: Vec<usize> = partners
        .iter()
        .enumerate()
        .filter(|(_, p)| burst_hours.iter().any(|((q, _), s)| q == *p && !s.is_empty()))
        .map(|(i, _)| i)
        .collect();
    let capacity: u64 = ps.iter().map(|p| p.limit).sum();
    let scenario = Scenario {
        name: "Replay of the history under the proposed limits".into(),
        start: jiff::Timestamp::from_millisecond(start_ms).unwrap_or_default(),
        length_ms: i64::try_from(n).unwrap_or(1) * 3_600_000,
        seed,
        bucket_minutes: 60,
        backend: Backend { capacity: sp(capacity.max(1)), unit: CapacityUnit::Records },
        partners: partners
            .iter()
            .map(|p| Partner {
                name: sp(p.clone()),
                id: None,
                documents: sp(docs_of(p)),
                rate_per_hour: sp(0.0),
                profile: None,
                records: sp(Records::Fixed(1)),
            })
            .collect(),
        bursts: Vec::new(),
        gateway: None,
        policies: Vec::new(),
        marked_bursting: marked,
    };
    let mut control = vec![0u32; partners.len()];
    // Looked up once per row: by borrowed names, not copies of them.
    let bursts_of: HashMap<(&str, &str), &BTreeSet<usize>> =
        burst_hours.iter().map(|((p, d), set)| ((p.as_str(), d.as_str()), set)).collect();
    let index_of: HashMap<&str, usize> =
        partners.iter().enumerate().map(|(i, p)| (p.as_str(), i)).collect();
    let arrivals: Vec<Arrival> = rows
        .iter()
        .map(|r| {
            let pi = index_of.get(r.partner.as_str()).copied().unwrap_or(0);
            control[pi] = control[pi] % 999_999_999 + 1;
            let docs = &scenario.partners[pi].documents;
            let h = usize::try_from(hour_of(r.at_ms) - first_hour).unwrap_or(0);
            let burst = bursts_of
                .get(&(r.partner.as_str(), r.document.as_str()))
                .is_some_and(|s| s.contains(&h));
            Arrival {
                at_ms: r.at_ms - start_ms,
                partner: pi,
                control: control[pi],
                document: docs.get_ref().iter().position(|d| *d == r.document).unwrap_or(0),
                records: r.records,
                kind: if burst { Kind::Burst } else { Kind::Ordinary },
            }
        })
        .collect();
    // Partners grouped by their limits.
    let mut groups: BTreeMap<Vec<(String, u64)>, Vec<usize>> = BTreeMap::new();
    for (pi, p) in partners.iter().enumerate() {
        let key: Vec<(String, u64)> =
            ps.iter().filter(|x| x.partner == *p).map(|x| (x.document.clone(), x.limit)).collect();
        groups.entry(key).or_default().push(pi);
    }
    // Each group's gateway is prepared here, in order; the runs, independent (each on its own
    // runtime, clock and work dir), share the machine's cores; their results merge in order.
    let mut prepared = Vec::with_capacity(groups.len());
    for (limits, members) in &groups {
        let mut table = toml::Table::new();
        table.insert("dedup_days".into(), toml::Value::Integer(1));
        let routes: Vec<toml::Value> = all_docs
            .iter()
            .map(|d| {
                let limit = limits.iter().find(|(x, _)| x == d).map_or(1, |(_, l)| *l);
                let mut r = toml::Table::new();
                r.insert("name".into(), toml::Value::String(route_of(d)));
                r.insert(
                    "documents".into(),
                    toml::Value::Array(vec![toml::Value::String(d.clone())]),
                );
                r.insert(
                    "limit".into(),
                    toml::Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
                );
                r.insert("unit".into(), toml::Value::String("hour".into()));
                r.insert("split".into(), toml::Value::Boolean(true));
                r.insert("deliver".into(), toml::Value::String("dir:backend".into()));
                toml::Value::Table(r)
            })
            .collect();
        table.insert("route".into(), toml::Value::Array(routes));
        let subset: Vec<Arrival> =
            arrivals.iter().filter(|a| members.contains(&a.partner)).copied().collect();
        if subset.is_empty() {
            continue;
        }
        let work =
            run::work_dir().map_err(|e| crate::SimError::Config(format!("work dir: {e}")))?;
        let backend = work.path().join("backend");
        let (config, _) =
            crate::setup::prepare(&scenario, table, &backend, &work.path().join("acks"))
                .map_err(crate::SimError::Config)?;
        prepared.push((config, subset, work));
    }
    // A group's run costs about its arrivals: the busiest groups start first.
    let outputs = run::on_cores(
        prepared.len(),
        |i| prepared[i].1.len(),
        |i| {
            let (config, subset, work) = &prepared[i];
            run::run(&scenario, config.clone(), subset.clone(), seed, work.path(), progress)
        },
    );
    let mut merged = RunOutput { arrivals: Vec::new(), fates: Vec::new() };
    for out in outputs {
        let out = out?;
        let offset = merged.arrivals.len();
        merged.arrivals.extend(out.arrivals);
        merged
            .fates
            .extend(out.fates.into_iter().map(|f| Fate { arrival: f.arrival + offset, ..f }));
    }
    let figures = figures::compute(&scenario, &merged);
    Ok(Simulation {
        name: scenario.name.clone(),
        seed,
        start: scenario.start.to_string(),
        hours: n as f64,
        bursting: scenario.marked_bursting.iter().map(|&i| partners[i].clone()).collect(),
        cases: vec![Case {
            label: String::new(),
            value: None,
            limits: ps
                .iter()
                .map(|p| {
                    (
                        format!("{}:{}", p.route, p.partner),
                        i64::try_from(p.limit).unwrap_or(i64::MAX),
                        1,
                        "hour".to_owned(),
                    )
                })
                .collect(),
            figures,
        }],
        notes: vec![
            "the backend capacity shown is the sum of the proposed limits (records per hour)"
                .into(),
        ],
    })
}

/// Makes a progress callback for a run offering `total` interchanges.
pub(crate) type Progress<'a> = &'a dyn Fn(u64) -> Box<dyn Fn(u64) + Sync>;

/// `tollgate advise`: reads the history, proposes, replays, writes the report to `out`, and
/// returns the proposal as TOML.
pub fn command(
    history: Option<&Path>,
    data_dir: Option<&Path>,
    config: Option<&Path>,
    target_held: &str,
    headroom: f64,
    out: &Path,
    progress: Progress<'_>,
) -> Result<String, String> {
    let target = parse_percent(target_held)?;
    if !(headroom.is_finite() && (1.0..=100.0).contains(&headroom)) {
        return Err(format!("--headroom {headroom}: give a factor in 1..=100"));
    }
    let (rows, source) = match (history, data_dir) {
        (Some(path), _) => {
            (history::read_csv(path).map_err(|e| e.to_string())?, path.display().to_string())
        }
        (None, Some(dir)) => {
            (history::from_queue(dir)?, format!("the delivered items in {}", dir.display()))
        }
        (None, None) => return Err("give --history FILE.csv or --from-queue".into()),
    };
    let mut ps = propose(&rows, target, headroom);
    if let Some(path) = config {
        read_in_force(path, &mut ps)?;
    }
    let bar = progress(rows.len() as u64);
    let sim = replay(&rows, &ps, 1, &*bar).map_err(|e| e.to_string())?;
    crate::write_report(&sim, out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(to_toml(&ps, &source, &rows, target, headroom))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_hour_does_not_raise_the_threshold() {
        let mut hours: Vec<u64> = (0..720).map(|i| 40 + (i % 7) * 5).collect();
        let calm = burst_threshold(&hours);
        hours[300] = 100_000;
        hours[301] = 50_000;
        let with_burst = burst_threshold(&hours);
        assert!(with_burst < 200.0, "{with_burst}");
        assert!((with_burst - calm).abs() < 5.0, "{calm} {with_burst}");
    }

    #[test]
    fn percent_parses_with_or_without_sign() {
        assert_eq!(parse_percent("0.1%"), Ok(0.001));
        assert_eq!(parse_percent("5"), Ok(0.05));
        assert!(parse_percent("0").is_err());
        assert!(parse_percent("ten").is_err());
    }
}
