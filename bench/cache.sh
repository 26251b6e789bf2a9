#!/usr/bin/env bash
# What a response-cache hit costs the gateway (docs/benchmarks.md, "Response cache"): the
# same request at RATE a second for DURATION seconds through one worker, in alternating
# rounds of:
#   proxy         the cache off: every request proxied to the upstream (the baseline);
#   hit           cache on, in process: every request after the first a hit;
#   hit-stream    the same, a streamed request replayed (21 events);
#   redis-hit     cache on with cache.redis and local_ttl 1s: hits from the in-process
#                 copy, refreshed from Redis each second (what a replica mostly does);
#   redis-only    cache on with cache.redis and local_ttl 0s: every hit read from Redis.
# Per round: tahua's CPU per request on its own core, the upstream's requests, the
# client's latency percentiles.
#
# Knobs: TAHUA (build/tahua), ROUNDS (3), DURATION (10 s), RATE (2000), CONNS (32),
# PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18490).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
RATE=${RATE:-2000}
CONNS=${CONNS:-32}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18490}
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
taskset -c "$LOAD_CPU" redis-server --port "$PORT_REDIS" --bind 127.0.0.1 --dir "$TMP/redis" --save "" \
  --maxmemory 256mb --maxmemory-policy allkeys-lru >"$TMP/redis.out" 2>&1 &
track $! redis-server
for _ in $(seq 50); do redis-cli -p "$PORT_REDIS" ping >/dev/null 2>&1 && break; sleep 0.1; done

config() {  # NAME CACHE_YAML
  cat >"$TMP/tahua-$1.yaml" <<YAML
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up}]
$2
YAML
}
config proxy "cache: {enabled: false}"
config hit "cache: {enabled: true, cacheable: all}"
config hit-stream "cache: {enabled: true, cacheable: all}"
config redis-hit "cache: {enabled: true, cacheable: all, redis: {url: \"redis://127.0.0.1:$PORT_REDIS\"}, local_ttl: 1s}"
config redis-only "cache: {enabled: true, cacheable: all, redis: {url: \"redis://127.0.0.1:$PORT_REDIS\"}, local_ttl: 0s}"
BODY='{"model":"bench","temperature":0,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
STREAM_BODY='{"model":"bench","temperature":0,"stream":true,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
# CPU time of every thread of the process, in ns (schedstat: not quantized to ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }
field() { sed -n "s/.* $1=\([0-9.-]*\).*/\1/p"; }

for round in $(seq "$ROUNDS"); do
  for name in proxy hit hit-stream redis-hit redis-only; do
    body=$BODY
    [ "$name" = hit-stream ] && body=$STREAM_BODY
    redis-cli -p "$PORT_REDIS" flushall >/dev/null
    wait_for_quiet || true
    start_tahua "tahua-$name" "$PROXY_CPU" "$TMP/tahua-$name.yaml"
    pid=$STARTED_PID
    # The first answer is kept: the measured requests are hits (but the proxy's).
    curl -s -o /dev/null -H 'content-type: application/json' -d "$body" "http://127.0.0.1:$PORT_TAHUA/v1/chat/completions"
    c0=$(cpu_ns "$pid")
    out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate "$RATE" --conns "$CONNS" \
      --duration "$DURATION" --body "$body" | grep '^RATE ')
    c1=$(cpu_ns "$pid")
    hits=$(curl -s "http://127.0.0.1:$PORT_TAHUA/metrics" | awk '/^tahua_cache_requests_total\{.*status="hit"/ { s += $2 } END { print s + 0 }')
    stop_pids "$pid"
    log "round $round $name: $out"
    n=$(field done <<<"$out")
    echo "cache round=$round mode=$name requests=$n errors=$(field errors <<<"$out") hits=$hits" \
      "cpu_us_per_req=$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", c / 1e3 / n; else print "nan" }')" \
      "p50_us=$(field p50_us <<<"$out") p99_us=$(field p99_us <<<"$out")"
  done
done
