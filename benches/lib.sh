# The start-up the load scripts of benches/ share; sourced, never run on its own.
#
# After `source benches/lib.sh`: the working directory is the repository root, ROOT and TARGET
# (CARGO_TARGET_DIR or target/) are set, WORK is a fresh temp dir, and every process handed to
# `track` (servers started with `start_tollgate` are) gets SIGTERM and is waited for when the
# script exits, after which WORK is removed.
#
#   need wrk "apt-get install -y wrk"  # exit 2 when a program is missing, with the hint
#   build_tollgate                     # release build; BIN is the binary
#   start_tollgate NAME [serve args…]  # on a free loopback port; URL[NAME], PID_OF[NAME]
#   stop_tollgate NAME [SIGNAL]        # SIGTERM (or SIGNAL), wait, forget it
#   track PID NAME / untrack PID       # stop another process at exit / no longer
#   free_port                          # a free loopback TCP port
#   cpu_ticks PID                      # "user system" CPU ticks (CLK_TCK a second) used so far
#   install_throttlecrab               # the peer's binary into target/peers (PEER_BIN), once
#   start_throttlecrab                 # its HTTP server on a free port; URL[throttlecrab], PID_OF[throttlecrab]
#   machine_line                       # "# 2 cores, 8 GiB, Linux …, load average …"
#   start_redis                        # redis-server on a free port, files in WORK; REDIS_PORT
#   live_counters URL                  # the server's tollgate_live_counters gauge
#   feed_ids URL FROM TO               # ids FROM..TO-1 once each to /v1/quota (benches/memory.lua)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

WORK="$(mktemp -d)"
PIDS=()
NAMES=()
declare -A URL
declare -A PID_OF

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

need() { # program [how to install it]
  command -v "$1" >/dev/null || { echo "$1 not found${2:+ ($2)}" >&2; exit 2; }
}

# Builds the release `tollgate`; BIN is the binary.
build_tollgate() {
  cargo build --release -q -p tollgate
  BIN="$TARGET/release/tollgate"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cpu_ticks() { # pid
  awk '{print $14, $15}' "/proc/$1/stat"
}

# Registers a background process to stop at exit (and, with NAME, to list in `cpu_times`).
track() { # pid name
  PIDS+=("$1")
  NAMES+=("$2")
}

# Forgets a tracked process that has ended.
untrack() { # pid
  local i
  for i in "${!PIDS[@]}"; do [ "${PIDS[$i]}" = "$1" ] && PIDS[$i]=""; done
  return 0
}

# Starts `$BIN serve --listen 127.0.0.1:0 ARGS…` (or BINARY=path for another build) with its
# output in WORK/NAME.{stdout,stderr}, waits for its "listening on" line and sets URL[NAME].
# LABEL=text names it in `cpu_times` (default NAME).
start_tollgate() { # name [serve args…]
  local name="$1" out="$WORK/$1.stdout"
  shift
  RUST_LOG=warn "${BINARY:-$BIN}" serve --listen 127.0.0.1:0 "$@" >"$out" 2>"$WORK/$name.stderr" &
  PID_OF[$name]=$!
  track "$!" "${LABEL:-$name}"
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$out" 2>/dev/null && break
    sleep 0.05
  done
  URL[$name]="$(sed -n 's/^listening on //p' "$out" | head -n1)"
  [ -n "${URL[$name]}" ] || { echo "$name did not start:" >&2; cat "$WORK/$name.stderr" >&2; exit 1; }
}

# Stops a server started by `start_tollgate` (SIGTERM, or the given signal) and waits for it.
stop_tollgate() { # name [signal]
  local pid="${PID_OF[$1]}"
  kill "-${2:-TERM}" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  untrack "$pid"
  unset 'PID_OF[$1]'
}

# CPU time used so far by every tracked process still running, one "#   name: time" line each.
cpu_times() {
  local i
  for i in "${!PIDS[@]}"; do
    if [ -n "${PIDS[$i]}" ]; then echo "#   ${NAMES[$i]}: $(ps -o time= -p "${PIDS[$i]}" | tr -d ' ')"; fi
  done
}

# The peer the HTTP figures are compared with: ThrottleCrab's server, built once (a few minutes)
# with `cargo install --locked` into target/peers.
PEER_VERSION=0.4.40
PEER_BIN="$TARGET/peers/bin/throttlecrab-server"

install_throttlecrab() {
  if ! [ -x "$PEER_BIN" ] || ! "$PEER_BIN" --version 2>/dev/null | grep -q "$PEER_VERSION"; then
    need protoc "needed to build throttlecrab-server: apt-get install -y protobuf-compiler"
    echo "# installing throttlecrab-server $PEER_VERSION into $TARGET/peers" >&2
    CARGO_TARGET_DIR="$TARGET/peers-build" cargo install throttlecrab-server \
      --version "$PEER_VERSION" --locked --root "$TARGET/peers"
  fi
}

# Starts `throttlecrab-server --http` on a free loopback port and waits until it answers.
start_throttlecrab() {
  local port url warm='{"key":"warm","max_burst":10,"count_per_period":10,"period":60}'
  port="$(free_port)"
  url="http://127.0.0.1:$port"
  "$PEER_BIN" --http --http-host 127.0.0.1 --http-port "$port" >"$WORK/peer.log" 2>&1 &
  PID_OF[throttlecrab]=$!
  track "$!" throttlecrab-server
  URL[throttlecrab]="$url"
  for _ in $(seq 1 200); do
    curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d "$warm" "$url/throttle" && break
    sleep 0.05
  done
  curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' -d "$warm" "$url/throttle" \
    || { echo "throttlecrab-server did not start:" >&2; cat "$WORK/peer.log" >&2; exit 1; }
}

machine_line() {
  echo "# $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr), $(df -T "$WORK" | awk 'NR == 2 {print $2}') temp dir, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# Functions the scripts' summaries share, put before their own awk programs: field(name) reads
# `name=value` from a RESULT/ROUND line, median(a, n) is the median of a[1..n].
AWK_STATS='
  function field(name,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } }
  function median(a, n,   i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
    return (n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
  }
'

live_counters() { # url
  curl -fsS "$1/metrics" | awk '/^tollgate_live_counters / { print $2 }'
}

# Sends ids FROM..TO-1 once each through benches/memory.lua (THREADS, default 2, CONNECTIONS,
# default 16, calendar windows of WINDOW_MIN minutes, default 2); stops wrk once the server's
# gauge says TO counters are held, and prints wrk's RESULT line.
feed_ids() { # url from to
  local threads="${THREADS:-2}"
  TOLLGATE_BENCH_IDS="$3" TOLLGATE_BENCH_FIRST="$2" TOLLGATE_BENCH_THREADS="$threads" \
    TOLLGATE_BENCH_WINDOW_MIN="${WINDOW_MIN:-2}" \
    wrk -t"$threads" -c"${CONNECTIONS:-16}" -d3600s -s benches/memory.lua "$1" >"$WORK/wrk.out" &
  local wrk=$!
  track "$wrk" wrk
  until [ "$(live_counters "$1")" = "$3" ]; do
    kill -0 "$wrk" 2>/dev/null || { echo "wrk ended early:" >&2; cat "$WORK/wrk.out" >&2; exit 1; }
    sleep 0.5
  done
  kill -INT "$wrk"
  wait "$wrk" || true
  untrack "$wrk"
  grep '^RESULT' "$WORK/wrk.out"
}

# Starts redis-server on a free loopback port (no persistence, files in WORK/redis, log in
# WORK/redis.log), stopped at exit; waits for its PONG and sets REDIS_PORT.
start_redis() {
  REDIS_PORT="$(free_port)"
  mkdir -p "$WORK/redis"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK/redis" >"$WORK/redis.log" 2>&1 &
  track "$!" redis-server
  for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  echo "redis-server did not start:" >&2
  cat "$WORK/redis.log" >&2
  exit 1
}
