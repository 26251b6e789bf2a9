// What a request costs, in instructions, by thread (callgrind: deterministic where the
// VMs' clocks are not), for tahua's configurations and for nginx. See
// docs/benchmarks.md, "Observability and accounting".
//
//   node bench/request_cost.mjs [target...]
//
// For each target the server runs under `valgrind --tool=callgrind --separate-threads=yes`
// in front of bench/sse_upstream.c (and, where the target needs them, a redis-server of its
// own and a receiver that answers every OTLP export with 200). N, then 3N non-streaming
// chat completions go through it over 4 keep-alive connections; once everything the
// requests produced has been delivered (below) it is stopped. The difference of the two
// runs over 2N is the cost of one request (start-up and shutdown cancel out), per thread:
// the worker, each exporter or writer thread, the rest, and the whole process.
//
// Targets (tahua: 1 worker, TAHUA_MALLOC_TUNING=off):
//   plain    no API keys, no access log, no usage records, no traces, memory store
//   prod     the production profile (issue 41): Redis store, a tenant and its API key
//            with limits, a per-key rate-limit policy, tenant metrics, the access log to
//            a file, usage records to a Redis stream, traces sampled at 0.1 (protobuf)
//   nginx    nginx (Debian's) as a keep-alive reverse proxy, one process
//            (`-g 'daemon off; master_process off;'`), access_log off, as bench/lib.sh
// A tahua target may add (+) or remove (-) parts: keys (the Redis store, tenant, key,
// limits, policy, tenant metrics), log, usage, traces; e.g. `prod-log` (the profile
// without the access log), `plain+usage`. Tracing alone (the targets of the former
// bench/trace_cost.mjs: plain plus tracing, flushed every 100 ms): off, ratio0, ratio01,
// ratio1, each with the protocol's default or `-json` / `-protobuf`.
// Default: plain prod nginx.
//
// Nothing may be left undelivered or dropped (a drop would flatter the run), checked
// without asking tahua while it runs (a /metrics page costs the worker far more than a
// request, and polls would not cancel out): the access log must hold one line per
// request; the Redis stream one record per request; the receiver every span of the
// sampled requests (which ones were sampled: the trace ids of the access log or of the
// records, against the sampler's threshold). Then one /metrics read (the same in both
// runs) must show no span, record or log line dropped. A failure stops the run.
//
// For tahua it also prints pieces of the worker's cost by the functions that hold them
// (inclusive costs, the same difference over 2N): the access log's entry and hand-over,
// the usage record, the spans' and records' hand-over, the tracing filter's end, the
// worker's 200 ms flush timer. The timer's cost, and that of every other periodic task,
// is per second, not per request: under callgrind a run of 3N requests lasts longer, so
// it shows up in the difference, more when the machine is busy (it is small at the rate
// a worker serves without valgrind).
//
// Knobs (environment): TAHUA (build/tahua), NGINX (nginx), N (1000), PORT_BASE (18480:
// upstream, +1 receiver, +2 the server, +3 redis), PROFILE (a number: that many of the
// worker's functions by inclusive cost per request, the dearest first), KEEP_TMP (1: keep
// the callgrind files, for callgrind_annotate).
import { spawn, execFileSync } from 'node:child_process';
import { createServer, Agent, request } from 'node:http';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync, readFileSync, readdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TAHUA = process.env.TAHUA ?? join(ROOT, 'build/tahua');
const NGINX = process.env.NGINX ?? 'nginx';
const N = Number(process.env.N ?? 1000);
const PORT_BASE = Number(process.env.PORT_BASE ?? 18480);
const PORT_UP = PORT_BASE, PORT_RECEIVER = PORT_BASE + 1, PORT_SERVER = PORT_BASE + 2, PORT_REDIS = PORT_BASE + 3;
const CLIENT_KEY = 'sk-bench-0123456789abcdef0123456789abcdef';
const BODY = JSON.stringify({ model: 'bench-json', messages: [{ role: 'user', content: 'Say hello in one short sentence.' }] });
const tmp = mkdtempSync(join(tmpdir(), 'tahua-request-cost-'));
const children = new Set();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function die(msg) {
  console.error(`request_cost: ${msg} (files in ${tmp})`);
  for (const c of children) c.kill('SIGKILL');
  process.exit(1);
}

function track(child) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

function get(url) {
  return new Promise((resolve) => {
    const req = request(url, { timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', () => resolve({ status: 0, body: '' }));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

// Polls `fn` every 100 ms, up to `ms`: the wait is for a state, never a fixed time.
async function until(fn, what, ms = 180_000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    const v = await fn();
    if (v) return v;
  }
  die(`timed out waiting for ${what}`);
}

// Whether something listens on the port, without connecting to it (a connection would
// cost the server instructions that differ from run to run).
const listening = (port) => execFileSync('ss', ['-Htln', `sport = :${port}`]).toString().trim() !== '';

function post(agent) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: PORT_SERVER, path: '/v1/chat/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY), authorization: `Bearer ${CLIENT_KEY}` } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(BODY);
  });
}

async function load(n) {
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  let next = 0;
  const lane = async () => { while (next < n) { next++; await post(agent); } };
  await Promise.all([lane(), lane(), lane(), lane()]);
  agent.destroy();
}

const metric = (text, name) => {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) sum += Number(m[1]);
  return sum;
};

// --- targets ---------------------------------------------------------------------------

const PARTS = ['keys', 'log', 'usage', 'traces'];

// A target's parts: {keys, log, usage, traces: {ratio, protocol, flush} | null}, or
// {nginx: true}.
function parse(target) {
  if (target === 'nginx') return { nginx: true };
  const legacy = target.match(/^(off|ratio0|ratio01|ratio1)(?:-(json|protobuf))?$/);
  if (legacy) {
    const ratio = { off: undefined, ratio0: 0, ratio01: 0.1, ratio1: 1 }[legacy[1]];
    return { traces: ratio === undefined ? null : { ratio, protocol: legacy[2], flush: '100ms' } };
  }
  const m = target.match(/^(plain|prod)((?:[+-][a-z]+)*)$/);
  if (!m) die(`unknown target ${target}`);
  const t = m[1] === 'prod' ? { keys: true, log: true, usage: true, traces: { ratio: 0.1 } } : { traces: null };
  for (const [, sign, part] of m[2].matchAll(/([+-])([a-z]+)/g)) {
    if (!PARTS.includes(part)) die(`unknown part ${part} in ${target} (${PARTS.join(', ')})`);
    if (part === 'traces') t.traces = sign === '+' ? { ratio: 0.1 } : null;
    else t[part] = sign === '+';
  }
  return t;
}

function tahuaConfig(t, dir) {
  const lines = [
    `server: {workers: 1${t.keys ? ', tenant_metrics: true' : ''}}`,
    `listeners: [{address: 127.0.0.1, port: ${PORT_SERVER}}]`,
    'idempotency: {enabled: false}',
    t.log ? `access_log: {enabled: true, path: "${dir}/access.log"}` : 'access_log: {enabled: false}',
    `providers: [{name: up-json, type: openai, base_url: "http://127.0.0.1:${PORT_UP}/v1"}]`,
    'models: [{name: bench-json, provider: up-json, upstream_model: gpt-4o-mini, pricing: {input: 0.15, output: 0.6}}]',
  ];
  if (t.keys) {
    const sha = createHash('sha256').update(CLIENT_KEY).digest('hex');
    lines.push(
      `store: {type: redis, redis: {url: "redis://127.0.0.1:${PORT_REDIS}"}}`,
      'tenants: [{name: bench-team, limits: {requests_per_minute: 1000000000, tokens_per_minute: 1000000000000, usd_per_month: 1000000}}]',
      `keys: [{name: bench-key, tenant: bench-team, sha256: "${sha}", prefix: sk-bench, limits: {requests_per_minute: 1000000000}}]`,
      'rate_limits: {default_max_tokens: 256, policies: [{name: per-key, match: {tenant: [bench-team]}, per: key, requests_per_minute: 1000000000}]}',
    );
  }
  if (t.traces)
    lines.push(`tracing: {endpoint: "http://127.0.0.1:${PORT_RECEIVER}/v1/traces", sample_ratio: ${t.traces.ratio}` +
      (t.traces.flush ? `, flush_interval: ${t.traces.flush}, max_queue_spans: 1000000` : '') +
      (t.traces.protocol ? `, protocol: ${t.traces.protocol}` : '') + '}');
  if (t.usage)
    lines.push(`usage: {spill_dir: "${dir}/spill", sinks: [{name: redis, type: redis_stream, url: "redis://127.0.0.1:${PORT_REDIS}", ` +
      'stream: "tahua:usage", maxlen: 100000}]}');
  return lines.join('\n') + '\n';
}

// nginx as bench/lib.sh writes it, without `daemon` (given on the command line).
function nginxConfig(dir) {
  return `worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 1024; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ${dir}/tmp/body;
  proxy_temp_path ${dir}/tmp/proxy;
  fastcgi_temp_path ${dir}/tmp/fastcgi;
  uwsgi_temp_path ${dir}/tmp/uwsgi;
  scgi_temp_path ${dir}/tmp/scgi;
  upstream up { server 127.0.0.1:${PORT_UP}; keepalive 64; }
  server {
    listen 127.0.0.1:${PORT_SERVER} backlog=4096;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering on;
    }
  }
}
`;
}

// --- the OTLP receiver: counts spans, by trace id ---------------------------------------

function varint(buf, at) {
  let v = 0, shift = 0, b;
  do {
    b = buf[at++];
    v += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [v, at];
}

// The LEN fields `field` of a protobuf message, as buffers.
function lenFields(buf, field) {
  const out = [];
  for (let at = 0; at < buf.length;) {
    let key;
    [key, at] = varint(buf, at);
    const wire = key & 7;
    if (wire === 0) [, at] = varint(buf, at);
    else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else if (wire === 2) {
      let len;
      [len, at] = varint(buf, at);
      if ((key >> 3) === field) out.push(buf.subarray(at, at + len));
      at += len;
    } else throw new Error(`protobuf wire type ${wire}`);
  }
  return out;
}

// Trace ids (hex) of an OTLP export: ExportTraceServiceRequest.resource_spans (1) ->
// scope_spans (2) -> spans (2) -> trace_id (1); or the JSON mapping's traceId.
function spanTraceIds(body, type) {
  if (type === 'application/json')
    return JSON.parse(body.toString()).resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans.map((sp) => sp.traceId.toLowerCase())));
  const ids = [];
  for (const rs of lenFields(body, 1))
    for (const ss of lenFields(rs, 2))
      for (const span of lenFields(ss, 2)) ids.push(Buffer.from(lenFields(span, 1)[0] ?? []).toString('hex'));
  return ids;
}

function startReceiver() {
  const receiver = { spans: [] };
  receiver.server = createServer((req, res) => {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => {
      const type = req.headers['content-type'];
      try {
        receiver.spans.push(...spanTraceIds(Buffer.concat(parts), type));
      } catch (e) {
        die(`the receiver could not read an export: ${e.message}`);
      }
      res.writeHead(200, { 'content-type': type ?? 'application/json' });
      res.end(type === 'application/x-protobuf' ? '' : '{}');
    });
  });
  return new Promise((r) => receiver.server.listen(PORT_RECEIVER, '127.0.0.1', () => r(receiver)));
}

// The tracing filter's sampler: a new trace is sampled when the low 8 bytes of its id
// (read as a little-endian integer) are below ratio * 2^64.
function sampled(traceIdHex, ratio) {
  if (ratio >= 1) return true;
  const threshold = BigInt(Math.floor(ratio * 18446744073709551615));
  return Buffer.from(traceIdHex, 'hex').readBigUInt64LE(8) < threshold;
}

// --- redis -------------------------------------------------------------------------------

async function startRedis(dir) {
  mkdirSync(join(dir, 'redis'), { recursive: true });
  const redis = track(spawn('redis-server', ['--port', String(PORT_REDIS), '--bind', '127.0.0.1', '--dir', join(dir, 'redis'),
    '--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec'], { stdio: 'ignore' }));
  await until(async () => redisCli('PING') === 'PONG', 'redis-server', 10_000);
  return redis;
}

function redisCli(...args) {
  try {
    return execFileSync('redis-cli', ['-p', String(PORT_REDIS), ...args], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
  } catch {
    return '';
  }
}

// The usage records' trace ids, one per record (null: none).
function streamTraceIds() {
  const out = execFileSync('redis-cli', ['-p', String(PORT_REDIS), '--no-raw', 'XRANGE', 'tahua:usage', '-', '+'], { maxBuffer: 1 << 30 }).toString();
  return [...out.matchAll(/\\"trace_id\\":(?:\\"([0-9a-f]{32})\\"|null)/g)].map((m) => m[1] ?? null);
}

// --- costs -------------------------------------------------------------------------------

// Each thread's instructions (callgrind --separate-threads=yes: one file per thread),
// named by the function its body runs.
const THREADS = [
  ['worker', 'tahua::Worker::run()'],
  ['trace exporter', 'tahua::TraceExporter::run()'],
  ['usage sinks', 'tahua::UsageExporter::runSink('],
  ['usage exporter', 'tahua::UsageExporter::run()'],
  ['log writer', 'tahua::LogFile::run()'],
  ['main', 'tahua::Gateway::run()'],
  ['redis store', 'tahua::RedisStore::start('],
  ['nginx', 'ngx_single_process_cycle'],
];
function costs(dir) {
  const files = readdirSync(dir).filter((f) => /^callgrind\.out-\d+$/.test(f));
  if (!files.length) die(`no callgrind output in ${dir}`);
  const out = { process: 0 };
  for (const f of files) {
    const text = readFileSync(join(dir, f), 'latin1');
    const total = Number(text.match(/^(?:summary|totals): (\d+)/m)?.[1] ?? NaN);
    const name = THREADS.find(([, fn]) => text.includes(fn))?.[0] ?? 'other';
    out[name] = (out[name] ?? 0) + total;
    out.process += total;
    if (name === 'worker') out.workerFile = join(dir, f);
  }
  return out;
}

// The worker's functions with their inclusive cost (callgrind_annotate), by name.
function functions(file) {
  const text = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], { maxBuffer: 256 << 20 }).toString();
  const out = new Map();
  for (const line of text.split('\n')) {
    const m = line.match(/^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\?\?\?:)?(.*?)(?: \[[^\]]*\])?$/);
    if (m && !out.has(m[2])) out.set(m[2], Number(m[1].replaceAll(',', '')));
  }
  return out;
}

// Pieces of the worker's cost named by the functions that hold them (inclusive: a
// piece's callees are in it).
const PIECES = [
  ['access log entry', 'AccessLogFilter::onComplete('],
  ['access log hand-over', 'tahua::AccessLogSink::flush()'],
  ['usage record', 'UsageFilter::onComplete('],
  ['spans and records hand-over', 'tahua::ExportBuffer::flush()'],
  ['tracing (end)', 'TracingFilter::onComplete('],
  ['the 200 ms flush timer', 'Worker::scheduleLogFlush()::{lambda'],
];

// --- one run -------------------------------------------------------------------------------

async function runOnce(target, t, n, receiver) {
  const dir = join(tmp, `${target}-${n}`);
  mkdirSync(dir, { recursive: true });
  const redis = t.keys || t.usage ? await startRedis(dir) : null;
  receiver.spans = [];
  let server;
  if (t.nginx) {
    for (const d of ['logs', 'tmp']) mkdirSync(join(dir, d), { recursive: true });
    writeFileSync(join(dir, 'nginx.conf'), nginxConfig(dir));
    server = spawn('valgrind', ['--tool=callgrind', '--separate-threads=yes', '--compress-strings=no', `--callgrind-out-file=${dir}/callgrind.out`, NGINX,
      '-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'logs/error.log'), '-g', 'daemon off; master_process off;'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
  } else {
    writeFileSync(join(dir, 'tahua.yaml'), tahuaConfig(t, dir));
    server = spawn('valgrind', ['--tool=callgrind', '--separate-threads=yes', '--compress-strings=no', `--callgrind-out-file=${dir}/callgrind.out`, TAHUA,
      '--config', join(dir, 'tahua.yaml')], { env: { ...process.env, TAHUA_MALLOC_TUNING: 'off' }, stdio: ['ignore', 'ignore', 'pipe'] });
  }
  track(server);
  let err = '';
  server.stderr.on('data', (c) => (err += c));
  const exited = new Promise((r) => server.on('exit', r));
  await until(async () => {
    if (server.exitCode !== null) die(`${target}: the server exited: ${err.slice(-3000)}`);
    return listening(PORT_SERVER);
  }, 'the server to listen', 120_000);
  if ((await get(`http://127.0.0.1:${PORT_SERVER}/healthz`)).status !== 200) die(`${target}: /healthz is not 200: ${err.slice(-3000)}`);

  await load(n);

  // Everything the requests made has been delivered: watched from outside.
  const logPath = join(dir, 'access.log');
  const logLines = () => (existsSync(logPath) ? readFileSync(logPath, 'utf8').split('\n').filter((l) => l.includes('"/v1/chat/completions"')) : []);
  if (t.log) await until(() => logLines().length >= n, `${n} access log lines`);
  if (t.usage) await until(() => Number(redisCli('XLEN', 'tahua:usage')) >= n, `${n} usage records in the stream`);
  let expectSpans = null;
  if (t.traces) {
    const ids = t.log ? logLines().map((l) => JSON.parse(l).trace_id) : t.usage ? streamTraceIds() : null;
    if (ids) {
      expectSpans = 2 * ids.filter((id) => id && sampled(id, t.traces.ratio)).length;  // the server span and its attempt's
      await until(() => receiver.spans.length >= expectSpans, `${expectSpans} spans`);
    } else {
      // Nothing says which requests were sampled: wait until the receiver has been quiet
      // for 3 s (the worker hands spans over every 200 ms, the exporter sends each flush).
      let last = -1, since = Date.now();
      await until(() => {
        if (receiver.spans.length !== last) [last, since] = [receiver.spans.length, Date.now()];
        return Date.now() - since > 3000;
      }, 'the spans');
    }
  }
  if (!t.nginx) {
    const m = (await get(`http://127.0.0.1:${PORT_SERVER}/metrics`)).body;
    for (const name of ['tahua_trace_spans_dropped_total', 'tahua_trace_export_failures_total', 'tahua_usage_records_dropped_total',
      'tahua_usage_sink_failures_total', 'tahua_log_lines_dropped_total'])
      if (metric(m, name) > 0) die(`${target}: ${name} is ${metric(m, name)}`);
    if (t.traces && expectSpans === null) expectSpans = metric(m, 'tahua_trace_spans_exported_total');
  }
  server.kill('SIGTERM');
  await exited;
  // Exactly what was expected, and nothing more came at shutdown.
  if (t.log && logLines().length !== n) die(`${target}: ${logLines().length} access log lines for ${n} requests`);
  if (t.usage && Number(redisCli('XLEN', 'tahua:usage')) !== n) die(`${target}: ${redisCli('XLEN', 'tahua:usage')} records for ${n} requests`);
  if (t.traces && receiver.spans.length !== expectSpans) die(`${target}: ${receiver.spans.length} spans, ${expectSpans} expected`);
  console.error(`  ${target} ${n}: delivered` + (t.log ? ` ${n} log lines` : '') + (t.usage ? ` ${n} records` : '') +
    (t.traces ? ` ${expectSpans} spans` : '') + (t.log || t.usage || t.traces ? '' : ' nothing (none made)'));
  if (redis) {
    redis.kill('SIGTERM');
    await new Promise((r) => (redis.exitCode !== null ? r() : redis.on('exit', r)));
  }
  return costs(dir);
}

async function main() {
  for (const port of [PORT_UP, PORT_RECEIVER, PORT_SERVER, PORT_REDIS])
    if (listening(port)) die(`port ${port} is in use (set PORT_BASE)`);
  execFileSync('cc', ['-O2', '-o', join(tmp, 'sse_upstream'), join(ROOT, 'bench/sse_upstream.c')]);
  const up = track(spawn(join(tmp, 'sse_upstream'), ['--port', String(PORT_UP)], { stdio: 'ignore' }));
  const receiver = await startReceiver();
  await until(async () => (await get(`http://127.0.0.1:${PORT_UP}/healthz`)).status === 200, 'the upstream');

  const targets = process.argv.slice(2).length ? process.argv.slice(2) : ['plain', 'prod', 'nginx'];
  console.log(`instructions per request (callgrind; (run of ${3 * N} - run of ${N}) / ${2 * N})`);
  const results = {};
  for (const target of targets) {
    const t = parse(target);
    const a = await runOnce(target, t, N, receiver);
    const b = await runOnce(target, t, 3 * N, receiver);
    const per = {};
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)]))
      if (k !== 'workerFile') per[k] = Math.round(((b[k] ?? 0) - (a[k] ?? 0)) / (2 * N));
    results[target] = per;
    const threads = Object.entries(per).filter(([k]) => k !== 'process').map(([k, v]) => `${k} ${v}`).join(', ');
    console.log(`${target.padEnd(16)} process ${String(per.process).padStart(7)}   ${threads}`);
    if (a.workerFile && b.workerFile) {
      const fa = functions(a.workerFile), fb = functions(b.workerFile);
      const diff = (name) => Math.round(((fb.get(name) ?? 0) - (fa.get(name) ?? 0)) / (2 * N));
      const pieces = PIECES.map(([label, fn]) => {
        const names = [...new Set([...fa.keys(), ...fb.keys()])].filter((n) => n.includes(fn));
        return [label, names.reduce((sum, n) => sum + diff(n), 0)];
      }).filter(([, v]) => v !== 0);
      if (pieces.length) console.log(`${''.padEnd(16)} worker pieces (inclusive): ${pieces.map(([l, v]) => `${l} ${v}`).join(', ')}`);
      const top = Number(process.env.PROFILE ?? 0);
      if (top > 0) {
        const rows = [...new Set([...fa.keys(), ...fb.keys()])].map((n) => [diff(n), n]).sort((x, y) => y[0] - x[0]).slice(0, top);
        for (const [v, n] of rows) console.log(`${String(v).padStart(24)}  ${n.length > 150 ? n.slice(0, 150) + '...' : n}`);
      }
    }
  }
  if (results.nginx)
    for (const [target, per] of Object.entries(results))
      if (target !== 'nginx')
        console.log(`${target} / nginx: process ${(per.process / results.nginx.process).toFixed(3)}, worker ${((per.worker ?? 0) / results.nginx.process).toFixed(3)}`);
  up.kill('SIGTERM');
  receiver.server.close();
  if (process.env.KEEP_TMP === '1') console.log(`kept ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });
}

main().catch((e) => die(e.stack ?? String(e)));
