#!/usr/bin/env bash
# Lua plugins under load (docs/plugins.md, docs/benchmarks.md "Plugins"):
#
#   hostile   p50/p99 of plain requests at a fixed rate (LAT_RATE, datapath_client rate)
#             through a gateway whose plugin loops forever on requests that carry
#             x-evil, with HOSTILE connections sending HOSTILE_RATE such requests a second, against
#             the same gateway with no hostile traffic, in alternating order. The plugin's
#             budget is 50 ms of CPU in SLICE slices: a looping call holds the worker's
#             loop one slice at a time.
#   reload    RELOADS versions of a plugin put through the admin API one after the other
#             (PUT /admin/v1/plugins/{id}, alternating two versions), with requests going
#             on: the gateway's RSS before and after, and the time of a PUT (checked,
#             compiled, stored and in force).
#   templates RELOADS versions of a prompt template put through the admin API
#             (PUT /admin/v1/resources/PromptTemplate/bench@2, two contents alternating),
#             with requests that name it going on: RSS before and after, the time of a PUT.
#
# CPU per request of a no-op plugin, of 100 installed plugins none of which matches, and
# of a no-op stream-event plugin: bench/datapath.sh with VARIANTS="plug plug100 plugev".
#
# Knobs: TAHUA (build/tahua), ROUNDS (3), DURATION (10 s), LAT_RATE (200), LAT_CONNS (16),
# HOSTILE (2 connections), HOSTILE_RATE (30 hostile requests a second), SLICE (1ms), RELOADS (1000), PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18380).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
LAT_RATE=${LAT_RATE:-200}
LAT_CONNS=${LAT_CONNS:-16}
HOSTILE=${HOSTILE:-2}
HOSTILE_RATE=${HOSTILE_RATE:-30}
SLICE=${SLICE:-1ms}
RELOADS=${RELOADS:-1000}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18380}
PORT_UP=$PORT_BASE
PORT_TAHUA=$((PORT_BASE + 1))
PORT_ADMIN=$((PORT_BASE + 2))
TOKEN=bench-admin-token-0123456789
SCENARIOS=("$@")
[ "${#SCENARIOS[@]}" -gt 0 ] || SCENARIOS=(hostile reload templates)

for tool in "$TAHUA" taskset curl cc; do command -v "$tool" >/dev/null || die "missing $tool"; done
for p in "$PORT_UP" "$PORT_TAHUA" "$PORT_ADMIN"; do check_port_free "$p"; done
bench_start
print_machine

cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
cc -O2 -Wall -o "$TMP/datapath_client" "$ROOT/bench/datapath_client.c" -lm
taskset -c "$LOAD_CPU" "$TMP/sse_upstream" --port "$PORT_UP" --events 21 >"$TMP/upstream.out" 2>&1 &
track $! sse_upstream
wait_http "http://127.0.0.1:$PORT_UP/healthz" "$!"

cat >"$TMP/tahua.yaml" <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
admin: {listen: {address: 127.0.0.1, port: $PORT_ADMIN}, token: $TOKEN}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up}]
prompts:
  - {id: bench, version: "1", messages: [{role: system, content: "Answer {{who}}."}], variables: [who]}
plugins:
  - id: hostile
    budgets: {cpu: 50ms, slice: $SLICE}
    breaker: {failures: 1000000}
    source: |
      return { on_request = function(req) if req:header("x-evil") then while true do end end end }
EOF
start_tahua tahua "$PROXY_CPU" "$TMP/tahua.yaml"
TAHUA_PID=$STARTED_PID
BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

quiet_p() {  # -> the RATE line of plain requests
  taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate "$LAT_RATE" --conns "$LAT_CONNS" \
    --duration "$DURATION" --warmup 1 --body "$BODY" | grep '^RATE '
}
# The hostile traffic: HOSTILE connections sending requests that make the plugin loop
# (each is cut off at the 50 ms budget), HOSTILE_RATE a second in all.
start_hostile() {
  taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate "$HOSTILE_RATE" --conns "$HOSTILE" \
    --duration 100000 --body "$BODY" --header "x-evil: 1" >/dev/null 2>&1 &
  HOSTILE_PID=$!
  track "$HOSTILE_PID" "hostile client"
}
field() { sed -n "s/.* $1=\([0-9.-]*\).*/\1/p"; }

if [[ " ${SCENARIOS[*]} " == *" hostile "* ]]; then
  for round in $(seq "$ROUNDS"); do
    wait_for_quiet
    quiet=$(quiet_p)
    log "round $round quiet:   $quiet"
    start_hostile
    sleep 1  # the hostile requests are looping in the plugin
    loud=$(quiet_p)
    stop_pids "$HOSTILE_PID"
    log "round $round hostile: $loud"
    echo "hostile round=$round quiet_p50=$(field p50_us <<<"$quiet") quiet_p99=$(field p99_us <<<"$quiet")" \
      "hostile_p50=$(field p50_us <<<"$loud") hostile_p99=$(field p99_us <<<"$loud")" \
      "ratio_p99=$(awk -v a="$(field p99_us <<<"$loud")" -v b="$(field p99_us <<<"$quiet")" 'BEGIN { printf "%.2f", a / b }')"
  done
  calls=$(curl -s "http://127.0.0.1:$PORT_TAHUA/metrics" | grep '^tahua_plugin_calls_total{plugin="hostile".*outcome="cpu_budget"' || true)
  log "hostile calls cut off: $calls"
fi

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$TAHUA_PID/status"; }
put_version() {  # N
  local src="return { on_response_headers = function(resp) resp:set_header('x-v', '$1') end }"
  curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X PUT -H "authorization: Bearer $TOKEN" \
    -d "{\"version\":\"$1\",\"source\":\"$src\"}" "http://127.0.0.1:$PORT_ADMIN/admin/v1/plugins/reloaded"
}
# reloads NAME PUT_FN BODY: RELOADS puts (PUT_FN 0, PUT_FN 1, ...) with requests of BODY
# going on at 100/s; the RSS before and after and the PUTs' times.
reloads() {
  local name=$1 put=$2 body=$3
  taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate 100 --conns 4 \
    --duration 100000 --body "$body" >/dev/null 2>&1 &
  LOAD_PID=$!
  track "$LOAD_PID" "background requests"
  for i in $(seq 50); do "$put" $((i % 2)) >/dev/null; done  # warm up: allocator, caches
  local before after bad p50 p99
  before=$(rss_kb)
  : >"$TMP/puts-$name"
  for i in $(seq "$RELOADS"); do "$put" $((i % 2)) >>"$TMP/puts-$name"; done
  after=$(rss_kb)
  stop_pids "$LOAD_PID"
  bad=$(awk '$1 != 200' "$TMP/puts-$name" | wc -l)
  p50=$(awk '{ print $2 * 1000 }' "$TMP/puts-$name" | sort -n | awk '{ v[NR] = $1 } END { print v[int(NR / 2) + 1] }')
  p99=$(awk '{ print $2 * 1000 }' "$TMP/puts-$name" | sort -n | awk '{ v[NR] = $1 } END { print v[int(NR * 0.99) + 1] }')
  echo "$name reloads=$RELOADS rss_before_kb=$before rss_after_kb=$after growth_kb=$((after - before)) failed_puts=$bad" \
    "put_p50_ms=$p50 put_p99_ms=$p99"
}
[[ " ${SCENARIOS[*]} " == *" reload "* ]] && reloads reload put_version "$BODY"

put_template() {  # N
  curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X PUT -H "authorization: Bearer $TOKEN" \
    -d "{\"variables\":[\"who\"],\"messages\":[{\"role\":\"system\",\"content\":\"Version $1 answers {{who}}.\"}]}" \
    "http://127.0.0.1:$PORT_ADMIN/admin/v1/resources/PromptTemplate/bench@2"
}
TBODY='{"model":"bench","prompt":{"id":"bench","variables":{"who":"briefly"}},"messages":[{"role":"user","content":"Say hello."}]}'
[[ " ${SCENARIOS[*]} " == *" templates "* ]] && reloads templates put_template "$TBODY"
true
