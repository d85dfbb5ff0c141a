-- wrk script: ThrottleCrab's `POST /throttle`, the peer side of benches/peer.sh.
--
-- The same load as benches/load.lua gives /v1/quota: ids cycle through TOLLGATE_BENCH_IDS
-- distinct keys (default 10,000), each wrk thread starting at a different offset, and the
-- limit is high enough that every request is admitted. The JSON body is ThrottleCrab's
-- request: {"key", "max_burst", "count_per_period", "period"} (period in seconds).
--
--   wrk -t2 -c64 -d10s --latency -s benches/peer.lua http://127.0.0.1:PORT

local ids = tonumber(os.getenv("TOLLGATE_BENCH_IDS") or "10000")
local counter = 0
local thread_no = 0
local headers = { ["Content-Type"] = "application/json" }

function setup(thread)
  thread:set("offset", thread_no * 7919)
  thread_no = thread_no + 1
end

function init(args)
  counter = offset or 0
end

function request()
  counter = counter + 1
  local body = string.format(
    '{"key":"Bench:Carrier%d","max_burst":1000000000,"count_per_period":1000000000,"period":86400}',
    counter % ids)
  return wrk.format("POST", "/throttle", headers, body)
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT path=/throttle requests=%d rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d socket_errors=%d\n",
    summary.requests, summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
