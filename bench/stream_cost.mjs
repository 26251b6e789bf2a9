// What a stream costs tahua's worker, in instructions (callgrind: deterministic where the
// VMs' clocks are not). See docs/benchmarks.md, "Guardrails".
//
//   node bench/stream_cost.mjs [target...]      targets: plain guard (default: both)
//
// tahua (1 worker, TAHUA_MALLOC_TUNING=off) runs under `valgrind --tool=callgrind
// --separate-threads=yes` in front of bench/sse_upstream.c, which writes each answer of
// EVENTS chat chunks whole, in one send() (`whole=1`: datapath.sh's `whole` scenario).
// N, then 3N streams go through one keep-alive connection, each read to its end; the
// difference of the two runs over 2N is one stream's cost on the worker (start-up and
// shutdown cancel out). Targets: `plain` (no policy), `guard` (datapath.sh's guard variant:
// an output PII policy, every detector, redact).
//
// Knobs (environment): TAHUA (build/tahua), N (200), EVENTS (21), PORT_BASE (18580:
// upstream, +1 the server), KEEP_TMP (1: keep the callgrind files).
import { spawn, execFileSync } from 'node:child_process';
import { Agent, request } from 'node:http';
import { mkdirSync, mkdtempSync, writeFileSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TAHUA = process.env.TAHUA ?? join(ROOT, 'build/tahua');
const N = Number(process.env.N ?? 200);
const EVENTS = Number(process.env.EVENTS ?? 21);
const PORT_BASE = Number(process.env.PORT_BASE ?? 18580);
const PORT_UP = PORT_BASE, PORT_SERVER = PORT_BASE + 1;
const BODY = JSON.stringify({
  model: 'bench',
  stream: true,
  messages: [{ role: 'user', content: `Say hello in one short sentence. events=${EVENTS} whole=1` }],
});
const tmp = mkdtempSync(join(tmpdir(), 'tahua-stream-cost-'));
const children = new Set();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function die(msg) {
  console.error(`stream_cost: ${msg} (files in ${tmp})`);
  for (const c of children) c.kill('SIGKILL');
  process.exit(1);
}

function start(cmd, args, name, env = process.env) {
  const child = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(child);
  let err = '';
  child.stderr.on('data', (d) => (err = (err + d).slice(-4000)));
  child.on('exit', () => children.delete(child));
  child.lastErr = () => err;
  child.name = name;
  return child;
}

async function waitPort(port, child) {
  for (let i = 0; i < 600; ++i) {
    if (child.exitCode !== null) die(`${child.name} exited: ${child.lastErr()}`);
    const ok = await new Promise((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/', method: 'GET' }, (res) => {
        res.resume();
        resolve(true);
      });
      req.on('error', () => resolve(false));
      req.end();
    });
    if (ok) return;
    await sleep(100);
  }
  die(`port ${port} never answered`);
}

function config(target) {
  const lines = [
    'server: {workers: 1}',
    `listeners: [{address: 127.0.0.1, port: ${PORT_SERVER}}]`,
    'access_log: {enabled: false}',
    `providers: [{name: up, type: openai, base_url: "http://127.0.0.1:${PORT_UP}/v1"}]`,
    'models: [{name: bench, provider: up}]',
  ];
  if (target === 'guard') lines.push('guardrails: {policies: [{name: pii, rules: [{name: pii, pii: all, action: redact, inspect: [output]}]}]}');
  else if (target !== 'plain') die(`unknown target ${target} (plain guard)`);
  return lines.join('\n') + '\n';
}

async function streams(n) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < n; ++i) {
    const text = await new Promise((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: PORT_SERVER, path: '/v1/chat/completions', method: 'POST', agent, headers: { 'content-type': 'application/json' } },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d) => (body += d));
          res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`status ${res.statusCode}: ${body}`))));
        },
      );
      req.on('error', reject);
      req.end(BODY);
    });
    if (!text.includes('data: [DONE]')) die(`a stream did not end with [DONE]: ${text.slice(-200)}`);
  }
  agent.destroy();
}

// The worker's and the whole process's instructions in one run (one file a thread; the
// worker's runs tahua::Worker::run()).
function instructions(dir) {
  const out = { worker: NaN, process: 0 };
  for (const f of readdirSync(dir).filter((f) => /^callgrind\.out-\d+$/.test(f))) {
    const text = readFileSync(join(dir, f), 'latin1');
    const total = Number(text.match(/^(?:summary|totals): (\d+)/m)?.[1] ?? NaN);
    if (text.includes('tahua::Worker::run()')) out.worker = total;
    out.process += total;
  }
  if (Number.isNaN(out.worker)) die(`no worker thread in ${dir}`);
  return out;
}

async function run(target, n) {
  const dir = join(tmp, `${target}-${n}`);
  mkdirSync(dir, { recursive: true });
  const cfg = join(tmp, `${target}.yaml`);
  writeFileSync(cfg, config(target));
  const env = { ...process.env, TAHUA_MALLOC_TUNING: 'off' };
  const server = start(
    'valgrind',
    ['--tool=callgrind', '--separate-threads=yes', '--compress-strings=no', `--callgrind-out-file=${dir}/callgrind.out`, TAHUA, '--config', cfg, '--no-watch'],
    'tahua',
    env,
  );
  await waitPort(PORT_SERVER, server);
  await streams(n);
  const exited = new Promise((r) => server.on('exit', r));
  server.kill('SIGTERM');
  await exited;
  return instructions(dir);
}

const targets = process.argv.slice(2).length ? process.argv.slice(2) : ['plain', 'guard'];
execFileSync('cc', ['-O2', '-Wall', '-o', join(tmp, 'sse_upstream'), join(ROOT, 'bench/sse_upstream.c')]);
const upstream = start(join(tmp, 'sse_upstream'), ['--port', String(PORT_UP), '--events', String(EVENTS)], 'sse_upstream');
await sleep(200);
if (upstream.exitCode !== null) die(`sse_upstream exited: ${upstream.lastErr()}`);
console.log(`instructions per stream (${EVENTS} events, one upstream write), (run of ${3 * N} - run of ${N}) / ${2 * N}`);
const per = (a, b) => Math.round((b - a) / (2 * N)).toLocaleString('en-US');
for (const target of targets) {
  const a = await run(target, N);
  const b = await run(target, 3 * N);
  console.log(`${target.padEnd(6)} worker ${per(a.worker, b.worker)}  process ${per(a.process, b.process)}`);
}
upstream.kill('SIGTERM');
if (process.env.KEEP_TMP !== '1') rmSync(tmp, { recursive: true, force: true });
else console.log(`files in ${tmp}`);
