// The health page: the store, breakers, spool and queue depths from `/readyz` and `/metrics`,
// and the test notification button.

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
