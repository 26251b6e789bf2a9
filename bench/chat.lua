-- wrk script for bench/run.sh: a small non-streaming chat completion.
-- Every request is the same, so wrk builds it once and only resends bytes
-- (no request()/response() hooks: they would cost wrk CPU on the shared core).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"mock-gpt","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

-- One machine-readable line for run.sh; latencies in microseconds.
-- errors.status counts responses with status >= 400, so a target that "wins" by
-- failing fast is visible.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "err_status=%d err_connect=%d err_read=%d err_write=%d err_timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect, e.read, e.write, e.timeout))
end
