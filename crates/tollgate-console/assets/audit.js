// The Audit log page: GET /v1/audit a page at a time, with filters; policy changes shown as a
// diff of the policies that changed (`policy_diff.js`).

// ---- audit ---------------------------------------------------------------------------------

// What a record changed: for a policies.replace or .reload, only the policies that changed (from the
// whole lists, or from the bounded diff of a large change); the record as stored below.
function auditChange(r) {
  const raw = el("details", {}, el("summary", {}, "show the record"),
    el("pre", {}, "before: " + JSON.stringify(r.before, null, 1) + "\nafter: " +
      JSON.stringify(r.after, null, 1) +
      // Large changes are stored as their size and hash plus a bounded diff.
      (r.diff ? "\ndiff: " + JSON.stringify(r.diff, null, 1) : "")));
  if (r.action !== "policies.replace" && r.action !== "policies.reload") return raw;
  let lists = null;
  if (Array.isArray(r.before) && Array.isArray(r.after)) lists = [r.before, r.after];
  else if (r.diff && (Array.isArray(r.diff.removed) || Array.isArray(r.diff.added))) {
    lists = [r.diff.removed, r.diff.added];
  }
  if (!lists) return raw;
  return el("div", {}, el("pre", { class: "diff" }, policyDiffText(lists[0], lists[1])), raw);
}

function auditRow(r) {
  return el("tr", {}, el("td", {}, timeEl(r.at)), el("td", {}, r.who), el("td", {}, r.role),
    el("td", {}, r.action), el("td", { class: "id" }, r.target), el("td", {}, auditChange(r)));
}

// The audit log, 50 records a page, newest first: filters on action, author and target
// (any case, on the server), "Older" follows the answer's Link.
async function initAudit() {
  let next = null, pageNo = 1, seq = 0;
  const first = () => {
    const p = new URLSearchParams({ limit: "50" });
    for (const k of ["action", "who", "target"]) {
      const v = $("a-" + k).value.trim();
      if (v) p.set(k, v);
    }
    return "/v1/audit?" + p.toString();
  };
  const load = async (url, n) => {
    const mine = ++seq;
    const res = await api("GET", url);
    if (mine !== seq) return;
    if (!res.ok) {
      status(await problemText(res), true);
      return;
    }
    const records = await res.json();
    if (mine !== seq) return;
    const m = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get("Link") || "");
    next = m ? m[1] : null;
    pageNo = n;
    const filtered = ["action", "who", "target"].some((k) => $("a-" + k).value.trim());
    fill($("audit"), records.map(auditRow), filtered ? "No recorded change matches these filters."
      : n > 1 ? "No older changes." : "No changes recorded yet.");
    $("a-older").disabled = !next;
    $("a-newest").disabled = n === 1;
    $("a-count").textContent = records.length ? `Page ${num(n)}: ${num(records.length)} ` +
      `change${records.length === 1 ? "" : "s"}, newest first.` : "";
    status("");
  };
  let typing = null;
  $("a-filters").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => load(first(), 1), 250);
  });
  $("a-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    load(first(), 1);
  });
  $("a-older").addEventListener("click", () => next && load(next, pageNo + 1));
  $("a-newest").addEventListener("click", () => load(first(), 1));
  await load(first(), 1);
}
