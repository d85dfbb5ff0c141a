#!/usr/bin/env bash
# Resident memory of the release `tollgate serve` per live counter, and what it gives back once
# the windows have expired: the shipped binary (its allocator included), fed over HTTP.
#
#   benches/memory.sh [memory|embedded ...]   # default: both stores, one after the other
#
# Environment: TOLLGATE_BENCH_IDS (default 1000000), CONNECTIONS (16), THREADS (2),
# WINDOW_MIN (2: the counters' calendar window in minutes; the feed must fit in one),
# SETTLE (30: seconds to wait after the windows' end), TOLLGATE_BIN (run that build instead of
# building the release binary). Needs wrk and curl (Debian: apt-get install wrk curl).
#
# For each store it starts `tollgate serve` with `[server] usage_history = false` and a fresh
# data directory, waits for the start of a calendar window, and reads the server's VmRSS. It
# sends every one of the N ids once to /v1/quota (benches/memory.lua), first half then second
# half, stopping wrk each time once the server's `tollgate_live_counters` gauge holds them all,
# and prints the RSS and the bytes per live counter (the growth over all N, and over the second
# half alone). Then, with a /healthz request a second as the only traffic, it waits until SETTLE
# seconds after the window's end and prints the RSS again, the gauge (0 once swept) and how much
# of the growth was given back.
set -euo pipefail

N="${TOLLGATE_BENCH_IDS:-1000000}"
CONNECTIONS="${CONNECTIONS:-16}"
THREADS="${THREADS:-2}"
WINDOW_MIN="${WINDOW_MIN:-2}"
SETTLE="${SETTLE:-30}"
STORES=("$@")
[ "${#STORES[@]}" -gt 0 ] || STORES=(memory embedded)

source "$(dirname "$0")/lib.sh"
need wrk "apt-get install -y wrk"
need curl "apt-get install -y curl"
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

rss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; }

machine_line
echo "# $N ids of 23 B (ShipmentStatus:C0000000), $WINDOW_MIN-minute calendar windows, usage history off"
window_s=$((WINDOW_MIN * 60))
for store in "${STORES[@]}"; do
  printf '[server]\nusage_history = false\n' >"$WORK/$store.toml"
  start_tollgate "$store" --store "$store" --data "$WORK/$store-data" --config "$WORK/$store.toml"
  u="${URL[$store]}" pid="${PID_OF[$store]}"
  curl -fsS "$u/healthz" >/dev/null
  # Start right after a window opens, so every counter shares the window and expires with it.
  while [ $(($(date +%s) % window_s)) -ne 0 ]; do sleep 0.2; done
  window_end=$(($(date +%s) + window_s))
  before="$(rss "$pid")"
  feed_ids "$u" 0 $((N / 2))
  half="$(rss "$pid")"
  feed_ids "$u" $((N / 2)) "$N"
  full="$(rss "$pid")"
  held="$(live_counters "$u")"
  [ "$(date +%s)" -lt "$window_end" ] || { echo "the feed outlasted the window: raise WINDOW_MIN" >&2; exit 1; }
  while [ "$(date +%s)" -lt $((window_end + SETTLE)) ]; do curl -fsS "$u/healthz" >/dev/null; sleep 1; done
  after="$(rss "$pid")"
  left="$(live_counters "$u")"
  awk -v s="$store" -v n="$N" -v b="$before" -v h="$half" -v f="$full" -v a="$after" \
      -v held="$held" -v left="$left" -v settle="$SETTLE" 'BEGIN {
    printf "RESULT store=%s live_counters=%s rss_before_mib=%.1f rss_live_mib=%.1f per_counter_b=%.1f second_half_b=%.1f\n",
      s, held, b / 1048576, f / 1048576, (f - b) / n, (f - h) / (n - int(n / 2))
    printf "RESULT store=%s %ss_after_the_window: live_counters=%s rss_mib=%.1f given_back=%.1f%%\n",
      s, settle, left, a / 1048576, 100 * (f - a) / (f - b)
  }'
  stop_tollgate "$store"
done
