#!/usr/bin/env bash
# What the usage history's flush costs Redis: two builds of `tollgate serve` on the same Redis
# store in turn, under the same `/v1/quota` load over 10,000 ids (every id decided every
# second, so every flush writes every id: the history's worst case), alternated ROUNDS times.
#
#   BEFORE_BIN=<another build> benches/usage_redis.sh
#
# Environment: BEFORE_BIN (required), TOLLGATE_BIN (default: this tree's release build),
# DURATION (10s), CONNECTIONS (16), ROUNDS (3), TOLLGATE_BENCH_IDS (10000). Needs wrk,
# redis-server and redis-cli.
#
# Per run: the decisions answered per second, redis-server's CPU (user + system, from `INFO
# cpu`) per decision over the wrk run, and Redis' calls by command (`INFO commandstats`: the
# decisions' EVALSHA and the ledger's commands), with the microseconds Redis spent in each.
set -euo pipefail

DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-16}"
ROUNDS="${ROUNDS:-3}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
need redis-server "apt-get install -y redis-server"
need redis-cli "apt-get install -y redis-server"
[ -n "${BEFORE_BIN:-}" ] || { echo "BEFORE_BIN=<a tollgate binary> is required" >&2; exit 2; }
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

start_redis
PORT="$REDIS_PORT"
printf '[store]\ntimeout_ms = 50\n' >"$WORK/config.toml"

redis_cpu() { # seconds of CPU redis-server has used
  redis-cli -p "$PORT" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}

machine_line
printf '%-7s %-6s %9s %14s  %s\n' round build rps "redis µs/dec" "calls (µs each)"
for round in $(seq 1 "$ROUNDS"); do
  for build in before after; do
    bin="$BIN"
    [ "$build" = before ] && bin="$BEFORE_BIN"
    redis-cli -p "$PORT" flushall >/dev/null
    BINARY="$bin" start_tollgate "$build" --store "redis://127.0.0.1:$PORT/0" \
      --data "$WORK/data-$build-$round" --config "$WORK/config.toml"
    url="${URL[$build]}"
    # Warm up: every id once, and the scripts loaded.
    wrk -t1 -c"$CONNECTIONS" -d2s -s benches/load.lua "$url" >/dev/null
    sleep 1.2
    redis-cli -p "$PORT" config resetstat >/dev/null
    before_cpu="$(redis_cpu)"
    d0="$(curl -s "$url/metrics" | awk '/^tollgate_decisions_total/ {s += $2} END {print s + 0}')"
    out="$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s benches/load.lua "$url")"
    # The flush of the run's last second.
    sleep 1.2
    after_cpu="$(redis_cpu)"
    d1="$(curl -s "$url/metrics" | awk '/^tollgate_decisions_total/ {s += $2} END {print s + 0}')"
    stop_tollgate "$build"
    rps="$(awk '/^Requests\/sec/ {printf "%d", $2}' <<<"$out")"
    calls="$(redis-cli -p "$PORT" info commandstats | tr -d '\r' |
      sed -n 's/^cmdstat_\([a-z]*\):calls=\([0-9]*\),usec=[0-9]*,usec_per_call=\([0-9.]*\).*/\1 \2 (\3)/p' |
      grep -v -e '^config ' -e '^info ' -e '^ping ' | tr '\n' ' ')"
    per="$(awk -v a="$before_cpu" -v b="$after_cpu" -v n="$((d1 - d0))" \
      'BEGIN {printf "%.2f", (n > 0 ? (b - a) * 1e6 / n : 0)}')"
    printf '%-7s %-6s %9s %14s  %s\n' "$round" "$build" "$rps" "$per" "$calls"
  done
done
