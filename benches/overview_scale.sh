#!/usr/bin/env bash
# The console's overview over a store of many live counters: the time of one refresh, the
# server's memory, four refreshes at once, and a /healthz answered during one.
#
#   benches/overview_scale.sh [N]     # default N = 1000000 counters, memory store
#
# Environment: TOLLGATE_BIN (run that build instead of building the release binary),
# MAX_COUNTERS (sets `[server] console_max_counters`; unset, the default), LIST=1 (also the
# wall time of `tollgate counters list` writing the whole table to a file). Needs wrk and curl.
#
# The release `tollgate serve` (memory store, usage history off) gets every one of N ids once
# through /v1/quota (benches/memory.lua, a 2-hour calendar window), then GET
# /ui/api/overview three times (100 rows a page), then four at once sorted by share of the
# limit. VmRSS and VmHWM (the peak) are read from /proc after each.
set -euo pipefail

N="${1:-1000000}"
source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
need curl "apt-get install -y curl"
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

printf '[server]\nusage_history = false\n' >"$WORK/t.toml"
[ -z "${MAX_COUNTERS:-}" ] || printf 'console_max_counters = %s\n' "$MAX_COUNTERS" >>"$WORK/t.toml"
start_tollgate s --store memory --config "$WORK/t.toml"
u="${URL[s]}" pid="${PID_OF[s]}"
kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }

machine_line
WINDOW_MIN=120 feed_ids "$u" 0 "$N" >/dev/null
echo "# $N live counters; RSS $(kb VmRSS) KB, peak $(kb VmHWM) KB"
for _ in 1 2 3; do
  t=$(curl -fsS -o "$WORK/ov.json" -w '%{time_total}' "$u/ui/api/overview?per_page=100")
  partial=$(grep -o '"partial":[0-9a-z]*' "$WORK/ov.json" || echo 'no "partial"')
  echo "overview ${t} s, $partial; RSS $(kb VmRSS) KB, peak $(kb VmHWM) KB"
done
start=$(date +%s%N)
clients=()
for _ in 1 2 3 4; do
  curl -fsS -o /dev/null "$u/ui/api/overview?per_page=100&sort=percent&desc=true" &
  clients+=("$!")
done
wait "${clients[@]}"
echo "four at once: $(( ($(date +%s%N) - start) / 1000000 )) ms; peak $(kb VmHWM) KB"
curl -fsS -o /dev/null "$u/ui/api/overview" &
one=$!
sleep 0.05
echo "/healthz during an overview: $(curl -fsS -o /dev/null -w '%{time_total}' "$u/healthz") s"
wait "$one"
if [ "${LIST:-}" = 1 ]; then
  start=$(date +%s%N)
  "$BIN" counters list --url "$u" >"$WORK/list.txt"
  echo "counters list: $(( ($(date +%s%N) - start) / 1000000 )) ms, $(wc -l <"$WORK/list.txt") lines"
fi
