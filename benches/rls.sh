#!/usr/bin/env bash
# Envoy's rate limit service (`ShouldRateLimit` over gRPC) against `GET /v1/quota` (HTTP/1.1),
# side by side on one `tollgate serve` process, both driven by the same load generator from a
# process of its own: h2load, nghttp2's C client (apt-get install nghttp2-client). So the
# figures are the server's, without a Rust client's own tasks and buffers in the same process.
#
#   benches/rls.sh
#
# Environment: ROUNDS (3), DURATION (10, seconds per round), GRPC_CONNS (2) connections with
# STREAMS (8) calls in flight on each, as Envoy's workers multiplex their calls; HTTP_CONNS
# (GRPC_CONNS × STREAMS) connections with one request in flight on each, so both protocols
# have as many calls outstanding. TOLLGATE_BIN=path/to/tollgate uses that build instead of
# building the release binary.
#
# The server runs `serve --store embedded` (fresh data directory) with `grpc_listen` and one
# `[[rls.rule]]`; every call, on either protocol, checks one metering id per protocol against a
# limit no run reaches, so both do the same store work. After a warm-up, the protocols alternate
# round by round. Each round prints the calls per second, the p50 and p99 of the calls' latency
# (h2load's per-request log), and the server's CPU per call (utime + stime from /proc/PID/stat
# over the counter's growth). h2load counts a gRPC error as a 200, so each round also checks
# that the counter grew by every call answered (and by no more than the calls still in flight
# when h2load stopped); a round that fails the check stops the script. A summary per protocol
# gives the medians and the median per-round ratio gRPC / HTTP (the goal: at least 1.0).
set -euo pipefail

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10}"
GRPC_CONNS="${GRPC_CONNS:-2}"
STREAMS="${STREAMS:-8}"
HTTP_CONNS="${HTTP_CONNS:-$((GRPC_CONNS * STREAMS))}"

source "$(dirname "$0")/lib.sh"
need h2load "apt-get install -y nghttp2-client"
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

GRPC_PORT="$(free_port)"
cat >"$WORK/rls.toml" <<EOF
[server]
grpc_listen = "127.0.0.1:$GRPC_PORT"

[[rls.rule]]
domain = "bench"
descriptor = ["id"]
metering_id = "Bench:{id}"
limit = 1000000000000
unit = "day"
EOF
start_tollgate rls --store embedded --data "$WORK/data" --config "$WORK/rls.toml"
PID="${PID_OF[rls]}"
GRPC_URL="http://127.0.0.1:$GRPC_PORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

# The gRPC frame of a `RateLimitRequest` for domain "bench" and one descriptor {id: "grpc"}:
# a flag byte, the message's length (big-endian) and the message, each string a field
# (tag, length, bytes); every string here is under 128 bytes, so each length is one byte.
python3 - "$WORK/request.bin" <<'EOF'
import struct, sys
def field(number, value):
    assert len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value
entry = field(1, b"id") + field(2, b"grpc")
message = field(1, b"bench") + field(2, field(1, entry))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(message)) + message)
EOF

# Units counted so far on the metering id `Bench:<protocol>`.
used() { # protocol
  curl -fsS "${URL[rls]}/v1/counters?prefix=Bench:$1" \
    | python3 -c 'import json, sys; print(sum(c["used"] for c in json.load(sys.stdin)["counters"]))'
}

load() { # protocol seconds log
  if [ "$1" = grpc ]; then
    h2load -c"$GRPC_CONNS" -m"$STREAMS" -D"$2" --log-file="$3" -d "$WORK/request.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "$GRPC_URL"
  else
    h2load --h1 -c"$HTTP_CONNS" -m1 -D"$2" --log-file="$3" -H 'metering-id: Bench:http' \
      -H 'quota-limit: 1000000000000' -H 'quota-interval: 1' -H 'quota-timeunit: day' \
      -H 'message-weight: 1' "${URL[rls]}/v1/quota"
  fi
}

HZ="$(getconf CLK_TCK)"
round() { # protocol
  local log="$WORK/$1.log" out="$WORK/$1.out" before after a b in_flight rps
  in_flight=$HTTP_CONNS
  [ "$1" = grpc ] && in_flight=$((GRPC_CONNS * STREAMS))
  rm -f "$log" # h2load appends to its log
  before="$(used "$1")"
  a="$(cpu_ticks "$PID")"
  load "$1" "$DURATION" "$log" >"$out"
  b="$(cpu_ticks "$PID")"
  after="$(used "$1")"
  rps="$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' "$out")"
  sort -t$'\t' -k3,3n "$log" | awk -F'\t' -v p="$1" -v rps="$rps" -v grew=$((after - before)) \
    -v in_flight="$in_flight" -v cpu="$a $b" -v hz="$HZ" '
    { t[NR] = $3; if ($2 != 200) bad++ }
    END {
      split(cpu, c, " ")
      if (bad + 0 > 0 || grew < NR || grew > NR + in_flight) {
        printf "CHECK FAILED protocol=%s answered=%d non200=%d counter_grew=%d\n", p, NR, bad, grew
        exit 1
      }
      printf "ROUND protocol=%s rps=%.0f p50_us=%d p99_us=%d us_per_call=%.2f calls=%d\n", p, rps, \
        t[int(NR * 0.5) + 1], t[int(NR * 0.99) + 1], (c[3] + c[4] - c[1] - c[2]) * 1e6 / hz / grew, grew
    }'
}

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?') (embedded store): gRPC at 127.0.0.1:$GRPC_PORT, HTTP at ${URL[rls]}"
echo "# h2load: gRPC -c$GRPC_CONNS -m$STREAMS, HTTP/1.1 --h1 -c$HTTP_CONNS -m1; ${DURATION} s rounds, rounds=$ROUNDS, protocols alternating"
machine_line
for p in grpc http; do load "$p" 2 /dev/null >/dev/null; done

: >"$WORK/rounds"
for _ in $(seq 1 "$ROUNDS"); do
  for p in grpc http; do round "$p" | tee -a "$WORK/rounds"; done
done

awk "$AWK_STATS"'
  /^ROUND/ {
    p = field("protocol"); i = ++n[p]
    r[p, i] = field("rps"); p50[p, i] = field("p50_us"); p99[p, i] = field("p99_us"); u[p, i] = field("us_per_call")
  }
  END {
    printf "%-8s %10s %8s %8s %12s\n", "protocol", "calls/s", "p50_ms", "p99_ms", "cpu_us/call"
    for (x = 1; x <= 2; x++) {
      p = (x == 1) ? "grpc" : "http"
      for (i = 1; i <= n[p]; i++) { a[i] = r[p, i]; b[i] = p50[p, i]; c[i] = p99[p, i]; d[i] = u[p, i] }
      printf "%-8s %10.0f %8.2f %8.2f %12.2f\n", p, median(a, n[p]), median(b, n[p]) / 1000, median(c, n[p]) / 1000, median(d, n[p])
      m99[p] = median(c, n[p])
    }
    for (i = 1; i <= n["grpc"]; i++) q[i] = r["grpc", i] / r["http", i]
    printf "SUMMARY grpc/http=%.2f (goal >= 1.0) grpc_p99=%.2fms http_p99=%.2fms\n", median(q, n["grpc"]), m99["grpc"] / 1000, m99["http"] / 1000
  }' "$WORK/rounds"
echo "# CPU time used by the server over the run: $(ps -o time= -p "$PID" | tr -d ' ')"
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
