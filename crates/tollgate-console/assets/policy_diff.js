// ---- policy diffs --------------------------------------------------------------------------
//
// What a change of the policies does, for people (the Limits page's review, the audit log's
// policies.replace rows). Policies are paired by their `match` glob (the n-th policy of a glob
// with the n-th of the same glob), so an unchanged policy is not listed at all and a changed
// one shows only its changed fields; an order change is said once, since the first policy
// matching an id applies.

// A policy's fields without their defaults (`override = false`, `mode = "enforce"`, unset
// ones), as the server lists them and the form leaves them out.
function policyFields(p) {
  const out = {};
  for (const [k, v] of Object.entries(p || {})) {
    if (v === null || v === undefined || (k === "override" && v === false)) continue;
    if (k === "mode" && v === "enforce") continue;
    out[k] = v;
  }
  return out;
}

// Whether two policies say the same (defaults and key order aside).
function samePolicy(a, b) {
  if (!a || !b) return false;
  const x = policyFields(a), y = policyFields(b);
  const keys = new Set([...Object.keys(x), ...Object.keys(y)]);
  return [...keys].every((k) => JSON.stringify(x[k]) === JSON.stringify(y[k]));
}

// A policy field's value for people: numbers with separators, the default or "(not set)"
// when absent.
function policyValue(v, key) {
  if (v === undefined || v === null) {
    return key === "mode" ? "enforce" : key === "override" ? "no" : "(not set)";
  }
  if (typeof v === "number") return num(v);
  if (typeof v === "boolean") return v ? "yes" : "no";
  return typeof v === "string" ? v : JSON.stringify(v);
}

// A policy on one line: its glob, then its other fields.
function policyLine(p) {
  const rest = Object.entries(p || {}).filter(([k]) => k !== "match")
    .map(([k, v]) => `${k} ${policyValue(v)}`);
  return `"${p && p.match}"` + (rest.length ? ": " + rest.join(", ") : "");
}

// The changes from `before` to `after` (lists of policies): lines "- " (removed), "+ " (added)
// and "~ " (changed, each changed field as old → new, defaults shown as not set), and how many
// stayed as they were.
function policyDiff(before, after) {
  const keyed = (list) => {
    const seen = new Map();
    return (Array.isArray(list) ? list : []).map((p) => {
      const m = String(p && p.match);
      const n = seen.get(m) || 0;
      seen.set(m, n + 1);
      return [m + "\u0000" + n, policyFields(p)];
    });
  };
  const b = keyed(before), a = keyed(after);
  const bMap = new Map(b), aMap = new Map(a);
  const lines = [];
  let unchanged = 0;
  for (const [k, p] of b) if (!aMap.has(k)) lines.push("- " + policyLine(p));
  for (const [k, p] of a) {
    const old = bMap.get(k);
    if (!old) {
      lines.push("+ " + policyLine(p));
      continue;
    }
    const fields = [...new Set([...Object.keys(old), ...Object.keys(p)])]
      .filter((f) => JSON.stringify(old[f]) !== JSON.stringify(p[f]));
    if (!fields.length) {
      unchanged++;
      continue;
    }
    lines.push(`~ "${p.match}": ` +
      fields.map((f) => `${f} ${policyValue(old[f], f)} → ${policyValue(p[f], f)}`).join(", "));
  }
  const order = (list, other) => list.filter(([k]) => other.has(k)).map(([k]) => k).join("\u0001");
  if (order(b, aMap) !== order(a, bMap)) {
    lines.push("↕ the order changed (the first policy matching an id applies)");
  }
  return { lines, unchanged };
}

// The diff as text: one line per change, then how many policies did not change.
function policyDiffText(before, after) {
  const d = policyDiff(before, after);
  if (!d.lines.length) return "No change.";
  const rest = d.unchanged
    ? `(${num(d.unchanged)} other ${d.unchanged === 1 ? "policy" : "policies"} unchanged)` : "";
  return [...d.lines, rest].filter(Boolean).join("\n");
}
