#!/usr/bin/env bash
# Data path benchmark (issue 10), run on demand (not in CI). See docs/benchmarks.md,
# "Data path (issue 10)".
#
#   bench/datapath.sh [SCENARIO...]     default: rate latency latency200 streams whole ttfe hold hold10k
#
# tahua and nginx 1.22 as plain reverse proxies, one worker each pinned to PROXY_CPU, in
# front of bench/sse_upstream.c (a C epoll server that streams like a real one: one chunk
# and one send() per SSE event, or with whole=1 a whole answer in one send()), which runs
# with the load generator on LOAD_CPU.
#
#   rate      non-streaming chat completions at saturation (wrk -c$RATE_CONNS):
#             req/s and the proxy's CPU µs per request
#   latency   p50/p99 at a fixed low rate (LAT_RATE req/s, open loop, datapath_client rate)
#   latency200  the same at LAT200_RATE (200) req/s with client, upstream and proxy all on
#             PROXY_CPU (the upstream is moved there for it): what one request waits for
#             when nothing is busy, leases and timers included
#   streams   back-to-back streams of STREAM_EVENTS events at 1 and 64 clients (wrk):
#             streams/s and CPU µs per stream
#   whole     the same, with an upstream that writes each whole answer in one send() (a
#             loaded inference server or a cache: many events per read)
#   ttfe      TTFE_CONNS (64) clients each running streams back to back, TTFE_EVENTS events
#             TTFE_DELAY_MS apart (datapath_client streams): time to first event from the
#             send (p50/p90/p99/p99.9/max and a histogram) and the whole stream's p99
#   hold      HOLD_N streams held at once, HOLD_EVENTS events HOLD_DELAY_MS apart
#             (datapath_client hold): time to first event, largest gap between events,
#             RSS per stream
#   hold10k   the same with HOLD10K_N streams, HOLD10K_EVENTS events HOLD10K_DELAY_MS apart
#
# Targets: alone (wrk on PROXY_CPU straight at the upstream, which has LOAD_CPU to itself:
# the upstream's own rate, which must be at least twice any proxy's; rate and 64-client
# streams only), direct (the client straight at the upstream, both on LOAD_CPU, as in the proxy
# runs), nginx, tahua (access log off, like nginx's), and the tahua variants of VARIANTS
# (all scenarios but hold and hold10k), each its own process pinned to PROXY_CPU:
#   gov       + an API key, tenant and key limits, a rate-limit policy and tenant metrics,
#             counted in process (limits far above the load: every request is admitted)
#   redis     the same with the Redis store (a redis-server with AOF on LOAD_CPU)
#   obs       tahua with the observability defaults: the access log on (to a file)
#   before    plain tahua run from the binary BEFORE (a before/after pair in one run)
#   gov0      the gov variant run from the binary BEFORE
#   plug      tahua with one Lua plugin whose on_request does nothing (docs/plugins.md)
#   plug100   tahua with 100 plugins, none of which matches the model (the selection's cost)
#   plugev    tahua with one plugin whose on_stream_event does nothing (a call per event)
#   guard     tahua with an output PII policy (every detector, redact) on the answers:
#             each event parsed, its text scanned and held back (issue 41, item 6)
#   prod      the production profile of issue 41 (docs/benchmarks.md): gov on the Redis
#             store, the access log to a file, usage records to a Redis stream (spill
#             dir set), traces sampled at 0.1 to the upstream (it answers any POST 200),
#             a priced model; after the run any dropped log line, record or span fails it
# Every target gets the same Authorization header. Each round runs every scenario, the
# targets in alternating order; the summary has medians over the rounds and the median of
# the per-round ratios: tahua/nginx, and each variant / tahua.
#
# Knobs (environment): TAHUA (build/tahua), ROUNDS (3), DURATION (10 s per measurement),
# WARMUP (2 s), PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18180: upstream, +1 nginx, +2 tahua,
# +3 gov, +4 redis, +5 obs, +6 redis-server, +7 before, +8 gov0, +9 plug, +10 plug100,
# +11 plugev, +12 prod, +13 guard), VARIANTS ("gov redis obs";
# "" for none; before and gov0 need BEFORE=path of the other binary),
# RATE_CONNS (64), LAT_RATE (1000), LAT_CONNS (16), LAT200_RATE (200), STREAM_EVENTS (21),
# STREAM_CONNS ("1 64"), TTFE_CONNS (64), TTFE_EVENTS (21), TTFE_DELAY_MS (20), TTFE_DURATION (30 s),
# HOLD_N (2000), HOLD_EVENTS (100), HOLD_DELAY_MS (20), HOLD10K_N (10000), HOLD10K_EVENTS (25),
# HOLD10K_DELAY_MS (400), OPEN_RATE (5000 streams opened per second), HOLD_TIMEOUT (120 s),
# TRIES (3 tries of a measurement that others disturbed), BUSY_MAX, FOREIGN_MAX, LOAD_WAIT
# (the quiet-machine guard, as in bench/run.sh), KEEP_TMP (1 = keep configs, logs, outputs).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
# A p99 over 64 streams in lockstep: a 10 s round holds ~25 bursts, and its p99 is one
# burst's last streams; 30 s rounds make it three times steadier (docs/benchmarks.md).
TTFE_DURATION=${TTFE_DURATION:-30}
WARMUP=${WARMUP:-2}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18180}
RATE_CONNS=${RATE_CONNS:-64}
LAT_RATE=${LAT_RATE:-1000}
LAT_CONNS=${LAT_CONNS:-16}
LAT200_RATE=${LAT200_RATE:-200}
TTFE_CONNS=${TTFE_CONNS:-64}
TTFE_EVENTS=${TTFE_EVENTS:-21}
TTFE_DELAY_MS=${TTFE_DELAY_MS:-20}
VARIANTS=${VARIANTS-gov redis obs}
STREAM_EVENTS=${STREAM_EVENTS:-21}
STREAM_CONNS=${STREAM_CONNS:-1 64}
HOLD_N=${HOLD_N:-2000}
HOLD_EVENTS=${HOLD_EVENTS:-100}
HOLD_DELAY_MS=${HOLD_DELAY_MS:-20}
HOLD10K_N=${HOLD10K_N:-10000}
HOLD10K_EVENTS=${HOLD10K_EVENTS:-25}
HOLD10K_DELAY_MS=${HOLD10K_DELAY_MS:-400}
OPEN_RATE=${OPEN_RATE:-5000}
HOLD_TIMEOUT=${HOLD_TIMEOUT:-120}
TRIES=${TRIES:-3}

PORT_UP=$PORT_BASE
PORT_NGINX=$((PORT_BASE + 1))
PORT_TAHUA=$((PORT_BASE + 2))
declare -A PORT_VARIANT=([gov]=$((PORT_BASE + 3)) [redis]=$((PORT_BASE + 4)) [obs]=$((PORT_BASE + 5))
                        [before]=$((PORT_BASE + 7)) [gov0]=$((PORT_BASE + 8)) [plug]=$((PORT_BASE + 9))
                        [plug100]=$((PORT_BASE + 10)) [plugev]=$((PORT_BASE + 11)) [prod]=$((PORT_BASE + 12))
                        [guard]=$((PORT_BASE + 13)))
PORT_REDIS=$((PORT_BASE + 6))
declare -A VARIANT_PID=()
for v in $VARIANTS; do
  [ -n "${PORT_VARIANT[$v]:-}" ] || { echo "unknown variant $v (gov redis obs before gov0 plug plug100 plugev prod guard)" >&2; exit 2; }
  [[ $v != before && $v != gov0 ]] || [ -x "${BEFORE:-}" ] || { echo "variant $v needs BEFORE=<a tahua binary>" >&2; exit 2; }
done
KEY=tk-bench-0123456789abcdef
AUTH_HEADER="Authorization: Bearer $KEY"

SCENARIOS=("$@")
[ "${#SCENARIOS[@]}" -gt 0 ] || SCENARIOS=(rate latency latency200 streams whole ttfe hold hold10k)
for s in "${SCENARIOS[@]}"; do
  case $s in
    rate|latency|latency200|streams|whole|ttfe|hold|hold10k) ;;
    -h|--help) sed -n '2,58p' "$0"; exit 0 ;;
    *) echo "usage: $0 [rate] [latency] [latency200] [streams] [whole] [ttfe] [hold] [hold10k]" >&2; exit 2 ;;
  esac
done

for tool in "$TAHUA" taskset curl ss wrk nginx cc redis-server redis-cli; do
  command -v "$tool" >/dev/null || die "missing $tool (scripts/bootstrap.sh --test installs nginx-light, wrk and redis)"
done
for p in "$PORT_UP" "$PORT_NGINX" "$PORT_TAHUA" "${PORT_VARIANT[@]}" "$PORT_REDIS"; do check_port_free "$p"; done

bench_start

# Every held stream costs a proxy two descriptors (client and upstream side), and a proxy
# needs a few hundred for itself (listener, logs, epoll, idle upstream connections kept
# alive). Raise the limit as far as allowed (children inherit it) and hold fewer streams
# if it is still short.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
NOFILE=$(ulimit -n)
[ "$NOFILE" = unlimited ] && NOFILE=65536
cap_streams() {  # N -> N, or the most the open-file limit allows, with a warning
  local n=$1 max=$(((NOFILE - 300) / 2))
  if [ "$n" -gt "$max" ]; then
    log "warning: open-file limit $NOFILE lets a proxy hold ~$max streams (2 descriptors each), not $n; holding $max"
    n=$max
  fi
  echo "$n"
}
HOLD_N=$(cap_streams "$HOLD_N")
HOLD10K_N=$(cap_streams "$HOLD10K_N")

# The bodies: the same chat as bench/chat.lua. Stream knobs ride in the prompt, which
# every proxy forwards unchanged; the upstream reads `events=` and `delay_ms=` from it.
CHAT_BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
stream_body() {  # EVENTS DELAY_MS
  printf '{"model":"bench","stream":true,"messages":[{"role":"user","content":"Say hello in one short sentence. events=%s delay_ms=%s"}]}' "$1" "$2"
}
STREAM_BODY=$(stream_body "$STREAM_EVENTS" 0)
WHOLE_BODY=$(printf '{"model":"bench","stream":true,"messages":[{"role":"user","content":"Say hello in one short sentence. events=%s whole=1"}]}' "$STREAM_EVENTS")
REQ_PATH=/v1/chat/completions

# ---------------------------------------------------------------------------------------
# processes

log "compiling bench/sse_upstream.c and bench/datapath_client.c (cc -O2) into $TMP"
cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
cc -O2 -Wall -o "$TMP/datapath_client" "$ROOT/bench/datapath_client.c" -lm

start_upstream() {
  taskset -c "$LOAD_CPU" "$TMP/sse_upstream" --port "$PORT_UP" --events "$STREAM_EVENTS" \
    >"$TMP/upstream.out" 2>&1 &
  UP_PID=$!
  track "$UP_PID" "sse_upstream"
  wait_http "http://127.0.0.1:$PORT_UP/healthz" "$UP_PID"
}

# One nginx config for every scenario: the same location serves streaming and
# non-streaming completions, as in front of a real LLM API, so buffering is off for all.
# worker_connections is above the open-file limit on purpose: once fewer than 1/16 of
# them are free, nginx closes connections that have not sent their request yet (new
# streams) to make room, so at worker_connections = the limit it holds ~6% fewer streams
# than it has descriptors for. Sized this way, descriptors are its limit, as for tahua.
start_nginx_proxy() {
  write_nginx_config "$TMP/nginx" "$PORT_NGINX" "$PORT_UP" off $((NOFILE + NOFILE / 8)) "$NOFILE"
  start_nginx "$TMP/nginx" "$PROXY_CPU" "$PORT_NGINX"
}

# tahua as users run it: 1 worker, access log off, one openai provider. stream_usage is
# left at its default (true): tahua asks the upstream for the usage chunk, meters it and
# cuts it out of the client's stream, so the usage path is part of what is measured.
# Metrics, router and balancer filters are on by default.
TAHUA_STARTS=0
tahua_config() {  # tahua | gov | redis | obs | before | gov0 | plug | plug100 | plugev | prod | guard
  local port=$PORT_TAHUA
  [ "$1" = tahua ] || port=${PORT_VARIANT[$1]}
  echo "server: {workers: 1$([[ $1 == gov* || $1 == redis || $1 == prod ]] && echo ', tenant_metrics: true')}"
  echo "listeners: [{address: 127.0.0.1, port: $port}]"
  if [[ $1 == obs || $1 == prod ]]; then echo "access_log: {path: $TMP/access-$1.log}"; else echo "access_log: {enabled: false}"; fi
  echo "providers: [{name: up, type: openai, base_url: \"http://127.0.0.1:$PORT_UP/v1\"}]"
  if [ "$1" = prod ]; then echo "models: [{name: bench, provider: up, pricing: {input: 0.15, output: 0.6}}]"
  else echo "models: [{name: bench, provider: up}]"; fi
  case $1 in
    prod)
      local hash
      hash=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
      echo "tenants: [{name: bench, limits: {requests_per_minute: 1000000000, tokens_per_minute: 1000000000000, usd_per_month: 1000000}}]"
      echo "keys: [{name: k, tenant: bench, sha256: $hash, limits: {requests_per_minute: 1000000000}}]"
      echo "rate_limits: {default_max_tokens: 256, policies: [{name: per-key, match: {tenant: [bench]}, per: key, requests_per_minute: 1000000000}]}"
      echo "store: {type: redis, redis: {url: \"redis://127.0.0.1:$PORT_REDIS\"}}"
      echo "tracing: {endpoint: \"http://127.0.0.1:$PORT_UP/v1/traces\", sample_ratio: 0.1}"
      echo "usage: {spill_dir: $TMP/spill-prod, sinks: [{name: redis, type: redis_stream, stream: \"tahua:usage\", maxlen: 100000}]}" ;;
    gov|gov0|redis)
      local hash
      hash=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
      echo "tenants: [{name: bench, limits: {requests_per_minute: 100000000, tokens_per_minute: 1000000000000}}]"
      echo "keys: [{name: k, tenant: bench, sha256: $hash, limits: {requests_per_minute: 100000000, tokens_per_minute: 1000000000000}}]"
      echo "rate_limits: {policies: [{name: p, match: {model: bench}, per: key, requests_per_minute: 100000000}]}"
      if [ "$1" = redis ]; then echo "store: {type: redis, redis: {url: \"redis://127.0.0.1:$PORT_REDIS\"}}"; fi ;;
    plug) echo 'plugins: [{id: noop, source: "return {on_request = function(req) end}"}]' ;;
    plugev) echo 'plugins: [{id: noop, source: "return {on_stream_event = function(ev) end}"}]' ;;
    guard) echo 'guardrails: {policies: [{name: pii, rules: [{name: pii, pii: all, action: redact, inspect: [output]}]}]}' ;;
    plug100)
      echo "plugins:"
      for i in $(seq 1 100); do
        echo "  - {id: p$i, supports: {models: [\"other-$i-*\"]}, source: \"return {on_request = function(req) end}\"}"
      done ;;
  esac
}
start_tahua_proxy() {  # [tahua | gov | redis | obs]
  local which=${1:-tahua}
  tahua_config "$which" >"$TMP/$which.yaml"
  TAHUA_STARTS=$((TAHUA_STARTS + 1))
  if [[ $which == before || $which == gov0 ]]; then TAHUA=$BEFORE start_tahua "$which-$TAHUA_STARTS" "$PROXY_CPU" "$TMP/$which.yaml"
  else start_tahua "$which-$TAHUA_STARTS" "$PROXY_CPU" "$TMP/$which.yaml"; fi
  if [ "$which" = tahua ]; then TAHUA_PID=$STARTED_PID; else VARIANT_PID[$which]=$STARTED_PID; fi
  if [[ $which == redis || $which == prod ]]; then
    grep -q '"redis store available' "$TMP/$which-$TAHUA_STARTS.err" || die "the redis variant does not use Redis (see $TMP)"
  fi
}

# Held streams measure RSS growth, so each hold measurement gets a fresh proxy: memory a
# previous hold freed stays in the allocator and would hide the cost of the next.
restart_proxy() {  # nginx | tahua | a variant
  case $1 in
    nginx) stop_tracked "$NGINX_MASTER"; start_nginx_proxy ;;
    tahua) stop_tracked "$TAHUA_PID"; start_tahua_proxy ;;
    *) stop_tracked "${VARIANT_PID[$1]}"; start_tahua_proxy "$1" ;;
  esac
}

# ---------------------------------------------------------------------------------------
# load generators: each prints one "key=value ..." line

run_wrk() {  # CPU PORT SECONDS CONNS BODY -> "requests=.. duration_us=.. errors=.."
  local out line
  out=$(BENCH_BODY=$5 BENCH_AUTH="Bearer $KEY" taskset -c "$1" wrk -t1 -c"$4" -d"$3"s -s "$ROOT/bench/body.lua" \
        "http://127.0.0.1:$2$REQ_PATH") || die "wrk failed: $out"
  printf '%s\n' "$out" >>"$TMP/wrk.log"
  line=$(printf '%s\n' "$out" | grep '^BENCH ') || die "no BENCH line from wrk: $out"
  awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         printf "requests=%d duration_us=%d errors=%d\n", v["requests"], v["duration_us"],
           v["err_status"] + v["err_connect"] + v["err_read"] + v["err_write"] + v["err_timeout"] }' <<<"$line"
}

run_rate_client() {  # PORT SECONDS [RATE CPU] -> the RATE line
  local out
  out=$(taskset -c "${4:-$LOAD_CPU}" "$TMP/datapath_client" rate --port "$1" --rate "${3:-$LAT_RATE}" --conns "$LAT_CONNS" \
        --duration "$2" --body "$CHAT_BODY" --path "$REQ_PATH" --header "$AUTH_HEADER") || true
  printf '%s\n' "$out" >>"$TMP/client.log"
  printf '%s\n' "$out" | grep '^RATE ' || die "no RATE line from datapath_client: $out"
}

run_streams_client() {  # PORT SECONDS -> the STREAMS line
  local out
  out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" streams --port "$1" --conns "$TTFE_CONNS" --duration "$2" \
        --events "$TTFE_EVENTS" --body "$(stream_body "$TTFE_EVENTS" "$TTFE_DELAY_MS")" --path "$REQ_PATH" \
        --header "$AUTH_HEADER") || true
  printf '%s\n' "$out" >>"$TMP/client.log"
  printf '%s\n' "$out" | grep '^STREAMS ' || die "no STREAMS line from datapath_client: $out"
}

# latency200 runs everything on PROXY_CPU: the upstream moves there for it, and back.
pin_upstream() { taskset -pc "$1" "$UP_PID" >/dev/null; }

run_hold_client() {  # PORT N EVENTS DELAY_MS PID -> the HOLD line
  local out
  out=$(timeout $((HOLD_TIMEOUT + 30)) taskset -c "$LOAD_CPU" "$TMP/datapath_client" hold --port "$1" --n "$2" \
        --open-rate "$OPEN_RATE" --events "$3" --pid "$5" --timeout "$HOLD_TIMEOUT" --path "$REQ_PATH" --header "$AUTH_HEADER" \
        --body "$(stream_body "$3" "$4")" 2>>"$TMP/client.err") || true
  printf '%s\n' "$out" >>"$TMP/client.log"
  printf '%s\n' "$out" | grep '^HOLD ' || die "no HOLD line from datapath_client: $out (see $TMP/client.err)"
}

# ---------------------------------------------------------------------------------------
# one measurement

# target_of TARGET: set PORT, PIDS_M (processes whose CPU counts per request: the proxy,
# or the upstream for alone/direct), CLIENT_CPU, RSS_PID (the proxy's worker; 0 = none).
target_of() {
  CLIENT_CPU=$LOAD_CPU RSS_PID=0
  case $1 in
    alone)  PORT=$PORT_UP; PIDS_M=("$UP_PID"); CLIENT_CPU=$PROXY_CPU ;;
    direct) PORT=$PORT_UP; PIDS_M=("$UP_PID") ;;
    nginx)  PORT=$PORT_NGINX; PIDS_M=("$NGINX_MASTER" "$NGINX_WORKER"); RSS_PID=$NGINX_WORKER ;;
    tahua)  PORT=$PORT_TAHUA; PIDS_M=("$TAHUA_PID"); RSS_PID=$TAHUA_PID ;;
    *)      PORT=${PORT_VARIANT[$1]}; PIDS_M=("${VARIANT_PID[$1]}"); RSS_PID=${VARIANT_PID[$1]} ;;
  esac
}

wall_ns() { date +%s%N; }

proxy_running() {  # nginx | tahua | a variant
  case $1 in
    nginx) running "$NGINX_MASTER" && running "$NGINX_WORKER" ;;
    tahua) running "$TAHUA_PID" ;;
    *) running "${VARIANT_PID[$1]}" ;;
  esac
}

# After a measurement: a proxy that died is said loudly, recorded (the summary counts
# crashes; a crash during its own measurement replaces that measurement), restarted, and
# the temp dir is kept for its logs. Returns 1 if the target itself died.
check_crashes() {  # SCENARIO TARGET ROUND
  local who rc=0
  for who in nginx tahua $VARIANTS; do
    proxy_running "$who" && continue
    log "ERROR: $who exited during round $3 $1 (target $2); logs kept in $TMP; restarting it"
    echo "$1 $who $3 crashed=1" >>"$TMP/results"
    KEEP_TMP=1
    [ "$who" = "$2" ] && rc=1
    restart_proxy "$who"
  done
  return "$rc"
}

# measure SCENARIO TARGET ROUND: warm up, run once, append
# "SCENARIO TARGET ROUND key=value ..." to $TMP/results. "foreign" is machine CPU used
# during the run by anything but our servers and clients, in % of one core; above
# FOREIGN_MAX the run is repeated (TRIES), else kept and flagged disturbed=1.
measure() {
  local scen=$1 target=$2 round=$3
  local try disturbed foreign line res out conns="" servers
  local w0 w1 b0 b1 s0 s1 c0 c1 m0 m1 u0 u1 wall_ticks dm du dc
  case $scen in streams*) conns=${scen#streams} ;; whole*) conns=${scen#whole} ;; esac
  for try in $(seq "$TRIES"); do
    disturbed=0
    wait_for_quiet || disturbed=1
    if [[ $scen == hold* && ($target == nginx || $target == tahua) ]]; then restart_proxy "$target"; fi
    target_of "$target"
    [ "$scen" = latency200 ] && pin_upstream "$PROXY_CPU"
    # Warm-up: connections, caches, the proxy's upstream pool; not measured.
    case $scen in
      rate) run_wrk "$CLIENT_CPU" "$PORT" "$WARMUP" "$RATE_CONNS" "$CHAT_BODY" >/dev/null ;;
      latency) run_rate_client "$PORT" "$WARMUP" >/dev/null ;;
      latency200) run_rate_client "$PORT" "$WARMUP" "$LAT200_RATE" "$PROXY_CPU" >/dev/null ;;
      streams*) run_wrk "$CLIENT_CPU" "$PORT" "$WARMUP" "$conns" "$STREAM_BODY" >/dev/null ;;
      whole*) run_wrk "$CLIENT_CPU" "$PORT" "$WARMUP" "$conns" "$WHOLE_BODY" >/dev/null ;;
      ttfe) run_streams_client "$PORT" "$WARMUP" >/dev/null ;;
    esac
    servers=("$UP_PID" "$NGINX_MASTER" "$NGINX_WORKER" "$TAHUA_PID" "${VARIANT_PID[@]}" ${REDIS_PID:+"$REDIS_PID"})
    w0=$(wall_ns); b0=$(busy_ticks); s0=$(cpu_ticks "${servers[@]}"); times >"$TMP/times"; c0=$(child_ticks)
    m0=$(cpu_ticks "${PIDS_M[@]}"); u0=$(cpu_ticks "$UP_PID")
    case $scen in
      rate) out=$(run_wrk "$CLIENT_CPU" "$PORT" "$DURATION" "$RATE_CONNS" "$CHAT_BODY") ;;
      latency) out=$(run_rate_client "$PORT" "$DURATION") ;;
      latency200) out=$(run_rate_client "$PORT" "$DURATION" "$LAT200_RATE" "$PROXY_CPU") ;;
      streams*) out=$(run_wrk "$CLIENT_CPU" "$PORT" "$DURATION" "$conns" "$STREAM_BODY") ;;
      whole*) out=$(run_wrk "$CLIENT_CPU" "$PORT" "$DURATION" "$conns" "$WHOLE_BODY") ;;
      ttfe) out=$(run_streams_client "$PORT" "$TTFE_DURATION") ;;
      hold) out=$(run_hold_client "$PORT" "$HOLD_N" "$HOLD_EVENTS" "$HOLD_DELAY_MS" "$RSS_PID") ;;
      hold10k) out=$(run_hold_client "$PORT" "$HOLD10K_N" "$HOLD10K_EVENTS" "$HOLD10K_DELAY_MS" "$RSS_PID") ;;
    esac
    m1=$(cpu_ticks "${PIDS_M[@]}"); u1=$(cpu_ticks "$UP_PID")
    times >"$TMP/times"; c1=$(child_ticks); s1=$(cpu_ticks "${servers[@]}"); b1=$(busy_ticks); w1=$(wall_ns)
    [ "$scen" = latency200 ] && pin_upstream "$LOAD_CPU"
    # Without the upstream (or after a Ctrl-C that reached the whole process group)
    # nothing can go on; a proxy that crashed is restarted, so one crash does not cost
    # the other measurements, and a measurement of a proxy that crashed is dropped.
    running "$UP_PID" || die "$scen $target: the upstream (pid $UP_PID) is gone"
    check_crashes "$scen" "$target" "$round" || return 0
    wall_ticks=$(( (w1 - w0) * HZ / 1000000000 ))
    [ "$wall_ticks" -gt 0 ] || wall_ticks=1
    foreign=$(( ((b1 - b0) - (s1 - s0) - (c1 - c0)) * 100 / wall_ticks ))
    [ "$foreign" -le "$FOREIGN_MAX" ] && break
    disturbed=1
    log "round $round $scen $target: other processes used ${foreign}% of a core during the run (try $try of $TRIES)"
  done
  dm=$((m1 - m0)) du=$((u1 - u0)) dc=$((c1 - c0))
  # Per scenario: the figures of the summary, CPU from /proc ticks (1/HZ s).
  res=$(awk -v scen="$scen" -v out=" $out" -v dm="$dm" -v du="$du" -v dc="$dc" -v hz="$HZ" -v wt="$wall_ticks" '
    function v(k,   m) { return match(out, " " k "=[^ ]*") ? substr(out, RSTART + length(k) + 2, RLENGTH - length(k) - 2) : "" }
    BEGIN {
      cpu_s = dm / hz; up_core = du / wt; cl_core = dc / wt
      if (scen == "rate" || scen ~ /^streams/ || scen ~ /^whole/) {
        n = v("requests"); sec = v("duration_us") / 1e6
        if (n <= 0) exit 1
        printf "rate=%.1f cpu_us=%.2f core=%.2f up_core=%.2f cl_core=%.2f err=%d", n / sec, cpu_s * 1e6 / n, cpu_s / sec, up_core, cl_core, v("errors")
      } else if (scen == "ttfe") {
        n = v("measured"); if (n <= 0) exit 1
        printf "ttfe_p50_ms=%.3f ttfe_p90_ms=%.3f ttfe_p99_ms=%.3f ttfe_p999_ms=%.3f ttfe_max_ms=%.3f whole_p50_ms=%.1f whole_p99_ms=%.1f cpu_us=%.1f cl_core=%.2f err=%d hist=%s",
          v("ttfe_p50_us") / 1000, v("ttfe_p90_us") / 1000, v("ttfe_p99_us") / 1000, v("ttfe_p999_us") / 1000, v("ttfe_max_us") / 1000,
          v("whole_p50_us") / 1000, v("whole_p99_us") / 1000, cpu_s * 1e6 / n, cl_core, v("errors"), v("ttfe_hist")
      } else if (scen ~ /^latency/) {
        n = v("measured"); if (n <= 0) exit 1
        printf "p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f cpu_us=%.2f lag_p99_ms=%.3f up_core=%.2f cl_core=%.2f err=%d",
          v("p50_us") / 1000, v("p99_us") / 1000, v("p999_us") / 1000, cpu_s * 1e6 / n, v("lag_p99_us") / 1000, up_core, cl_core, v("errors")
      } else {
        n = v("n"); if (n <= 0) exit 1
        kib = v("kib_per_stream"); if (kib < 0 || v("rss_idle_kib") < 0) kib = "nan"
        printf "ttfe_p50_ms=%.2f ttfe_p99_ms=%.2f gap_p50_ms=%.1f gap_p99_ms=%.1f kib=%s cpu_us=%.1f core=%.2f up_core=%.2f cl_core=%.2f failed=%d together=%.3f",
          v("ttfe_p50_us") / 1000, v("ttfe_p99_us") / 1000, v("gap_p50_us") / 1000, v("gap_p99_us") / 1000, kib,
          cpu_s * 1e6 / n, dm / wt, up_core, cl_core, v("failed"), v("held_together") / n
      }
    }') || die "$scen $target: no completed requests ($out)"
  line="$scen $target $round $res foreign=$foreign disturbed=$disturbed"
  echo "$line" >>"$TMP/results"
  log "round $round $scen $target: $res foreign=$foreign%"
}

# ---------------------------------------------------------------------------------------
# checks before the first round: every target answers what the scenarios send

check_targets() {
  local port name code events
  for name in direct nginx tahua $VARIANTS; do
    target_of "$name"; port=$PORT
    code=$(curl -s -o "$TMP/check.json" -w '%{http_code}' --max-time 5 -H 'content-type: application/json' -H "$AUTH_HEADER" \
      -d "$CHAT_BODY" "http://127.0.0.1:$port$REQ_PATH")
    [ "$code" = 200 ] && grep -q '"chat.completion"' "$TMP/check.json" ||
      die "$name answered $code to a chat completion: $(head -c 300 "$TMP/check.json")"
    code=$(curl -sN -o "$TMP/check.sse" -w '%{http_code}' --max-time 5 -H 'content-type: application/json' -H "$AUTH_HEADER" \
      -d "$STREAM_BODY" "http://127.0.0.1:$port$REQ_PATH")
    events=$(grep -c '^data: ' "$TMP/check.sse" || true)
    [ "$code" = 200 ] && [ "$events" = "$STREAM_EVENTS" ] && grep -q '^data: \[DONE\]' "$TMP/check.sse" ||
      die "$name: stream answered $code with $events events, not $STREAM_EVENTS ending in [DONE]: $(head -c 300 "$TMP/check.sse")"
  done
  # tahua asked for the usage chunk, metered it and cut it out (the client saw
  # STREAM_EVENTS events, checked above): the usage path runs.
  # (Read whole first: grep -q quits at its match, and under pipefail curl's SIGPIPE
  # would fail the pipeline.)
  local metrics
  metrics=$(curl -s --max-time 2 "http://127.0.0.1:$PORT_TAHUA/metrics" || true)
  grep -q '^tahua_tokens_total{.*type="completion".*} [1-9]' <<<"$metrics" ||
    log "warning: tahua_tokens_total shows no completion tokens: is the stream usage path running?"
}

# ---------------------------------------------------------------------------------------
# main

wait_for_quiet || true  # goes on after LOAD_WAIT; measure() flags disturbed runs
print_machine
echo "nofile:  $NOFILE"
start_upstream
start_nginx_proxy
start_tahua_proxy
[[ " $VARIANTS " == *" redis "* || " $VARIANTS " == *" prod "* ]] && start_redis "$LOAD_CPU" "$PORT_REDIS"
for v in $VARIANTS; do start_tahua_proxy "$v"; done
log "upstream $UP_PID (cpu $LOAD_CPU), nginx $NGINX_MASTER/$NGINX_WORKER and tahua $TAHUA_PID (cpu $PROXY_CPU)${VARIANTS:+, variants $VARIANTS}"
check_targets

: >"$TMP/results"
steal0=$(cpu_steal)
for round in $(seq "$ROUNDS"); do
  # Alternate the order within each round, so drift over a round favours neither proxy.
  # shellcheck disable=SC2206  # VARIANTS is a list of words
  if [ $((round % 2)) = 1 ]; then order4=(alone direct nginx tahua $VARIANTS); order3=(direct nginx tahua $VARIANTS)
  else order4=($VARIANTS tahua nginx direct alone); order3=($VARIANTS tahua nginx direct); fi
  hold_order=(); for t in "${order3[@]}"; do [[ " $VARIANTS " == *" $t "* ]] || hold_order+=("$t"); done
  for scen in "${SCENARIOS[@]}"; do
    case $scen in
      rate) for t in "${order4[@]}"; do measure rate "$t" "$round"; done ;;
      latency|latency200|ttfe) for t in "${order3[@]}"; do measure "$scen" "$t" "$round"; done ;;
      streams|whole)
        for c in $STREAM_CONNS; do
          # One client is bound by round trips, not by the upstream's capacity: no "alone" there.
          if [ "$c" = 1 ]; then order=("${order3[@]}"); else order=("${order4[@]}"); fi
          for t in "${order[@]}"; do measure "$scen$c" "$t" "$round"; done
        done ;;
      hold|hold10k) for t in "${hold_order[@]}"; do measure "$scen" "$t" "$round"; done ;;
    esac
  done
done

running "$UP_PID" || die "the upstream (pid $UP_PID) died during the run (logs in $TMP)"
for who in nginx tahua $VARIANTS; do
  proxy_running "$who" && continue
  log "ERROR: $who exited after the last measurement; logs kept in $TMP"
  echo "end $who $ROUNDS crashed=1" >>"$TMP/results"
  KEEP_TMP=1
done
# The production profile's figures count only if nothing was dropped (a drop flatters them).
if [[ " $VARIANTS " == *" prod "* ]] && proxy_running prod; then
  drops=$(curl -s "http://127.0.0.1:${PORT_VARIANT[prod]}/metrics" | awk '/^tahua_[a-z_]*dropped_total/ && $NF > 0')
  if [ -n "$drops" ]; then
    log "ERROR: the prod variant dropped what it was to keep:"; printf '%s\n' "$drops" >&2
    echo "end prod $ROUNDS crashed=1" >>"$TMP/results"
  fi
fi
if grep -qh '"level":"\(error\|warn\)' "$TMP"/*.err; then
  log "tahua logged warnings/errors (first 5):"; grep -h '"level":"\(error\|warn\)' "$TMP"/*.err | head -5 >&2
fi
[ -s "$TMP/client.err" ] && { log "client messages (first 10):"; head -10 "$TMP/client.err" >&2; }

echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end (includes this run's own load)"
echo "steal:   $(steal_pct "$steal0" "$(cpu_steal)") of CPU time during the rounds"
echo "$ROUNDS rounds, ${DURATION}s per measurement (ttfe ${TTFE_DURATION}s; +${WARMUP}s warm-up); medians over the rounds;"
echo "tahua/nginx = median of the per-round ratios. CPU is utime+stime of the proxy process"
echo "(nginx master+worker, tahua), of the upstream for alone/direct."
echo "hold: $HOLD_N streams x $HOLD_EVENTS events ${HOLD_DELAY_MS} ms apart; hold10k: $HOLD10K_N x $HOLD10K_EVENTS events ${HOLD10K_DELAY_MS} ms apart; opened $OPEN_RATE/s"
echo
awk -v stream_events="$STREAM_EVENTS" -v foreign_max="$FOREIGN_MAX" \
    -v hold="$HOLD_N streams held, $HOLD_EVENTS events ${HOLD_DELAY_MS} ms apart" \
    -v hold10k="$HOLD10K_N streams held, $HOLD10K_EVENTS events ${HOLD10K_DELAY_MS} ms apart" \
    -v hold_delay="$HOLD_DELAY_MS" -v hold10k_delay="$HOLD10K_DELAY_MS" -v variants="$VARIANTS" \
    -v ttfe="$TTFE_CONNS clients, streams of $TTFE_EVENTS events ${TTFE_DELAY_MS} ms apart, back to back" \
    -v lat="$LAT_RATE req/s" -v lat200="$LAT200_RATE req/s" '
  function median(arr, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j-1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j-1]; arr[j-1] = t }
    return n % 2 ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
  }
  # med(S, T, K): median over the rounds of key K; sums for counts.
  function med(s, t, k,   r, m, a, x) {
    m = 0
    for (r = 1; r <= R; r++) if ((s, t, r, k) in val && val[s, t, r, k] != "nan") a[++m] = val[s, t, r, k]
    if (!m) return "nan"
    if (k == "err" || k == "failed") { x = 0; for (r = 1; r <= m; r++) x += a[r]; return x }
    return median(a, m)
  }
  # ratio(S, K, A, B): median over the rounds of K of target A / K of target B.
  function ratio(s, k, ta, tb,   r, m, a) {
    m = 0
    for (r = 1; r <= R; r++)
      if ((s, ta, r, k) in val && (s, tb, r, k) in val && val[s, tb, r, k] + 0 != 0 &&
          val[s, ta, r, k] != "nan" && val[s, tb, r, k] != "nan")
        a[++m] = val[s, ta, r, k] / val[s, tb, r, k]
    return m ? median(a, m) : "nan"
  }
  function ratio_row(s, nc, c, ta, tb, label,   j, f) {
    if (!((s, ta) in has && (s, tb) in has)) return
    printf "%-12s", label
    for (j = 1; j <= nc; j++) {
      split(c[j], f, ":")
      printf " %11s", (f[4] == "r" ? fmt("%.2f", ratio(s, f[1], ta, tb)) : "")
    }
    printf "\n"
  }
  function fmt(f, x) { return x == "nan" ? "-" : sprintf(f, x) }
  {
    s = $1; t = $2; r = $3; if (r > R) R = r; seen[s] = 1; has[s, t] = 1
    for (i = 4; i <= NF; i++) { split($i, kv, "="); val[s, t, r, kv[1]] = kv[2] }
    if (val[s, t, r, "disturbed"]) dist++
    if (val[s, t, r, "crashed"]) { crash[s, t]++; crashes++ }
  }
  END {
    ns = split("rate latency latency200 streams1 streams64 whole1 whole64 ttfe hold hold10k", order, " ")
    title["rate"] = "non-streaming, wrk -c64 (saturation)"
    title["latency"] = "non-streaming at a fixed low rate (open loop), " lat
    title["latency200"] = "non-streaming at " lat200 " (open loop), client, upstream and proxy on one core"
    title["streams1"] = "back-to-back streams of " stream_events " events, 1 client"
    title["streams64"] = "back-to-back streams of " stream_events " events, 64 clients"
    title["whole1"] = "back-to-back streams of " stream_events " events, each answer in one upstream write, 1 client"
    title["whole64"] = "the same, 64 clients"
    title["ttfe"] = ttfe
    title["hold"] = hold; title["hold10k"] = hold10k
    # key:header:format[:r] per column, | between columns; r: show the tahua/nginx ratio.
    # Times in ms, CPU in us; "core" columns are the share of one core used over the run.
    cols["rate"] = "rate:req/s:%.0f:r|cpu_us:CPU us/req:%.1f:r|core:core use:%.2f|up_core:up core:%.2f|cl_core:client core:%.2f|err:errors:%d"
    cols["streams1"] = "rate:streams/s:%.0f:r|cpu_us:CPU us/str:%.1f:r|core:core use:%.2f|up_core:up core:%.2f|cl_core:client core:%.2f|err:errors:%d"
    cols["streams64"] = cols["streams1"]; cols["whole1"] = cols["streams1"]; cols["whole64"] = cols["streams1"]
    cols["ttfe"] = "ttfe_p50_ms:TTFE p50:%.2f:r|ttfe_p90_ms:TTFE p90:%.2f:r|ttfe_p99_ms:TTFE p99:%.2f:r|ttfe_p999_ms:p99.9:%.2f:r|ttfe_max_ms:max:%.2f:r|whole_p99_ms:whole p99:%.1f:r|cpu_us:CPU us/str:%.0f:r|err:errors:%d"
    cols["latency"] = "p50_ms:p50 ms:%.3f:r|p99_ms:p99 ms:%.3f:r|p999_ms:p99.9 ms:%.3f:r|cpu_us:CPU us/req:%.1f:r|lag_p99_ms:lag p99 ms:%.3f|err:errors:%d"
    cols["latency200"] = cols["latency"]
    cols["hold"] = "ttfe_p50_ms:TTFE p50:%.2f:r|ttfe_p99_ms:TTFE p99:%.2f:r|gap_p50_ms:gap p50:%.1f:r|gap_p99_ms:gap p99:%.1f:r|kib:KiB/stream:%.2f:r|cpu_us:CPU us/str:%.0f:r|core:core use:%.2f|cl_core:client core:%.2f|failed:failed:%d"
    cols["hold10k"] = cols["hold"]
    nt = split("alone direct nginx tahua " variants, targets, " ")
    nv = split(variants, vlist, " ")
    for (o = 1; o <= ns; o++) {
      s = order[o]; if (!(s in seen)) continue
      nc = split(cols[s], c, "|")
      printf "== %s: %s\n", s, title[s]
      printf "%-12s", "target"
      for (j = 1; j <= nc; j++) { split(c[j], f, ":"); printf " %11s", f[2] }
      printf "\n"
      for (i = 1; i <= nt; i++) {
        t = targets[i]; if (!((s, t) in has)) continue
        printf "%-12s", t
        for (j = 1; j <= nc; j++) { split(c[j], f, ":"); printf " %11s", fmt(f[3], med(s, t, f[1])) }
        printf "\n"
      }
      ratio_row(s, nc, c, "tahua", "nginx", "tahua/nginx")
      for (i = 1; i <= nv; i++) if (vlist[i] != "before" && vlist[i] != "gov0") ratio_row(s, nc, c, vlist[i], "tahua", vlist[i] "/tahua")
      ratio_row(s, nc, c, "tahua", "before", "tahua/before")  # this build against the BEFORE binary
      ratio_row(s, nc, c, "gov", "gov0", "gov/gov0")
      if (s == "ttfe") for (i = 2; i <= nt; i++) if ((s, targets[i]) in has) {
        # The distribution: streams per bucket of time to first event (upper bounds in us), summed over the rounds.
        delete hsum
        for (r = 1; r <= R; r++) if ((s, targets[i], r, "hist") in val) {
          nb = split(val[s, targets[i], r, "hist"], hb, ",")
          for (b = 1; b <= nb; b++) { split(hb[b], kv2, ":"); hsum[b] += kv2[2]; hname[b] = kv2[1] }
        }
        printf "  %-10s TTFE histogram (us: streams):", targets[i]
        for (b = 1; b <= nb; b++) printf " <%s:%d", hname[b], hsum[b]
        printf "\n"
      }
      # The upstream must never be the bottleneck: at least 2x what either proxy reaches.
      # Measured alone, the client on the other core may be what limits it (it then uses
      # less than its core); its capacity, 1e6 / its CPU us per request, is the sure figure.
      if ((s, "alone") in has) {
        a = med(s, "alone", "rate"); uc = med(s, "alone", "up_core"); cap = 1e6 / med(s, "alone", "cpu_us")
        printf "upstream alone: %.0f per s using %.2f of its core; at %.1f us of CPU each, %.0f per s per core\n",
          a, uc, med(s, "alone", "cpu_us"), cap
        for (i = 3; i <= nt; i++) {
          t = targets[i]; p = med(s, t, "rate"); if (p == "nan" || p <= 0) continue
          printf "  / %s (%.0f per s): measured %.2f, capacity %.2f (at least 2 required)", t, p, a / p, cap / p
          if (cap / p < 2) printf "   <<<<< WARNING: THE UPSTREAM IS NOT 2x %s: IT MAY BE WHAT LIMITS IT", toupper(t)
          else if (a / p < 2) printf "   (measured below 2 with the upstream under its core: not driven to its limit)"
          printf "\n"
        }
      }
      if (s ~ /^latency/)
        printf "(latency from the scheduled send, so client delays count; lag: how late the client sent)\n"
      if (s ~ /^hold/) {
        printf "(ms: time to first event from connect() and largest gap between two events of a stream,\n"
        printf " percentiles over the streams. KiB/stream: VmRSS growth of a fresh proxy worker with all\n"
        printf " N streams open, / N. CPU and core use: the proxy over the whole hold; for direct, the upstream.)\n"
        # direct is the floor: the client and the upstream alone on the load core.
        d = (s == "hold" ? hold_delay : hold10k_delay); g = med(s, "direct", "gap_p50_ms")
        if (g != "nan" && g > 1.25 * d)
          printf "note: direct has a largest-gap p50 of %.1f ms on a %d ms schedule: the load core (upstream + client) is late, and the gaps through the proxies include that\n", g, d
      }
      for (i = 2; i <= nt; i++) {
        t = targets[i]; if (!((s, t) in has)) continue
        if ((s == "rate" || s ~ /^streams/ || s ~ /^whole/) && i >= 3 && med(s, t, "core") < 0.9)
          printf "note: %s used %.2f of its core: the load core (client + upstream) limited it; compare CPU per request\n", t, med(s, t, "core")
        # together: the largest share of the N streams that were open at once.
        if (s ~ /^hold/) for (r = 1; r <= R; r++) if ((s, t, r, "together") in val && val[s, t, r, "together"] < 1)
          printf "note: %s round %d: at most %.0f%% of the streams were open at once (streams ended before the last opened); its KiB/stream is taken at that count\n", t, r, 100 * val[s, t, r, "together"]
      }
      for (i = 3; i <= nt; i++) if ((s, targets[i]) in crash)
        printf "CRASHED: %s exited during %d of the measurements above (its figures exclude them; see its log)\n", targets[i], crash[s, targets[i]]
      printf "\n"
    }
    if (crashes) printf "WARNING: a proxy crashed %d time(s) during the run\n", crashes
    if (dist) printf "WARNING: %d measurement(s) ran while other work used more than %d%% of a core: treat the numbers as disturbed\n", dist, foreign_max
  }' "$TMP/results"
# A crash is a failed run, whatever the numbers say.
! grep -q 'crashed=1' "$TMP/results"
