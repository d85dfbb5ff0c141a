-- wrk script for benches/memory.sh: every id below TOLLGATE_BENCH_IDS is asked for exactly
-- once, with a calendar window of TOLLGATE_BENCH_WINDOW_MIN minutes (default 2); memory.sh
-- stops wrk once the server's gauge holds them all.
--
-- Thread t of TOLLGATE_BENCH_THREADS sends ids F + t, F + t + T, … below TOLLGATE_BENCH_IDS,
-- where F is TOLLGATE_BENCH_FIRST (default 0), as "ShipmentStatus:C0000000" (23 B, as in
-- the `memory` example). A connection that asks after the thread's share is used up asks for
-- /healthz instead, which creates no counter.

local ids = tonumber(os.getenv("TOLLGATE_BENCH_IDS") or "1000000")
local base = tonumber(os.getenv("TOLLGATE_BENCH_FIRST") or "0")
local threads_total = tonumber(os.getenv("TOLLGATE_BENCH_THREADS") or "1")
local threads = {}
local thread_no = 0

function setup(thread)
  thread:set("first", thread_no)
  thread_no = thread_no + 1
  table.insert(threads, thread)
end

local window_min = os.getenv("TOLLGATE_BENCH_WINDOW_MIN") or "2"
local next_id = 0
-- Globals, so that done() can read them from each thread.
answered, refused = 0, 0

function init(args)
  next_id = base + first
  -- wrk calls thread 0's request() once to check the script and never sends that request, so
  -- thread 0's sequence starts one step early, with a /healthz placeholder.
  if first == 0 then next_id = next_id - threads_total end
end

function request()
  if next_id < base or next_id >= ids then
    next_id = next_id + threads_total
    return wrk.format("GET", "/healthz")
  end
  local id = string.format("ShipmentStatus:C%07d", next_id)
  next_id = next_id + threads_total
  return wrk.format("GET", "/v1/quota", {
    ["metering-id"] = id,
    ["quota-limit"] = "1000",
    ["quota-interval"] = window_min,
    ["quota-timeunit"] = "minute",
    ["message-weight"] = "1",
  })
end

function response(status, headers, body)
  if headers["RateLimit-Policy"] == nil and headers["ratelimit-policy"] == nil then
    return -- a /healthz answer
  end
  answered = answered + 1
  if status ~= 200 then refused = refused + 1 end
end

function done(summary, latency, requests)
  local a, r = 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("answered")
    r = r + t:get("refused")
  end
  io.write(string.format("RESULT answered=%d refused=%d errors=%d\n", a, r,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
