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

/// The x axis's range: from 0, or, when the values sit far from it, from a round value below
/// the smallest, so close points are told apart.
fn x_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || hi <= 0.0 {
        return (0.0, 1.0);
    }
    if lo < hi * 0.5 {
        return (0.0, nice_max(hi * 1.1));
    }
    let span = nice_max((hi - lo).max(hi * 0.05) * 1.4);
    let start = ((lo - span * 0.2) / (span / 4.0)).floor() * (span / 4.0);
    (start.max(0.0), start.max(0.0) + span)
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

/// How values map to heights: linear, or logarithmic (`log10(1 + v)`) when bursts dwarf the
/// ordinary values, so both stay readable on one axis.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear { max: f64 },
    Log { max: f64 },
}

impl Scale {
    /// Logarithmic when the top value is more than 20 times the median of the positive ones
    /// (and above 100): a burst would otherwise flatten everything else onto zero.
    fn for_values(values: impl Iterator<Item = f64>) -> Self {
        let mut positive: Vec<f64> = values.filter(|v| *v > 0.0).collect();
        positive.sort_by(f64::total_cmp);
        let top = positive.last().copied().unwrap_or(0.0);
        let median = positive.get(positive.len() / 2).copied().unwrap_or(0.0);
        if top > 100.0 && top > 20.0 * median {
            Self::Log { max: 10f64.powf((top * 1.05).log10().ceil()) }
        } else {
            Self::Linear { max: nice_max(top * 1.05) }
        }
    }

    /// The share of the plot's height `v` reaches, 0 to 1.
    fn share(self, v: f64) -> f64 {
        match self {
            Self::Linear { max } => (v / max).clamp(0.0, 1.0),
            Self::Log { max } => ((1.0 + v.max(0.0)).log10() / (1.0 + max).log10()).clamp(0.0, 1.0),
        }
    }

    /// The values the axis labels.
    fn ticks(self) -> Vec<f64> {
        match self {
            Self::Linear { max } => (0..=4).map(|k| max * f64::from(k) / 4.0).collect(),
            Self::Log { max } => {
                // 1 sits too close to 0 to label both: the powers of ten start at 10.
                let mut t = vec![0.0];
                let mut v = 10.0;
                while v <= max {
                    t.push(v);
                    v *= 10.0;
                }
                t
            }
        }
    }

    /// Said after the axis's label.
    fn note(self) -> &'static str {
        match self {
            Self::Linear { .. } => "",
            Self::Log { .. } => " (log scale)",
        }
    }
}

fn y_axis(out: &mut String, scale: Scale) {
    let ph = H - MT - MB;
    for v in scale.ticks() {
        let y = MT + ph - ph * scale.share(v);
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

/// The most characters of a legend line that fit beside the plot.
const LEGEND_CHARS: usize = 20;

/// A legend name in at most two lines of [`LEGEND_CHARS`], cut at a space when it can be,
/// with an ellipsis when even two lines are too short.
fn legend_lines(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= LEGEND_CHARS {
        return vec![name.to_owned()];
    }
    let cut = chars[..=LEGEND_CHARS].iter().rposition(|c| *c == ' ').filter(|&i| i > 0);
    let (first, rest) = match cut {
        Some(i) => (chars[..i].iter().collect::<String>(), &chars[i + 1..]),
        None => (chars[..LEGEND_CHARS].iter().collect::<String>(), &chars[LEGEND_CHARS..]),
    };
    let second: String = if rest.len() > LEGEND_CHARS {
        rest[..LEGEND_CHARS - 1].iter().chain(['…'].iter()).collect()
    } else {
        rest.iter().collect()
    };
    vec![first, second]
}

fn legend(out: &mut String, items: &[(String, String, Style)]) {
    let mut y = MT + 8.0;
    for (name, color, style) in items {
        let x = W - MR + 14.0;
        let dash = if *style == Style::Dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let lines = legend_lines(name);
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{y}" x2="{x2}" y2="{y}" stroke="{color}" stroke-width="3"{dash}/><text x="{tx}" y="{ty}" fill="#333">"##,
            x2 = x + 22.0,
            tx = x + 28.0,
            ty = y + 4.0,
        );
        for (k, line) in lines.iter().enumerate() {
            let dy = if k == 0 { 0.0 } else { 14.0 };
            let _ = write!(out, r#"<tspan x="{}" dy="{dy}">{}</tspan>"#, x + 28.0, esc(line));
        }
        out.push_str("</text>");
        y += 18.0 + 14.0 * (lines.len() - 1) as f64;
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
    let scale = Scale::for_values(
        series.iter().flat_map(|s| s.values.iter().copied()).chain(reference.as_ref().map(|r| r.0)),
    );
    open(&mut out, title, &format!("{y_label}{}", scale.note()));
    y_axis(&mut out, scale);
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let n = n.max(1);
    let step = pw / n as f64;
    let x = |i: f64| ML + step * i;
    let y = |v: f64| MT + ph - ph * scale.share(v);
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
    y_axis(&mut out, Scale::Linear { max });
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
    let top = points.iter().map(|p| p.1).fold(0.0, f64::max);
    // All at zero: a unit axis, with the points on its floor and a line saying so.
    let ymax = if top > 0.0 { nice_max(top * 1.1) } else { 1.0 };
    let (xlo, xhi) = x_range(points.iter().map(|p| p.0));
    y_axis(&mut out, Scale::Linear { max: ymax });
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let x = |v: f64| ML + pw * ((v - xlo) / (xhi - xlo)).clamp(0.0, 1.0);
    let y = |v: f64| MT + ph - ph * (v / ymax).clamp(0.0, 1.0);
    if top == 0.0 && !points.is_empty() {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{}</text>"##,
            ML + pw / 2.0,
            MT + ph / 2.0,
            esc(&format!("{y_label}: 0 at every value"))
        );
    }
    for k in 0..=4 {
        let v = xlo + (xhi - xlo) * f64::from(k) / 4.0;
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
    // Labels closer than 90 units to the one before step up a line, so none overlaps.
    let mut order: Vec<&(f64, f64, String)> = points.iter().collect();
    order.sort_by(|a, b| x(a.0).total_cmp(&x(b.0)).then(y(a.1).total_cmp(&y(b.1))));
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (px, py, label) in order {
        let (cx, cy) = (x(*px), y(*py));
        let mut ty = cy - 8.0;
        while placed.iter().any(|(lx, ly)| (cx - lx).abs() < 90.0 && (ty - ly).abs() < 14.0) {
            ty -= 14.0;
        }
        placed.push((cx, ty));
        let _ = write!(
            out,
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="#e15759"/><text x="{tx:.1}" y="{ty:.1}" fill="#222">{l}</text>"##,
            tx = cx + 8.0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_switches_to_a_log_scale_that_keeps_ordinary_values_visible() {
        let ordinary = std::iter::repeat_n(40.0, 100);
        let scale = Scale::for_values(ordinary.clone().chain([200_000.0]));
        assert_eq!(scale, Scale::Log { max: 1_000_000.0 });
        assert!(scale.share(40.0) > 0.25, "40 reaches {} of the height", scale.share(40.0));
        assert_eq!(scale.ticks(), [0.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        assert_eq!(Scale::for_values(ordinary.chain([90.0])), Scale::Linear { max: 100.0 });
    }

    #[test]
    fn close_points_get_a_range_of_their_own_and_their_labels_do_not_overlap() {
        let (lo, hi) = x_range([1000.0, 1060.0, 1131.0].into_iter());
        assert!(lo > 800.0 && hi >= 1131.0 && hi - lo < 400.0, "{lo}..{hi}");
        assert_eq!(x_range([10.0, 900.0].into_iter()).0, 0.0);
        let points: Vec<(f64, f64, String)> = [(1000.0, 0.0), (1010.0, 0.0), (1020.0, 0.0)]
            .map(|(x, y)| (x, y, format!("limit {x}")))
            .into();
        let svg = scatter("t", "x", "held", &points);
        let ys: Vec<&str> = svg.split("<text x=").filter(|t| t.contains("limit")).collect();
        assert_eq!(ys.len(), 3);
        let mut label_ys: Vec<String> = ys
            .iter()
            .map(|t| t.split("y=\"").nth(1).unwrap().split('"').next().unwrap().to_owned())
            .collect();
        label_ys.dedup();
        assert_eq!(label_ys.len(), 3, "each label on a line of its own: {label_ys:?}");
        assert!(svg.contains("held: 0 at every value"));
    }

    #[test]
    fn long_legend_names_wrap_instead_of_being_cut() {
        assert_eq!(legend_lines("CarrierXYZ (bursts) offered"), ["CarrierXYZ (bursts)", "offered"]);
        assert_eq!(legend_lines("short"), ["short"]);
        let long = legend_lines(&"x".repeat(50));
        assert_eq!(long[0].chars().count(), LEGEND_CHARS);
        assert!(long[1].ends_with('…') && long[1].chars().count() == LEGEND_CHARS);
    }
}
