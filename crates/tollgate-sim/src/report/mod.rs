//! The report: charts (SVG) and one self-contained HTML page (inline SVG, inline style, no
//! script, no external asset, a Content-Security-Policy that allows nothing else), so it
//! opens offline and can be mailed. It holds no path, no run time and no host name: the same
//! simulation gives the same bytes.

pub(crate) mod svg;

use std::fmt::Write;

use svg::{Series, Style, color, esc};

use crate::figures::grouped;
use crate::{Case, Simulation};

/// Time axis ticks for `n` buckets of `minutes` each: at most [`MAX_TICKS`] labels, so they
/// never run into each other.
fn ticks(n: usize, minutes: u32) -> Vec<(usize, String)> {
    let per_hour = (60 / minutes.max(1)).max(1) as usize;
    let hours = n / per_hour;
    let (every_h, label): (usize, fn(usize) -> String) = if hours > 96 {
        (24 * (hours / 24).div_ceil(MAX_TICKS).max(1), |h| format!("day {}", h / 24 + 1))
    } else if hours > 24 {
        (12, |h| format!("{}h", h))
    } else {
        (3, |h| format!("{}h", h))
    };
    (0..=hours).step_by(every_h).map(|h| (h * per_hour, label(h))).collect()
}

/// The most labels on a time axis.
const MAX_TICKS: usize = 12;

fn f64s(v: &[u64]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The partners drawn one by one (at most 6); with more, the ordinary ones are summed.
fn partner_series(sim: &Simulation, case: &Case) -> Vec<Series> {
    let f = &case.figures;
    let many = f.partners.len() > 6;
    let mut out = Vec::new();
    let mut sum_off = vec![0u64; f.held_backlog.len()];
    let mut sum_del = vec![0u64; f.held_backlog.len()];
    let (mut calm, mut hot) = (0, 0);
    for row in &f.partners {
        let burst = sim.bursting.contains(&row.partner);
        let off = f.offered.get(&row.partner).cloned().unwrap_or_default();
        let del = f.delivered.get(&row.partner).cloned().unwrap_or_default();
        if many && !burst {
            for (k, v) in off.iter().enumerate() {
                sum_off[k] += v;
            }
            for (k, v) in del.iter().enumerate() {
                sum_del[k] += v;
            }
            continue;
        }
        let c = if burst {
            hot += 1;
            color(hot - 1, true)
        } else {
            calm += 1;
            color(calm - 1, false)
        };
        let tag = if burst { " (bursts)" } else { "" };
        out.push(Series {
            name: format!("{}{tag} offered", row.partner),
            values: f64s(&off),
            color: c.clone(),
            width: 1.5,
            style: Style::Dashed,
        });
        out.push(Series {
            name: format!("{}{tag} delivered", row.partner),
            values: f64s(&del),
            color: c,
            width: if burst { 3.0 } else { 2.0 },
            style: Style::Line,
        });
    }
    if many {
        let n = f.partners.iter().filter(|r| !sim.bursting.contains(&r.partner)).count();
        out.insert(
            0,
            Series {
                name: format!("{n} ordinary partners delivered"),
                values: f64s(&sum_del),
                color: color(0, false),
                width: 2.0,
                style: Style::Line,
            },
        );
        out.insert(
            0,
            Series {
                name: format!("{n} ordinary partners offered"),
                values: f64s(&sum_off),
                color: color(0, false),
                width: 1.5,
                style: Style::Dashed,
            },
        );
    }
    out
}

fn unit(case: &Case) -> &'static str {
    match case.figures.capacity_unit {
        crate::scenario::CapacityUnit::Documents => "documents",
        crate::scenario::CapacityUnit::Records => "records",
    }
}

/// Every chart of the report, as (file stem, SVG).
pub(crate) fn charts(sim: &Simulation) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(case) = sim.cases.first() else { return out };
    let f = &case.figures;
    let n = f.held_backlog.len();
    let t = ticks(n, f.bucket_minutes);
    let th = ticks(f.backend_with.len(), 60);
    let per = format!("documents per {} min", f.bucket_minutes);
    let suffix = if case.label.is_empty() { String::new() } else { format!(" ({})", case.label) };
    out.push((
        "offered-delivered".to_owned(),
        svg::time_chart(
            &format!("Offered and delivered documents per partner{suffix}"),
            &per,
            n,
            &t,
            &partner_series(sim, case),
            None,
        ),
    ));
    out.push((
        "backend".to_owned(),
        svg::time_chart(
            &format!("Backend inbound per hour, with and without Tollgate{suffix}"),
            &format!("{} per hour", unit(case)),
            f.backend_with.len(),
            &th,
            &[
                Series {
                    name: "without Tollgate".into(),
                    values: f64s(&f.backend_without),
                    color: color(0, true),
                    width: 1.5,
                    style: Style::Line,
                },
                Series {
                    name: "with Tollgate".into(),
                    values: f64s(&f.backend_with),
                    color: color(0, false),
                    width: 2.5,
                    style: Style::Line,
                },
            ],
            Some((f.capacity_per_hour as f64, "backend capacity".into())),
        ),
    ));
    out.push((
        "held".to_owned(),
        svg::time_chart(
            &format!("Held backlog, and releases{suffix}"),
            "documents",
            n,
            &t,
            &[
                Series {
                    name: format!("released per {} min", f.bucket_minutes),
                    values: f64s(&f.released),
                    color: color(1, false),
                    width: 1.0,
                    style: Style::Bars,
                },
                Series {
                    name: "held".into(),
                    values: f64s(&f.held_backlog),
                    color: color(1, true),
                    width: 2.5,
                    style: Style::Line,
                },
            ],
            None,
        ),
    ));
    let bars: Vec<(String, f64)> =
        f.delay.histogram.iter().map(|(l, c)| (l.clone(), *c as f64)).collect();
    out.push((
        "delay".to_owned(),
        svg::bar_chart(
            &format!("Added delay of partners that never burst{suffix}"),
            "documents",
            &bars,
            &color(0, false),
        ),
    ));
    if sim.cases.len() > 1 {
        let line = |name: &str, pick: &dyn Fn(&Case) -> Vec<u64>| -> Vec<Series> {
            sim.cases
                .iter()
                .enumerate()
                .map(|(i, c)| Series {
                    name: format!("{name} {}", c.label),
                    values: f64s(&pick(c)),
                    color: color(i, i % 2 == 1),
                    width: 2.0,
                    style: Style::Line,
                })
                .collect()
        };
        out.push((
            "sweep-backend".to_owned(),
            svg::time_chart(
                "Backend inbound per hour, per value",
                &format!("{} per hour", unit(case)),
                f.backend_with.len(),
                &th,
                &line("", &|c| c.figures.backend_with.clone()),
                Some((f.capacity_per_hour as f64, "backend capacity".into())),
            ),
        ));
        out.push((
            "sweep-held".to_owned(),
            svg::time_chart(
                "Held backlog, per value",
                "documents",
                n,
                &t,
                &line("", &|c| c.figures.held_backlog.clone()),
                None,
            ),
        ));
        let points: Vec<(f64, f64, String)> = sim
            .cases
            .iter()
            .map(|c| (c.figures.peak_with as f64, c.figures.ordinary_held as f64, c.label.clone()))
            .collect();
        out.push((
            "tradeoff".to_owned(),
            svg::scatter(
                "Trade-off: ordinary partners' documents held against backend peak load",
                &format!("backend peak, {} per hour", unit(case)),
                "ordinary documents held",
                &points,
            ),
        ));
    }
    // All charts stacked in one picture (for a README or a slide).
    let mut all = String::new();
    let h = 330 * out.len();
    let _ = write!(
        all,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 880 {h}" width="880" height="{h}">"#
    );
    for (i, (_, s)) in out.iter().enumerate() {
        let _ = write!(all, r#"<g transform="translate(0 {})">{s}</g>"#, 330 * i);
    }
    all.push_str("</svg>\n");
    out.push(("report".to_owned(), all));
    out
}

fn duration(s: u64) -> String {
    match s {
        0 => "-".to_owned(),
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{:.1} h", s as f64 / 3600.0),
    }
}

fn table(out: &mut String, sim: &Simulation, case: &Case) {
    out.push_str("<table><thead><tr><th>Partner</th><th>Offered</th><th>Delivered</th><th>Held at the end</th><th>Ever held</th><th>Longest hold</th><th>Duplicates removed</th><th>Rejected</th></tr></thead><tbody>");
    let f = &case.figures;
    for r in f.partners.iter().chain(std::iter::once(&f.total)) {
        let class = if r.partner == "all" {
            " class=\"total\""
        } else if sim.bursting.contains(&r.partner) {
            " class=\"burst\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.partner),
            grouped(r.offered),
            grouped(r.delivered),
            grouped(r.held),
            grouped(r.ever_held),
            duration(r.longest_hold_s),
            grouped(r.duplicates),
            grouped(r.rejected)
        );
    }
    out.push_str("</tbody></table>");
}

/// The HTML page.
pub(crate) fn html(sim: &Simulation, charts: &[(String, String)]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{t} — Tollgate simulation</title><style>body{{font-family:Helvetica,Arial,sans-serif;color:#222;max-width:920px;margin:24px auto;padding:0 16px;line-height:1.45}}h1{{font-size:24px;margin-bottom:4px}}h2{{font-size:18px;margin-top:32px}}.meta{{color:#666}}table{{border-collapse:collapse;margin:12px 0;font-size:14px}}th,td{{border-bottom:1px solid #ddd;padding:4px 10px;text-align:right}}th:first-child,td:first-child{{text-align:left}}tr.burst td{{color:#b3261e;font-weight:bold}}tr.total td{{border-top:2px solid #333;font-weight:bold}}.kpi{{display:flex;gap:12px;flex-wrap:wrap}}.kpi div{{background:#f4f6f8;border-radius:6px;padding:10px 14px}}.kpi b{{display:block;font-size:22px}}svg{{max-width:100%;height:auto}}</style></head><body>"#,
        t = esc(&sim.name)
    );
    let _ = write!(
        o,
        "<h1>{}</h1><p class=\"meta\">Simulated {:.0} hours from {} with seed {}. The real gateway pipeline and quota engine ran on a virtual clock.</p>",
        esc(&sim.name),
        sim.hours,
        esc(&sim.start),
        sim.seed
    );
    for note in &sim.notes {
        let _ = write!(o, "<p class=\"meta\">Note: {}.</p>", esc(note));
    }
    for case in &sim.cases {
        let f = &case.figures;
        if !case.label.is_empty() {
            let _ = write!(o, "<h2>{}</h2>", esc(&case.label));
        }
        let limits: Vec<String> =
            case.limits.iter().map(|(r, l, i, u)| format!("{} {l} per {i} {u}", esc(r))).collect();
        let _ = write!(o, "<p><strong>{}</strong></p>", esc(&f.end_state()));
        let _ = write!(o, "<p>Limits: {}.</p>", limits.join("; "));
        let _ = write!(
            o,
            "<div class=\"kpi\"><div><b>{}</b>backend peak per hour with Tollgate</div><div><b>{}</b>without</div><div><b>{}</b>hours over capacity ({}) with, {} without</div><div><b>{}</b>documents of partners that never burst held</div></div>",
            grouped(f.peak_with),
            grouped(f.peak_without),
            grouped(f.hours_over_with),
            grouped(f.capacity_per_hour),
            grouped(f.hours_over_without),
            grouped(f.ordinary_held)
        );
        table(&mut o, sim, case);
        let d = &f.delay;
        let _ = write!(
            o,
            "<p>Partners that never burst: {} documents delivered, added delay median {} ms, 99th percentile {} ms, longest {} ms.</p>",
            grouped(d.count),
            grouped(d.p50_ms.unsigned_abs()),
            grouped(d.p99_ms.unsigned_abs()),
            grouped(d.max_ms.unsigned_abs())
        );
    }
    for (name, svg) in charts.iter().filter(|(n, _)| n != "report") {
        let _ = write!(o, "<figure id=\"{}\">{svg}</figure>", esc(name));
    }
    o.push_str("<p class=\"meta\">Every figure on this page is in report.json beside it.</p></body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_of_hours_gets_at_most_twelve_day_labels() {
        let t = ticks(30 * 24, 60);
        assert!(t.len() <= MAX_TICKS && t.len() >= 8, "{t:?}");
        assert_eq!(t[0].1, "day 1");
        assert_eq!(ticks(96, 60).len(), 9, "4 days: every 12 h");
    }
}
