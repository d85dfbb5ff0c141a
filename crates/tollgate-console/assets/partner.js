// The partner page: a traffic chart per route over a chosen range, and the partner's recent
// interchanges read through the queue's filters.

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
