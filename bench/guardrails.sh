#!/usr/bin/env bash
# What guardrails cost the gateway (docs/benchmarks.md, "Guardrails"): the same requests
# at RATE a second for DURATION seconds through one worker, in alternating rounds of:
#   plain           no guardrails, a 4 KB prompt, a whole answer (the baseline);
#   guarded         50 patterns (40 literals, 10 regexes) and every PII detector on the
#                   request's text and the answer's, the same 4 KB prompt;
#   plain-stream    no guardrails, a streamed answer of 341 events (2 KB of text);
#   guarded-stream  the same rules on it.
# Per round: tahua's CPU per request on its own core (schedstat), the client's latency.
# Then the time to first event of a paced stream (an event every 5 ms), plain and
# guarded with the PII rules alone (what a stream waits for is the hold-back).
#
# Knobs: TAHUA (build/tahua), ROUNDS (3), DURATION (10 s), RATE (1000; streams at
# STREAM_RATE, 100), CONNS (32), PROXY_CPU (0), LOAD_CPU (1), PORT_BASE (18520).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/lib.sh"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
RATE=${RATE:-1000}
STREAM_RATE=${STREAM_RATE:-100}
CONNS=${CONNS:-32}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT_BASE=${PORT_BASE:-18520}
PORT_UP=$PORT_BASE
PORT_TAHUA=$((PORT_BASE + 1))

for tool in "$TAHUA" taskset curl cc python3; do command -v "$tool" >/dev/null || die "missing $tool"; done
for p in "$PORT_UP" "$PORT_TAHUA"; do check_port_free "$p"; done
bench_start
print_machine

cc -O2 -Wall -o "$TMP/sse_upstream" "$ROOT/bench/sse_upstream.c"
cc -O2 -Wall -o "$TMP/datapath_client" "$ROOT/bench/datapath_client.c" -lm
taskset -c "$LOAD_CPU" "$TMP/sse_upstream" --port "$PORT_UP" --events 21 >"$TMP/upstream.out" 2>&1 &
track $! sse_upstream
wait_http "http://127.0.0.1:$PORT_UP/healthz" "$!"

# The rules: 40 literals and 10 regexes in one policy, every PII detector in another;
# all look at the request (input, system) and at the answer.
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
literals = [f"codename-{w}" for w in ["alder","birch","cedar","dogwood","elm","fir","ginkgo","hazel","ironwood","juniper",
            "kapok","larch","maple","nutmeg","oak","pine","quince","rowan","spruce","teak"]]
literals += [f"project {w}" for w in ["aurora","borealis","comet","dune","eclipse","falcon","glacier","harbor","island","jetty",
             "kestrel","lagoon","meteor","nebula","orbit","pulsar","quasar","rocket","summit","tundra"]]
regexes = [r"\bproj-[a-z]{3}-\d{4}\b", r"\bticket\s+#\d{6}\b", r"\binternal-[a-z]{4,8}\.corp\b", r"\bemp\d{7}\b",
           r"\bINV-\d{4}-\d{4}\b", r"\bcustomer\s+id\s+\d{8}\b", r"\bbuild-\d{5}-[a-f0-9]{6}\b", r"\bvault:[a-z]{3,10}\b",
           r"\bsecret-[A-Z]{2}\d{3}\b", r"\bDB_[A-Z]{3,8}_PASS\b"]
policies = [
  {"name": "words", "rules": [
    {"name": "literals", "literals": literals, "caseless": True, "action": "block", "inspect": ["input", "system", "output"]},
    {"name": "regexes", "patterns": regexes, "action": "block", "inspect": ["input", "system", "output"]}]},
  {"name": "pii", "rules": [{"name": "pii", "pii": "all", "action": "redact", "inspect": ["input", "system", "output"]}]},
]
json.dump({"policies": policies}, open(f"{tmp}/guardrails-all.json", "w"))
json.dump({"policies": [policies[1]]}, open(f"{tmp}/guardrails-pii.json", "w"))
# A 4 KB prompt of ordinary prose (no rule matches it).
words = ("the quarterly report shows steady growth in the northern region while costs in logistics rose "
         "slightly because of fuel prices and the team expects the new warehouse to open next spring ").split()
text = []
while len(" ".join(text)) < 4000: text.extend(words)
prompt = " ".join(text)[:4000]
for name, extra in [("body", ""), ("stream-body", " events=341"), ("paced-body", " events=41 delay_ms=5")]:
  body = {"model": "bench", "messages": [{"role": "system", "content": "You are a helpful analyst."},
                                         {"role": "user", "content": (prompt if name == "body" else "Summarise the report.") + extra}]}
  if name != "body": body["stream"] = True
  open(f"{tmp}/{name}.json", "w").write(json.dumps(body))
PY

config() {  # NAME GUARDRAILS_JSON_FILE|-
  {
    cat <<YAML
server: {workers: 1}
listeners: [{address: 127.0.0.1, port: $PORT_TAHUA}]
access_log: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:$PORT_UP/v1"}]
models: [{name: bench, provider: up}]
YAML
    [ "$2" = - ] || echo "guardrails: $(cat "$2")"
  } >"$TMP/tahua-$1.yaml"
}
config plain -
config guarded "$TMP/guardrails-all.json"
config pii "$TMP/guardrails-pii.json"
# CPU time of every thread of the process, in ns (schedstat: not quantized to ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }
field() { sed -n "s/.* $1=\([0-9.-]*\).*/\1/p"; }

for round in $(seq "$ROUNDS"); do
  for mode in plain guarded plain-stream guarded-stream; do
    conf=${mode%-stream}
    body=$(cat "$TMP/body.json")
    rate=$RATE
    if [ "$conf" != "$mode" ]; then
      body=$(cat "$TMP/stream-body.json")
      rate=$STREAM_RATE
    fi
    wait_for_quiet || true
    start_tahua "tahua-$mode" "$PROXY_CPU" "$TMP/tahua-$conf.yaml"
    pid=$STARTED_PID
    curl -s -o /dev/null -H 'content-type: application/json' -d "$body" "http://127.0.0.1:$PORT_TAHUA/v1/chat/completions"
    c0=$(cpu_ns "$pid")
    out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" rate --port "$PORT_TAHUA" --rate "$rate" --conns "$CONNS" \
      --duration "$DURATION" --body "$body" | grep '^RATE ')
    c1=$(cpu_ns "$pid")
    stop_pids "$pid"
    log "round $round $mode: $out"
    n=$(field done <<<"$out")
    echo "guardrails round=$round mode=$mode requests=$n errors=$(field errors <<<"$out")" \
      "cpu_us_per_req=$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN { if (n > 0) printf "%.2f", c / 1e3 / n; else print "nan" }')" \
      "p50_us=$(field p50_us <<<"$out") p99_us=$(field p99_us <<<"$out")"
  done
done

# Time to first event of a paced stream (41 events, 5 ms apart), plain and with the PII rules.
for mode in plain pii; do
  wait_for_quiet || true
  start_tahua "tahua-ttfe-$mode" "$PROXY_CPU" "$TMP/tahua-$mode.yaml"
  pid=$STARTED_PID
  out=$(taskset -c "$LOAD_CPU" "$TMP/datapath_client" streams --port "$PORT_TAHUA" --conns 4 --duration "$DURATION" --events 41 \
    --body "$(cat "$TMP/paced-body.json")" | grep '^STREAMS ')
  stop_pids "$pid"
  log "ttfe $mode: $out"
  echo "guardrails ttfe mode=$mode streams=$(field done <<<"$out") ttfe_p50_us=$(field ttfe_p50_us <<<"$out") ttfe_p99_us=$(field ttfe_p99_us <<<"$out")"
done
