# shellcheck shell=bash
# Helpers shared by the benchmark scripts (bench/run.sh, bench/datapath.sh); sourced, not run.
#
# The sourcing script sets ROOT first. Shared knobs (environment) with their defaults:
# TAHUA (build/tahua), BUSY_MAX (15), LOAD_WAIT (600), FOREIGN_MAX (10), KEEP_TMP (0).
# bench_start creates $TMP and installs the traps that stop every tracked process on exit,
# Ctrl-C included.

TAHUA=${TAHUA:-$ROOT/build/tahua}
BUSY_MAX=${BUSY_MAX:-15}
LOAD_WAIT=${LOAD_WAIT:-600}
FOREIGN_MAX=${FOREIGN_MAX:-10}
KEEP_TMP=${KEEP_TMP:-0}
HZ=$(getconf CLK_TCK)

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

PIDS=()             # every background process we start, stopped by cleanup()
declare -A NAME=()  # pid -> what it is, for messages

bench_start() {
  TMP=$(mktemp -d /tmp/tahua-bench.XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

track() { PIDS+=("$1"); NAME[$1]=$2; }

# stop_pids PID...: SIGTERM (tahua drains, nginx quits), wait up to 5 s, then SIGKILL
# whatever is left, and say so: a server that ignores SIGTERM is a bug worth knowing about.
stop_pids() {
  local pid alive
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then
      log "warning: ${NAME[$pid]:-process} (pid $pid) did not exit within 5 s of SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# stop_tracked PID: stop one tracked process before the end of the run (a restart) and
# forget it, so cleanup() does not signal a pid the system may have reused since.
stop_tracked() {
  local pid=$1 p keep=()
  stop_pids "$pid"
  wait "$pid" 2>/dev/null || true
  for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  PIDS=("${keep[@]+"${keep[@]}"}")
}

cleanup() {
  [ "${#PIDS[@]}" -gt 0 ] && stop_pids "${PIDS[@]}"
  wait 2>/dev/null || true
  if [ "$KEEP_TMP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}

# Fail early instead of benchmarking whatever else owns the port.
check_port_free() {
  [ -z "$(ss -Htln "sport = :$1")" ] || die "port $1 is in use (set PORT_BASE)"
}

# Wait (bounded) until GET $1 answers 200; fail if the process $2 died meanwhile.
wait_http() {
  local url=$1 pid=$2
  for _ in $(seq 100); do
    curl -sf -o /dev/null --max-time 1 "$url" && return 0
    kill -0 "$pid" 2>/dev/null || die "process $pid exited before $url answered (logs in $TMP)"
    sleep 0.1
  done
  die "$url did not answer within 10 s (logs in $TMP)"
}

# start_tahua NAME CPU CONFIG: start a pinned tahua, wait for it, set STARTED_PID.
# taskset execs tahua, so $! is tahua's own pid.
start_tahua() {
  local name=$1 cpu=$2 conf=$3 port
  taskset -c "$cpu" "$TAHUA" --config "$conf" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  STARTED_PID=$!
  track "$STARTED_PID" "tahua $name"
  port=$(sed -n 's/.*port: *\([0-9]*\).*/\1/p' "$conf" | head -1)
  wait_http "http://127.0.0.1:$port/healthz" "$STARTED_PID"
  grep -q '"msg":"listening"' "$TMP/$name.err" || die "$name: no 'listening' log line"
}

# write_nginx_config DIR PORT UPSTREAM_PORT BUFFERING WORKER_CONNECTIONS [NOFILE]: nginx as a plain
# keep-alive reverse proxy with its own prefix, config, pid and logs under DIR: 1 worker,
# no access log, HTTP/1.1 and keep-alive to the upstream. BUFFERING is on or off
# (proxy_buffering; off is what SSE needs). NOFILE: the worker's open-file limit
# (default WORKER_CONNECTIONS + 100). Bursts of new connections: the listen backlog
# is tahua's (SOMAXCONN, 4096) instead of nginx's default 511, and multi_accept takes all
# pending connections per event-loop pass instead of one (by default a worker busy relaying
# thousands of streams accepts a few hundred connections a second), so a burst measures
# the two proxies, not nginx's defaults for accepting.
write_nginx_config() {
  local dir=$1 port=$2 up=$3 buffering=$4 wconns=$5 nofile=${6:-$(($5 + 100))}
  mkdir -p "$dir/logs" "$dir/tmp"
  cat >"$dir/nginx.conf" <<EOF
daemon off;
worker_processes 1;
worker_rlimit_nofile $nofile;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections $wconns; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  upstream up { server 127.0.0.1:$up; keepalive 64; }
  server {
    listen 127.0.0.1:$port backlog=4096;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering $buffering;
    }
  }
}
EOF
}

# shellcheck disable=SC2034  # NGINX_MASTER, NGINX_WORKER: results for the caller
# start_nginx DIR CPU PORT: start the nginx configured in DIR pinned to CPU, wait until it
# answers on PORT (the upstream's /healthz through it); set NGINX_MASTER and NGINX_WORKER.
start_nginx() {
  local dir=$1 cpu=$2 port=$3
  # -e: nginx opens its default error log before reading the config otherwise.
  taskset -c "$cpu" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/nginx.out" 2>&1 &
  NGINX_MASTER=$!
  track "$NGINX_MASTER" "nginx"
  wait_http "http://127.0.0.1:$port/healthz" "$NGINX_MASTER"
  NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
  [ -n "$NGINX_WORKER" ] || die "nginx (pid $NGINX_MASTER) has no worker process"
}

# Numbers from a busy machine (e.g. a compile on the other core) are noise. Between
# measurements our own processes are idle, so whatever CPU is busy then belongs to someone
# else: sample it for 2 s and wait, bounded by one LOAD_WAIT budget per run, until it is
# below BUSY_MAX percent of the machine. Returns 1 if the budget ran out (still busy).
WAITED=0
busy_pct() {
  local a b
  a=$(awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat)
  sleep 2
  b=$(awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%.0f\n", (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0 }'
}
wait_for_quiet() {
  local busy
  while :; do
    busy=$(busy_pct)
    [ "$busy" -le "$BUSY_MAX" ] && return 0
    if [ "$WAITED" -ge "$LOAD_WAIT" ]; then
      log "warning: machine still ${busy}% busy with other work after ${LOAD_WAIT}s of waiting; going on"
      return 1
    fi
    log "machine ${busy}% busy with other work (load $(cut -d' ' -f1 /proc/loadavg)), waiting (${WAITED}s of ${LOAD_WAIT}s)"
    sleep 30
    WAITED=$((WAITED + 32))
  done
}

print_machine() {
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -r)"
  echo "tahua:   $TAHUA (built $(date -u -r "$TAHUA" +%Y-%m-%dT%H:%M:%SZ), tree $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'))"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
}

# "steal ticks total ticks" from the aggregate cpu line: on a VM, time the hypervisor gave
# to someone else is the usual reason two identical rounds differ.
cpu_steal() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t }' /proc/stat; }
steal_pct() {  # "S0 T0" "S1 T1"
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%.1f%%", (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0 }'
}

# utime+stime in clock ticks, summed over the given pids (all threads of each process).
# Fields are counted after the ")" that ends the command name, which may contain spaces.
# A process that is gone counts 0 (the caller checks liveness where it matters).
cpu_ticks() {
  local pid total=0 t
  for pid in "$@"; do
    t=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }')
    total=$((total + ${t:-0}))
  done
  echo "$total"
}

# Whether PID runs. Unlike kill -0, a crashed child not yet reaped (a zombie) is not.
running() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ]
}

# Busy ticks of the whole machine (user+nice+system+irq+softirq+steal, both CPUs).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# CPU ticks of this shell's waited-for children (wrk) from a `times` snapshot. `times`
# itself must run in this shell, not inside $(...), whose fresh process has no children.
child_ticks() {
  tail -1 "$TMP/times" | awk -v hz="$HZ" '{ split($1, u, /[ms]/); split($2, s, /[ms]/)
    printf "%d\n", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * hz }'
}

# wrk_chat CPU PORT SECONDS CONNS BODY [AUTH]: POST BODY to /v1/chat/completions at
# saturation (wrk -c CONNS, bench/body.lua), pinned to CPU -> "requests=.. duration_us=..
# p99_us=.. errors=..". AUTH: an Authorization header value.
wrk_chat() {
  local out line
  out=$(BENCH_BODY=$5 BENCH_AUTH=${6:-} taskset -c "$1" wrk -t1 -c"$4" -d"$3"s \
        -s "$ROOT/bench/body.lua" "http://127.0.0.1:$2/v1/chat/completions") || die "wrk failed: $out"
  line=$(printf '%s\n' "$out" | grep '^BENCH ') || die "no BENCH line from wrk: $out"
  awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         printf "requests=%d duration_us=%d p99_us=%d errors=%d\n", v["requests"], v["duration_us"], v["p99_us"],
           v["err_status"] + v["err_connect"] + v["err_read"] + v["err_write"] + v["err_timeout"] }' <<<"$line"
}

# shellcheck disable=SC2034  # UP_PID, REDIS_PID: results for the caller
# start_upstream_and_redis CPU UPSTREAM_PORT REDIS_PORT: bench/sse_upstream.c (21 events)
# and a redis-server (AOF on, appendfsync everysec, as a store in production) pinned to
# CPU; sets UP_PID and REDIS_PID.
start_upstream_and_redis() {
  local cpu=$1 up=$2 redis=$3
  cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
  taskset -c "$cpu" "$TMP/sse_upstream" --port "$up" --events 21 >"$TMP/upstream.out" 2>&1 &
  UP_PID=$!
  track "$UP_PID" sse_upstream
  wait_http "http://127.0.0.1:$up/healthz" "$UP_PID"
  start_redis "$cpu" "$redis"
}

# shellcheck disable=SC2034  # REDIS_PID: a result for the caller
# start_redis CPU PORT: a redis-server (AOF on, appendfsync everysec, as a store in
# production) pinned to CPU, its data in $TMP/redis; sets REDIS_PID.
start_redis() {
  local cpu=$1 redis=$2
  mkdir -p "$TMP/redis"
  taskset -c "$cpu" redis-server --port "$redis" --bind 127.0.0.1 --dir "$TMP/redis" --save "" --appendonly yes \
    --appendfsync everysec >"$TMP/redis.out" 2>&1 &
  REDIS_PID=$!
  track "$REDIS_PID" redis-server
  for _ in $(seq 50); do [ "$(redis-cli -p "$redis" ping 2>/dev/null)" = PONG ] && return 0; sleep 0.1; done
  die "redis-server on port $redis did not answer"
}
