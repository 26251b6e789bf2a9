#!/usr/bin/env bash
# What observability costs per request (issue 20), run on demand (not in CI). See
# docs/benchmarks.md, "Observability and accounting".
#
#   bench/observability.sh
#
# Non-streaming chat completions at saturation (wrk -c$RATE_CONNS) through one tahua
# worker pinned to PROXY_CPU (its exporter and log threads too: the whole process is
# pinned, so their CPU is counted), in front of bench/sse_upstream.c; the upstream, the
# OTLP receiver (an nginx answering 200), Redis and wrk share LOAD_CPU. Metrics are
# always on (per-worker counters). Targets, each round in this order:
#   off     access log off, no tracing, no usage records
#   log     + the access log (to a file)
#   traces  + tracing, every request sampled and exported (OTLP/HTTP protobuf)
#   usage   + usage records to a Redis stream (XADD), Redis on LOAD_CPU
#   all     log + traces + usage
# Reported per target: req/s, the proxy process's CPU µs per request and the ratio to
# `off`; medians over ROUNDS.
#
# Knobs (environment): TAHUA, ROUNDS (3), DURATION (10), WARMUP (2), PROXY_CPU (0),
# LOAD_CPU (1), PORT_BASE (18380: upstream, +1 receiver, +2 tahua, +3 redis),
# RATE_CONNS (64), KEEP_TMP.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18380}
RATE_CONNS=${RATE_CONNS:-64}
PORT_UP=$PORT_BASE
PORT_OTLP=$((PORT_BASE + 1))
PORT_TAHUA=$((PORT_BASE + 2))
PORT_REDIS=$((PORT_BASE + 3))
CHAT_BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

for tool in "$TAHUA" taskset curl wrk nginx cc redis-server redis-cli; do
  command -v "$tool" >/dev/null || die "missing $tool (scripts/bootstrap.sh --test)"
done
for p in "$PORT_UP" "$PORT_OTLP" "$PORT_TAHUA" "$PORT_REDIS"; do check_port_free "$p"; done
bench_start

start_upstream_and_redis "$LOAD_CPU" "$PORT_UP" "$PORT_REDIS"

# The OTLP receiver: nginx reading each export and answering 200 (a collector's cost is
# not what this measures).
mkdir -p "$TMP/otlp/logs" "$TMP/otlp/tmp"
cat >"$TMP/otlp/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/otlp/nginx.pid;
error_log $TMP/otlp/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/otlp/tmp/body;
  client_max_body_size 64m;
  server {
    listen 127.0.0.1:$PORT_OTLP;
    location / { return 200 '{}'; }
  }
}
EOF
taskset -c "$LOAD_CPU" nginx -p "$TMP/otlp" -c "$TMP/otlp/nginx.conf" -e "$TMP/otlp/logs/error.log" >"$TMP/otlp/nginx.out" 2>&1 &
OTLP_PID=$!
track "$OTLP_PID" "otlp receiver"
wait_http "http://127.0.0.1:$PORT_OTLP/healthz" "$OTLP_PID"

tahua_config() {  # TARGET
  cat <<EOF
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
idempotency: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up, pricing: {input: 2.5, output: 10}}]
EOF
  local log=false traces=false usage=false
  case $1 in
    log) log=true ;;
    traces) traces=true ;;
    usage) usage=true ;;
    all) log=true traces=true usage=true ;;
  esac
  echo "access_log: {enabled: $log, path: \"$TMP/access-$1.log\"}"
  $traces && echo "tracing: {endpoint: \"http://127.0.0.1:$PORT_OTLP/v1/traces\", sample_ratio: 1, max_queue_spans: 1000000}"
  $usage && echo "usage: {spill_dir: \"$TMP/spill-$1\", max_queue_records: 1000000, sinks: [{type: redis_stream, url: \"redis://127.0.0.1:$PORT_REDIS\", maxlen: 100000}]}"
  true
}

run_wrk() { wrk_chat "$LOAD_CPU" "$1" "$2" "$RATE_CONNS" "$CHAT_BODY"; }  # PORT SECONDS

measure() {  # TARGET ROUND
  local target=$1 out p0 p1 m
  tahua_config "$target" >"$TMP/tahua-$target.yaml"
  start_tahua "tahua-$target-$2" "$PROXY_CPU" "$TMP/tahua-$target.yaml"
  code=$(curl -s -o /dev/null -w '%{http_code}' -d "$CHAT_BODY" "http://127.0.0.1:$PORT_TAHUA/v1/chat/completions")
  [ "$code" = 200 ] || die "$target answered $code"
  wait_for_quiet || true
  run_wrk "$PORT_TAHUA" "$WARMUP" >/dev/null
  p0=$(cpu_ticks "$STARTED_PID")
  out=$(run_wrk "$PORT_TAHUA" "$DURATION")
  p1=$(cpu_ticks "$STARTED_PID")
  # Nothing the exporters could not keep: a dropped span or record would flatter the run.
  m=$(curl -s "http://127.0.0.1:$PORT_TAHUA/metrics")
  if awk '/^tahua_(trace_spans_dropped_total|usage_records_dropped_total|log_lines_dropped_total)[{ ]/ && $NF > 0 { bad = 1 } END { exit !bad }' <<<"$m"; then
    die "$target: the exporters dropped something: $(grep -E '^tahua_(trace_spans_dropped|usage_records_dropped|log_lines_dropped)' <<<"$m")"
  fi
  stop_tracked "$STARTED_PID"
  awk -v t="$target" -v r="$2" -v out=" $out" -v dp=$((p1 - p0)) -v hz="$HZ" '
    function v(k) { return match(out, " " k "=[^ ]*") ? substr(out, RSTART + length(k) + 2, RLENGTH - length(k) - 2) : "" }
    BEGIN { n = v("requests"); sec = v("duration_us") / 1e6
            printf "%s %s rate=%.1f cpu_us=%.3f p99_us=%d err=%d\n", t, r, n / sec, dp / hz * 1e6 / n, v("p99_us"), v("errors") }' \
    | tee -a "$TMP/results" >&2
}

print_machine
for round in $(seq "$ROUNDS"); do
  for target in off log traces usage all; do measure "$target" "$round"; done
done

echo "== summary (medians over $ROUNDS rounds; ratios per round to 'off')"
awk '
  function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { for (i = 3; i <= NF; i++) { split($i, kv, "="); val[$1, $2, kv[1]] = kv[2] } targets[$1] = 1; rounds[$2] = 1 }
  END {
    split("off log traces usage all", order, " ")
    for (k = 1; k <= 5; k++) {
      t = order[k]; n = 0
      if (!(t in targets)) continue
      for (r in rounds) { n++; rate[n] = val[t, r, "rate"]; cpu[n] = val[t, r, "cpu_us"]
                          cr[n] = val[t, r, "cpu_us"] / val["off", r, "cpu_us"]; dcpu[n] = val[t, r, "cpu_us"] - val["off", r, "cpu_us"] }
      printf "%-7s req/s %9.1f  cpu/req %7.3f us  cpu vs off %.3f  cpu - off %+.3f us\n", t, median(rate, n), median(cpu, n), median(cr, n), median(dcpu, n)
    }
  }' "$TMP/results"
