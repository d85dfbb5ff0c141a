#!/usr/bin/env bash
# CPU of an idle release `tollgate serve` with a `[gateway]`: nothing arrives, so it should cost
# (almost) nothing.
#
#   benches/idle.sh                  # SECONDS_IDLE=30 ROUNDS=3 POLL_MS=500 (the default poll)
#
# Environment: TOLLGATE_BIN (run that build instead of building the release binary).
#
# Each round starts the server with the default gateway settings (`poll_ms` 500, one empty
# landing directory, one `dir:` route) and a fresh data directory, waits 5 s for start-up to
# finish, then reads the process' utime + stime from /proc/PID/stat, waits SECONDS_IDLE, reads
# them again and prints the share of one core used meanwhile, with the listings of the landing
# directory counted by `tollgate_gateway_landing_scans_total`. Goal (issue 24): ≤ 0.5 % of a
# core.
set -euo pipefail

SECONDS_IDLE="${SECONDS_IDLE:-30}"
ROUNDS="${ROUNDS:-3}"
POLL_MS="${POLL_MS:-500}"

source "$(dirname "$0")/lib.sh"
need curl "apt-get install -y curl"
if [ -n "${TOLLGATE_BIN:-}" ]; then BIN="$TOLLGATE_BIN"; else build_tollgate; fi

ticks() { cpu_ticks "$1" | awk '{ print $1 + $2 }'; }
scans() { curl -fsS "$1/metrics" | awk '/^tollgate_gateway_landing_scans_total / { print $2 }'; }
HZ="$(getconf CLK_TCK)"

machine_line
for round in $(seq 1 "$ROUNDS"); do
  dir="$WORK/round-$round"
  mkdir -p "$dir/in" "$dir/out"
  cat >"$dir/tollgate.toml" <<TOML
[server]
data = "$dir/data"

[gateway]
inbound = ["$dir/in"]
poll_ms = $POLL_MS

[[gateway.route]]
name = "ShipmentStatus"
documents = ["214"]
limit = 1000
unit = "day"
deliver = "dir:$dir/out"
TOML
  start_tollgate "idle-$round" --config "$dir/tollgate.toml"
  pid="${PID_OF[idle-$round]}"
  url="${URL[idle-$round]}"
  sleep 5
  t0="$(ticks "$pid")"
  s0="$(scans "$url")"
  sleep "$SECONDS_IDLE"
  t1="$(ticks "$pid")"
  s1="$(scans "$url")"
  awk -v t="$((t1 - t0))" -v hz="$HZ" -v s="$SECONDS_IDLE" -v n="$((s1 - s0))" -v r="$round" \
    'BEGIN { printf "ROUND %d cpu_ticks=%d cpu_share=%.3f%% listings=%d (%.2f/s)\n", r, t, 100 * t / hz / s, n, n / s }'
  stop_tollgate "idle-$round"
done
