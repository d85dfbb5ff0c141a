-- wrk script: GET /v1/quota over many distinct metering ids, or the same requests against
-- /healthz as the ceiling (TOLLGATE_BENCH_PATH=/healthz).
--
-- Each request carries the header contract of the motivating case with a limit high enough
-- that every request is admitted (the run measures the decision path, not 429s). Ids cycle
-- through TOLLGATE_BENCH_IDS distinct values (default 10,000), each wrk thread starting at a
-- different offset. Both runs build every request the same way, so wrk's own work is the same
-- and the difference between them is the server's decision path alone (/healthz ignores the
-- headers).
--
--   wrk -t1 -c16 -d20s -s benches/load.lua http://127.0.0.1:8080
--   TOLLGATE_BENCH_PATH=/healthz wrk -t1 -c16 -d20s -s benches/load.lua http://127.0.0.1:8080
--
-- TOLLGATE_BENCH_DELAY_MS=d paces the load: each connection waits d milliseconds (a decimal;
-- wrk's timers count whole milliseconds, so the fractions are carried from one request to the
-- next) between an answer and its next request, so C connections send about
-- C / (d + latency) requests per second. Unset, requests follow answers at once.

local path = os.getenv("TOLLGATE_BENCH_PATH") or "/v1/quota"
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

local pace = tonumber(os.getenv("TOLLGATE_BENCH_DELAY_MS") or "")
if pace then
  local owed = 0
  function delay()
    owed = owed + pace
    local ms = math.floor(owed)
    owed = owed - ms
    return ms
  end
end

function request()
  counter = counter + 1
  local id = "Bench:Carrier" .. (counter % ids)
  return wrk.format("GET", path, {
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
    "RESULT path=" .. path .. " requests=%d rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d socket_errors=%d\n",
    summary.requests, summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
