// The Limits page: the policies as a form, reviewed as a diff (`policy_diff.js`) and applied
// with PUT /v1/policies and the version loaded (If-Match); the gateway's route limits.

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
    const original = fs.dataset.original ? JSON.parse(fs.dataset.original) : null;
    if ($("shadow-first").checked && !samePolicy(r, original)) r.mode = "shadow";
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
      `; generation ${num(body.generation)}` + (body.last_error ? "; last reload error: " + body.last_error : "");
    rulesBox.replaceChildren();
    current.forEach((r, i) => addRule({ ...r, __index: i }));
    if (!current.length) rulesBox.append(el("p", { class: "empty" }, "No policies."));
  };
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
    $("diff").textContent = policyDiffText(current, proposed);
    $("diff-box").hidden = false;
    $("apply").disabled = policyDiff(current, proposed).lines.length === 0;
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
      status(`Applied: ${num(current.length)} policies in force.`);
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
    fill($("routes"), (await routes.json()).map((r) => el("tr", {},
      el("td", {}, r.name), el("td", {}, r.documents.join(", ")), el("td", {}, r.metering_id),
      el("td", { class: "num" }, num(r.limit)), el("td", {}, `${num(r.interval)} ${r.unit}`))),
      "No gateway route: this server runs no gateway, or its config declares none.");
  }
  await load();
}
