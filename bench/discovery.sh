#!/usr/bin/env bash
# Cost of DNS discovery's refreshes on the data path (issue 13), run on demand (not in
# CI). See docs/benchmarks.md, "Upstream discovery".
#
#   bench/discovery.sh
#
# One proxy worker pinned to PROXY_CPU in front of four bench/sse_upstream.c servers on
# 127.0.0.2-127.0.0.5 (one port), found through a dnsmasq on loopback (TTL 1 s; tahua
# re-resolves every 200 ms). Open-loop non-streaming requests at LAT_RATE/s
# (bench/datapath_client.c rate: latency from each request's due time, so a stall shows)
# for DURATION seconds, in three phases each round:
#   static   a second tahua whose deployment is a fixed base_url (127.0.0.2): no discovery
#   steady   the records do not change (the 200 ms refreshes find nothing new)
#   flip     every FLIP_MS a third endpoint (127.0.0.4) joins or leaves the records, so each
#            refresh that sees it publishes a new config
# Reported per phase: p50, p99, p99.9 and max latency, and how many configs were
# published (tahua_config_generation). The upstreams, dnsmasq and the client share LOAD_CPU.
#
# Knobs (environment): TAHUA, ROUNDS (3), DURATION (10), LAT_RATE (2000), LAT_CONNS (16),
# FLIP_MS (500), PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18480: upstreams, +1 tahua,
# +2 dnsmasq, +3 the static tahua), KEEP_TMP.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
LAT_RATE=${LAT_RATE:-2000}
LAT_CONNS=${LAT_CONNS:-16}
FLIP_MS=${FLIP_MS:-500}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18480}
PORT_UP=$PORT_BASE
PORT_TAHUA=$((PORT_BASE + 1))
PORT_DNS=$((PORT_BASE + 2))
PORT_STATIC=$((PORT_BASE + 3))
CHAT_BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

for tool in "$TAHUA" taskset curl cc dnsmasq; do
  command -v "$tool" >/dev/null || die "missing $tool (scripts/bootstrap.sh --test)"
done
for p in "$PORT_UP" "$PORT_TAHUA" "$PORT_DNS" "$PORT_STATIC"; do check_port_free "$p"; done
bench_start

cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
cc -O2 -Wall -o "$TMP/datapath_client" "$ROOT/bench/datapath_client.c" -lm
for ip in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do
  taskset -c "$LOAD_CPU" "$TMP/sse_upstream" --host "$ip" --port "$PORT_UP" --events 21 >"$TMP/upstream-$ip.out" 2>&1 &
  track $! "sse_upstream $ip"
  wait_http "http://$ip:$PORT_UP/healthz" "$!"
done

records() {  # the A records of pool.test: set a (two endpoints) or b (a third joined)
  case $1 in
    a) printf '127.0.0.2 pool.test\n127.0.0.3 pool.test\n' ;;
    b) printf '127.0.0.2 pool.test\n127.0.0.3 pool.test\n127.0.0.4 pool.test\n' ;;
  esac >"$TMP/hosts"
}
records a
taskset -c "$LOAD_CPU" dnsmasq --keep-in-foreground --port="$PORT_DNS" --listen-address=127.0.0.1 --bind-interfaces --no-resolv \
  --no-hosts --addn-hosts="$TMP/hosts" --local-ttl=1 --conf-file=/dev/null --pid-file= --log-facility=/dev/null \
  $( [ "$(id -u)" = 0 ] && echo --user=root ) &
DNS_PID=$!
track "$DNS_PID" dnsmasq
chmod 755 "$TMP"

cat >"$TMP/tahua.yaml" <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
idempotency: {enabled: false}
discovery: {resolvers: ["127.0.0.1:$PORT_DNS"], timeout: 300ms}
providers: [{name: up, type: openai, base_url: "http://pool.test:$PORT_UP/v1"}]
models: [{name: bench, balancing: least_outstanding, deployments: [{id: pool, provider: up, dns: {name: pool.test, min_ttl: 200ms, max_ttl: 200ms}}]}]
EOF
start_tahua tahua "$PROXY_CPU" "$TMP/tahua.yaml"
TAHUA_PID=$STARTED_PID
for _ in $(seq 50); do
  grep -q '"dns discovery: endpoints changed"' "$TMP/tahua.err" && break
  sleep 0.1
done
grep -q '"dns discovery: endpoints changed"' "$TMP/tahua.err" || die "tahua found no endpoints"

sed -e "s/port: $PORT_TAHUA/port: $PORT_STATIC/" -e "s#http://pool.test:$PORT_UP/v1#http://127.0.0.2:$PORT_UP/v1#" \
    -e 's/deployments: \[{id: pool, provider: up, dns: {[^}]*}}\]/provider: up/' "$TMP/tahua.yaml" >"$TMP/static.yaml"
start_tahua static "$PROXY_CPU" "$TMP/static.yaml"

generation() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^tahua_config_generation /{print $2}'; }
measure() {  # PHASE ROUND
  local flipper="" g0 g1 out port=$PORT_TAHUA
  [ "$1" = static ] && port=$PORT_STATIC
  if [ "$1" = flip ]; then
    # On the load core, like the DNS server: the proxy's core runs only the proxy.
    taskset -c "$LOAD_CPU" bash -c "set=a; while :; do sleep $(awk -v ms="$FLIP_MS" 'BEGIN{print ms/1000}')
        if [ \$set = a ]; then set=b; printf '127.0.0.2 pool.test\n127.0.0.3 pool.test\n127.0.0.4 pool.test\n'
        else set=a; printf '127.0.0.2 pool.test\n127.0.0.3 pool.test\n'; fi >'$TMP/hosts'; kill -HUP $DNS_PID; done" &
    flipper=$!
  fi
  g0=$(generation "$port")
  out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$port" --rate "$LAT_RATE" --conns "$LAT_CONNS" \
        --duration "$DURATION" --body "$CHAT_BODY") || true
  g1=$(generation "$port")
  [ -n "$flipper" ] && { kill "$flipper"; wait "$flipper" 2>/dev/null || true; records a; kill -HUP "$DNS_PID"; }
  line=$(printf '%s\n' "$out" | grep '^RATE ') || die "no RATE line: $out"
  echo "$1 $2 $line configs=$((g1 - g0))" | tee -a "$TMP/results" >&2
}

for round in $(seq "$ROUNDS"); do
  for phase in static steady flip; do measure "$phase" "$round"; done
done
kill -0 "$TAHUA_PID" || die "tahua exited"
echo "== per phase (each round's RATE line; latencies in µs)"
cat "$TMP/results"
