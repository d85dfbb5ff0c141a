// The Tollgate console's script: fills the static pages from Tollgate's own HTTP API
// (/v1/* and /ui/api/*), with the same credentials as any client: the session cookie plus
// its CSRF token in X-CSRF-Token.
//
// Rule kept throughout: text from the server (metering ids, sender ids, reasons, ...) is only
// ever put into the page as text (text nodes, textContent, attribute values), never parsed as
// markup.
//
// This file holds the shared helpers, the start (session, navigation) and the login page; each
// other page's code is in its own file (overview.js, partner.js, queue.js, health.js, limits.js,
// audit.js, with charts.js, reasons.js and policy_diff.js), joined after this one into the one
// script the pages load (see `pages.rs`).
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
