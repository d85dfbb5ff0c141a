#!/usr/bin/env bash
# Tollgate against ThrottleCrab, side by side in one run: `GET /v1/quota` (embedded store,
# benches/load.lua) against ThrottleCrab's `POST /throttle` (benches/peer.lua), the same
# 10,000 ids, the same admitted-always limit, the two servers alternating round by round.
#
#   benches/peer.sh
#
# Environment: DURATION (default 10s), CONNECTIONS ("64 16"), THREADS (2), ROUNDS (3),
# TOLLGATE_BENCH_IDS (10000), CARGO_TARGET_DIR (target). Needs wrk (apt-get install wrk),
# and protoc to build ThrottleCrab (apt-get install protobuf-compiler).
# TOLLGATE_BIN=path/to/tollgate uses that build instead of building the release binary.
# BASELINE_BIN=path/to/an/older/tollgate adds that binary as a third server ("baseline") in
# the same rounds, to show a change before and after in one run.
# CEILING=1 adds the first Tollgate server's `GET /healthz` ("ceiling": the same wrk script,
# headers ignored) as one more column in the same rounds: what the server's HTTP stack answers
# with no decision behind it, beside the peer's whole answer.
# FLOOR=1 adds the `canned_answer` example of tollgate-server ("floor"): a loop that answers
# every request head with the same bytes as an allowed answer, without parsing or deciding;
# what any HTTP stack costs beyond it is that stack's own work.
#
# It installs throttlecrab-server 0.4.40 into target/peers if it is not there yet
# (`cargo install --locked`, a few minutes once), builds the release `tollgate`, starts
# `throttlecrab-server --http` and `tollgate serve --store embedded` (fresh data directory) on
# free loopback ports, warms both up, then for each connection count runs ROUNDS rounds of
# wrk --latency on each server in turn, and prints every round and a summary per connection
# count: median decisions/s, p50 and p99 of each, and the median per-round ratio
# Tollgate/ThrottleCrab. Goal: ratio >= 1.2 and Tollgate p99 <= ThrottleCrab p99.
# Everything started here is stopped at the end.
set -euo pipefail

DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-64 16}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"

install_throttlecrab

if [ -n "${TOLLGATE_BIN:-}" ]; then
  BIN="$TOLLGATE_BIN"
else
  build_tollgate
fi

start_server() { # name binary
  BINARY="$2" start_tollgate "$1" --store embedded --data "$WORK/data-$1"
}
SERVERS=(tollgate throttlecrab)
start_server tollgate "$BIN"
if [ -n "${BASELINE_BIN:-}" ]; then
  start_server baseline "$BASELINE_BIN"
  SERVERS+=(baseline)
fi
if [ -n "${CEILING:-}" ]; then
  URL[ceiling]="${URL[tollgate]}"
  SERVERS+=(ceiling)
fi
if [ -n "${FLOOR:-}" ]; then
  cargo build --release -q -p tollgate-server --example canned_answer
  "$TARGET/release/examples/canned_answer" >"$WORK/floor.stdout" 2>&1 &
  track "$!" floor
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$WORK/floor.stdout" 2>/dev/null && break
    sleep 0.05
  done
  URL[floor]="$(sed -n 's/^listening on //p' "$WORK/floor.stdout" | head -n1)"
  [ -n "${URL[floor]}" ] || { echo "canned_answer did not start" >&2; exit 1; }
  SERVERS+=(floor)
fi

start_throttlecrab

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?') at ${URL[tollgate]} (embedded store); throttlecrab-server $PEER_VERSION at ${URL[throttlecrab]}${BASELINE_BIN:+; baseline $BASELINE_BIN at ${URL[baseline]:-}}"
WRK=(wrk)
[ -n "${WRK_NICE:-}" ] && WRK=(nice -n "$WRK_NICE" wrk)
echo "# ${WRK[*]} -t$THREADS -c{$CONNECTIONS} -d$DURATION --latency, ids=$TOLLGATE_BENCH_IDS, rounds=$ROUNDS, servers alternating"
machine_line

run() { # server connections duration
  local script=benches/load.lua
  [ "$1" = throttlecrab ] && script=benches/peer.lua
  local path=/v1/quota
  [ "$1" = ceiling ] && path=/healthz
  TOLLGATE_BENCH_PATH="$path" "${WRK[@]}" -t"$THREADS" -c"$2" -d"$3" --latency -s "$script" "${URL[$1]}" \
    | grep '^RESULT' \
    | sed "s/^RESULT /RESULT server=$1 c=$2 /"
}

for s in "${SERVERS[@]}"; do run "$s" 64 3s >/dev/null; done

: >"$WORK/results"
for c in $CONNECTIONS; do
  for i in $(seq 1 "$ROUNDS"); do
    for s in "${SERVERS[@]}"; do run "$s" "$c" "$DURATION" | tee -a "$WORK/results"; done
  done
done

awk -v servers="${SERVERS[*]}" "$AWK_STATS"'
  /^RESULT/ {
    s = field("server"); c = field("c")
    if (!(c in seen)) { seen[c] = 1; order[++nc] = c }
    k = s SUBSEP c; i = ++n[k]
    rps[k, i] = field("rps"); p50[k, i] = field("p50_us"); p99[k, i] = field("p99_us")
    bad[k] += field("non2xx") + field("socket_errors")
  }
  END {
    printf "%-5s %-13s %10s %8s %8s %7s\n", "conns", "server", "rps", "p50_ms", "p99_ms", "errors"
    for (x = 1; x <= nc; x++) {
      c = order[x]
      ns = split(servers, names, " ")
      for (y = 1; y <= ns; y++) {
        s = names[y]; k = s SUBSEP c
        for (i = 1; i <= n[k]; i++) { a1[i] = rps[k, i]; a2[i] = p50[k, i]; a3[i] = p99[k, i] }
        mr[s] = median(a1, n[k]); m50[s] = median(a2, n[k]); m99[s] = median(a3, n[k])
        printf "%-5s %-13s %10.0f %8.2f %8.2f %7d\n", c, s, mr[s], m50[s] / 1000, m99[s] / 1000, bad[k]
      }
      m = n["tollgate", c]
      for (i = 1; i <= m; i++) r[i] = rps["tollgate", c, i] / rps["throttlecrab", c, i]
      printf "SUMMARY c=%s ratio=%.2f (goal >= 1.2) tollgate_p99=%.2fms throttlecrab_p99=%.2fms (goal: tollgate <= throttlecrab) errors=%d\n", \
        c, median(r, m), m99["tollgate"] / 1000, m99["throttlecrab"] / 1000, bad["tollgate", c] + bad["throttlecrab", c]
      if ("baseline" in m99) {
        for (i = 1; i <= m; i++) r[i] = rps["baseline", c, i] / rps["throttlecrab", c, i]
        printf "BASELINE c=%s ratio=%.2f baseline_p99=%.2fms\n", c, median(r, m), m99["baseline"] / 1000
      }
      if ("ceiling" in m99) {
        for (i = 1; i <= m; i++) r[i] = rps["ceiling", c, i] / rps["throttlecrab", c, i]
        for (i = 1; i <= m; i++) q[i] = rps["tollgate", c, i] / rps["ceiling", c, i]
        printf "CEILING c=%s healthz/throttlecrab=%.2f quota/healthz=%.2f healthz_p99=%.2fms\n", c, median(r, m), median(q, m), m99["ceiling"] / 1000
      }
      if ("floor" in m99) {
        for (i = 1; i <= m; i++) r[i] = rps["floor", c, i] / rps["throttlecrab", c, i]
        for (i = 1; i <= m; i++) q[i] = rps["tollgate", c, i] / rps["floor", c, i]
        printf "FLOOR c=%s floor/throttlecrab=%.2f quota/floor=%.2f floor_p99=%.2fms\n", c, median(r, m), median(q, m), m99["floor"] / 1000
      }
    }
  }' "$WORK/results"
echo "# CPU time used by each server over the run:"
cpu_times
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
