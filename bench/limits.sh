#!/usr/bin/env bash
# Cost of authentication and limits (issue 12), run on demand (not in CI). See
# docs/benchmarks.md, "Tenants and limits".
#
#   bench/limits.sh
#
# Non-streaming chat completions at saturation (wrk -c$RATE_CONNS) through one proxy
# worker pinned to PROXY_CPU, in front of bench/sse_upstream.c; the upstream, Redis and
# wrk share LOAD_CPU. Targets, each round in this order:
#   nginx    the reference proxy
#   off      tahua, no tenants (authentication off)
#   auth     tahua, one tenant and its key: the key check on every request
#   memory   auth + a request rate limit and a token limit per tenant and per key,
#            counted in process (limits far above the load: every request is admitted)
#   redis    the same limits in Redis (store.type: redis) on LOAD_CPU
#   redis0   with BEFORE=path: the redis target with that binary (a before/after pair in
#            one run, the same machine state)
# Reported per target: req/s, the proxy's CPU µs per request, wrk's p99 latency (at
# saturation: a closed loop of RATE_CONNS connections), and for redis the Redis
# server's CPU µs per request and share of its core (it must not be the bottleneck).
# Summary: medians over ROUNDS of each figure and of the ratios to `off`.
#
# Knobs (environment): TAHUA, ROUNDS (3), DURATION (10), WARMUP (2), PROXY_CPU (0),
# LOAD_CPU (1), PORT_BASE (18280: upstream, +1 nginx, +2 tahua, +3 redis), RATE_CONNS (64),
# BEFORE, KEEP_TMP.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18280}
RATE_CONNS=${RATE_CONNS:-64}
PORT_UP=$PORT_BASE
PORT_NGINX=$((PORT_BASE + 1))
PORT_TAHUA=$((PORT_BASE + 2))
PORT_REDIS=$((PORT_BASE + 3))
KEY=tk-bench-0123456789abcdef
CHAT_BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

for tool in "$TAHUA" taskset curl wrk nginx cc redis-server redis-cli; do
  command -v "$tool" >/dev/null || die "missing $tool (scripts/bootstrap.sh --test)"
done
for p in "$PORT_UP" "$PORT_NGINX" "$PORT_TAHUA" "$PORT_REDIS"; do check_port_free "$p"; done
bench_start

start_upstream_and_redis "$LOAD_CPU" "$PORT_UP" "$PORT_REDIS"

write_nginx_config "$TMP/nginx" "$PORT_NGINX" "$PORT_UP" off 4096
start_nginx "$TMP/nginx" "$PROXY_CPU" "$PORT_NGINX"

HASH=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
tahua_config() {  # TARGET
  cat <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
idempotency: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up}]
EOF
  case $1 in
    off) ;;
    auth)
      echo "tenants: [{name: bench}]"
      echo "keys: [{name: k, tenant: bench, sha256: $HASH}]" ;;
    memory|redis|redis0)
      echo "tenants: [{name: bench, limits: {requests_per_minute: 100000000, tokens_per_minute: 1000000000000}}]"
      echo "keys: [{name: k, tenant: bench, sha256: $HASH, limits: {requests_per_minute: 100000000, tokens_per_minute: 1000000000000}}]"
      if [ "$1" != memory ]; then echo "store: {type: redis, redis: {url: \"redis://127.0.0.1:$PORT_REDIS\"}}"; fi ;;
  esac
}

run_wrk() { wrk_chat "$LOAD_CPU" "$1" "$2" "$RATE_CONNS" "$CHAT_BODY" "Bearer $KEY"; }  # PORT SECONDS

measure() {  # TARGET ROUND
  local target=$1 port pids out r0 r1 p0 p1
  if [ "$target" = nginx ]; then
    port=$PORT_NGINX pids=("$NGINX_MASTER" "$NGINX_WORKER")
  else
    tahua_config "$target" >"$TMP/tahua-$target.yaml"
    if [ "$target" = redis0 ]; then TAHUA="$BEFORE" start_tahua "tahua-$target-$2" "$PROXY_CPU" "$TMP/tahua-$target.yaml"
    else start_tahua "tahua-$target-$2" "$PROXY_CPU" "$TMP/tahua-$target.yaml"; fi
    port=$PORT_TAHUA pids=("$STARTED_PID")
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $KEY" -d "$CHAT_BODY" \
      "http://127.0.0.1:$port/v1/chat/completions")
    [ "$code" = 200 ] || die "$target answered $code"
  fi
  wait_for_quiet || true
  run_wrk "$port" "$WARMUP" >/dev/null
  p0=$(cpu_ticks "${pids[@]}"); r0=$(cpu_ticks "$REDIS_PID")
  out=$(run_wrk "$port" "$DURATION")
  p1=$(cpu_ticks "${pids[@]}"); r1=$(cpu_ticks "$REDIS_PID")
  if [ "$target" != nginx ]; then
    [ "${target#redis}" = "$target" ] || grep -q '"redis store available' "$TMP/tahua-$target-$2.err" || die "redis target did not use Redis"
    stop_tracked "$STARTED_PID"
  fi
  awk -v t="$target" -v r="$2" -v out=" $out" -v dp=$((p1 - p0)) -v dr=$((r1 - r0)) -v hz="$HZ" '
    function v(k) { return match(out, " " k "=[^ ]*") ? substr(out, RSTART + length(k) + 2, RLENGTH - length(k) - 2) : "" }
    BEGIN { n = v("requests"); sec = v("duration_us") / 1e6
            printf "%s %s rate=%.1f cpu_us=%.3f p99_us=%d redis_us=%.3f redis_core=%.2f err=%d\n", t, r, n / sec, dp / hz * 1e6 / n,
              v("p99_us"), dr / hz * 1e6 / n, dr / hz / sec, v("errors") }' | tee -a "$TMP/results" >&2
}

for round in $(seq "$ROUNDS"); do
  for target in nginx off auth memory ${BEFORE:+redis0} redis; do measure "$target" "$round"; done
done

echo "== summary (medians over $ROUNDS rounds; ratios per round to tahua 'off')"
awk '
  function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { for (i = 3; i <= NF; i++) { split($i, kv, "="); val[$1, $2, kv[1]] = kv[2] } targets[$1] = 1; rounds[$2] = 1 }
  END {
    split("nginx off auth memory redis0 redis", order, " ")
    for (k = 1; k <= 6; k++) {
      t = order[k]; n = 0
      if (!(t in targets)) continue
      for (r in rounds) { n++; rate[n] = val[t, r, "rate"]; cpu[n] = val[t, r, "cpu_us"]; rr[n] = val[t, r, "rate"] / val["off", r, "rate"]
                          cr[n] = val[t, r, "cpu_us"] / val["off", r, "cpu_us"]; dcpu[n] = val[t, r, "cpu_us"] - val["off", r, "cpu_us"]
                          ru[n] = val[t, r, "redis_us"]; rc[n] = val[t, r, "redis_core"]; p99[n] = val[t, r, "p99_us"] }
      printf "%-7s req/s %9.1f  cpu/req %7.3f us  p99 %6d us  req/s vs off %.3f  cpu vs off %.3f  cpu - off %+.3f us", t, median(rate, n), median(cpu, n), median(p99, n), median(rr, n), median(cr, n), median(dcpu, n)
      if (t ~ /^redis/) printf "  redis cpu/req %.3f us, redis core %.2f", median(ru, n), median(rc, n)
      printf "\n"
    }
  }' "$TMP/results"
