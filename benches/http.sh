#!/usr/bin/env bash
# HTTP load run: /v1/quota (10,000 distinct ids) against /healthz on the same release server,
# and, with `redis`, the Redis store next to the embedded store in the same run.
#
#   benches/http.sh [memory|embedded]        # one store (default: embedded)
#   benches/http.sh redis                    # embedded and Redis, same load, same run
#   benches/http.sh usage                    # embedded, usage history off and on, same run
#
# Environment: DURATION (default 20s), CONNECTIONS (16), THREADS (1), ROUNDS (3),
# TOLLGATE_BENCH_IDS (10000), CARGO_TARGET_DIR (target). Needs wrk (Debian: apt-get install wrk),
# and for `redis` redis-server and redis-cli (apt-get install redis-server).
#
# It builds the release binary, starts `tollgate serve` on a free loopback port with a fresh
# data directory (for `redis` also a redis-server on a free port in a temp dir, and a second
# `tollgate serve --store redis://…` on it), warms every path up, then runs /healthz and
# /v1/quota on each store in turn, ROUNDS times, and prints every run and a summary:
# - one store: median ratio quota/healthz and the quota p99. Goal: ratio >= 70%, p99 <= 2 ms.
# - redis: per store rps, p50, p99, ratio to /healthz, and the median per-round ratio
#   Redis/embedded. Goal: Redis >= 50% of embedded, Redis p99 <= 3 ms. Then Redis
#   `INFO commandstats` against the decisions the Redis-backed server made during the measured
#   runs (from its /metrics): one EVALSHA per decision, with Redis' time per call, and the CPU
#   time each process of the run used.
# - usage: two embedded servers, `[server] usage_history = false` and the default (on); per
#   server rps, p50, p99, and the median per-round ratio on/off. Goal: on >= 95% of off.
# Everything started here is stopped at the end.
set -euo pipefail

MODE="${1:-embedded}"
DURATION="${DURATION:-20s}"
CONNECTIONS="${CONNECTIONS:-16}"
THREADS="${THREADS:-1}"
ROUNDS="${ROUNDS:-3}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"

case "$MODE" in
  memory | embedded) STORES=("$MODE") ;;
  redis) STORES=(embedded redis) ;;
  usage) STORES=(usage_off usage_on) ;;
  *) echo "usage: $0 [memory|embedded|redis|usage]" >&2; exit 2 ;;
esac

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
if [ "$MODE" = redis ]; then
  need redis-server "apt-get install -y redis-server"
  need redis-cli "apt-get install -y redis-server"
fi

build_tollgate

REDIS_PORT=""
[ "$MODE" != redis ] || start_redis

start_server() { # store
  local store="$1" arg="$1"
  [ "$store" = redis ] && arg="redis://127.0.0.1:$REDIS_PORT/0"
  case "$store" in usage_on | usage_off) arg=embedded ;; esac
  local usage=true
  [ "$store" = usage_off ] && usage=false
  printf '[server]\nusage_history = %s\n' "$usage" >"$WORK/$store.toml"
  LABEL="tollgate --store $store" start_tollgate "$store" --store "$arg" --data "$WORK/data-$store" --config "$WORK/$store.toml"
}
for s in "${STORES[@]}"; do start_server "$s"; done

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?') mode=$MODE$(for s in "${STORES[@]}"; do printf ' %s=%s' "$s" "${URL[$s]}"; done)"
[ -n "$REDIS_PORT" ] && echo "# $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$REDIS_PORT"
echo "# wrk -t$THREADS -c$CONNECTIONS -d$DURATION, ids=$TOLLGATE_BENCH_IDS, rounds=$ROUNDS"
machine_line

run() { # store healthz|quota duration
  local path=/v1/quota
  [ "$2" = healthz ] && path=/healthz
  TOLLGATE_BENCH_PATH="$path" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$3" -s benches/load.lua "${URL[$1]}" | grep '^RESULT' \
    | sed "s/^RESULT /RESULT store=$1 /"
}

# Decisions (all outcomes) the server of a store has made so far, from its /metrics.
decisions() { # store
  curl -fsS "${URL[$1]}/metrics" | awk '/^tollgate_decisions_total/ { n += $NF } END { printf "%d\n", n }'
}

for s in "${STORES[@]}"; do
  run "$s" healthz 3s >/dev/null
  run "$s" quota 3s >/dev/null
done

if [ -n "$REDIS_PORT" ]; then
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  DECISIONS_BEFORE="$(decisions redis)"
fi

: >"$WORK/results"
for i in $(seq 1 "$ROUNDS"); do
  for s in "${STORES[@]}"; do
    run "$s" healthz "$DURATION" | tee -a "$WORK/results"
    run "$s" quota "$DURATION" | tee -a "$WORK/results"
  done
done

awk -v mode="$MODE" "$AWK_STATS"'
  /^RESULT/ {
    s = field("store")
    if (!(s in seen)) { seen[s] = 1; order[++ns] = s }
    if (field("path") == "/healthz") { c = ++nh[s]; h[s, c] = field("rps") }
    else {
      c = ++nq[s]; k = s SUBSEP c; q[k] = field("rps"); p50[k] = field("p50_us"); p99[k] = field("p99_us")
      bad[s] += field("non2xx") + field("socket_errors")
    }
  }
  END {
    for (x = 1; x <= ns; x++) {
      s = order[x]; n = nq[s]
      for (i = 1; i <= n; i++) { k = s SUBSEP i; a1[i] = h[k]; a2[i] = q[k]; a3[i] = p50[k]; a4[i] = p99[k]; a5[i] = q[k] / h[k] }
      mh[s] = median(a1, n); mq[s] = median(a2, n); m50[s] = median(a3, n); m99[s] = median(a4, n); mr[s] = median(a5, n)
    }
    if (mode == "usage") {
      printf "%-9s %12s %11s %9s %9s %15s %7s\n", "server", "healthz_rps", "quota_rps", "p50_ms", "p99_ms", "quota/healthz", "errors"
      for (x = 1; x <= ns; x++) {
        s = order[x]
        printf "%-9s %12.0f %11.0f %9.2f %9.2f %14.1f%% %7d\n", s, mh[s], mq[s], m50[s] / 1000, m99[s] / 1000, 100 * mr[s], bad[s]
      }
      for (i = 1; i <= nq["usage_on"]; i++) { r[i] = q["usage_on", i] / q["usage_off", i]; printf "ROUND %d usage_on/usage_off=%.1f%%\n", i, 100 * r[i] }
      printf "SUMMARY usage_on_rps=%.0f usage_off_rps=%.0f ratio_on_off=%.1f%% (goal >= 95%%) errors=%d\n", mq["usage_on"], mq["usage_off"], 100 * median(r, nq["usage_on"]), bad["usage_on"] + bad["usage_off"]
      exit
    }
    if (mode != "redis") {
      s = order[1]
      printf "SUMMARY healthz_rps=%.0f quota_rps=%.0f ratio=%.1f%% (goal >= 70%%) quota_p99=%.2fms (goal <= 2ms) quota_errors=%d\n", mh[s], mq[s], 100 * mr[s], m99[s] / 1000, bad[s]
      exit
    }
    printf "%-9s %12s %11s %9s %9s %15s %7s\n", "store", "healthz_rps", "quota_rps", "p50_ms", "p99_ms", "quota/healthz", "errors"
    for (x = 1; x <= ns; x++) {
      s = order[x]
      printf "%-9s %12.0f %11.0f %9.2f %9.2f %14.1f%% %7d\n", s, mh[s], mq[s], m50[s] / 1000, m99[s] / 1000, 100 * mr[s], bad[s]
    }
    for (i = 1; i <= nq["redis"]; i++) r[i] = q["redis", i] / q["embedded", i]
    printf "SUMMARY redis_rps=%.0f embedded_rps=%.0f ratio_redis_embedded=%.1f%% (goal >= 50%%) redis_p99=%.2fms (goal <= 3ms) errors=%d\n", mq["redis"], mq["embedded"], 100 * median(r, nq["redis"]), m99["redis"] / 1000, bad["redis"] + bad["embedded"]
  }' "$WORK/results"

if [ -n "$REDIS_PORT" ]; then
  DECISIONS="$(( $(decisions redis) - DECISIONS_BEFORE ))"
  echo "# Redis INFO commandstats over the measured runs ($DECISIONS decisions by the Redis-backed server):"
  redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' | grep '^cmdstat_' \
    | sed 's/,usec=[0-9]*,/,/; s/,rejected_calls=.*$//' | sed 's/^/#   /'
  EVALSHA="$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')"
  echo "# CPU time used by the processes of this run (where the cores went):"
  cpu_times
  awk -v e="${EVALSHA:-0}" -v d="$DECISIONS" 'BEGIN { printf "COMMANDS evalsha=%d decisions=%d evalsha_per_decision=%.4f (goal 1)\n", e, d, (d ? e / d : 0) }'
fi
