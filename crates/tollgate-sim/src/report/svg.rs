//! Charts as SVG text, written by hand: no fonts read, no assets, nothing random, so the same
//! figures always give the same bytes. Text from partners is escaped.

use std::fmt::Write;

/// Chart width and height in SVG units.
const W: f64 = 880.0;
const H: f64 = 330.0;
/// Plot area margins: left, right, top, bottom.
const ML: f64 = 64.0;
const MR: f64 = 180.0;
const MT: f64 = 34.0;
const MB: f64 = 40.0;

/// Escapes text for SVG and HTML.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// A line.
    Line,
    /// A dashed line.
    Dashed,
    /// Vertical bars.
    Bars,
}

/// One series of a time chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend text.
    pub name: String,
    /// One value per bucket.
    pub values: Vec<f64>,
    /// CSS colour.
    pub color: String,
    /// Line width.
    pub width: f64,
    /// How it is drawn.
    pub style: Style,
}

/// A distinct colour per index (and a brighter set for highlighted series).
pub(crate) fn color(i: usize, highlight: bool) -> String {
    const CALM: [&str; 8] =
        ["#4e79a7", "#59a14f", "#76b7b2", "#9c755f", "#bab0ac", "#8cd17d", "#499894", "#86bcb6"];
    const HOT: [&str; 4] = ["#e15759", "#f28e2b", "#b07aa1", "#edc948"];
    if highlight { HOT[i % HOT.len()].to_owned() } else { CALM[i % CALM.len()].to_owned() }
}

fn num(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A round upper bound for an axis.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

fn open(out: &mut String, title: &str, y_label: &str) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="Helvetica, Arial, sans-serif" font-size="12" role="img" aria-label="{t}"><rect width="{W}" height="{H}" fill="#ffffff"/><text x="{ML}" y="20" font-size="15" font-weight="bold" fill="#222">{t}</text><text x="14" y="{ym}" transform="rotate(-90 14 {ym})" text-anchor="middle" fill="#555">{y}</text>"##,
        t = esc(title),
        y = esc(y_label),
        ym = MT + (H - MT - MB) / 2.0
    );
}

fn y_axis(out: &mut String, max: f64) {
    let ph = H - MT - MB;
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        let y = MT + ph - ph * f64::from(k) / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{ML}" y1="{y:.1}" x2="{x2}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{tx}" y="{ty:.1}" text-anchor="end" fill="#555">{v}</text>"##,
            x2 = W - MR,
            tx = ML - 6.0,
            ty = y + 4.0,
            v = num(v)
        );
    }
}

fn legend(out: &mut String, items: &[(String, String, Style)]) {
    for (i, (name, color, style)) in items.iter().enumerate() {
        let y = MT + 8.0 + 18.0 * i as f64;
        let x = W - MR + 14.0;
        let dash = if *style == Style::Dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{y}" x2="{x2}" y2="{y}" stroke="{color}" stroke-width="3"{dash}/><text x="{tx}" y="{ty}" fill="#333">{n}</text>"##,
            x2 = x + 22.0,
            tx = x + 28.0,
            ty = y + 4.0,
            n = esc(name)
        );
    }
}

/// A chart over time: `n` buckets labelled by `x_label` at the ticks `ticks` gives, with an
/// optional horizontal reference line (value, label).
pub(crate) fn time_chart(
    title: &str,
    y_label: &str,
    n: usize,
    ticks: &[(usize, String)],
    series: &[Series],
    reference: Option<(f64, String)>,
) -> String {
    let mut out = String::new();
    open(&mut out, title, y_label);
    let top = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .chain(reference.as_ref().map(|r| r.0))
        .fold(0.0, f64::max);
    let max = nice_max(top * 1.05);
    y_axis(&mut out, max);
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let n = n.max(1);
    let step = pw / n as f64;
    let x = |i: f64| ML + step * i;
    let y = |v: f64| MT + ph - ph * (v / max).clamp(0.0, 1.0);
    for (i, label) in ticks {
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{y2}" stroke="#999"/><text x="{x:.1}" y="{ty}" text-anchor="middle" fill="#555">{l}</text>"##,
            x = x(*i as f64),
            y1 = MT + ph,
            y2 = MT + ph + 5.0,
            ty = MT + ph + 18.0,
            l = esc(label)
        );
    }
    for s in series.iter().filter(|s| s.style == Style::Bars) {
        let _ = write!(out, r#"<g fill="{}" opacity="0.75">"#, s.color);
        for (i, v) in s.values.iter().enumerate().filter(|(_, v)| **v > 0.0) {
            let _ = write!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.2}" height="{:.1}"/>"#,
                x(i as f64),
                y(*v),
                (step * 0.9).max(0.6),
                MT + ph - y(*v)
            );
        }
        out.push_str("</g>");
    }
    for s in series.iter().filter(|s| s.style != Style::Bars) {
        let dash = if s.style == Style::Dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let mut d = String::new();
        for (i, v) in s.values.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if i == 0 { "M" } else { " L" },
                x(i as f64 + 0.5),
                y(*v)
            );
        }
        let _ = write!(
            out,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"{dash}/>"#,
            s.color, s.width
        );
    }
    let mut items: Vec<(String, String, Style)> =
        series.iter().map(|s| (s.name.clone(), s.color.clone(), s.style)).collect();
    if let Some((v, label)) = reference {
        let _ = write!(
            out,
            r##"<line x1="{ML}" y1="{yv:.1}" x2="{x2}" y2="{yv:.1}" stroke="#222" stroke-width="1.5" stroke-dasharray="3 3"/>"##,
            yv = y(v),
            x2 = W - MR
        );
        items.push((label, "#222".into(), Style::Dashed));
    }
    legend(&mut out, &items);
    let _ = write!(
        out,
        r##"<line x1="{ML}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/></svg>"##,
        b = MT + ph,
        r = W - MR
    );
    out
}

/// Vertical bars, one per category.
pub(crate) fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64)], color: &str) -> String {
    let mut out = String::new();
    open(&mut out, title, y_label);
    let max = nice_max(bars.iter().map(|b| b.1).fold(0.0, f64::max) * 1.1);
    y_axis(&mut out, max);
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let slot = pw / bars.len().max(1) as f64;
    for (i, (label, v)) in bars.iter().enumerate() {
        let h = ph * (v / max).clamp(0.0, 1.0);
        let x = ML + slot * i as f64 + slot * 0.15;
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{color}"/><text x="{cx:.1}" y="{vy:.1}" text-anchor="middle" fill="#222">{v}</text><text x="{cx:.1}" y="{ly}" text-anchor="middle" fill="#555">{l}</text>"##,
            y = MT + ph - h,
            w = slot * 0.7,
            cx = x + slot * 0.35,
            vy = MT + ph - h - 4.0,
            v = num(*v),
            ly = MT + ph + 18.0,
            l = esc(label)
        );
    }
    let _ = write!(
        out,
        r##"<line x1="{ML}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/></svg>"##,
        b = MT + ph,
        r = W - MR
    );
    out
}

/// Labelled points joined in order (a trade-off curve).
pub(crate) fn scatter(
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[(f64, f64, String)],
) -> String {
    let mut out = String::new();
    open(&mut out, title, y_label);
    let ymax = nice_max(points.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1);
    let xmax = nice_max(points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.1);
    y_axis(&mut out, ymax);
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let x = |v: f64| ML + pw * (v / xmax).clamp(0.0, 1.0);
    let y = |v: f64| MT + ph - ph * (v / ymax).clamp(0.0, 1.0);
    for k in 0..=4 {
        let v = xmax * f64::from(k) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
            x(v),
            MT + ph + 18.0,
            num(v)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
        ML + pw / 2.0,
        H - 4.0,
        esc(x_label)
    );
    let mut d = String::new();
    for (i, (px, py, _)) in points.iter().enumerate() {
        let _ = write!(d, "{}{:.1} {:.1}", if i == 0 { "M" } else { " L" }, x(*px), y(*py));
    }
    let _ = write!(out, r##"<path d="{d}" fill="none" stroke="#4e79a7" stroke-width="2"/>"##);
    for (px, py, label) in points {
        let _ = write!(
            out,
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="#e15759"/><text x="{tx:.1}" y="{ty:.1}" fill="#222">{l}</text>"##,
            cx = x(*px),
            cy = y(*py),
            tx = x(*px) + 8.0,
            ty = y(*py) - 6.0,
            l = esc(label)
        );
    }
    let _ = write!(
        out,
        r##"<line x1="{ML}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/></svg>"##,
        b = MT + ph,
        r = W - MR
    );
    out
}
