// A rolling update on loopback, as deploy/kubernetes/ configures one: three tahua
// replicas behind HAProxy (Debian's; nginx-light has no active health checks), checked
// with `option httpchk GET /readyz` every second (`fall 1`), under streaming load, are
// replaced one at a time the way the Deployment does it: a new replica starts and becomes
// ready (maxUnavailable 0: it takes traffic before an old one leaves); the old one is
// taken out of the balancer (what the endpoints controller does when a pod starts
// terminating: here `set server ... state drain` on HAProxy's runtime API), the preStop
// sleep passes, then SIGTERM: tahua's drain lets its streams finish and exits 0.
// Zero failed requests, and zero streams cut without the drain's final event.
// (CI runs this short version: 3 replicas, a few streams at a time, 1 s streams.)
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { closedPort, eventually, makeTempDir } from './lib/util.mjs';

const EVENTS = 10;        // per stream
const EVENT_GAP_MS = 100; // a 1 s stream
const PRE_STOP_MS = 1500; // the manifests' preStop sleep, scaled down (> HAProxy's inter 1s)
const CLIENTS = 6;

// An OpenAI-format upstream whose streams last EVENTS x EVENT_GAP_MS.
async function startSlowUpstream() {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      const parsed = JSON.parse(body || '{}');
      if (!parsed.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: parsed.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < EVENTS; i++) {
        if (res.destroyed) return;
        const finish = i === EVENTS - 1 ? 'stop' : null;
        res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: parsed.model,
          choices: [{ index: 0, delta: { content: `tok${i} ` }, finish_reason: finish }] })}\n\n`);
        await new Promise((resolve) => setTimeout(resolve, EVENT_GAP_MS));
      }
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}/v1`, close: () => new Promise((r) => server.close(r)) };
}

// One command on HAProxy's runtime API (a unix socket); its answer.
function runtime(sock, command) {
  return new Promise((resolve, reject) => {
    const c = net.createConnection(sock);
    let out = '';
    c.on('data', (d) => { out += d; });
    c.on('end', () => resolve(out));
    c.on('error', reject);
    c.end(`${command}\n`);
  });
}

// Server name -> status ("UP", "DOWN", "DRAIN", "MAINT", ...) from `show stat`.
async function serverStates(sock) {
  const csv = await runtime(sock, 'show stat');
  const lines = csv.split('\n').filter(Boolean);
  const head = lines[0].replace(/^# /, '').split(',');
  const col = (name) => head.indexOf(name);
  const out = {};
  for (const l of lines.slice(1)) {
    const f = l.split(',');
    if (f[col('pxname')] === 'gateways' && !['BACKEND', 'FRONTEND'].includes(f[col('svname')])) out[f[col('svname')]] = f[col('status')];
  }
  return out;
}

// One streamed chat through the balancer: 'ok' (every piece, then [DONE]), 'reconnect'
// (cut by a drain with its final event), or what went wrong.
function streamOnce(agent, port) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'go' }] });
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        if (res.statusCode !== 200) return resolve(`status ${res.statusCode}: ${text.slice(0, 200)}`);
        const pieces = [...text.matchAll(/"content":"(tok\d+) "/g)].map((m) => m[1]);
        if (text.includes('event: reconnect')) return resolve('reconnect');
        const complete = pieces.length === EVENTS && pieces.every((p, i) => p === `tok${i}`) && text.trimEnd().endsWith('data: [DONE]');
        resolve(complete ? 'ok' : `cut after ${pieces.length} pieces`);
      });
      res.on('error', (e) => resolve(`response error ${e.code ?? e.message}`));
    });
    req.on('error', (e) => resolve(`request error ${e.code ?? e.message}`));
    req.end(body);
  });
}

describe('a rolling update behind HAProxy', () => {
  it('replaces three replicas one at a time under streaming load: nothing fails, no stream is cut', async (t) => {
    const haproxyBin = spawnSync('haproxy', ['-v']);
    assert.equal(haproxyBin.status, 0, 'haproxy is not installed (scripts/bootstrap.sh --test installs it)');
    const upstream = await startSlowUpstream();
    t.after(() => upstream.close());
    const dir = makeTempDir('tahua-rollout-');
    const sock = join(dir, 'admin.sock');
    const frontPort = await closedPort();
    const ports = { old: [await closedPort(), await closedPort(), await closedPort()], fresh: [await closedPort(), await closedPort(), await closedPort()] };
    const replica = (port) =>
      startTahua({
        t,
        config: gatewayConfig({
          providers: [openaiProvider('up', upstream.url)],
          models: [{ name: 'm', provider: 'up' }],
          server: { drain_timeout: '5s' },
          listeners: [{ address: '127.0.0.1', port }],
          accessLog: { enabled: false },
        }),
      });
    const old = [];
    for (const port of ports.old) old.push(await replica(port));

    const servers = [
      ...ports.old.map((p, i) => `  server old${i} 127.0.0.1:${p}`),
      ...ports.fresh.map((p, i) => `  server new${i} 127.0.0.1:${p}`),
    ].join('\n');
    const cfg = join(dir, 'haproxy.cfg');
    writeFileSync(cfg, `global
  stats socket ${sock} mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  # No keep-alive to the replicas: a request never rides a connection a draining
  # replica is closing (kube-proxy has no pool either).
  option http-server-close
frontend api
  bind 127.0.0.1:${frontPort}
  default_backend gateways
backend gateways
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  default-server check inter 1s fall 1 rise 1
${servers}
`);
    const lb = spawn('haproxy', ['-f', cfg, '-db'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let lbOut = '';
    lb.stdout.on('data', (d) => { lbOut += d; });
    lb.stderr.on('data', (d) => { lbOut += d; });
    t.after(() => lb.kill('SIGKILL'));
    // The starting point: the old replicas UP, the slots of the new ones DOWN (HAProxy
    // takes a server for UP until its first check fails; a pod not started yet is in no
    // Service's endpoints).
    let seen = {};
    await eventually(async () => {
      const s = (seen = await serverStates(sock).catch((e) => ({ error: e.message })));
      return ['old0', 'old1', 'old2'].every((n) => s[n] === 'UP') && ['new0', 'new1', 'new2'].every((n) => s[n] === 'DOWN');
    }, { timeout: 10000, what: 'the old replicas UP and the new slots DOWN in HAProxy' }).catch((e) => {
      throw new Error(`${e.message}: last seen ${JSON.stringify(seen)}; haproxy said: ${lbOut}`);
    });

    // The load: CLIENTS loops of streams through the balancer until the rollout is over.
    const results = [];
    let running = true;
    const agent = new http.Agent({ keepAlive: true });
    const loops = Array.from({ length: CLIENTS }, async () => {
      while (running) results.push(await streamOnce(agent, frontPort));
    });
    await eventually(() => results.length >= CLIENTS, { timeout: 10000, what: 'streams flowing' });

    const fresh = [];
    const exits = [];
    for (let i = 0; i < 3; i++) {
      // 1. The new pod, ready before an old one leaves (maxUnavailable: 0).
      fresh.push(await replica(ports.fresh[i]));
      await eventually(async () => (await serverStates(sock))[`new${i}`] === 'UP', { timeout: 10000, what: `new${i} UP` });
      // 2. The old pod terminates: out of the endpoints, then the preStop sleep, then SIGTERM.
      const drained = await runtime(sock, `set server gateways/old${i} state drain`);
      assert.equal(drained.trim(), '', drained);
      await new Promise((resolve) => setTimeout(resolve, PRE_STOP_MS));
      exits.push(await old[i].stop('SIGTERM', 15000));
    }
    running = false;
    await Promise.all(loops);
    agent.destroy();

    const failed = results.filter((r) => r !== 'ok' && r !== 'reconnect');
    const cut = results.filter((r) => r === 'reconnect');
    console.log(`rollout: ${results.length} streams, ${failed.length} failed, ${cut.length} cut with the reconnect event`);
    assert.deepEqual(exits, [0, 0, 0], 'every old replica drained and exited 0');
    assert.deepEqual(failed, [], 'no failed request');
    assert.equal(cut.length, 0, 'streams shorter than drain_timeout all finish');
    assert.ok(results.length >= 3 * CLIENTS, `enough load (${results.length} streams)`);
    // Every request after the rollout is served by the new replicas.
    const states = await serverStates(sock);
    assert.deepEqual([states.new0, states.new1, states.new2], ['UP', 'UP', 'UP']);
    for (const f of fresh) assert.ok(f.running);
  });
});
