#!/usr/bin/env bash
# tahua benchmarks, run on demand (not in CI). See docs/benchmarks.md.
#
#   bench/run.sh              proxy overhead: wrk against the mock upstream directly, nginx in
#                             front of it, and tahua in front of it; alternating rounds
#   bench/run.sh streams [N]  gateway memory with N (default 10000) concurrent idle streams
#   bench/run.sh translation  cost of the Anthropic adapter's translation: the same mock upstream
#                             reached through an openai provider (pass-through) and through an
#                             anthropic provider (chat -> Messages -> chat); alternating rounds
#
# Knobs (environment): TAHUA (binary), ROUNDS (3), DURATION (10, seconds per measurement),
# WARMUP (2, seconds), CONNS (32), THREADS (1), PROXY_CPU (0), LOAD_CPU (1),
# PORT_BASE (18080: mock, +1 nginx, +2 tahua), BUSY_MAX (15, % CPU used by others before a
# measurement), FOREIGN_MAX (10, % of a core others may use during one), LOAD_WAIT (600,
# seconds of waiting for a quiet machine, per run), STREAMS_TIMEOUT (120, seconds),
# KEEP_TMP (1 = keep configs and logs), DEPLOYMENTS (1; N: tahua serves the model from N
# weighted deployments of the same mock, to measure routing end to end), RESILIENCE (1: retry
# policy, circuit breaker and timeouts on tahua's provider), HEARTBEAT (e.g. 1s: tahua's
# server.stream_heartbeat, so held streams get heartbeats between the mock's chunks),
# STREAM (1 = proxy mode sends streaming chats: the per-event relay path).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
PROXY_CPU=${PROXY_CPU:-0}   # the process under test (nginx or proxying tahua)
LOAD_CPU=${LOAD_CPU:-1}     # wrk / node and the mock upstream
PORT_BASE=${PORT_BASE:-18080}
STREAMS_TIMEOUT=${STREAMS_TIMEOUT:-120}
SERVER_PIDS=()   # all servers of the proxy mode, for the foreign-CPU check

PORT_MOCK=$PORT_BASE
PORT_NGINX=$((PORT_BASE + 1))
PORT_TAHUA=$((PORT_BASE + 2))

MODE=${1:-proxy}
case $MODE in
  proxy|translation) ;;
  streams)
    STREAMS_N=${2:-10000}
    [[ $STREAMS_N =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 streams [N], N a positive integer" >&2; exit 2; } ;;
  -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
  *) echo "usage: $0 [proxy | streams [N] | translation]" >&2; exit 2 ;;
esac

for tool in "$TAHUA" taskset curl ss; do
  command -v "$tool" >/dev/null || die "missing $tool"
done

bench_start

write_mock_config() {  # FILE COMPLETION_TOKENS CHUNK_DELAY
  cat >"$1" <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_MOCK}]
access_log: {enabled: false}
providers: [{name: mock, type: mock, mock: {completion_tokens: $2, chunk_delay: $3}}]
models: [{name: mock-gpt, provider: mock}]
EOF
}

# DEPLOYMENTS=N (default 1) serves mock-gpt from N weighted deployments (50/30/20/...)
# of N providers that all point at the same mock: the routing decision's end-to-end
# cost against a single deployment, with everything else equal.
# RESILIENCE=1 turns on what issue 5 asks to cost < 3% on a healthy upstream: a retry
# policy, a circuit breaker and explicit timeouts on the provider.
write_proxy_config() {  # FILE
  local n=${DEPLOYMENTS:-1} i w providers="" deployments="" extra=""
  local hb=""  # HEARTBEAT=1s: stream heartbeats on idle streams (streams mode: memory with them on)
  [ -n "${HEARTBEAT:-}" ] && hb=", stream_heartbeat: $HEARTBEAT"
  if [ "${RESILIENCE:-0}" = 1 ]; then
    extra=", retry: {attempts: 3, backoff: 50ms}, circuit_breaker: {window: 20, min_calls: 10}"
    extra+=", timeouts: {connect: 2s, first_byte: 30s, idle: 30s, total: 120s}"
  fi
  if [ "$n" -le 1 ]; then
    cat >"$1" <<EOF
server: {workers: 1$hb}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_MOCK/v1"$extra}]
models: [{name: mock-gpt, provider: up}]
EOF
    return
  fi
  for i in $(seq "$n"); do
    case $i in 1) w=50 ;; 2) w=30 ;; *) w=20 ;; esac
    providers+="  - {name: up$i, type: openai, base_url: \"http://127.0.0.1:$PORT_MOCK/v1\"$extra}"$'\n'
    deployments+="      - {id: d$i, provider: up$i, upstream_model: mock-gpt, weight: $w}"$'\n'
  done
  cat >"$1" <<EOF
server: {workers: 1$hb}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers:
$providers
models:
  - name: mock-gpt
    balancing: weighted_random
    deployments:
$deployments
EOF
}

# ---------------------------------------------------------------------------------------
# proxy mode

# What measure() checks with curl and run_wrk() sends. Proxy mode uses chat.lua as it is;
# the translation mode switches these per target (use_request), so both modes share one
# measure(). The curl check reads chat.lua's body, so check and load cannot drift apart.
CHAT_BODY=$(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$ROOT/bench/chat.lua")
WRK_SCRIPT=$ROOT/bench/chat.lua
REQ_PATH=/v1/chat/completions
REQ_BODY=$CHAT_BODY
REQ_EXPECT='"chat.completion"'   # grep pattern a correct answer contains
[ -n "$CHAT_BODY" ] || die "no wrk.body = '...' line in bench/chat.lua"
# STREAM=1: the same chat as a stream (16 SSE chunks from the mock): the relay path per
# event instead of one body; nginx then runs with proxy_buffering off, as for SSE.
if [ "${STREAM:-0}" = 1 ]; then
  REQ_BODY=${CHAT_BODY%\}},\"stream\":true}
  WRK_SCRIPT=$ROOT/bench/body.lua
  REQ_EXPECT='data: \[DONE\]'
fi

# One wrk run against a target, pinned to the load CPU. chat.lua ignores BENCH_BODY;
# body.lua sends it.
run_wrk() {  # PORT SECONDS
  BENCH_BODY=$REQ_BODY taskset -c "$LOAD_CPU" wrk -t"$THREADS" -c"$CONNS" -d"$2"s --latency -s "$WRK_SCRIPT" \
    "http://127.0.0.1:$1$REQ_PATH"
}

# measure NAME PORT ROUND PID...: warm up, then one measured wrk run; append one result
# line "name round rps p50_us p99_us cpu_us_per_req errors foreign_pct disturbed" to
# $TMP/results. PID... are the server processes whose CPU counts as "per request".
# "foreign" is machine CPU used during the run by anything but our servers and wrk, in % of
# one core; above FOREIGN_MAX the run is repeated (3 tries), else kept with disturbed=1.
measure() {
  local name=$1 port=$2 round=$3; shift 3
  local code out line try disturbed foreign
  local t0 t1 b0 b1 s0 s1 c0 c1
  # A target that answers errors would look fast; check one real answer first.
  code=$(curl -s -o "$TMP/check.json" -w '%{http_code}' --max-time 5 \
    -H 'content-type: application/json' -d "$REQ_BODY" "http://127.0.0.1:$port$REQ_PATH")
  if [ "$code" != 200 ] || ! grep -q "$REQ_EXPECT" "$TMP/check.json"; then
    die "$name answered $code: $(head -c 300 "$TMP/check.json")"
  fi
  for try in 1 2 3; do
    disturbed=0
    wait_for_quiet || disturbed=1
    run_wrk "$port" "$WARMUP" >/dev/null
    b0=$(busy_ticks); s0=$(cpu_ticks "${SERVER_PIDS[@]}"); times >"$TMP/times"; c0=$(child_ticks); t0=$(cpu_ticks "$@")
    out=$(run_wrk "$port" "$DURATION")
    t1=$(cpu_ticks "$@"); times >"$TMP/times"; c1=$(child_ticks); s1=$(cpu_ticks "${SERVER_PIDS[@]}"); b1=$(busy_ticks)
    printf '%s\n' "$out" >>"$TMP/wrk-$name.log"
    foreign=$(( ((b1 - b0) - (s1 - s0) - (c1 - c0)) * 100 / (DURATION * HZ) ))
    [ "$foreign" -le "$FOREIGN_MAX" ] && break
    disturbed=1
    log "round $round $name: other processes used ${foreign}% of a core during the run; discarded (try $try of 3)"
  done
  line=$(printf '%s\n' "$out" | grep '^BENCH ') || die "no BENCH line from wrk for $name"
  # BENCH key=value ... (see chat.lua) -> one results line.
  awk -v n="$name" -v r="$round" -v dt=$((t1 - t0)) -v hz="$HZ" -v f="$foreign" -v d="$disturbed" '{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["requests"] <= 0) exit 1
    e = v["err_status"] + v["err_connect"] + v["err_read"] + v["err_write"] + v["err_timeout"]
    printf "%s %d %.0f %d %d %.2f %d %d %d\n", n, r, v["requests"] / (v["duration_us"] / 1e6),
      v["p50_us"], v["p99_us"], dt * 1e6 / hz / v["requests"], e, f, d
  }' <<<"$line" >>"$TMP/results" || die "$name: wrk completed no requests"
  log "round $round $name: $(tail -1 "$TMP/results" | cut -d' ' -f3-) (req/s p50us p99us cpu_us/req errors foreign% disturbed)"
}

proxy_mode() {
  command -v wrk >/dev/null || die "missing wrk (apt-get install wrk)"
  command -v nginx >/dev/null || die "missing nginx (apt-get install nginx-light)"
  for p in "$PORT_MOCK" "$PORT_NGINX" "$PORT_TAHUA"; do check_port_free "$p"; done
  wait_for_quiet || true  # goes on after LOAD_WAIT; measure() flags disturbed rounds
  print_machine

  # (a) the mock upstream: answers in-process, no chunk delay, on the load CPU.
  write_mock_config "$TMP/mock.yaml" 16 0ms
  start_tahua mock "$LOAD_CPU" "$TMP/mock.yaml"
  local mock_pid=$STARTED_PID
  SERVER_PIDS+=("$mock_pid")

  # (b) nginx as a plain keep-alive reverse proxy (bench/lib.sh); proxy_buffering off for
  # streams, as SSE needs.
  local buffering=on
  [ "${STREAM:-0}" = 1 ] && buffering=off
  write_nginx_config "$TMP/nginx" "$PORT_NGINX" "$PORT_MOCK" "$buffering" 4096
  start_nginx "$TMP/nginx" "$PROXY_CPU" "$PORT_NGINX"
  local nginx_master=$NGINX_MASTER nginx_worker=$NGINX_WORKER
  SERVER_PIDS+=("$nginx_master" "$nginx_worker")

  # (c) tahua as the proxy, same shape as nginx: 1 worker, no access log.
  write_proxy_config "$TMP/proxy.yaml"
  start_tahua proxy "$PROXY_CPU" "$TMP/proxy.yaml"
  local proxy_pid=$STARTED_PID
  SERVER_PIDS+=("$proxy_pid")

  log "mock pid $mock_pid (cpu $LOAD_CPU), nginx $nginx_master/$nginx_worker and tahua $proxy_pid (cpu $PROXY_CPU)"
  log "$ROUNDS rounds x 3 targets x (${WARMUP}s warm-up + ${DURATION}s), wrk -t$THREADS -c$CONNS"
  : >"$TMP/results"
  local steal0
  steal0=$(cpu_steal)
  local round
  for round in $(seq "$ROUNDS"); do
    # Rotate the order each round so drift (thermal, neighbours) does not favour one target.
    local targets=(mock nginx tahua)
    local k=$(( (round - 1) % 3 ))
    targets=("${targets[@]:k}" "${targets[@]:0:k}")
    for t in "${targets[@]}"; do
      case $t in
        mock)  measure mock  "$PORT_MOCK"  "$round" "$mock_pid" ;;
        nginx) measure nginx "$PORT_NGINX" "$round" "$nginx_master" "$nginx_worker" ;;
        tahua) measure tahua "$PORT_TAHUA" "$round" "$proxy_pid" ;;
      esac
    done
  done

  for pid in "$mock_pid" "$nginx_master" "$proxy_pid"; do
    kill -0 "$pid" 2>/dev/null || die "process $pid died during the run (logs in $TMP)"
  done
  if grep -q '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/proxy.err"; then
    log "tahua logged warnings/errors:"; grep -h '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/proxy.err" | head -5 >&2
  fi

  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end (includes this run's own load)"
  echo "steal:   $(steal_pct "$steal0" "$(cpu_steal)") of CPU time during the rounds"
  echo "wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds, median per column;"
  echo "CPU/req is the server process's utime+stime (mock for 'mock', nginx master+worker, tahua proxy)."
  echo
  # Median of each column over the rounds, per target; then tahua/nginx ratios vs the goals.
  awk '
    function median(arr, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j-1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j-1]; arr[j-1] = t }
      return n % 2 ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
    }
    { n[$1]++; k = n[$1]; rps[$1,k] = $3; p50[$1,k] = $4; p99[$1,k] = $5; cpu[$1,k] = $6; err[$1] += $7; dist += $9
      all[$1] = all[$1] sprintf(" %s", $3) }
    END {
      printf "%-7s %10s %9s %9s %11s %9s %7s   %s\n", "target", "req/s", "p50 ms", "p99 ms", "CPU us/req", "core use", "errors", "req/s per round"
      split("mock nginx tahua", names, " ")
      for (i = 1; i <= 3; i++) {
        t = names[i]; m = n[t]
        for (k = 1; k <= m; k++) { a[k] = rps[t,k] } R[t] = median(a, m)
        for (k = 1; k <= m; k++) { a[k] = p50[t,k] } P50[t] = median(a, m)
        for (k = 1; k <= m; k++) { a[k] = p99[t,k] } P99[t] = median(a, m)
        for (k = 1; k <= m; k++) { a[k] = cpu[t,k] } C[t] = median(a, m)
        U[t] = R[t] * C[t] / 1e6  # fraction of one core the server process used
        printf "%-7s %10.0f %9.3f %9.3f %11.1f %9.2f %7d  %s\n", t, R[t], P50[t] / 1000, P99[t] / 1000, C[t], U[t], err[t], all[t]
      }
      printf "\nproxy capacity per core (1e6 / CPU us per req): nginx %.0f req/s, tahua %.0f req/s\n",
        1e6 / C["nginx"], 1e6 / C["tahua"]
      tr = R["tahua"] / R["nginx"]; pr = P99["tahua"] / P99["nginx"]; cr = C["tahua"] / C["nginx"]
      # Rounds drift (the VM speed changes over minutes); the ratio within one round, where
      # the targets ran back to back, is steadier than the ratio of medians. Show both.
      m = n["tahua"] < n["nginx"] ? n["tahua"] : n["nginx"]
      for (k = 1; k <= m; k++) { a[k] = rps["tahua",k] / rps["nginx",k] } rr = median(a, m)
      for (k = 1; k <= m; k++) { a[k] = p99["tahua",k] / p99["nginx",k] } rp = median(a, m)
      for (k = 1; k <= m; k++) { a[k] = cpu["tahua",k] / cpu["nginx",k] } rc = median(a, m)
      printf "median of per-round tahua/nginx ratios: throughput %.2f, p99 %.2f, CPU/req %.2f\n", rr, rp, rc
      printf "tahua/nginx: throughput %.3f (goal >= 0.80: %s), p50 %.2f, p99 %.3f (goal <= 1.30: %s), CPU/req %.2f\n",
        tr, (tr >= 0.8 ? "met" : "NOT met"), P50["tahua"] / P50["nginx"], pr, (pr <= 1.3 ? "met" : "NOT met"), cr
      for (i = 1; i <= 3; i++) if (err[names[i]])
        printf "WARNING: %s: %d failed requests (non-2xx or socket errors; see wrk logs with KEEP_TMP=1)\n", names[i], err[names[i]]
      if (dist) printf "WARNING: %d measurement(s) ran while other work used the CPU; treat the numbers as disturbed\n", dist
      # With 2 cores the load side (wrk + mock on one core) can be the bottleneck: then the
      # proxy that needs less CPU is not running flat out, and req/s understates the gap.
      for (i = 2; i <= 3; i++) if (U[names[i]] < 0.9)
        printf "note: %s used %.2f of its core, i.e. the load core (wrk + mock) limited it, not its own CPU;\n" \
               "      its req/s is a lower bound, compare capacity per core\n", names[i], U[names[i]]
    }' "$TMP/results"
}

# ---------------------------------------------------------------------------------------
# streams mode

streams_mode() {
  command -v node >/dev/null || die "missing node"
  for p in "$PORT_MOCK" "$PORT_TAHUA"; do check_port_free "$p"; done
  local n=$STREAMS_N
  # Each stream costs the proxy two descriptors (client + upstream) and the mock and node one.
  # Raise the limit as far as allowed; children inherit it.
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  local nofile need
  nofile=$(ulimit -n)
  need=$((2 * n + 100))
  if [ "$nofile" != unlimited ] && [ "$nofile" -lt "$need" ]; then
    local capped=$(((nofile - 100) / 2))
    log "warning: open-file limit is $nofile (hard), the proxy needs ~$need for $n streams; measuring $capped"
    n=$capped
  fi
  # RSS hardly depends on CPU load, but a busy machine slows the ramp-up; same bounded wait.
  wait_for_quiet || true
  print_machine
  echo "nofile:  $nofile"

  # A stream that stays open: one chunk every 5 s, far more chunks than the hold lasts.
  write_mock_config "$TMP/mock.yaml" 100000 5s
  start_tahua mock "$LOAD_CPU" "$TMP/mock.yaml"
  local mock_pid=$STARTED_PID
  write_proxy_config "$TMP/proxy.yaml"
  start_tahua proxy "$PROXY_CPU" "$TMP/proxy.yaml"
  local proxy_pid=$STARTED_PID
  log "mock pid $mock_pid (cpu $LOAD_CPU), proxy tahua $proxy_pid (cpu $PROXY_CPU); opening $n streams"

  local rc=0
  # timeout: a hung node must not hang the run (its own deadline is STREAMS_TIMEOUT).
  timeout $((STREAMS_TIMEOUT + 30)) taskset -c "$LOAD_CPU" node "$ROOT/bench/hold_streams.mjs" \
    --port "$PORT_TAHUA" --n "$n" --pid "$proxy_pid" --mock-pid "$mock_pid" --timeout "$STREAMS_TIMEOUT" \
    | tee "$TMP/hold.out" || rc=$?

  # After the client closed everything the proxy should be back to no streams; poll, bounded.
  local active="" conns=""
  for _ in $(seq 50); do
    active=$(curl -s --max-time 2 "http://127.0.0.1:$PORT_TAHUA/metrics" | awk '/^tahua_active_streams/ { s += $2 } END { print s + 0 }')
    [ "$active" = 0 ] && break
    sleep 0.2
  done
  conns=$(curl -s --max-time 2 "http://127.0.0.1:$PORT_TAHUA/metrics" | awk '/^tahua_active_connections/ { s += $2 } END { print s + 0 }')
  echo "after close: proxy VmRSS $(awk '/^VmRSS/ { print $2 }' "/proc/$proxy_pid/status") KiB," \
       "tahua_active_streams $active, tahua_active_connections $conns (includes this scrape)"
  kill -0 "$proxy_pid" 2>/dev/null || die "proxy tahua died (logs in $TMP)"
  kill -0 "$mock_pid" 2>/dev/null || die "mock tahua died (logs in $TMP)"
  if grep -q '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/proxy.err"; then
    log "tahua logged warnings/errors (first 5):"
    grep -h '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/proxy.err" | head -5 >&2
  fi
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end"
  local per
  per=$(sed -n 's/^RESULT .*"kib_per_stream":\([0-9.]*\).*/\1/p' "$TMP/hold.out")
  [ -n "$per" ] && awk -v p="$per" -v n="$n" 'BEGIN {
    printf "goal <= 16 KiB per stream at 10000 streams: %s (%.2f KiB/stream at %d)\n", (p <= 16 ? "met" : "NOT met"), p, n }'
  return "$rc"
}

# ---------------------------------------------------------------------------------------
# translation mode

write_translation_config() {  # FILE
  # Two providers on the same mock: `oa` forwards chat completions as they are, `an` speaks
  # the Messages API to it (the mock's /v1/messages is itself served by translation).
  # api_key: the anthropic adapter sends x-api-key like it would to api.anthropic.com.
  cat >"$1" <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers:
  - {name: oa, type: openai, base_url: "http://127.0.0.1:$PORT_MOCK/v1"}
  - {name: an, type: anthropic, base_url: "http://127.0.0.1:$PORT_MOCK/v1", api_key: x}
models:
  - {name: via-openai, provider: oa, upstream_model: mock-gpt}
  - {name: via-anthropic, provider: an, upstream_model: mock-gpt}
EOF
}

use_request() {  # PATH BODY EXPECT: what measure() checks and wrk sends next
  REQ_PATH=$1 REQ_BODY=$2 REQ_EXPECT=$3 WRK_SCRIPT=$ROOT/bench/body.lua
}

translation_mode() {
  command -v wrk >/dev/null || die "missing wrk (apt-get install wrk)"
  for p in "$PORT_MOCK" "$PORT_TAHUA"; do check_port_free "$p"; done
  wait_for_quiet || true  # goes on after LOAD_WAIT; measure() flags disturbed rounds
  print_machine

  # Every body is chat.lua's, so all four targets carry the same message; only the model
  # differs, plus max_tokens, which the Messages API requires.
  local body_mock body_msgs body_oa body_an
  body_mock=$CHAT_BODY
  body_msgs=${CHAT_BODY/'"model":"mock-gpt",'/'"model":"mock-gpt","max_tokens":64,'}
  body_oa=${CHAT_BODY/'"mock-gpt"'/'"via-openai"'}
  body_an=${CHAT_BODY/'"mock-gpt"'/'"via-anthropic"'}
  [ "$body_msgs" != "$CHAT_BODY" ] && [ "$body_oa" != "$CHAT_BODY" ] ||
    die "bench/chat.lua's body does not start with \"model\":\"mock-gpt\"; update translation_mode"

  # The same mock as proxy mode, on the load CPU.
  write_mock_config "$TMP/mock.yaml" 16 0ms
  start_tahua mock "$LOAD_CPU" "$TMP/mock.yaml"
  local mock_pid=$STARTED_PID
  SERVER_PIDS+=("$mock_pid")

  # The gateway under test, shaped like proxy mode's tahua: 1 worker, no access log.
  write_translation_config "$TMP/gateway.yaml"
  start_tahua gateway "$PROXY_CPU" "$TMP/gateway.yaml"
  local gw_pid=$STARTED_PID
  SERVER_PIDS+=("$gw_pid")

  log "mock pid $mock_pid (cpu $LOAD_CPU), gateway tahua $gw_pid (cpu $PROXY_CPU)"
  log "$ROUNDS rounds x 4 targets x (${WARMUP}s warm-up + ${DURATION}s), wrk -t$THREADS -c$CONNS"
  : >"$TMP/results"
  local steal0
  steal0=$(cpu_steal)
  local round
  for round in $(seq "$ROUNDS"); do
    # Rotate the order each round so drift (thermal, neighbours) does not favour one target.
    local targets=(mock-chat mock-messages via-openai via-anthropic)
    local k=$(( (round - 1) % 4 ))
    targets=("${targets[@]:k}" "${targets[@]:0:k}")
    for t in "${targets[@]}"; do
      # CPU per request is the mock's for (1)/(2), the gateway's alone for (3)/(4).
      case $t in
        mock-chat)
          use_request /v1/chat/completions "$body_mock" '"chat.completion"'
          measure "$t" "$PORT_MOCK" "$round" "$mock_pid" ;;
        mock-messages)
          use_request /v1/messages "$body_msgs" '"type":"message"'
          measure "$t" "$PORT_MOCK" "$round" "$mock_pid" ;;
        via-openai)
          use_request /v1/chat/completions "$body_oa" '"chat.completion"'
          measure "$t" "$PORT_TAHUA" "$round" "$gw_pid" ;;
        via-anthropic)
          use_request /v1/chat/completions "$body_an" '"chat.completion"'
          measure "$t" "$PORT_TAHUA" "$round" "$gw_pid" ;;
      esac
    done
  done

  for pid in "$mock_pid" "$gw_pid"; do
    kill -0 "$pid" 2>/dev/null || die "process $pid died during the run (logs in $TMP)"
  done
  if grep -q '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/gateway.err"; then
    log "tahua logged warnings/errors:"; grep -h '"level":"\(error\|warn\)' "$TMP/mock.err" "$TMP/gateway.err" | head -5 >&2
  fi

  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end (includes this run's own load)"
  echo "steal:   $(steal_pct "$steal0" "$(cpu_steal)") of CPU time during the rounds"
  echo "wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds, median per column;"
  echo "CPU/req is the mock's utime+stime for (1)/(2), the gateway tahua's alone for (3)/(4)."
  echo
  awk '
    function median(arr, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j-1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j-1]; arr[j-1] = t }
      return n % 2 ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
    }
    function col(f, t, r) { return f == "rps" ? rps[t,r] : f == "p50" ? p50[t,r] : f == "p99" ? p99[t,r] : cpu[t,r] }
    # med: median over the rounds of one column of target t.
    function med(f, t,   r, m, a) { m = 0; for (r = 1; r <= R; r++) if ((t, r) in rps) a[++m] = col(f, t, r); return median(a, m) }
    # rmed / dmed: median over the rounds of the per-round ratio x/y, or difference x-y.
    function rmed(f, x, y,   r, m, a) { m = 0
      for (r = 1; r <= R; r++) if ((x, r) in rps && (y, r) in rps) a[++m] = col(f, x, r) / col(f, y, r); return median(a, m) }
    function dmed(f, x, y,   r, m, a) { m = 0
      for (r = 1; r <= R; r++) if ((x, r) in rps && (y, r) in rps) a[++m] = col(f, x, r) - col(f, y, r); return median(a, m) }
    # pair: the comparison of target x with its baseline y, per round ratios and of medians.
    function pair(x, y, who) {
      printf "  median of per-round ratios: throughput %.3f, p99 %.2f, %s CPU/req %.2f (%+.1f us/req)\n",
        rmed("rps", x, y), rmed("p99", x, y), who, rmed("cpu", x, y), dmed("cpu", x, y)
      printf "  ratio of medians:           throughput %.3f, p99 %.2f, %s CPU/req %.2f (%+.1f us/req)\n",
        Rq[x] / Rq[y], P99[x] / P99[y], who, C[x] / C[y], C[x] - C[y]
    }
    { rps[$1,$2] = $3; p50[$1,$2] = $4; p99[$1,$2] = $5; cpu[$1,$2] = $6; err[$1] += $7; dist += $9
      all[$1] = all[$1] sprintf(" %s", $3); if ($2 > R) R = $2 }
    END {
      nt = split("mock-chat mock-messages via-openai via-anthropic", names, " ")
      printf "%-17s %9s %8s %8s %11s %9s %7s   %s\n", "target", "req/s", "p50 ms", "p99 ms", "CPU us/req", "core use", "errors", "req/s per round"
      for (i = 1; i <= nt; i++) {
        t = names[i]
        Rq[t] = med("rps", t); P50[t] = med("p50", t); P99[t] = med("p99", t); C[t] = med("cpu", t)
        U[t] = Rq[t] * C[t] / 1e6  # fraction of one core the measured server used
        printf "(%d) %-13s %9.0f %8.3f %8.3f %11.1f %9.2f %7d  %s\n", i, t, Rq[t], P50[t] / 1000, P99[t] / 1000, C[t], U[t], err[t], all[t]
      }
      # Per round: both targets of a pair ran in the same round, so their ratio is steadier
      # than the ratio of medians when the VM drifts between rounds. Show both.
      printf "\n%-9s %36s %38s\n", "", "gateway (4)/(3)", "mock (2)/(1)"
      printf "%-9s %9s %6s %8s %11s   %9s %6s %8s %11s\n", "round", "req/s", "p99", "CPU/req", "+CPU us/req", "req/s", "p99", "CPU/req", "+CPU us/req"
      a = "via-anthropic"; o = "via-openai"; m2 = "mock-messages"; m1 = "mock-chat"
      for (r = 1; r <= R; r++) {
        if (!((a, r) in rps && (o, r) in rps && (m2, r) in rps && (m1, r) in rps)) continue
        printf "%-9d %9.3f %6.2f %8.2f %+11.1f   %9.3f %6.2f %8.2f %+11.1f\n", r,
          rps[a,r] / rps[o,r], p99[a,r] / p99[o,r], cpu[a,r] / cpu[o,r], cpu[a,r] - cpu[o,r],
          rps[m2,r] / rps[m1,r], p99[m2,r] / p99[m1,r], cpu[m2,r] / cpu[m1,r], cpu[m2,r] - cpu[m1,r]
      }
      printf "\ngateway translation, via-anthropic (4) / via-openai (3):\n"
      pair(a, o, "gateway")
      printf "upstream alone, mock-messages (2) / mock-chat (1), the mock translating Messages in-process:\n"
      pair(m2, m1, "mock")
      # In (4) the mock also answers /v1/messages by translating, on the load core; when that
      # core is the bottleneck, the throughput and p99 of (4) carry the mock cost too.
      printf "The cost of the gateway translation alone is the gateway CPU/req of (4) vs (3): it excludes\n"
      printf "the mock, whose extra work in (4) is the (2) vs (1) difference and also weighs on the\n"
      printf "throughput and p99 of (4).\n"
      for (i = 1; i <= nt; i++) if (err[names[i]])
        printf "WARNING: %s: %d failed requests (non-2xx or socket errors; see wrk logs with KEEP_TMP=1)\n", names[i], err[names[i]]
      if (dist) printf "WARNING: %d measurement(s) ran while other work used the CPU; treat the numbers as disturbed\n", dist
      # With 2 cores the load core (wrk + mock) can be the bottleneck, as in proxy mode.
      for (i = 3; i <= 4; i++) if (U[names[i]] < 0.9)
        printf "note: the gateway used %.2f of its core for %s, i.e. the load core (wrk + mock) limited it;\n" \
               "      its req/s is a lower bound, compare CPU/req\n", U[names[i]], names[i]
    }' "$TMP/results"
}

case $MODE in
  proxy) proxy_mode ;;
  streams) streams_mode ;;
  translation) translation_mode ;;
esac
