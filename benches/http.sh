#!/usr/bin/env bash
# HTTP load run: /v1/quota (10,000 distinct ids) against /healthz on the same release server.
#
#   benches/http.sh [memory|embedded]        # default: embedded
#
# Environment: DURATION (default 20s), CONNECTIONS (16), THREADS (1), ROUNDS (3),
# TOLLGATE_BENCH_IDS (10000), CARGO_TARGET_DIR (target). Needs wrk (Debian: apt-get install wrk).
#
# It builds the release binary, starts `tollgate serve` on a free loopback port with a fresh
# data directory, warms both paths up, then alternates /healthz and /v1/quota runs ROUNDS
# times and prints every run plus the median ratio quota/healthz and the quota p99. Goal:
# ratio >= 70% and p99 <= 2 ms.
set -euo pipefail

STORE="${1:-embedded}"
DURATION="${DURATION:-20s}"
CONNECTIONS="${CONNECTIONS:-16}"
THREADS="${THREADS:-1}"
ROUNDS="${ROUNDS:-3}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
command -v wrk >/dev/null || { echo "wrk not found (apt-get install -y wrk)" >&2; exit 2; }

cargo build --release -q -p tollgate
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/tollgate"

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

RUST_LOG=warn "$BIN" serve --listen 127.0.0.1:0 --store "$STORE" --data "$WORK/data" \
  >"$WORK/stdout" 2>"$WORK/stderr" &
SERVER_PID=$!
for _ in $(seq 1 200); do
  grep -q '^listening on ' "$WORK/stdout" 2>/dev/null && break
  sleep 0.05
done
URL="$(sed -n 's/^listening on //p' "$WORK/stdout" | head -n1)"
[ -n "$URL" ] || { echo "server did not start:" >&2; cat "$WORK/stderr" >&2; exit 1; }

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?') store=$STORE url=$URL"
echo "# wrk -t$THREADS -c$CONNECTIONS -d$DURATION, ids=$TOLLGATE_BENCH_IDS, rounds=$ROUNDS"
echo "# $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"

run() { # path-script duration
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$2" -s "benches/$1.lua" "$URL" | grep '^RESULT'
}

run healthz 3s >/dev/null
run quota 3s >/dev/null

: >"$WORK/results"
for i in $(seq 1 "$ROUNDS"); do
  run healthz "$DURATION" | tee -a "$WORK/results"
  run quota "$DURATION" | tee -a "$WORK/results"
done

awk '
  function field(name,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } }
  /path=\/healthz/ { h[++nh] = field("rps") }
  /path=\/v1\/quota/ { q[++nq] = field("rps"); p99[nq] = field("p99_us"); bad += field("non2xx") + field("socket_errors") }
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= nq; i++) r[i] = q[i] / h[i]
    mh = median(h, nh); mq = median(q, nq); mr = median(r, nq); mp = median(p99, nq)
    printf "SUMMARY healthz_rps=%.0f quota_rps=%.0f ratio=%.1f%% (goal >= 70%%) quota_p99=%.2fms (goal <= 2ms) quota_errors=%d\n", mh, mq, 100 * mr, mp / 1000, bad
  }' "$WORK/results"
