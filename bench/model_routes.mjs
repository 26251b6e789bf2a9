// 3,200 ModelRoute resources in a config directory (seed S0 §4.1, §6.2: "3,200 ModelRoutes,
// a change live within 3 s"): the gateway's memory with them, and how long a change to
// one of them takes to be live — from the file's rename into place (what the kubelet's
// ConfigMap swap does) to the first request the new route answers — against the same
// with 10 routes. docs/benchmarks.md records the results.
// With `kube`, the routes are objects of a (fake) Kubernetes API server that tahua lists
// and watches (`kubernetes.resources`), and a change is a MODIFIED watch event: timed from
// the event's write to the first request the new route answers.
//
//   node bench/model_routes.mjs [N=3200] [ROUNDS=5] [dir|kube]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';

const ROOT = new URL('..', import.meta.url).pathname;
const BIN = process.env.TAHUA_BIN ?? join(ROOT, 'build/tahua');
const N = Number(process.argv[2] ?? 3200);
const ROUNDS = Number(process.argv[3] ?? 5);
const MODE = process.argv[4] ?? 'dir';

const base = (port) => `listeners: [{address: 127.0.0.1, port: ${port}}]
server: {workers: 2, deployment_header: true}
access_log: {enabled: false}
providers: [{name: mock, type: mock}]
models:
${Array.from({ length: 10 }, (_, i) => `  - {name: m${i}, deployments: [{id: d${i}, provider: mock}]}`).join('\n')}
`;
// Route k sends the alias `alias-k` to model m(k % 10); `shift` moves every target by one.
const routes = (n, shift, changed = -1) =>
  Array.from({ length: n }, (_, k) => `apiVersion: tahua.dev/v1
kind: ModelRoute
metadata: {name: route-${k}}
spec: {match: {model: alias-${k}}, target: m${(k + (k === changed ? shift : 0)) % 10}}
`).join('---\n');

function ask(port, model) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] });
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, deployment: res.headers['x-tahua-deployment'], text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

async function run(n) {
  const dir = mkdtempSync(join(tmpdir(), 'tahua-routes-'));
  const port = 21000 + Math.floor(Math.random() * 20000);
  let api = null;
  const spec = (k, shift) => ({ match: { model: `alias-${k}` }, target: `m${(k + shift) % 10}` });
  if (MODE === 'kube') {
    const { startFakeKubeApi } = await import('../tests/integration/lib/fake_kube_api.mjs');
    api = await startFakeKubeApi();
    for (let k = 0; k < n; k++) api.apply('modelroutes', `route-${k}`, spec(k, 0));
    const section = api.configSection();
    writeFileSync(join(dir, 'base.yaml'), `${base(port)}kubernetes: ${JSON.stringify(section)}\n`);
  } else {
    writeFileSync(join(dir, 'base.yaml'), base(port));
    writeFileSync(join(dir, 'routes.yaml'), routes(n, 0));
  }
  const started = Date.now();
  const child = spawn(BIN, ['--config', dir], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, TAHUA_MALLOC_TUNING: process.env.TAHUA_MALLOC_TUNING ?? 'off' } });
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  while (!/"msg":"listening"/.test(err)) await new Promise((r) => setTimeout(r, 10));
  // With the API: ready once every kind is listed (the routes are then in force).
  while (api && (await ask(port, `alias-${n - 1}`)).status !== 200) await new Promise((r) => setTimeout(r, 10));
  const startMs = Date.now() - started;
  const rss0 = rssKiB(child.pid);
  const target = n - 1; // the last route: the matcher's worst case
  const times = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const want = `d${(target + round) % 10}`;
    let t0;
    if (api) {
      t0 = process.hrtime.bigint();
      api.apply('modelroutes', `route-${target}`, spec(target, round));
    } else {
      writeFileSync(join(dir, '.routes.tmp'), routes(n, round, target));
      t0 = process.hrtime.bigint();
      renameSync(join(dir, '.routes.tmp'), join(dir, 'routes.yaml'));
    }
    for (;;) {
      const r = await ask(port, `alias-${target}`);
      if (r.status === 200 && r.deployment === want) break;
      await new Promise((res) => setTimeout(res, 5));
    }
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const rss1 = rssKiB(child.pid);
  child.kill('SIGTERM');
  if (api) await api.close();
  times.sort((a, b) => a - b);
  console.log(`mode=${MODE} routes=${n} start_ms=${startMs} rss_kib=${rss0} rss_after_${ROUNDS}_reloads_kib=${rss1} ` +
    `live_ms: min=${times[0].toFixed(0)} median=${times[Math.floor(times.length / 2)].toFixed(0)} max=${times.at(-1).toFixed(0)}`);
}

await run(10);
await run(N);
