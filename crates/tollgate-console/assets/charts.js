// The console's charts: the usage history of one metering id read from `GET /v1/usage`, the
// traffic chart of the partner page (axes, time labels, legend) and the overview's sparklines.
// Part of the one script the console serves (see `pages.rs`).

// The usage history of one metering id (admitted and refused per 5-minute bucket) since
// `hours` ago; an empty list when the server keeps none (404) or the call fails.
async function usage(id, hours, toMs) {
  const to = toMs || Date.now();
  const from = new Date(to - hours * 3600e3).toISOString();
  try {
    const res = await api("GET", "/v1/usage?metering_id=" + encodeURIComponent(id) +
      "&from=" + encodeURIComponent(from) + "&to=" + encodeURIComponent(new Date(to).toISOString()));
    if (!res.ok) return { buckets: [], missing: res.status === 404 };
    const body = await res.json();
    return { buckets: Array.isArray(body.buckets) ? body.buckets : [], missing: false };
  } catch (_) {
    return { buckets: [], missing: true };
  }
}

// The series of the traffic chart: admitted above the axis; refused, held and duplicate
// stacked below it.
const SERIES = [
  ["admitted", 1], ["refused", -1], ["held", -1], ["duplicate", -1],
];

// A traffic chart of one id between `fromMs` and `toMs`: bars per slot, a y axis with its
// scale, time labels on the x axis, and a legend with each series' total.
function trafficChart(buckets, fromMs, toMs, width, height) {
  const left = 56, bottom = 20, top = 8, plotW = width - left - 8, plotH = height - top - bottom;
  const span = Math.max(toMs - fromMs, 1);
  const slots = Math.max(1, Math.min(Math.floor(plotW / 3), Math.ceil(span / 300e3)));
  const sums = Object.fromEntries(SERIES.map(([k]) => [k, new Array(slots).fill(0)]));
  for (const b of buckets) {
    const t = Date.parse(b.start);
    if (isNaN(t) || t < fromMs || t >= toMs) continue;
    const i = Math.min(slots - 1, Math.floor(((t - fromMs) / span) * slots));
    for (const [k] of SERIES) sums[k][i] += Number(b[k]) || 0;
  }
  const up = sums.admitted;
  const down = up.map((_, i) => sums.refused[i] + sums.held[i] + sums.duplicate[i]);
  const maxUp = Math.max(1, ...up), maxDown = Math.max(0, ...down);
  const scale = plotH / (maxUp + maxDown);
  const zero = top + maxUp * scale;
  const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    class: "chart traffic" });
  const title = svg("title");
  const totals = SERIES.map(([k]) => `${num(sums[k].reduce((a, b) => a + b, 0))} ${k}`);
  title.textContent = "Units per slot: " + totals.join(", ");
  s.append(title);
  const text = (x, y, t, cls) => {
    const n = svg("text", { x, y, class: cls || "tick" });
    n.textContent = t;
    return n;
  };
  s.append(svg("line", { x1: left, y1: zero, x2: left + plotW, y2: zero, class: "axis" }));
  s.append(svg("line", { x1: left, y1: top, x2: left, y2: top + plotH, class: "axis" }));
  s.append(text(left - 4, top + 10, num(maxUp), "tick y"));
  s.append(text(left - 4, zero + 4, "0", "tick y"));
  if (maxDown > 0) s.append(text(left - 4, top + plotH, "−" + num(maxDown), "tick y"));
  const w = plotW / slots;
  for (let i = 0; i < slots; i++) {
    const x = left + i * w;
    if (up[i] > 0) s.append(svg("rect", { x, y: zero - up[i] * scale, width: Math.max(w - 0.5, 1),
      height: up[i] * scale, class: "admitted" }));
    let y = zero;
    for (const k of ["refused", "held", "duplicate"]) {
      const h = sums[k][i] * scale;
      if (h > 0) {
        s.append(svg("rect", { x, y, width: Math.max(w - 0.5, 1), height: h, class: k }));
        y += h;
      }
    }
  }
  const ticks = 5;
  for (let j = 0; j <= ticks; j++) {
    const t = fromMs + (span * j) / ticks;
    const d = new Date(t);
    const label = span > 2 * 86400e3
      ? d.toISOString().slice(5, 10) + " " + d.toISOString().slice(11, 16)
      : d.toISOString().slice(11, 16);
    const x = left + (plotW * j) / ticks;
    s.append(svg("line", { x1: x, y1: top + plotH, x2: x, y2: top + plotH + 3, class: "axis" }));
    s.append(text(x, height - 4, label, j === 0 ? "tick x first" : j === ticks ? "tick x last" : "tick x"));
  }
  // Offered: everything the partner sent in the range, whatever became of it.
  const offered = SERIES.reduce((a, [k]) => a + sums[k].reduce((x, y) => x + y, 0), 0);
  const legend = el("ul", { class: "legend" }, el("li", { class: "offered" }, `${num(offered)} offered:`),
    ...SERIES.map(([k], i) => el("li", { class: k }, el("span", { class: "swatch " + k }), totals[i])));
  return el("div", { class: "traffic-chart" }, s, legend);
}

// An SVG chart of admitted (up) and refused (down) units over `hours`, in `slots` columns.
function chart(buckets, hours, width, height, label) {
  const slots = Math.max(1, Math.min(width, Math.round(hours * 12)));
  const admitted = new Array(slots).fill(0), refused = new Array(slots).fill(0);
  const start = Date.now() - hours * 3600e3, span = hours * 3600e3;
  for (const b of buckets) {
    const t = Date.parse(b.start);
    if (isNaN(t) || t < start) continue;
    const i = Math.min(slots - 1, Math.floor(((t - start) / span) * slots));
    admitted[i] += Number(b.admitted) || 0;
    refused[i] += Number(b.refused) || 0;
  }
  const max = Math.max(1, ...admitted, ...refused);
  const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    class: "chart" });
  const title = svg("title");
  const ta = admitted.reduce((a, b) => a + b, 0), tr = refused.reduce((a, b) => a + b, 0);
  title.textContent = `${label}: ${num(ta)} admitted, ${num(tr)} refused`;
  s.append(title);
  const mid = height / 2, w = width / slots;
  s.append(svg("line", { x1: 0, y1: mid, x2: width, y2: mid, class: "axis" }));
  for (let i = 0; i < slots; i++) {
    const ha = (admitted[i] / max) * (mid - 1), hr = (refused[i] / max) * (mid - 1);
    if (ha > 0) s.append(svg("rect", { x: i * w, y: mid - ha, width: Math.max(w, 1), height: ha,
      class: "admitted" }));
    if (hr > 0) s.append(svg("rect", { x: i * w, y: mid, width: Math.max(w, 1), height: hr,
      class: "refused" }));
  }
  return s;
}
