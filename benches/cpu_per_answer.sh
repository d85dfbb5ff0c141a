#!/usr/bin/env bash
# Server CPU time per answer of `GET /v1/quota`, builds (and the peer) alternated round by round:
# the figure to compare changes by on a machine where throughput rounds move more than the
# change, and where the time goes (user, system, context switches).
#
#   BEFORE_BIN=path/to/old/tollgate benches/cpu_per_answer.sh
#   PEER=1 benches/cpu_per_answer.sh
#
# Environment: BEFORE_BIN (an older build, as "before"), PEER=1 (ThrottleCrab's `POST /throttle`
# with benches/peer.lua, as "throttlecrab"; installed as by benches/peer.sh); at least one of
# the two. TOLLGATE_BIN (default: the release build of this tree, as "after"), ROUNDS (6),
# DURATION (5s), CONNECTIONS ("64 16"), TOLLGATE_BENCH_PATH (/v1/quota), TOLLGATE_BENCH_IDS
# (10000). Tollgate servers run `serve --store embedded` on fresh data directories. Each round
# reads the server's utime and stime from /proc/PID/stat and the context switches of all its
# threads from /proc/PID/task/*/status around one `wrk -t2` run, and divides by the requests
# answered; it also reads wrk's own CPU time (GNU time), since on a machine whose cores the
# load generator shares, what it spends per answer is taken from the server. Prints every
# round, then per server and connection count the medians: µs per answer (user + system, and
# each), context switches per answer, wrk's µs per answer, and requests per second.
set -euo pipefail

ROUNDS="${ROUNDS:-6}"
DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-64 16}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"
export TOLLGATE_BENCH_PATH="${TOLLGATE_BENCH_PATH:-/v1/quota}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
[ -x /usr/bin/time ] || { echo "/usr/bin/time not found (apt-get install -y time)" >&2; exit 2; }
[ -n "${BEFORE_BIN:-}${PEER:-}" ] || { echo "BEFORE_BIN=path/to/the/build/before or PEER=1 is required" >&2; exit 2; }
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

SERVERS=(after)
BINARY="$BIN" start_tollgate after --store embedded --data "$WORK/data-after"
if [ -n "${BEFORE_BIN:-}" ]; then
  BINARY="$BEFORE_BIN" start_tollgate before --store embedded --data "$WORK/data-before"
  SERVERS+=(before)
fi
if [ -n "${PEER:-}" ]; then
  install_throttlecrab
  start_throttlecrab
  SERVERS+=(throttlecrab)
fi
machine_line
HZ="$(getconf CLK_TCK)"

# Context switches (voluntary + not) summed over all threads.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}'; }

round() { # server connections
  local pid="${PID_OF[$1]}" script=benches/load.lua a b sa sb out
  [ "$1" = throttlecrab ] && script=benches/peer.lua
  a="$(cpu_ticks "$pid")"
  sa="$(switches "$pid")"
  out="$(/usr/bin/time -f 'wrk_cpu_s=%U+%S' -o "$WORK/wrk.time" \
    wrk -t2 -c"$2" -d"$DURATION" -s "$script" "${URL[$1]}" | grep '^RESULT')"
  b="$(cpu_ticks "$pid")"
  sb="$(switches "$pid")"
  echo "$out $(tail -n1 "$WORK/wrk.time") $a $b" | awk -v n="$1" -v c="$2" -v hz="$HZ" -v sw=$((sb - sa)) '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    user = ($(NF - 1) - $(NF - 3)) * 1e6 / hz / f["requests"]; sys = ($NF - $(NF - 2)) * 1e6 / hz / f["requests"]
    split(f["wrk_cpu_s"], w, "+")
    printf "ROUND build=%s c=%s rps=%s us_per_answer=%.2f user_us=%.2f system_us=%.2f switches_per_answer=%.3f wrk_us=%.2f\n", \
      n, c, f["rps"], user + sys, user, sys, sw / f["requests"], (w[1] + w[2]) * 1e6 / f["requests"]
  }'
}

: >"$WORK/rounds"
for c in $CONNECTIONS; do
  for _ in $(seq 1 "$ROUNDS"); do
    for s in "${SERVERS[@]}"; do round "$s" "$c" | tee -a "$WORK/rounds"; done
  done
done

awk "$AWK_STATS"'
  /^ROUND/ {
    k = field("build") " c=" field("c"); i = ++n[k]
    r[k, i] = field("rps"); u[k, i] = field("us_per_answer"); us[k, i] = field("user_us")
    sy[k, i] = field("system_us"); sw[k, i] = field("switches_per_answer"); wk[k, i] = field("wrk_us")
  }
  END {
    for (k in n) {
      for (i = 1; i <= n[k]; i++) {
        a[i] = r[k, i]; b[i] = u[k, i]; d[i] = us[k, i]; e[i] = sy[k, i]; g[i] = sw[k, i]; h[i] = wk[k, i]
      }
      printf "SUMMARY %s us_per_answer=%.2f user_us=%.2f system_us=%.2f switches_per_answer=%.3f wrk_us=%.2f rps=%.0f rounds=%d\n", \
        k, median(b, n[k]), median(d, n[k]), median(e, n[k]), median(g, n[k]), median(h, n[k]), median(a, n[k]), n[k]
    }
  }' "$WORK/rounds" | sort
