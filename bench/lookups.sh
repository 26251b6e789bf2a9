#!/usr/bin/env bash
# A flood of lookups of ids that do not exist (docs/tenants-and-limits.md, "Lookups of
# ids that do not exist"; docs/benchmarks.md): a plugin looks up tahua.kv key
# "order:<request id>" on every request (a new, unknown id each time) through a gateway on
# a real redis-server, at RATE requests a second for DURATION seconds, with the lookup
# filter on (store.lookups.enabled: true) and off, in alternating rounds. Per round: the
# requests served, the lookups the filter answered (tahua_store_lookups_total{answer=
# "filter"}) and those that reached Redis (its own cmdstat_get), tahua's CPU per request
# and the latency percentiles of the open-loop client.
#
# Knobs: TAHUA (build/tahua), ROUNDS (3), DURATION (10 s), RATE (2000), CONNS (32),
# PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18480).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
RATE=${RATE:-2000}
CONNS=${CONNS:-32}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18480}
PORT_UP=$PORT_BASE
PORT_TAHUA=$((PORT_BASE + 1))
PORT_REDIS=$((PORT_BASE + 2))

for tool in "$TAHUA" taskset curl cc redis-server redis-cli; do command -v "$tool" >/dev/null || die "missing $tool"; done
for p in "$PORT_UP" "$PORT_TAHUA" "$PORT_REDIS"; do check_port_free "$p"; done
bench_start
print_machine

cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
cc -O2 -Wall -o "$TMP/datapath_client" "$ROOT/bench/datapath_client.c" -lm
taskset -c "$LOAD_CPU" "$TMP/sse_upstream" --port "$PORT_UP" --events 21 >"$TMP/upstream.out" 2>&1 &
track $! sse_upstream
wait_http "http://127.0.0.1:$PORT_UP/healthz" "$!"
mkdir -p "$TMP/redis"
taskset -c "$LOAD_CPU" redis-server --port "$PORT_REDIS" --bind 127.0.0.1 --dir "$TMP/redis" --appendonly yes \
  --save "" >"$TMP/redis.out" 2>&1 &
track $! redis-server
for _ in $(seq 50); do redis-cli -p "$PORT_REDIS" ping >/dev/null 2>&1 && break; sleep 0.1; done

config() {  # ENABLED
  cat >"$TMP/tahua-$1.yaml" <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up}]
store:
  type: redis
  redis: {url: "redis://127.0.0.1:$PORT_REDIS"}
  lookups: {enabled: $1, expected_ids: 1000000, false_positive_rate: 0.01, negative_ttl: 60s}
plugins:
  - id: orders
    source: |
      return { on_request = function(req) local v = tahua.kv.get("order:" .. req.id) end }
EOF
}
config true
config false
BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
gets() { redis-cli -p "$PORT_REDIS" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_get:calls=\([0-9]*\),.*/\1/p' | grep . || echo 0; }
metric() { curl -s "http://127.0.0.1:$PORT_TAHUA/metrics" | awk -v m="$1" 'index($0, m" ") == 1 { print $2 }' | head -1; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
field() { sed -n "s/.* $1=\([0-9.-]*\).*/\1/p"; }
hz=$(getconf CLK_TCK)

for round in $(seq "$ROUNDS"); do
  for enabled in true false; do
    wait_for_quiet || true
    start_tahua "tahua-$enabled" "$PROXY_CPU" "$TMP/tahua-$enabled.yaml"
    pid=$STARTED_PID
    if [ "$enabled" = true ]; then
      for _ in $(seq 100); do [ "$(metric tahua_store_id_filter_ready)" = 1 ] && break; sleep 0.1; done
    fi
    g0=$(gets); c0=$(cpu_ticks "$pid"); f0=$(metric 'tahua_store_lookups_total{answer="filter"}')
    out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate "$RATE" --conns "$CONNS" \
      --duration "$DURATION" --body "$BODY" | grep '^RATE ')
    g1=$(gets); c1=$(cpu_ticks "$pid"); f1=$(metric 'tahua_store_lookups_total{answer="filter"}')
    stop_pids "$pid"
    log "round $round filter=$enabled: $out"
    n=$(field done <<<"$out")
    filtered=$(( ${f1%.*} - ${f0%.*} ))
    echo "lookups round=$round filter=$enabled requests=$n errors=$(field errors <<<"$out") filtered=$filtered reached_redis=$((g1 - g0))" \
      "filtered_per_s=$(awk -v f="$filtered" -v d="$DURATION" 'BEGIN { printf "%.0f", f / d }')" \
      "cpu_us_per_req=$(awk -v c="$((c1 - c0))" -v hz="$hz" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", c / hz * 1e6 / n; else print "nan" }')" \
      "p50_us=$(field p50_us <<<"$out") p99_us=$(field p99_us <<<"$out")"
  done
done
