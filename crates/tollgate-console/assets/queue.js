// The queue page: items filtered on the server, one-item actions, and bulk release or purge
// of a filter followed to its end.

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
