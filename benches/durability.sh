#!/usr/bin/env bash
# Embedded store durability under load: what `buffered` loses in a kill -9 at full HTTP load,
# that `strict` loses nothing it answered, and the decisions per second of each, side by side.
#
#   benches/durability.sh
#
# Environment: CONNECTIONS ("64 16"), THREADS (2), DURATION (10s, each throughput run),
# ROUNDS (3, kill -9 rounds per durability), KILL_AFTER (3, seconds of load before the kill),
# FLUSH_MS (100, `flush_interval_ms`), TOLLGATE_BENCH_IDS (16), CARGO_TARGET_DIR (target).
# Needs wrk (Debian: apt-get install wrk), curl and python3.
#
# Throughput: for each connection count, a `buffered` server and a `strict` one (release build,
# embedded store, a fresh data directory each) are loaded with wrk on /v1/quota in turn; every
# request is admitted (limit 10^9), so decisions per second = 200 answers per second.
# Goal: strict >= 10,000 decisions/s.
#
# Crash: for each durability, ROUNDS times: a fresh server under wrk -c64 (few ids, every
# request admitted, so the units admitted = the number of 200 answers wrk received), kill -9
# after KILL_AFTER seconds while wrk is still sending, restart on the same data directory and
# sum `used` over GET /v1/counters. lost = answered - persisted (units the clients were told
# were counted and that the restarted server no longer counts); lost_ms = lost / (answered /
# KILL_AFTER) * 1000, the traffic those units represent, to compare with FLUSH_MS. Goal:
# strict loses 0. persisted may exceed answered: checks counted and committed whose answer
# was still on its way when the process died.
# Everything started here is stopped at the end.
set -euo pipefail

CONNECTIONS="${CONNECTIONS:-64 16}"
THREADS="${THREADS:-2}"
DURATION="${DURATION:-10s}"
ROUNDS="${ROUNDS:-3}"
KILL_AFTER="${KILL_AFTER:-3}"
FLUSH_MS="${FLUSH_MS:-100}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-16}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
need curl
need python3

build_tollgate

for d in buffered strict; do
  printf '[store]\nkind = "embedded"\ndurability = "%s"\nflush_interval_ms = %s\n' "$d" "$FLUSH_MS" \
    >"$WORK/$d.toml"
done

start_server() { # durability data-dir
  start_tollgate server --data "$2" --config "$WORK/$1.toml"
}
stop_server() { # [signal]
  stop_tollgate server "${1:-TERM}"
}

# Units the server counts for the bench ids (sum of `used`).
persisted() {
  curl -fsS "${URL[server]}/v1/counters?prefix=Bench:" \
    | python3 -c 'import json, sys; print(sum(c["used"] for c in json.load(sys.stdin)["counters"]))'
}

field() { # name line
  tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"
}

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), embedded store, flush_interval_ms=$FLUSH_MS"
echo "# wrk -t$THREADS, ids=$TOLLGATE_BENCH_IDS, throughput runs of $DURATION at -c{$CONNECTIONS}, crash rounds=$ROUNDS (kill -9 after ${KILL_AFTER}s at -c64)"
machine_line

echo "## throughput (decisions/s = 200 answers/s)"
for c in $CONNECTIONS; do
  for d in buffered strict; do
    start_server "$d" "$WORK/data-tp-$d-$c"
    wrk -t"$THREADS" -c"$c" -d2s -s benches/load.lua "${URL[server]}" >/dev/null
    line="$(wrk -t"$THREADS" -c"$c" -d"$DURATION" -s benches/load.lua "${URL[server]}" | grep '^RESULT')"
    stop_server
    echo "THROUGHPUT durability=$d connections=$c $(sed 's/^RESULT path=[^ ]* //' <<<"$line")"
  done
done

echo "## kill -9 under load"
for d in buffered strict; do
  for i in $(seq 1 "$ROUNDS"); do
    data="$WORK/data-crash-$d-$i"
    start_server "$d" "$data"
    wrk -t"$THREADS" -c64 -d"$((KILL_AFTER + 2))s" -s benches/load.lua "${URL[server]}" >"$WORK/wrk.out" &
    WRK=$!
    sleep "$KILL_AFTER"
    stop_server KILL
    wait "$WRK"
    line="$(grep '^RESULT' "$WORK/wrk.out")"
    answered=$(($(field requests "$line") - $(field non2xx "$line")))
    start_server "$d" "$data"
    kept="$(persisted)"
    stop_server
    awk -v d="$d" -v i="$i" -v a="$answered" -v p="$kept" -v t="$KILL_AFTER" -v f="$FLUSH_MS" 'BEGIN {
      lost = (a > p) ? a - p : 0
      printf "CRASH durability=%s round=%d answered_200=%d persisted=%d lost=%d lost_ms=%.1f flush_interval_ms=%d extra=%d\n",
        d, i, a, p, lost, lost / (a / t) * 1000, f, (p > a) ? p - a : 0
    }'
  done
done
