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

function when(text) {
  if (!text) return "";
  const t = new Date(text);
  return isNaN(t) ? String(text) : t.toLocaleString();
}

// The usage history of one metering id (admitted and refused per 5-minute bucket) since
// `hours` ago; an empty list when the server keeps none (404) or the call fails.
async function usage(id, hours) {
  const from = new Date(Date.now() - hours * 3600e3).toISOString();
  try {
    const res = await api("GET", "/v1/usage?metering_id=" + encodeURIComponent(id) +
      "&from=" + encodeURIComponent(from));
    if (!res.ok) return { buckets: [], missing: res.status === 404 };
    const body = await res.json();
    return { buckets: Array.isArray(body.buckets) ? body.buckets : [], missing: false };
  } catch (_) {
    return { buckets: [], missing: true };
  }
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
  title.textContent = `${label}: ${ta} admitted, ${tr} refused`;
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
  const res = await fetch("/ui/api/session", { credentials: "same-origin" });
  if (res.status === 401) {
    location.replace("/ui/login?next=" + encodeURIComponent(location.pathname + location.search));
    return;
  }
  if (!res.ok) {
    status(await problemText(res), true);
    return;
  }
  session = await res.json();
  $("who").textContent = session.open ? "open on loopback (no credentials configured)"
    : `${session.name} (${session.role})`;
  if (!session.open) {
    const out = $("logout");
    out.hidden = false;
    out.addEventListener("click", logout);
  }
  document.body.classList.toggle("may-queue", !!session.may.queue);
  document.body.classList.toggle("may-limits", !!session.may.limits);
  const init = { overview: initOverview, partner: initPartner, queue: initQueue,
    limits: initLimits, health: initHealth, audit: initAudit }[page];
  if (init) init().catch((e) => status(String(e.message || e), true));
});

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

async function heldCounts() {
  // Held items by metering id, from at most 10 pages of the queue.
  const counts = new Map();
  let url = "/v1/queue?state=held&limit=1000";
  for (let i = 0; url && i < 10; i++) {
    const res = await api("GET", url);
    if (!res.ok) break;
    for (const item of await res.json()) {
      const id = item.metering_id || "";
      counts.set(id, (counts.get(id) || 0) + 1);
    }
    const link = res.headers.get("Link") || "";
    const m = /<([^>]+)>;\s*rel="next"/.exec(link);
    url = m ? m[1] : null;
  }
  return counts;
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
  let gateway = true;
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
    let held = new Map();
    if (gateway) {
      try {
        held = await heldCounts();
      } catch (_) {
        gateway = false;
      }
    }
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
          el("span", { class: "num" }, r.used + " / " + (r.limit === null ? "—" : r.limit)),
          r.limit_source ? el("span", { class: "source", title: "the limit in force is the " +
            r.limit_source + "'s" }, " (" + r.limit_source + ")") : null),
        el("td", {}, duration(r.resets_in_s)),
        el("td", {}, el("span", { class: "badge " + r.state },
          r.state === "shadow" ? "shadow would-reject" : r.state)),
        el("td", { class: "held" }, String(held.get(r.metering_id) || 0)),
        el("td", {}, spark(r.metering_id)));
    });
    $("overview").tBodies[0].replaceChildren(...rows);
    $("summary").textContent = `${data.total} metering ids` +
      (data.total ? `, ${data.rows.length} shown` : "") + `; updated ${new Date().toLocaleTimeString()}`;
    $("pageinfo").textContent = `Page ${data.page} of ${data.pages}`;
    page = data.page;
    $("prev").disabled = data.page <= 1;
    $("next").disabled = data.page >= data.pages;
    status("");
  };
  let timer = null;
  const loop = async () => {
    clearTimeout(timer);
    try {
      await refresh();
    } catch (e) {
      status("cannot reach the server: " + (e.message || e), true);
    }
    timer = setTimeout(loop, POLL_MS);
  };
  $("filters").addEventListener("input", () => { page = 1; loop(); });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("prev").addEventListener("click", () => { page -= 1; loop(); });
  $("next").addEventListener("click", () => { page += 1; loop(); });
  await loop();
}

// ---- partner -------------------------------------------------------------------------------

async function initPartner() {
  const name = new URLSearchParams(location.search).get("name") || "";
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
  for (const r of rows) {
    const fig = el("figure", { class: "route-chart" });
    const cap = el("figcaption", {}, el("strong", {}, r.route || r.metering_id), " — ",
      r.metering_id, ": ", `${r.used} / ${r.limit === null ? "—" : r.limit} used, ${r.state}`);
    fig.append(cap);
    const holder = el("div", {}, "loading the last 7 days…");
    fig.append(holder);
    box.append(fig);
    usage(r.metering_id, 7 * 24).then((u) => {
      holder.replaceChildren(chart(u.buckets, 7 * 24, 600, 80, "last 7 days"),
        el("p", { class: "note" }, u.missing ? "No usage history kept for this id yet."
          : "Last 7 days: admitted above the line, refused below."));
    });
  }
  // Recent interchanges: the newest 50 of this partner among the last 10 pages of the queue.
  const found = [];
  let url = "/v1/queue?limit=1000";
  for (let i = 0; url && i < 10; i++) {
    const q = await api("GET", url);
    if (!q.ok) break;
    for (const item of await q.json()) if (item.partner === name) found.push(item);
    const m = /<([^>]+)>;\s*rel="next"/.exec(q.headers.get("Link") || "");
    url = m ? m[1] : null;
  }
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
        res.headers.get("Tollgate-Payload-Bytes") + " bytes)" : "");
    });
    return el("td", {}, box);
  };
  $("recent").tBodies[0].replaceChildren(...found.slice(0, 50).map((it) => el("tr", {},
    el("td", {}, when(it.received_at)), el("td", {}, it.state), el("td", {}, it.reason || ""),
    el("td", {}, String(it.weight)), el("td", {}, it.sender || ""), el("td", {}, it.receiver || ""),
    el("td", {}, it.control_number || ""), el("td", {}, it.document), el("td", {}, it.route || ""),
    payload(it))));
}

// ---- queue ---------------------------------------------------------------------------------

async function initQueue() {
  let busy = false;
  let cursorUrl = null;
  let nextUrl = null;
  let items = [];
  const first = () => {
    const p = new URLSearchParams();
    if ($("q-state").value) p.set("state", $("q-state").value);
    p.set("limit", $("q-limit").value);
    return "/v1/queue?" + p.toString();
  };
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
    const needle = $("q-partner").value.toLowerCase();
    const checked = new Set(selected().map((i) => i.id));
    items = all.filter((i) => !needle || String(i.partner).toLowerCase().includes(needle));
    if (!items.some((i) => checked.has(i.id))) $("q-all").checked = false;
    $("queue").tBodies[0].replaceChildren(...items.map((it) => el("tr", { "data-id": it.id },
      el("td", {}, el("input", { type: "checkbox", value: it.id, checked: checked.has(it.id),
        "aria-label": "Select " + it.id, class: "pick" })),
      el("td", { class: "id" }, it.id), el("td", {}, it.state), el("td", {}, it.partner),
      el("td", {}, it.sender || ""), el("td", {}, it.receiver || ""),
      el("td", {}, it.control_number || ""), el("td", {}, it.document),
      el("td", {}, it.route || ""), el("td", { class: "num" }, String(it.weight)),
      el("td", {}, when(it.received_at)), el("td", { class: "reason" }, it.reason || ""))));
    $("q-next").disabled = !nextUrl;
    $("q-count").textContent = items.length
      ? `${items.length} item${items.length === 1 ? "" : "s"} on this page` : "No items.";
  };
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
    const n = `${picked.length} interchange${picked.length === 1 ? "" : "s"} (${records} record${records === 1 ? "" : "s"})`;
    const text = {
      release: `Release ${n} to ${routes} without metering?`,
      retry: `Retry ${n}: meter them again now against ${routes}, and deliver those that fit?`,
      purge: `Purge ${n}: their bytes are deleted and cannot be delivered or recovered?`,
    }[op];
    $("confirm-text").textContent = text;
    const dlg = $("confirm");
    const answer = await new Promise((resolve) => {
      dlg.addEventListener("close", () => resolve(dlg.returnValue), { once: true });
      dlg.returnValue = "cancel";
      dlg.showModal();
      $("confirm-cancel").focus();
    });
    if (answer !== "ok") {
      status("Nothing done.");
      return;
    }
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
    status(`${op}: ${done} of ${picked.length} done` + (errors.length ? "; " + errors.join("; ") : ""),
      errors.length > 0);
  };
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

// ---- limits --------------------------------------------------------------------------------

const FIELDS = [
  { key: "match", label: "Metering ids (glob)", kind: "text" },
  { key: "limit", label: "Limit (units per window)", kind: "number" },
  { key: "interval", label: "Interval", kind: "number" },
  { key: "unit", label: "Unit", kind: "select", options: ["", "second", "minute", "hour", "day", "week", "month"] },
  { key: "window", label: "Window", kind: "select", options: ["", "calendar", "flexi", "rolling"] },
  { key: "mode", label: "Mode", kind: "select", options: ["enforce", "shadow"] },
  { key: "override", label: "Beats the limit a route or request asks (needed to change a route's limit)", kind: "check" },
];

async function initLimits() {
  let current = [];
  let proposed = null;
  // The version of the policies this page loaded (their ETag): applying sends it back in
  // If-Match, so a change someone else made meanwhile is not silently overwritten (412).
  let version = null;
  const editable = !!session.may.limits;
  document.body.classList.toggle("read-only", !editable);
  const rulesBox = $("rules");
  let serial = 0;
  const addRule = (rule) => {
    const n = serial++;
    const fs = el("fieldset", { class: "rule", "data-rule": n });
    fs.append(el("legend", {}, "Policy"));
    for (const f of FIELDS) {
      const id = `r${n}-${f.key}`;
      const err = el("span", { class: "field-error", id: id + "-error", role: "alert" });
      let input;
      const value = rule[f.key];
      if (f.kind === "select") {
        input = el("select", { id, name: f.key, disabled: !editable });
        for (const o of f.options) input.append(el("option", { value: o }, o || "(not set)"));
        input.value = value === undefined || value === null ? f.options[0] : String(value);
      } else if (f.kind === "check") {
        input = el("input", { id, name: f.key, type: "checkbox", disabled: !editable });
        input.checked = !!value;
      } else {
        input = el("input", { id, name: f.key, type: "text", disabled: !editable,
          inputmode: f.kind === "number" ? "numeric" : null });
        input.value = value === undefined || value === null ? "" : String(value);
      }
      input.setAttribute("aria-describedby", id + "-error");
      input.dataset.key = f.key;
      const wrap = el("div", { class: "field field-" + f.key });
      if (f.kind === "check") wrap.append(el("label", { for: id }, input, " ", f.label));
      else wrap.append(el("label", { for: id }, f.label), input);
      wrap.append(err);
      fs.append(wrap);
    }
    if (editable) {
      const rm = el("button", { type: "button", class: "remove" }, "Remove this policy");
      rm.addEventListener("click", () => fs.remove());
      fs.append(rm);
    }
    fs.dataset.original = rule.__index === undefined ? "" : JSON.stringify(current[rule.__index]);
    rulesBox.append(fs);
  };
  const fromForm = () => [...rulesBox.querySelectorAll("fieldset.rule")].map((fs) => {
    const r = {};
    for (const input of fs.querySelectorAll("[data-key]")) {
      const k = input.dataset.key;
      if (input.type === "checkbox") {
        if (input.checked) r[k] = true;
        continue;
      }
      const v = input.value.trim();
      if (v === "") continue;
      if (k === "mode" && v === "enforce") continue;
      r[k] = (k === "limit" || k === "interval") && /^-?\d+$/.test(v) ? Number(v) : v;
    }
    if ($("shadow-first").checked && JSON.stringify(r) !== fs.dataset.original) r.mode = "shadow";
    return r;
  });
  const clearErrors = () => {
    for (const e of document.querySelectorAll(".field-error")) e.textContent = "";
    for (const i of document.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
    $("form-error").textContent = "";
  };
  const load = async () => {
    const res = await api("GET", "/v1/policies");
    if (!res.ok) {
      status(await problemText(res), true);
      return;
    }
    const body = await res.json();
    version = res.headers.get("ETag");
    current = body.policies;
    $("pol-source").textContent = (body.source ? "From " + body.source : "Not kept in a file") +
      `; generation ${body.generation}` + (body.last_error ? "; last reload error: " + body.last_error : "");
    rulesBox.replaceChildren();
    current.forEach((r, i) => addRule({ ...r, __index: i }));
    if (!current.length) rulesBox.append(el("p", { class: "empty" }, "No policies."));
  };
  const line = (r) => "[[policy]] " + Object.entries(r).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join(", ");
  $("add-rule").addEventListener("click", () => {
    const empty = rulesBox.querySelector("p.empty");
    if (empty) empty.remove();
    // A new policy is how a functional team changes a partner's limit: it overrides what the
    // route or the middleware asks unless the editor unticks it.
    addRule({ override: true });
    const last = rulesBox.querySelector("fieldset.rule:last-of-type input");
    if (last) last.focus();
  });
  $("policies").addEventListener("submit", (ev) => {
    ev.preventDefault();
    clearErrors();
    proposed = fromForm();
    const before = current.map(line), after = proposed.map(line);
    const out = [];
    for (const l of before) if (!after.includes(l)) out.push("- " + l);
    for (const l of after) out.push((before.includes(l) ? "  " : "+ ") + l);
    $("diff").textContent = out.length ? out.join("\n") : "(no policies)";
    $("diff-box").hidden = false;
    $("apply").disabled = before.join("\n") === after.join("\n");
    if ($("apply").disabled) status("No change to apply.");
    $("apply").focus();
  });
  $("back").addEventListener("click", () => { $("diff-box").hidden = true; });
  $("apply").addEventListener("click", async () => {
    const res = await api("PUT", "/v1/policies", { policies: proposed },
      version ? { "If-Match": version } : undefined);
    $("diff-box").hidden = true;
    if (res.ok) {
      await load();
      status(`Applied: ${current.length} policies in force.`);
      return;
    }
    if (res.status === 412) {
      // Someone else applied a change since this page loaded the policies: nothing was
      // changed; reloading shows theirs (and drops the edits made here).
      const reload = el("button", { type: "button", id: "reload-policies" }, "Reload the limits");
      reload.addEventListener("click", async () => {
        clearErrors();
        await load();
        status("Reloaded: these are the limits in force now.");
      });
      $("form-error").replaceChildren(
        "Not applied: someone else changed the limits since you loaded them; reload to see " +
        "their change, then make yours again. ", reload);
      status("Not applied: someone else changed the limits; reload.", true);
      return;
    }
    let p = {};
    try { p = await res.json(); } catch (_) { /* not JSON */ }
    const msg = (p.detail || p.title || ("HTTP " + res.status));
    const fieldsets = rulesBox.querySelectorAll("fieldset.rule");
    const fs = Number.isInteger(p.index) ? fieldsets[p.index] : null;
    const input = fs && p.field ? fs.querySelector(`[data-key="${CSS.escape(p.field)}"]`) : null;
    if (input) {
      input.setAttribute("aria-invalid", "true");
      $(input.id + "-error").textContent = msg;
      input.focus();
      status("Not applied: see the field marked.", true);
    } else {
      $("form-error").textContent = msg;
      status("Not applied.", true);
    }
  });
  const routes = await api("GET", "/ui/api/routes");
  if (routes.ok) {
    $("routes").tBodies[0].replaceChildren(...(await routes.json()).map((r) => el("tr", {},
      el("td", {}, r.name), el("td", {}, r.documents.join(", ")), el("td", {}, r.metering_id),
      el("td", { class: "num" }, String(r.limit)), el("td", {}, `${r.interval} ${r.unit}`))));
  }
  await load();
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
      ["Policies", `${r.policies.count} in force, generation ${r.policies.generation}` +
        (r.policies.source ? ", from " + r.policies.source : "")],
      ["Policy reload error", r.policies.last_error || "none"],
      ["Breakers", breakers.length ? (open.length ? "open: " + open.map((b) => b.labels).join("; ")
        : `${breakers.length} closed`) : "no delivery breaker (no gateway)"],
      ["Spool", metrics.includes("tollgate_gateway_spool_files")
        ? `${sum("tollgate_gateway_spool_files")} files, ${sum("tollgate_gateway_spool_bytes")} bytes`
        : "no gateway"],
      ["Queue depth", String(sum("tollgate_gateway_queue_depth"))],
      ["Held", String(sum("tollgate_gateway_held"))],
      ["Restart needed for", (r.restart_needed || []).join(", ") || "nothing"],
      ["Version", session.version],
    ];
    if (r.tls) facts.push(["TLS", r.tls.cert + (r.tls.last_error ? " — " + r.tls.last_error : "")]);
    $("health").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    $("checks").tBodies[0].replaceChildren(...Object.entries(r.checks || {}).map(([k, v]) =>
      el("tr", {}, el("td", {}, k), el("td", {}, v.ok ? "ok" : "failing"), el("td", {}, v.error || ""))));
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

// ---- audit ---------------------------------------------------------------------------------

async function initAudit() {
  const res = await api("GET", "/v1/audit?limit=200");
  if (!res.ok) {
    status(await problemText(res), true);
    return;
  }
  const records = await res.json();
  $("audit").tBodies[0].replaceChildren(...records.map((r) => el("tr", {},
    el("td", {}, when(r.at)), el("td", {}, r.who), el("td", {}, r.role), el("td", {}, r.action),
    el("td", { class: "id" }, r.target),
    el("td", {}, el("details", {}, el("summary", {}, "show"),
      el("pre", {}, "before: " + JSON.stringify(r.before, null, 1) + "\nafter: " +
        JSON.stringify(r.after, null, 1) +
        // Large changes are stored as their size and hash plus a bounded diff.
        (r.diff ? "\ndiff: " + JSON.stringify(r.diff, null, 1) : "")))))));
  status(records.length ? "" : "No changes recorded yet.");
}
