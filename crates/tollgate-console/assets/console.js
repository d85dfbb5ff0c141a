// The Tollgate console's script: fills the static pages from Tollgate's own HTTP API
// (/v1/* and /ui/api/*), with the same credentials as any client: the session cookie plus
// its CSRF token in X-CSRF-Token.
//
// Rule kept throughout: text from the server (metering ids, sender ids, reasons, ...) is only
// ever put into the page as text (text nodes, textContent, attribute values), never parsed as
// markup.
"use strict";

let session = null;

// ---- helpers -------------------------------------------------------------------------------

// An element with attributes and children; strings become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// ---- numbers, sizes, times and tables for people -----------------------------------------

const NUMBER = new Intl.NumberFormat("en-US");

// A count with thousands separators ("1,000"); "—" when there is none.
function num(n) {
  if (n === null || n === undefined || n === "") return "—";
  const v = Number(n);
  return Number.isFinite(v) ? NUMBER.format(v) : String(n);
}

// A size in bytes for people: "512 bytes", "3.0 MiB".
function bytes(n) {
  const v = Number(n);
  if (!Number.isFinite(v)) return String(n);
  if (Math.abs(v) < 1024) return num(v) + (v === 1 ? " byte" : " bytes");
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let x = v / 1024, i = 0;
  while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) +
    " " + units[i];
}

const ZONE_KEY = "tollgate.zone";

// The zone times are shown in: "utc" (the default: quota windows are UTC) or "local", as
// chosen in the header and kept in this browser.
function zone() {
  try { return localStorage.getItem(ZONE_KEY) === "local" ? "local" : "utc"; } catch (_) { return "utc"; }
}

const STAMPS = {};
function stampParts(d) {
  const z = zone();
  STAMPS[z] = STAMPS[z] || new Intl.DateTimeFormat("en-US", {
    timeZone: z === "utc" ? "UTC" : undefined, year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  });
  return Object.fromEntries(STAMPS[z].formatToParts(d).map((p) => [p.type, p.value]));
}

// An absolute time with its zone: "2026-02-12 04:13:23 UTC" (or the local zone's name).
function stamp(t) {
  const d = t instanceof Date ? t : new Date(t);
  if (isNaN(d)) return String(t);
  const p = stampParts(d);
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

// The time of day with its zone: "04:13:23 UTC".
function clock(t) {
  const d = t instanceof Date ? t : new Date(t);
  if (isNaN(d)) return String(t);
  const p = stampParts(d);
  return `${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

// How far `t` is from now, for people: "just now", "3 min ago", "in 2 h", "5 d ago".
function ago(t) {
  const ms = (t instanceof Date ? t : new Date(t)).getTime() - Date.now();
  if (isNaN(ms)) return "";
  const s = Math.abs(ms) / 1000;
  if (s < 45) return ms < 0 ? "just now" : "in a moment";
  const m = Math.round(s / 60), h = Math.round(s / 3600), d = Math.round(s / 86400);
  const text = m < 60 ? `${m} min` : h < 48 ? `${h} h` : `${num(d)} d`;
  return ms < 0 ? text + " ago" : "in " + text;
}

// A time as text: absolute with its zone, then relative ("2026-02-12 04:13:23 UTC, 3 min ago").
function when(text) {
  if (!text) return "";
  const t = new Date(text);
  return isNaN(t) ? String(text) : stamp(t) + ", " + ago(t);
}

// The parts of a time element: the absolute time (kept on one line), then how long ago.
function timeParts(t) {
  return [el("span", { class: "stamp" }, stamp(t)), ", ", el("span", { class: "ago" }, ago(t))];
}

// A time as an element that follows the zone chosen and stays current (see `initZone`); its
// text is `when`'s.
function timeEl(text) {
  if (!text) return "";
  const t = new Date(text);
  if (isNaN(t)) return String(text);
  return el("time", { datetime: t.toISOString(), "data-at": t.toISOString() }, ...timeParts(t));
}

// Writes every time on the page again (after a zone change, and every 30 s).
function refreshTimes() {
  for (const t of document.querySelectorAll("time[data-at]")) {
    t.replaceChildren(...timeParts(new Date(t.dataset.at)));
  }
}

// The header's zone choice: kept in this browser; a change rewrites every time shown.
function initZone() {
  const sel = $("zone");
  if (!sel) return;
  let local = "";
  try { local = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (_) { /* none */ }
  sel.options[1].textContent = local ? `local time (${local})` : "local time";
  sel.value = zone();
  sel.addEventListener("change", () => {
    try { localStorage.setItem(ZONE_KEY, sel.value); } catch (_) { /* private mode */ }
    refreshTimes();
    document.dispatchEvent(new Event("zonechange"));
  });
  setInterval(refreshTimes, 30000);
}

// Puts `rows` in `table`'s body, each cell with its column's classes (from the header: which
// columns a phone hides, which need a role), or, with no rows, the sentence `empty` below.
function fill(table, rows, empty) {
  const heads = table.tHead ? [...table.tHead.rows[0].cells] : [];
  for (const r of rows) {
    [...r.cells].forEach((c, i) => {
      if (heads[i] && heads[i].classList.length) c.classList.add(...heads[i].classList);
    });
  }
  table.tBodies[0].replaceChildren(...rows);
  const foot = table.tFoot || table.createTFoot();
  foot.replaceChildren();
  if (!rows.length && empty) {
    foot.append(el("tr", { class: "empty" }, el("td", { colspan: heads.length || 1 }, empty)));
  }
}

// What an empty queue page says, from its filters.
function queueEmpty(state, partner) {
  return `No ${state ? state + " " : ""}items` +
    (partner ? ` for partners whose name holds "${partner}"` : "") + " on this page.";
}

// The partner a partner page is about (`?name=` or `?partner=`).
function partnerParam() {
  const q = new URLSearchParams(location.search);
  return q.get("name") || q.get("partner") || "";
}

// On a partner page: when nothing is known of the partner, one sentence instead of empty
// sections.
function partnerKnown(name, known) {
  const note = $("partner-unknown");
  for (const s of document.querySelectorAll("main section")) s.hidden = !known;
  note.hidden = known;
  if (known) return;
  note.replaceChildren(name
    ? `No traffic and no queue item is known for partner "${name}": no counter in a current ` +
      "window and no interchange in the queue. Check the name, or "
    : "No partner named. Pick one on ", el("a", { href: "/ui/" }, "the overview"), ".");
}

const $ = (id) => document.getElementById(id);

function status(text, isError) {
  const s = $("status");
  if (!s) return;
  s.textContent = text || "";
  s.classList.toggle("error", !!isError);
}

// A call to the API, with `extra` request headers if given; a 401 sends the browser to the
// login page.
async function api(method, path, body, extra) {
  const headers = { Accept: "application/json", ...(extra || {}) };
  if (session && session.csrf) headers["X-CSRF-Token"] = session.csrf;
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401 && document.body.dataset.page !== "login") {
    location.assign("/ui/login?next=" + encodeURIComponent(location.pathname + location.search));
    throw new Error("not logged in");
  }
  return res;
}

// The body of a problem+json answer, as one line of text.
async function problemText(res) {
  try {
    const p = await res.json();
    return (p.title || "Error") + (p.detail ? ": " + p.detail : "") + " (" + res.status + ")";
  } catch (_) {
    return "HTTP " + res.status;
  }
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "rolling";
  if (seconds <= 0) return "now";
  const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  if (d) return d + " d " + h + " h";
  if (h) return h + " h " + m + " min";
  if (m) return m + " min " + s + " s";
  return s + " s";
}

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
  const legend = el("ul", { class: "legend" }, ...SERIES.map(([k], i) =>
    el("li", { class: k }, el("span", { class: "swatch " + k }), totals[i])));
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

// ---- start ---------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", async () => {
  const page = document.body.dataset.page;
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page");
  }
  if (page === "login") return initLogin();
  initZone();
  if (page === "notfound") return initNotFound();
  const res = await fetch("/ui/api/session", { credentials: "same-origin" });
  if (res.status === 401) {
    location.replace("/ui/login?next=" + encodeURIComponent(location.pathname + location.search));
    return;
  }
  if (!res.ok) {
    status(await problemText(res), true);
    return;
  }
  showSession(await res.json());
  const init = { overview: initOverview, partner: initPartner, queue: initQueue,
    limits: initLimits, health: initHealth, audit: initAudit }[page];
  if (init) init().catch((e) => status(String(e.message || e), true));
});

// Shows who is logged in, the navigation, and what the role may do.
function showSession(s) {
  session = s;
  $("who").textContent = session.open ? "open on loopback (no credentials configured)"
    : `${session.name} (${session.role})`;
  if (!session.open) {
    const out = $("logout");
    out.hidden = false;
    out.addEventListener("click", logout);
  }
  document.body.classList.toggle("may-queue", !!session.may.queue);
  document.body.classList.toggle("may-limits", !!session.may.limits);
  $("nav").hidden = false;
  $("who-box").hidden = false;
}

// The "page not found" page: names the path; shows the navigation only to a session.
async function initNotFound() {
  $("nf-path").textContent = location.pathname;
  const res = await fetch("/ui/api/session", { credentials: "same-origin" });
  if (res.ok) showSession(await res.json());
}

async function logout() {
  const res = await api("POST", "/ui/logout");
  if (res.ok) location.assign("/ui/login");
  else status(await problemText(res), true);
}

// ---- login ---------------------------------------------------------------------------------

async function initLogin() {
  const next = new URLSearchParams(location.search).get("next") || "/ui/";
  const target = /^\/ui\/[^/]?/.test(next) && !next.startsWith("//") ? next : "/ui/";
  const res = await fetch("/ui/api/session", { credentials: "same-origin" });
  if (res.ok) {
    location.replace(target);
    return;
  }
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("login-error").textContent = "";
    const r = await fetch("/ui/login", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ token: $("token").value }),
    });
    if (r.ok) {
      $("token").value = "";
      location.assign(target);
    } else {
      $("login-error").textContent = await problemText(r);
      $("token").focus();
    }
  });
}

// ---- overview ------------------------------------------------------------------------------

const POLL_MS = 1000;
const SPARK_MS = 60000;
const BURST_MS = 10000;

// The "bursting now" table: held, surging, near and silent ids, worst first.
async function bursting() {
  const res = await api("GET", "/ui/api/bursting");
  if (!res.ok) return;
  const list = await res.json();
  const n = (x) => num(x || 0);
  const rows = list.slice(0, 20).map((b) => {
    const why = b.held_units ? `${n(b.held)} held (${n(b.held_units)} units)`
      : b.silent ? "silent for 24 h" : b.state === "exceeded" ? "limit reached" : "rising";
    const rate = b.ratio === null ? `${n(b.last_hour)} in the last hour`
      : `${n(b.last_hour)} in the last hour, ${b.ratio.toFixed(1)} × usual`;
    return el("tr", { "data-id": b.metering_id, class: "severity-" + b.severity },
      el("td", {}, el("a", { href: "/ui/partner?name=" + encodeURIComponent(b.partner) }, b.partner)),
      el("td", {}, b.route),
      el("td", {}, why),
      el("td", {}, b.held_since ? when(b.held_since) : "—"),
      el("td", {}, rate),
      el("td", {}, b.drain_s === null ? "—" : duration(b.drain_s)));
  });
  $("bursting").tBodies[0].replaceChildren(...rows);
  $("bursting-empty").hidden = rows.length > 0;
}

async function initOverview() {
  let page = 1;
  const sparks = new Map(); // metering id -> {at, node}
  const query = () => {
    const p = new URLSearchParams();
    p.set("page", page);
    p.set("sort", $("f-sort").value);
    if ($("f-desc").checked) p.set("desc", "true");
    if ($("f-partner").value) p.set("partner", $("f-partner").value);
    if ($("f-route").value) p.set("route", $("f-route").value);
    if ($("f-state").value) p.set("state", $("f-state").value);
    return p.toString();
  };
  const spark = (id) => {
    let s = sparks.get(id);
    if (!s || Date.now() - s.at > SPARK_MS) {
      const holder = el("span", { class: "spark" });
      holder.append(chart([], 24, 120, 24, "no history"));
      s = { at: Date.now(), node: holder };
      sparks.set(id, s);
      usage(id, 24).then((u) => {
        holder.replaceChildren(chart(u.buckets, 24, 120, 24,
          u.missing ? "no history" : "last 24 hours"));
      });
    }
    return s.node;
  };
  const refresh = async () => {
    const res = await api("GET", "/ui/api/overview?" + query());
    if (!res.ok) {
      status(await problemText(res), true);
      return;
    }
    const data = await res.json();
    const routeSel = $("f-route");
    const have = new Set([...routeSel.options].map((o) => o.value));
    for (const r of data.routes) if (!have.has(r)) routeSel.append(el("option", { value: r }, r));
    const rows = data.rows.map((r) => {
      const pct = r.limit ? Math.round((r.used * 100) / Math.max(r.limit, 1)) : null;
      const bar = r.limit !== null
        ? el("meter", { min: 0, max: Math.max(r.limit, 1), low: r.limit * 0.8, high: r.limit,
          optimum: 0, value: Math.min(r.used, r.limit), title: pct + " %" })
        : null;
      const partner = el("a", { href: "/ui/partner?name=" + encodeURIComponent(r.partner) },
        r.partner);
      return el("tr", { "data-id": r.metering_id, class: "state-" + r.state },
        el("td", { class: "id" }, r.metering_id),
        el("td", {}, partner),
        el("td", {}, r.route),
        el("td", { class: "used" }, bar, " ",
          el("span", { class: "num" }, num(r.used) + " / " + num(r.limit)),
          r.limit_source ? el("span", { class: "source", title: "the limit in force is the " +
            r.limit_source + "'s" }, " (" + r.limit_source + ")") : null),
        el("td", {}, duration(r.resets_in_s)),
        el("td", {}, el("span", { class: "badge " + r.state },
          r.state === "shadow" ? "shadow would-reject" : r.state)),
        el("td", { class: "held" }, r.held ? el("a", { href: "/ui/queue?state=held&partner=" +
          encodeURIComponent(r.partner) + "&route=" + encodeURIComponent(r.route),
          title: `${num(r.held_units)} units held` }, num(r.held)) : "0"),
        el("td", {}, spark(r.metering_id)));
    });
    fill($("overview"), rows, "No metering id to show: none has a counter in its current window, " +
      "or none matches these filters.");
    $("summary").textContent = `${num(data.total)} metering ids` +
      (data.total ? `, ${num(data.rows.length)} shown` : "") + `; updated ${clock(new Date())}`;
    $("pageinfo").textContent = `Page ${num(data.page)} of ${num(data.pages)}`;
    page = data.page;
    $("prev").disabled = data.page <= 1;
    $("next").disabled = data.page >= data.pages;
    status("");
  };
  let timer = null;
  let burstAt = 0;
  // Refreshes only while the page is visible; a hidden tab costs the server nothing.
  const loop = async () => {
    clearTimeout(timer);
    if (document.hidden) return;
    try {
      await refresh();
      if (Date.now() - burstAt > BURST_MS) {
        burstAt = Date.now();
        await bursting();
      }
    } catch (e) {
      status("cannot reach the server: " + (e.message || e), true);
    }
    timer = setTimeout(loop, POLL_MS);
  };
  document.addEventListener("visibilitychange", () => { if (!document.hidden) loop(); });
  $("filters").addEventListener("input", () => { page = 1; loop(); });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("prev").addEventListener("click", () => { page -= 1; loop(); });
  $("next").addEventListener("click", () => { page += 1; loop(); });
  await loop();
}

// ---- partner -------------------------------------------------------------------------------

async function initPartner() {
  const name = partnerParam();
  $("title").textContent = "Partner " + name;
  document.title = "Partner " + name + " · Tollgate console";
  const res = await api("GET", "/ui/api/overview?per_page=500&partner=" + encodeURIComponent(name));
  if (!res.ok) {
    status(await problemText(res), true);
    return;
  }
  const rows = (await res.json()).rows.filter((r) => r.partner === name);
  const box = $("partner-routes");
  if (!rows.length) box.append(el("p", {}, "No counters for this partner in their current windows."));
  const ranges = { "1h": 1, "24h": 24, "7d": 168 };
  const draw = [];
  for (const r of rows) {
    const fig = el("figure", { class: "route-chart" });
    const cap = el("figcaption", {}, el("strong", {}, r.route || r.metering_id), " — ",
      r.metering_id, ": ", `${num(r.used)} / ${num(r.limit)} used, ${r.state}` +
      (r.held ? `, ${num(r.held)} held (${num(r.held_units)} units)` : ""));
    fig.append(cap);
    const holder = el("div", { class: "chart-holder" }, "loading…");
    fig.append(holder);
    box.append(fig);
    draw.push(async (fromMs, toMs) => {
      const u = await usage(r.metering_id, (toMs - fromMs) / 3600e3, toMs);
      holder.replaceChildren(trafficChart(u.buckets, fromMs, toMs, 720, 180),
        el("p", { class: "note" }, u.missing ? "No usage history kept for this id yet."
          : "Units per slot (UTC): admitted above the line; refused, held and duplicate below."));
    });
  }
  const redraw = () => {
    const pick = $("range").value;
    let toMs = Date.now(), fromMs = toMs - (ranges[pick] || 24) * 3600e3;
    $("custom-range").hidden = pick !== "custom";
    if (pick === "custom") {
      const f = Date.parse($("range-from").value + "Z"), t = Date.parse($("range-to").value + "Z");
      if (isNaN(f) || isNaN(t) || f >= t) return;
      fromMs = f;
      toMs = t;
    }
    for (const d of draw) d(fromMs, toMs);
  };
  $("range-form").addEventListener("input", redraw);
  $("range-form").addEventListener("submit", (e) => e.preventDefault());
  redraw();
  // Recent interchanges: the partner's items of the last 24 hours, newest first (the
  // server filters; the total says how many there are in all).
  const since = new Date(Date.now() - 24 * 3600e3).toISOString();
  const q = await api("GET", "/v1/queue?limit=1000&partner=" + encodeURIComponent(name) +
    "&from=" + encodeURIComponent(since));
  const found = q.ok ? await q.json() : [];
  const all = q.ok ? Number(q.headers.get("X-Total-Count")) || 0 : 0;
  $("recent-total").textContent = all
    ? `${num(all)} interchange${all === 1 ? "" : "s"} in the last 24 hours` +
      (all > 1000 ? "; the first 1,000 are read, the newest 50 shown." : "")
    : "No interchange from this partner in the last 24 hours.";
  found.reverse();
  const payload = (it) => {
    if (!session.may.payload) return el("td", {}, "—");
    const pre = el("pre", { class: "payload" });
    const box = el("details", {}, el("summary", {}, "Show"), pre);
    box.addEventListener("toggle", async () => {
      if (!box.open || pre.dataset.loaded) return;
      const res = await api("GET", "/v1/queue/" + encodeURIComponent(it.id) + "/payload");
      if (!res.ok) {
        pre.textContent = await problemText(res);
        return;
      }
      pre.dataset.loaded = "1";
      const more = res.headers.get("Tollgate-Payload-Truncated") === "true";
      pre.textContent = (await res.text()) + (more ? "\n… (cut at 64 KiB of " +
        bytes(res.headers.get("Tollgate-Payload-Bytes")) + ")" : "");
    });
    return el("td", {}, box);
  };
  fill($("recent"), found.slice(0, 50).map((it) => el("tr", {},
    el("td", {}, timeEl(it.received_at)), el("td", {}, it.state), el("td", {}, reasonNode(it.reason)),
    el("td", {}, num(it.weight)), el("td", {}, it.sender || ""), el("td", {}, it.receiver || ""),
    el("td", {}, it.control_number || ""), el("td", {}, it.document), el("td", {}, it.route || ""),
    payload(it))), "No interchange of this partner is in the queue.");
  partnerKnown(name, rows.length + found.length > 0);
}

// ---- queue ---------------------------------------------------------------------------------

// Asks in the queue page's dialog; false (and "Nothing done.") unless the operator confirms.
async function confirmed(text) {
  $("confirm-text").textContent = text;
  const dlg = $("confirm");
  const answer = await new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue), { once: true });
    dlg.returnValue = "cancel";
    dlg.showModal();
    $("confirm-cancel").focus();
  });
  if (answer !== "ok") status("Nothing done.");
  return answer === "ok";
}

async function initQueue() {
  let busy = false;
  let cursorUrl = null;
  let nextUrl = null;
  let items = [];
  // The filter as query parameters, as GET /v1/queue and the bulk actions take it.
  const filter = () => {
    const p = new URLSearchParams();
    if ($("q-state").value) p.set("state", $("q-state").value);
    if ($("q-partner").value) p.set("partner", $("q-partner").value);
    if ($("q-route").value) p.set("route", $("q-route").value);
    for (const k of ["from", "to"]) {
      const v = $("q-" + k).value;
      if (v) p.set(k, new Date(v + "Z").toISOString());
    }
    return p;
  };
  const first = () => {
    const p = filter();
    p.set("limit", $("q-limit").value);
    return "/v1/queue?" + p.toString();
  };
  let total = 0;
  const selected = () => [...document.querySelectorAll("#queue tbody input:checked")]
    .map((c) => items.find((i) => i.id === c.value)).filter(Boolean);
  let onFirst = true;
  const load = async (url, later) => {
    cursorUrl = url;
    onFirst = !later;
    const res = await api("GET", url);
    if (!res.ok) {
      status(await problemText(res), true);
      return;
    }
    const all = await res.json();
    const m = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get("Link") || "");
    nextUrl = m ? m[1] : null;
    const checked = new Set(selected().map((i) => i.id));
    items = all;
    total = Number(res.headers.get("X-Total-Count")) || 0;
    if (!items.some((i) => checked.has(i.id))) $("q-all").checked = false;
    fill($("queue"), items.map((it) => el("tr", { "data-id": it.id },
      el("td", {}, el("input", { type: "checkbox", value: it.id, checked: checked.has(it.id),
        "aria-label": "Select " + it.id, class: "pick" })),
      el("td", { class: "id" }, it.id), el("td", {}, it.state), el("td", {}, it.partner),
      el("td", {}, it.sender || ""), el("td", {}, it.receiver || ""),
      el("td", {}, it.control_number || ""), el("td", {}, it.document),
      el("td", {}, it.route || ""), el("td", { class: "num" }, num(it.weight)),
      el("td", {}, timeEl(it.received_at)), el("td", { class: "reason" }, reasonNode(it.reason)))),
      queueEmpty($("q-state").value, $("q-partner").value));
    $("q-next").disabled = !nextUrl;
    $("q-count").textContent = items.length
      ? `${num(total)} item${total === 1 ? "" : "s"} match; ` +
        `${num(items.length)} on this page` : "No items.";
  };
  const given = new URLSearchParams(location.search);
  for (const k of ["state", "partner", "route"]) if (given.has(k)) $("q-" + k).value = given.get(k);
  $("q-actions").hidden = !session.may.queue;
  $("qfilters").addEventListener("input", () => load(first()));
  $("qfilters").addEventListener("submit", (e) => e.preventDefault());
  $("q-first").addEventListener("click", () => load(first()));
  $("q-next").addEventListener("click", () => nextUrl && load(nextUrl, true));
  $("q-all").addEventListener("change", () => {
    for (const c of document.querySelectorAll("#queue tbody input.pick")) c.checked = $("q-all").checked;
  });
  const act = async (op) => {
    if (busy) return;
    busy = true;
    try {
      await perform(op);
    } finally {
      busy = false;
    }
  };
  const perform = async (op) => {
    const picked = selected();
    if (!picked.length) {
      status("Select items first.", true);
      return;
    }
    const records = picked.reduce((a, i) => a + (Number(i.weight) || 0), 0);
    const routes = [...new Set(picked.map((i) => i.route || "no route"))].join(", ");
    const n = `${num(picked.length)} interchange${picked.length === 1 ? "" : "s"} (${num(records)} record${records === 1 ? "" : "s"})`;
    const text = {
      release: `Release ${n} to ${routes} without metering?`,
      retry: `Retry ${n}: meter them again now against ${routes}, and deliver those that fit?`,
      purge: `Purge ${n}: their bytes are deleted and cannot be delivered or recovered?`,
    }[op];
    if (!await confirmed(text)) return;
    let done = 0;
    const errors = [];
    for (const it of picked) {
      const id = encodeURIComponent(it.id);
      const res = op === "purge" ? await api("DELETE", "/v1/queue/" + id)
        : await api("POST", `/v1/queue/${id}/${op}`);
      if (res.ok) done++;
      else errors.push(it.id + ": " + await problemText(res));
    }
    await load(cursorUrl, !onFirst);
    status(`${op}: ${num(done)} of ${num(picked.length)} done` + (errors.length ? "; " + errors.join("; ") : ""),
      errors.length > 0);
  };
  // A bulk action on the whole filter: confirmed with its count, then followed to its end.
  const bulk = async (op) => {
    const p = filter();
    const what = [...p.entries()].map(([k, v]) => `${k} ${v}`).join(", ");
    if (!what) {
      status("Choose a filter first (a state, partner, route or time).", true);
      return;
    }
    const text = op === "purge"
      ? `Purge all ${num(total)} items matching ${what}? Their bytes are deleted and cannot be delivered or recovered.`
      : `Release all ${num(total)} items matching ${what} without metering?`;
    if (!await confirmed(text)) return;
    const res = await api("POST", `/v1/queue/${op}?` + p.toString());
    if (res.status !== 202) {
      status(await problemText(res), true);
      return;
    }
    await follow(res.headers.get("Location"));
  };
  const follow = async (at) => {
    busy = true;
    $("q-job").hidden = false;
    const stop = () => api("DELETE", at);
    $("q-job-stop").addEventListener("click", stop, { once: true });
    try {
      for (;;) {
        const r = await api("GET", at);
        if (!r.ok) {
          status(await problemText(r), true);
          return;
        }
        const job = await r.json();
        $("q-job-progress").max = Math.max(job.total, 1);
        $("q-job-progress").value = job.done + job.skipped;
        $("q-job-text").textContent = `${job.action}: ${num(job.done)} of ` +
          `${num(job.total)} done` +
          (job.skipped ? `, ${num(job.skipped)} skipped` : "") + ` (${job.state})`;
        if (job.state !== "running") {
          status(`${job.action} of the filter ${job.state}: ${num(job.done)} done`,
            job.state === "failed");
          break;
        }
        await new Promise((ok) => setTimeout(ok, 500));
      }
    } finally {
      $("q-job-stop").removeEventListener("click", stop);
      busy = false;
      await load(first());
    }
  };
  $("q-release-all").addEventListener("click", () => bulk("release"));
  $("q-purge-all").addEventListener("click", () => bulk("purge"));
  $("q-retry").addEventListener("click", () => act("retry"));
  $("q-release").addEventListener("click", () => act("release"));
  $("q-purge").addEventListener("click", () => act("purge"));
  await load(first());
  // The page follows the queue: the current page is read again every 2 s (selections kept),
  // except while a confirmation is open or an action runs.
  const poll = async () => {
    if (!busy && !$("confirm").open) {
      // On the first page, the filters are read again (a change shows even without an event).
      const url = onFirst ? first() : cursorUrl;
      try { await load(url, !onFirst); } catch (_) { /* shown on the next try */ }
    }
    setTimeout(poll, 2000);
  };
  setTimeout(poll, 2000);
}

// ---- health --------------------------------------------------------------------------------

function metricValues(text, name) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== " " && rest[0] !== "{") continue;
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    const labels = rest[0] === "{" ? rest.slice(1, rest.indexOf("}")) : "";
    out.push({ labels, value });
  }
  return out;
}

async function initHealth() {
  // Only roles that may send a test notification see the button.
  $("notify").hidden = !session.may.notify;
  $("notify-test").addEventListener("click", () => testNotifications($("notify-test"),
    $("notify-result")));
  const refresh = async () => {
    const res = await api("GET", "/readyz");
    const r = await res.json();
    let metrics = "";
    const m = await api("GET", "/metrics");
    if (m.ok) metrics = await m.text();
    const breakers = metricValues(metrics, "tollgate_gateway_breaker_open");
    const open = breakers.filter((b) => b.value > 0);
    const sum = (n) => metricValues(metrics, n).reduce((a, b) => a + b.value, 0);
    const facts = [
      ["Overall", r.status],
      ["Store", r.store + (r.store_error ? " — degraded: " + r.store_error : " — ok")],
      ["Policies", `${num(r.policies.count)} in force, generation ${num(r.policies.generation)}` +
        (r.policies.source ? ", from " + r.policies.source : "")],
      ["Policy reload error", r.policies.last_error || "none"],
      ["Breakers", breakers.length ? (open.length ? "open: " + open.map((b) => b.labels).join("; ")
        : `${num(breakers.length)} closed`) : "no delivery breaker (no gateway)"],
      ["Spool", metrics.includes("tollgate_gateway_spool_files")
        ? `${num(sum("tollgate_gateway_spool_files"))} files, ${bytes(sum("tollgate_gateway_spool_bytes"))}`
        : "no gateway"],
      ["Queue depth", num(sum("tollgate_gateway_queue_depth"))],
      ["Held", num(sum("tollgate_gateway_held"))],
      ["Restart needed for", (r.restart_needed || []).join(", ") || "nothing"],
      ["Version", session.version],
    ];
    if (r.tls) facts.push(["TLS", r.tls.cert + (r.tls.last_error ? " — " + r.tls.last_error : "")]);
    $("health").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    fill($("checks"), Object.entries(r.checks || {}).map(([k, v]) =>
      el("tr", {}, el("td", {}, k), el("td", {}, v.ok ? "ok" : "failing"), el("td", {}, v.error || ""))),
      "No readiness check is registered.");
  };
  const loop = async () => {
    try { await refresh(); status(""); } catch (e) { status(String(e.message || e), true); }
    setTimeout(loop, 2000);
  };
  await loop();
}

// Sends a test notification to every channel and shows, as text, what each one answered.
async function testNotifications(button, out) {
  button.disabled = true;
  out.textContent = "Sending…";
  try {
    const res = await api("POST", "/v1/notify/test");
    if (!res.ok) {
      out.textContent = await problemText(res);
      return;
    }
    const channels = (await res.json()).channels || [];
    out.textContent = channels.length ? channels.map((h) => `${h.name} (${h.target}): ` +
      (h.ok ? "delivered" + (h.status ? `, HTTP ${h.status}` : "") : `failed: ${h.error}`) +
      `, ${h.elapsed_ms} ms`).join("\n")
      : "No channel is configured: add [[notify.webhook]] or [notify.smtp] to the config file.";
  } catch (e) {
    out.textContent = String(e.message || e);
  } finally {
    button.disabled = false;
  }
}
