// What tracing costs per request, in instructions (callgrind: deterministic where the
// VMs' clocks are not). See docs/benchmarks.md, "Observability and accounting".
//
//   node bench/trace_cost.mjs [target...]
//
// For each target, tahua (1 worker, TAHUA_MALLOC_TUNING=off) runs under
// `valgrind --tool=callgrind` in front of bench/sse_upstream.c and a receiver that
// answers every OTLP export with 200. N, then 3N non-streaming chat completions go
// through it over 4 keep-alive connections; when every span expected has been
// exported (tahua_trace_spans_exported_total) it is stopped. The difference of the two
// runs over 2N is the cost of one request (start-up and shutdown cancel out), split by
// thread with callgrind's inclusive costs: the worker (Worker::run), the trace exporter
// (TraceExporter::run) and the whole process.
//
// Targets: off (no tracing), ratio0 (sample_ratio 0), ratio01 (0.1), ratio1 (1), each
// with the protocol's default; `<target>-json` or `<target>-protobuf` names the protocol.
// Default: off ratio0 ratio01-json ratio1-json ratio01 ratio1.
// Knobs (environment): TAHUA (build/tahua), N (1000), PORT_BASE (18480), KEEP_TMP (1:
// keep the callgrind files, for callgrind_annotate).
import { spawn, execFileSync } from 'node:child_process';
import { createServer, Agent, request } from 'node:http';
import { mkdtempSync, writeFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TAHUA = process.env.TAHUA ?? join(ROOT, 'build/tahua');
const N = Number(process.env.N ?? 1000);
const PORT_BASE = Number(process.env.PORT_BASE ?? 18480);
const PORT_UP = PORT_BASE, PORT_TAHUA = PORT_BASE + 2;
const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'Say hello in one short sentence.' }] });
const tmp = mkdtempSync(join(tmpdir(), 'tahua-trace-cost-'));
const children = [];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function die(msg) {
  console.error(`trace_cost: ${msg} (files in ${tmp})`);
  for (const c of children) c.kill('SIGKILL');
  process.exit(1);
}

function get(url) {
  return new Promise((resolve) => {
    const req = request(url, { timeout: 2000 }, (res) => {
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
async function until(fn, what, ms = 120_000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    const v = await fn();
    if (v) return v;
  }
  die(`timed out waiting for ${what}`);
}

function post(agent) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: PORT_TAHUA, path: '/v1/chat/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) } }, (res) => {
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
  const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm'));
  return m ? Number(m[1]) : 0;
};

function config(target, receiver) {
  const [kind, protocol] = target.split('-');
  const lines = [
    'server: {workers: 1}',
    `listeners: [{address: 127.0.0.1, port: ${PORT_TAHUA}}]`,
    'idempotency: {enabled: false}',
    'access_log: {enabled: false}',
    `providers: [{name: up, type: openai, base_url: "http://127.0.0.1:${PORT_UP}/v1"}]`,
    'models: [{name: bench, provider: up, pricing: {input: 2.5, output: 10}}]',
  ];
  const ratio = { ratio0: 0, ratio01: 0.1, ratio1: 1 }[kind];
  if (kind !== 'off' && ratio === undefined) die(`unknown target ${target}`);
  if (ratio !== undefined)
    lines.push(`tracing: {endpoint: "${receiver}/v1/traces", sample_ratio: ${ratio}, flush_interval: 100ms, max_queue_spans: 1000000` +
      (protocol ? `, protocol: ${protocol}` : '') + '}');
  return lines.join('\n') + '\n';
}

// Instructions: the process's total and the inclusive cost of each thread's body.
function costs(file) {
  const out = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], { maxBuffer: 64 << 20 }).toString();
  const total = Number(out.match(/^([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/m)?.[1].replaceAll(',', '') ?? NaN);
  const fn = (re) => {
    const m = out.split('\n').find((l) => re.test(l));
    return m ? Number(m.trim().split(/\s+/)[0].replaceAll(',', '')) : 0;
  };
  return { total, worker: fn(/tahua::Worker::run\(\)/), exporter: fn(/tahua::TraceExporter::run\(\)/) };
}

async function runOnce(target, n, receiver) {
  const dir = join(tmp, `${target}-${n}`);
  execFileSync('mkdir', ['-p', dir]);
  writeFileSync(join(dir, 'tahua.yaml'), config(target, receiver.url));
  receiver.spans = 0;
  const tahua = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${dir}/callgrind.out`, TAHUA, '--config', join(dir, 'tahua.yaml')],
    { env: { ...process.env, TAHUA_MALLOC_TUNING: 'off' }, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(tahua);
  let err = '';
  tahua.stderr.on('data', (c) => (err += c));
  const exited = new Promise((r) => tahua.on('exit', r));
  await until(async () => (await get(`http://127.0.0.1:${PORT_TAHUA}/healthz`)).status === 200, 'tahua to start', 60_000);
  await load(n);
  // Every span the exporter was handed has left (exported, or counted as dropped: fail).
  await until(async () => {
    const m = (await get(`http://127.0.0.1:${PORT_TAHUA}/metrics`)).body;
    if (metric(m, 'tahua_trace_spans_dropped_total') > 0) die(`${target}: spans dropped`);
    return metric(m, 'tahua_trace_export_queue_depth') === 0 && metric(m, 'tahua_trace_spans_exported_total') >= receiver.expect(target, n);
  }, 'the export');
  tahua.kill('SIGTERM');
  await exited;
  if (!readdirSync(dir).includes('callgrind.out')) die(`${target}: no callgrind output: ${err.slice(-2000)}`);
  return costs(join(dir, 'callgrind.out'));
}

async function main() {
  execFileSync('cc', ['-O2', '-o', join(tmp, 'sse_upstream'), join(ROOT, 'bench/sse_upstream.c')]);
  const up = spawn(join(tmp, 'sse_upstream'), ['--port', String(PORT_UP)], { stdio: 'ignore' });
  children.push(up);
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/json' });
      res.end(req.headers['content-type'] === 'application/x-protobuf' ? '' : '{}');
    });
  });
  await new Promise((r) => receiver.listen(PORT_BASE + 1, '127.0.0.1', r));
  receiver.url = `http://127.0.0.1:${PORT_BASE + 1}`;
  // Spans sure to be exported: all of them at ratio 1 (server + attempt), none below
  // (a sampled share is waited for by the queue's depth alone).
  receiver.expect = (target, n) => (target.startsWith('ratio1') ? 2 * n : 0);
  await until(async () => (await get(`http://127.0.0.1:${PORT_UP}/healthz`)).status === 200, 'the upstream');

  const targets = process.argv.slice(2).length ? process.argv.slice(2) : ['off', 'ratio0', 'ratio01-json', 'ratio1-json', 'ratio01', 'ratio1'];
  console.log(`instructions per request (callgrind; (run of ${3 * N} - run of ${N}) / ${2 * N})`);
  console.log('target          process    worker  exporter');
  for (const target of targets) {
    const a = await runOnce(target, N, receiver);
    const b = await runOnce(target, 3 * N, receiver);
    const per = (k) => Math.round((b[k] - a[k]) / (2 * N));
    console.log(`${target.padEnd(14)} ${String(per('total')).padStart(8)} ${String(per('worker')).padStart(9)} ${String(per('exporter')).padStart(9)}`);
  }
  up.kill('SIGTERM');
  receiver.close();
  if (process.env.KEEP_TMP === '1') console.log(`kept ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });
}

main().catch((e) => die(e.stack ?? String(e)));
