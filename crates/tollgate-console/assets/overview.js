// The overview page: one row per metering id (used against the limit, reset, state, held
// items) from `GET /ui/api/overview`, and the Bursting now table from `GET /ui/api/bursting`.

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
    $("partial").hidden = !data.partial;
    const of = $("f-route").value ? ` of route ${$("f-route").value}` : "";
    $("partial").textContent = data.partial ? `The store holds more than ${num(data.partial)} ` +
      `live counters${of}: this page is made from the first ${num(data.partial)} by metering ` +
      "id. All of them: GET /v1/counters (paged) or tollgate counters list." : "";
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
