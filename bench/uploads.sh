#!/usr/bin/env bash
# Upload benchmark (issue 25), run on demand (not in CI). See docs/benchmarks.md,
# "Uploads (issue 25)".
#
#   bench/uploads.sh
#
# The proxy's CPU per MB of upload relayed, tahua against nginx in the same run, one
# worker each pinned to PROXY_CPU. The upload is a multipart audio transcription of
# UPLOAD_MB (50) MB, sent UPLOADS (20) times by CLIENTS (2) curl loops on LOAD_CPU. The
# upstream is an nginx on LOAD_CPU that reads and discards the body and answers a
# transcription's JSON; "alone" is the client straight at it, whose rate must be at least
# twice either proxy's.
#
# Both proxies spool the body to a file before sending it on: nginx by default
# (proxy_request_buffering on, client_body_temp_path), tahua always (server.uploads),
# both in the same directory under $TMP. tahua sends the spool with sendfile(2); nginx
# reads it back into buffers.
#
# Output: per target MB/s (wall) and the proxy's CPU ms per MB (utime+stime of the proxy
# process over the run), ROUNDS (3) rounds, and the tahua/nginx ratio of the medians.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
UPLOAD_MB=${UPLOAD_MB:-50}
UPLOADS=${UPLOADS:-20}
CLIENTS=${CLIENTS:-2}
ROUNDS=${ROUNDS:-3}
UP_PORT=${UP_PORT:-18301}
NGINX_PORT=${NGINX_PORT:-18302}
TAHUA_PORT=${TAHUA_PORT:-18303}

command -v nginx >/dev/null || die "nginx is required (apt install nginx-light)"
command -v curl >/dev/null || die "curl is required"
[ -x "$TAHUA" ] || die "no tahua binary at $TAHUA (scripts/build.sh)"
bench_start
for p in $UP_PORT $NGINX_PORT $TAHUA_PORT; do check_port_free "$p"; done

# The body: a form as the openai SDK sends it (file first), built once.
BODY=$TMP/body.bin
BOUNDARY=----tahua-bench-boundary
{
  printf -- '--%s\r\nContent-Disposition: form-data; name="file"; filename="clip.wav"\r\nContent-Type: audio/wav\r\n\r\n' "$BOUNDARY"
  head -c $((UPLOAD_MB * 1048576)) /dev/urandom
  printf -- '\r\n--%s\r\nContent-Disposition: form-data; name="model"\r\n\r\nlistener\r\n--%s--\r\n' "$BOUNDARY" "$BOUNDARY"
} >"$BODY"
BODY_MB=$(awk -v b="$(stat -c %s "$BODY")" 'BEGIN { printf "%.2f", b / 1048576 }')

# The upstream: nginx that discards the body and answers.
mkdir -p "$TMP/up/logs" "$TMP/up/tmp"
cat >"$TMP/up/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/up/nginx.pid;
error_log $TMP/up/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/up/tmp/body;
  proxy_temp_path $TMP/up/tmp/proxy;
  fastcgi_temp_path $TMP/up/tmp/fastcgi;
  uwsgi_temp_path $TMP/up/tmp/uwsgi;
  scgi_temp_path $TMP/up/tmp/scgi;
  server {
    listen 127.0.0.1:$UP_PORT backlog=4096;
    client_max_body_size 0;
    location = /healthz { return 200 'ok'; }
    location / { default_type application/json; return 200 '{"text":"ok","usage":{"type":"duration","seconds":1}}'; }
  }
}
EOF
taskset -c "$LOAD_CPU" nginx -p "$TMP/up" -c "$TMP/up/nginx.conf" -e "$TMP/up/logs/error.log" >"$TMP/up/nginx.out" 2>&1 &
track $! "upstream nginx"
wait_http "http://127.0.0.1:$UP_PORT/healthz" $!

# nginx as the proxy: the shared config plus no body size limit.
write_nginx_config "$TMP/nginx" "$NGINX_PORT" "$UP_PORT" on 1024
sed -i 's|    location / {|    client_max_body_size 0;\n    location / {|' "$TMP/nginx/nginx.conf"
sed -i "s|client_body_temp_path .*;|client_body_temp_path $TMP/spool;|" "$TMP/nginx/nginx.conf"
mkdir -p "$TMP/spool"
chmod 711 "$TMP" && chmod 1777 "$TMP/spool"  # an nginx run as root writes as its worker user
start_nginx "$TMP/nginx" "$PROXY_CPU" "$NGINX_PORT"

cat >"$TMP/tahua.yaml" <<EOF
listeners: [{address: 127.0.0.1, port: $TAHUA_PORT}]
server:
  workers: 1
  uploads: {spool_dir: $TMP/spool}
access_log: {enabled: false}
providers:
  - {name: up, type: openai, base_url: "http://127.0.0.1:$UP_PORT/v1", api_key: sk-bench}
models:
  - {name: listener, provider: up, upstream_model: whisper-1}
EOF
start_tahua tahua "$PROXY_CPU" "$TMP/tahua.yaml"
TAHUA_PID=$STARTED_PID

# run TARGET PORT PID: UPLOADS uploads from CLIENTS loops; prints "MB/s cpu_ms_per_MB".
run() {
  local name=$1 port=$2 pid=$3 per=$((UPLOADS / CLIENTS)) t0 t1 c0 c1 loops=()
  wait_for_quiet || true
  c0=$(cpu_ticks "$pid")
  t0=$(date +%s.%N)
  for _ in $(seq "$CLIENTS"); do
    (
      for _ in $(seq "$per"); do
        code=$(taskset -c "$LOAD_CPU" curl -s -o /dev/null -w '%{http_code}' -H "content-type: multipart/form-data; boundary=$BOUNDARY" \
          -H 'expect:' --data-binary @"$BODY" "http://127.0.0.1:$port/v1/audio/transcriptions")
        [ "$code" = 200 ] || { echo "$name: HTTP $code" >&2; exit 1; }
      done
    ) &
    loops+=($!)
  done
  for l in "${loops[@]}"; do wait "$l" || die "$name: an upload failed"; done
  t1=$(date +%s.%N)
  c1=$(cpu_ticks "$pid")
  awk -v n=$((per * CLIENTS)) -v mb="$BODY_MB" -v t0="$t0" -v t1="$t1" -v c=$((c1 - c0)) -v hz="$HZ" -v name="$name" \
    'BEGIN { total = n * mb; printf "%-7s %8.0f MB/s  %7.3f ms CPU/MB  (%d uploads of %.1f MB)\n", name, total / (t1 - t0), 1000 * c / hz / total, n, mb }'
}

print_machine
UP_PID=$(pgrep -P "$(cat "$TMP/up/nginx.pid")" | head -1)
echo "alone:   the client straight at the upstream (upstream CPU shown)"
run alone "$UP_PORT" "$UP_PID"
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  run nginx "$NGINX_PORT" "$NGINX_WORKER" | tee "$TMP/nginx.$round"
  run tahua "$TAHUA_PORT" "$TAHUA_PID" | tee "$TMP/tahua.$round"
done
# The ratio of the medians over the rounds (rounds differ by tens of percent on a VM).
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
N=$(awk '/ms CPU/ { print $4 }' "$TMP"/nginx.* | median)
T=$(awk '/ms CPU/ { print $4 }' "$TMP"/tahua.* | median)
awk -v n="$N" -v t="$T" 'BEGIN { printf "median CPU per MB: nginx %.3f ms, tahua %.3f ms; tahua/nginx %.2f\n", n, t, t / n }'
echo "tahua peak RSS: $(awk '/VmHWM/ { print $2 " kB" }' "/proc/$TAHUA_PID/status")"
