#!/usr/bin/env bash
# The gateway end to end with fsync while wrk drives /v1/quota at half its peak, on ONE
# `tollgate serve` process (embedded store, the gateway with a `dir:` landing directory and a
# `dir:` target, spool and delivery with fsync as always, limits never reached).
#
#   benches/gateway-load.sh
#
# Environment: COUNT (10000 interchanges per drop), SIZE (1024 bytes), ROUNDS (3), DURATION
# (10s, each /v1/quota peak run; PEAK_RUNS of them, default 3), CONNECTIONS (16, peak runs),
# PACED_CONNECTIONS (32, paced runs), THREADS (1), LEAD (1, seconds of paced load before a
# drop), POLL_MS (100, `[gateway] poll_ms`), SETTLE_MS (0: the files arrive by rename, whole),
# MAX_CONCURRENCY (32, the route's `max_concurrency`), TIMEOUT_S (300, per drop),
# TOLLGATE_BENCH_IDS (10000), CARGO_TARGET_DIR (target), PROFILE (a path: `perf record` the
# server during each loaded drop into PROFILE.<round>), TOLLGATE_BIN (run that build instead of
# building the release binary). Needs wrk (apt-get install wrk), curl,
# python3.
#
# 1. Peak: wrk on /v1/quota (benches/load.lua, 10,000 ids, every request admitted), PEAK_RUNS
#    runs with the gateway idle; the median is the peak, half of it the paced target.
# 2. Pacing: wrk has no rate flag, so load.lua waits TOLLGATE_BENCH_DELAY_MS between an answer
#    and the connection's next request; the delay is calibrated on four short runs (idle
#    gateway) and corrected after every loaded round from the rate wrk achieved in it. The rate
#    reported is the one wrk achieved (answers / its run time), never the target.
# 3. Each round: COUNT 1 KB X12 214s (the `drop214` example: testkit's Status214, each parsed
#    back before it is written, unique control numbers across the run) are renamed into the
#    landing dir with wrk idle, then COUNT more while wrk runs paced (from LEAD seconds before
#    the first rename until the last file is delivered). Gateway rate = COUNT / time from the
#    first rename until the last file is in the outbound dir. After each drop the run checks
#    that the outbound dir holds exactly COUNT files, the landing dir is empty, and the
#    gateway's /metrics counted COUNT delivered and no held, rejected, duplicate or dead
#    interchange; otherwise it stops (exit 1).
# Prints every round, then medians. Goal: loaded gateway >= 2,000 interchanges/s, with the
# /v1/quota rate achieved and its p99 beside it.
# Everything started here is stopped at the end.
set -euo pipefail

COUNT="${COUNT:-10000}"
SIZE="${SIZE:-1024}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10s}"
PEAK_RUNS="${PEAK_RUNS:-3}"
CONNECTIONS="${CONNECTIONS:-16}"
PACED_CONNECTIONS="${PACED_CONNECTIONS:-32}"
THREADS="${THREADS:-1}"
LEAD="${LEAD:-1}"
POLL_MS="${POLL_MS:-100}"
SETTLE_MS="${SETTLE_MS:-0}"
MAX_CONCURRENCY="${MAX_CONCURRENCY:-32}"
TIMEOUT_S="${TIMEOUT_S:-300}"
export TOLLGATE_BENCH_IDS="${TOLLGATE_BENCH_IDS:-10000}"

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
need curl
need python3

if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi
cargo build --release -q -p tollgate-gateway --example drop214
DROP="$TARGET/release/examples/drop214"

IN="$WORK/in" OUT="$WORK/out" STAGE="$WORK/stage"
mkdir -p "$IN" "$OUT" "$STAGE"
cat >"$WORK/gateway.toml" <<EOF
[store]
kind = "embedded"

[gateway]
inbound = ["$IN"]
poll_ms = $POLL_MS
settle_ms = $SETTLE_MS

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000000000
interval = 1
unit = "hour"
deliver = "dir:$OUT"
max_concurrency = $MAX_CONCURRENCY
EOF
start_tollgate gateway --data "$WORK/data" --config "$WORK/gateway.toml"
U="${URL[gateway]}"

echo "# tollgate $(git rev-parse --short HEAD 2>/dev/null || echo '?') at $U: embedded store, gateway dir: -> dir: (poll_ms=$POLL_MS settle_ms=$SETTLE_MS max_concurrency=$MAX_CONCURRENCY), one process"
echo "# COUNT=$COUNT interchanges of ~${SIZE} B per drop, rounds=$ROUNDS; peak: wrk -t$THREADS -c$CONNECTIONS -d$DURATION x$PEAK_RUNS; paced: wrk -t$THREADS -c$PACED_CONNECTIONS, ids=$TOLLGATE_BENCH_IDS"
machine_line

# The gateway's interchange counters (summed over labels), as "name=value …".
gateway_counts() {
  curl -fsS "$U/metrics" | awk '
    /^tollgate_gateway_(received|delivered|held|duplicates|rejected|dead)_total/ {
      name = $1; sub(/\{.*/, "", name); sub(/^tollgate_gateway_/, "", name); sub(/_total$/, "", name); n[name] += $NF
    }
    END { printf "received=%d delivered=%d held=%d duplicates=%d rejected=%d dead=%d\n",
      n["received"], n["delivered"], n["held"], n["duplicates"], n["rejected"], n["dead"] }'
}
field() { # name line
  tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"
}
files() { # dir: files not named with a leading dot
  find "$1" -mindepth 1 -maxdepth 1 ! -name '.*' | wc -l
}

# Writes COUNT new interchanges, renames them into the landing dir, waits for their delivery,
# checks every one was delivered and none held/rejected; the drop214 DROP line goes to
# WORK/drop.out. (Not in a subshell: CONTROL must carry on.)
CONTROL=1
drop() {
  "$DROP" write "$STAGE" "$COUNT" "$SIZE" "$CONTROL" >"$WORK/write.out"
  CONTROL=$((CONTROL + COUNT))
  sync
  local before after line i d k
  before="$(gateway_counts)"
  line="$("$DROP" drop "$STAGE" "$IN" "$OUT" "$TIMEOUT_S")"
  # The delivered counter follows the file's rename by a commit: give it a moment.
  for i in $(seq 1 100); do
    after="$(gateway_counts)"
    [ $(($(field delivered "$after") - $(field delivered "$before"))) -ge "$COUNT" ] && break
    sleep 0.1
  done
  for k in received delivered held duplicates rejected dead; do
    d=$(($(field "$k" "$after") - $(field "$k" "$before")))
    case "$k" in
      received | delivered) [ "$d" -eq "$COUNT" ] || { echo "$k: $d of $COUNT ($before -> $after)" >&2; exit 1; } ;;
      *) [ "$d" -eq 0 ] || { echo "$k: $d interchanges ($before -> $after)" >&2; exit 1; } ;;
    esac
  done
  [ "$(files "$OUT")" -eq "$COUNT" ] || { echo "outbound holds $(files "$OUT") files, expected $COUNT" >&2; exit 1; }
  [ "$(files "$IN")" -eq 0 ] || { echo "landing dir still holds $(files "$IN") files" >&2; exit 1; }
  find "$OUT" -mindepth 1 -maxdepth 1 -delete
  echo "$line" >"$WORK/drop.out"
}

quota() { # duration [delay_ms]: one wrk run on /v1/quota, its RESULT line
  TOLLGATE_BENCH_DELAY_MS="${2:-}" wrk -t"$THREADS" -c"${3:-$CONNECTIONS}" -d"$1" -s benches/load.lua "$U" \
    | grep '^RESULT'
}
calc() { python3 -c "print($1)"; }

# Warm-up: both paths once.
quota 3s >/dev/null
COUNT_WARM="$COUNT"; COUNT=500; drop; COUNT="$COUNT_WARM"

: >"$WORK/peak"
for i in $(seq 1 "$PEAK_RUNS"); do
  quota "$DURATION" | tee -a "$WORK/peak" | sed 's/^RESULT/PEAK/'
done
PEAK="$(python3 -c 'import statistics, sys; print(statistics.median(float(l.split("rps=")[1].split()[0]) for l in sys.stdin))' <"$WORK/peak")"
GOAL_RPS="$(calc "round($PEAK / 2)")"
# A connection's cycle is its delay plus the answer's latency (plus wrk's timer rounding): start
# from the target cycle, then move the delay along the line through the last two runs
# (delay, cycle) toward the target cycle.
CYCLE="$(calc "$PACED_CONNECTIONS * 1000 / $GOAL_RPS")"
DELAY="$CYCLE" PREV=""
for _ in 1 2 3 4; do
  got="$(field rps "$(quota 3s "$DELAY" "$PACED_CONNECTIONS")")"
  cyc="$(calc "$PACED_CONNECTIONS * 1000 / $got")"
  if [ -z "$PREV" ]; then
    NEXT="$(calc "max(0.0, $DELAY + $CYCLE - $cyc)")"
  else
    NEXT="$(python3 -c "
d0, c0, d1, c1, t = $PREV, $DELAY, $cyc, $CYCLE
slope = (c1 - c0) / (d1 - d0) if d1 != d0 and c1 != c0 else 1.0
print(max(0.0, d1 + (t - c1) / max(slope, 0.2)))")"
  fi
  echo "# pacing: target $GOAL_RPS/s; delay $DELAY ms achieved $got/s; next delay $NEXT ms"
  PREV="$DELAY, $cyc"
  DELAY="$NEXT"
done
: >"$WORK/rounds"
for r in $(seq 1 "$ROUNDS"); do
  load="$(cut -d' ' -f1 /proc/loadavg)"
  drop
  idle="$(cat "$WORK/drop.out")"
  sleep 2
  TOLLGATE_BENCH_DELAY_MS="$DELAY" wrk -t"$THREADS" -c"$PACED_CONNECTIONS" -d3600s -s benches/load.lua "$U" \
    >"$WORK/wrk.out" &
  WRK=$!
  track "$WRK" wrk
  sleep "$LEAD"
  if [ -n "${PROFILE:-}" ]; then
    perf record -q -F 499 -g -p "${PID_OF[gateway]}" -o "$PROFILE.$r" 2>/dev/null &
    PERF=$!
  fi
  drop
  loaded="$(cat "$WORK/drop.out")"
  if [ -n "${PROFILE:-}" ]; then kill -INT "$PERF"; wait "$PERF" || true; fi
  kill -INT "$WRK"
  wait "$WRK" || true
  untrack "$WRK"
  q="$(grep '^RESULT' "$WORK/wrk.out")" || { echo "wrk printed no result:" >&2; cat "$WORK/wrk.out" >&2; exit 1; }
  echo "ROUND $r load=$load idle_rate=$(field rate "$idle") idle_secs=$(field secs "$idle") loaded_rate=$(field rate "$loaded") loaded_secs=$(field secs "$loaded") quota_target=$GOAL_RPS quota_rps=$(field rps "$q") quota_p50_us=$(field p50_us "$q") quota_p99_us=$(field p99_us "$q") quota_errors=$(($(field non2xx "$q") + $(field socket_errors "$q"))) delay_ms=$DELAY" \
    | tee -a "$WORK/rounds"
  # Correct the delay by half the latency the loaded run added (damped: rounds are noisy).
  DELAY="$(calc "max(0.0, $DELAY + ($CYCLE - $PACED_CONNECTIONS * 1000 / $(field rps "$q")) / 2)")"
  sleep 2
done

echo "# CPU time used by the server over the run:"
cpu_times
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v peak="$PEAK" -v goal="$GOAL_RPS" "$AWK_STATS"'
  /^ROUND/ { n++; idle[n] = field("idle_rate"); loaded[n] = field("loaded_rate"); q[n] = field("quota_rps"); p99[n] = field("quota_p99_us"); err += field("quota_errors") }
  END {
    l = median(loaded, n)
    printf "SUMMARY quota_peak_rps=%.0f quota_target_rps=%d quota_achieved_rps=%.0f quota_p99=%.2fms quota_errors=%d gateway_idle=%.0f/s gateway_loaded=%.0f/s (goal >= 2000/s: %s)\n",
      peak, goal, median(q, n), median(p99, n) / 1000, err, median(idle, n), l, (l >= 2000) ? "met" : "NOT met"
  }' "$WORK/rounds"
