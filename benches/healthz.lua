-- wrk script: GET /healthz, the ceiling the /v1/quota run is compared with: same server,
-- same connections, and the same client-side work per request (a Lua-built request carrying
-- the same quota headers), so the difference between the two runs is the server's decision
-- path alone. The handler ignores the headers.
--
--   wrk -t1 -c16 -d20s -s benches/healthz.lua http://127.0.0.1:8080

local ids = tonumber(os.getenv("TOLLGATE_BENCH_IDS") or "10000")
local counter = 0
local thread_no = 0

function setup(thread)
  thread:set("offset", thread_no * 7919)
  thread_no = thread_no + 1
end

function init(args)
  counter = offset or 0
end

function request()
  counter = counter + 1
  local id = "Bench:Carrier" .. (counter % ids)
  return wrk.format("GET", "/healthz", {
    ["metering-id"] = id,
    ["quota-limit"] = "1000000000",
    ["quota-interval"] = "24",
    ["quota-timeunit"] = "hours",
    ["message-weight"] = "1",
  })
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT path=/healthz requests=%d rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d socket_errors=%d\n",
    summary.requests, summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
