#!/usr/bin/env bash
# Server CPU time per answer of `GET /v1/quota`, two builds alternated round by round: the
# figure to compare changes by on a machine where throughput rounds move more than the change.
#
#   BEFORE_BIN=path/to/old/tollgate benches/cpu_per_answer.sh
#
# Environment: BEFORE_BIN (required), TOLLGATE_BIN (default: the release build of this tree),
# ROUNDS (6), DURATION (5s), CONNECTIONS ("64 16"), TOLLGATE_BENCH_PATH (/v1/quota),
# TOLLGATE_BENCH_IDS (10000). Both servers run `serve --store embedded` on fresh data
# directories; each round reads the server's utime + stime from /proc/PID/stat around one
# `wrk -t2 -s benches/load.lua` run and divides by the requests answered. Prints every round,
# then per build and connection count the median µs per answer and requests per second.
set -euo pipefail

ROUNDS="${ROUNDS:-6}"
DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-64 16}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"
export TOLLGATE_BENCH_PATH="${TOLLGATE_BENCH_PATH:-/v1/quota}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
[ -n "${BEFORE_BIN:-}" ] || { echo "BEFORE_BIN=path/to/the/build/before is required" >&2; exit 2; }
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

BINARY="$BIN" start_tollgate after --store embedded --data "$WORK/data-after"
BINARY="$BEFORE_BIN" start_tollgate before --store embedded --data "$WORK/data-before"
machine_line
HZ="$(getconf CLK_TCK)"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

round() { # name connections
  local pid="${PID_OF[$1]}" a b out
  a="$(ticks "$pid")"
  out="$(wrk -t2 -c"$2" -d"$DURATION" -s benches/load.lua "${URL[$1]}" | grep '^RESULT')"
  b="$(ticks "$pid")"
  echo "$out" | awk -v n="$1" -v c="$2" -v t=$((b - a)) -v hz="$HZ" '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    printf "ROUND build=%s c=%s rps=%s us_per_answer=%.2f\n", n, c, f["rps"], t * 1e6 / hz / f["requests"]
  }'
}

: >"$WORK/rounds"
for c in $CONNECTIONS; do
  for _ in $(seq 1 "$ROUNDS"); do
    round after "$c" | tee -a "$WORK/rounds"
    round before "$c" | tee -a "$WORK/rounds"
  done
done

awk "$AWK_STATS"'
  /^ROUND/ { k = field("build") " c=" field("c"); i = ++n[k]; r[k, i] = field("rps"); u[k, i] = field("us_per_answer") }
  END {
    for (k in n) {
      for (i = 1; i <= n[k]; i++) { a[i] = r[k, i]; b[i] = u[k, i] }
      printf "SUMMARY %s us_per_answer=%.2f rps=%.0f rounds=%d\n", k, median(b, n[k]), median(a, n[k]), n[k]
    }
  }' "$WORK/rounds" | sort
