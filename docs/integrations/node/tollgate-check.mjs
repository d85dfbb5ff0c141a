// Ask Tollgate whether a batch may go on, from Node.js 18+ (global fetch, no dependency).
//
//   node tollgate-check.mjs URL METERING_ID LIMIT RECORDS REQUEST_ID
//
// prints one line and exits with its code:
//   forward              0   the quota admits the batch: send it on
//   hold SECONDS         3   over quota: keep the batch and retry after SECONDS
//   forward (fail-open)  0   Tollgate did not answer in time, or failed: send it on anyway
//
// The metering id names the partner and the document type; the weight is the batch's record
// count; the request id is the message's own id, so a retried message is not counted twice.

// Short enough that a slow or dead Tollgate never holds up the pipeline: fail open after it.
const TIMEOUT_MS = 2000;

export async function check(url, meteringId, limit, records, requestId, interval = 24, unit = "hours") {
  try {
    const res = await fetch(url.replace(/\/$/, "") + "/v1/quota", {
      headers: {
        "metering-id": meteringId,
        "quota-limit": String(limit),
        "quota-interval": String(interval),
        "quota-timeunit": unit,
        "message-weight": String(records),
        "quota-request-id": requestId,
      },
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    if (res.status === 200) return { verdict: "forward" };
    if (res.status === 429) return { verdict: "hold", retryAfter: Number(res.headers.get("retry-after") || 60) };
    return { verdict: "fail-open", reason: "status " + res.status };
  } catch (e) {
    return { verdict: "fail-open", reason: String(e.cause?.code || e.name || e) };
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [url, id, limit, records, requestId] = process.argv.slice(2);
  if (!requestId) {
    console.error("usage: node tollgate-check.mjs URL METERING_ID LIMIT RECORDS REQUEST_ID");
    process.exit(2);
  }
  const r = await check(url, id, Number(limit), Number(records), requestId);
  if (r.verdict === "hold") {
    console.log("hold " + r.retryAfter);
    process.exit(3);
  }
  console.log(r.verdict === "forward" ? "forward" : `forward (fail-open: ${r.reason})`);
}
