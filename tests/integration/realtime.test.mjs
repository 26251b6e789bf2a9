// The Realtime API (issue 25): GET /v1/realtime?model= with a WebSocket upgrade,
// authenticated with the gateway's keys (a header, or the subprotocol a browser sends),
// routed and proxied to the provider's WebSocket with the provider's key, frames relayed
// both ways, usage from response.done metered and limited like chat, idle time bounded,
// a drain closing with a reason. The client is the official SDK's (`openai/realtime/ws`)
// or a bare `ws` socket where the browser's way is tested; the provider is a mock
// speaking the event protocol.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import WebSocket from 'ws';
import { readFileSync } from 'node:fs';
import { makeCa, issueCert } from './lib/certs.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { eventually } from './lib/util.mjs';

const KEY = 'tk-realtime-0123456789abcdef';
const NARROW = 'tk-realtime-narrow-012345678';
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
// The SDK always opens wss://: its sessions go to a TLS listener, and on to a TLS provider.
const ca = makeCa();
const cert = issueCert(ca, ['DNS:localhost', 'IP:127.0.0.1']);

async function start(t, { tenantLimits, server = {}, rateLimits, tls = false } = {}) {
  const upstream = await startMockUpstream({ t, ...(tls ? { tls: cert } : {}) });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl(), tls ? { tls: { ca_file: ca.caFile } } : {}),
      { name: 'claude', type: 'anthropic', base_url: 'http://127.0.0.1:1', api_key: 'x' }],
    ...(tls ? { listeners: [{ address: '127.0.0.1', port: 0, tls: { cert_file: cert.certFile, key_file: cert.keyFile } }] } : {}),
    models: [
      { name: 'voice', provider: 'up', upstream_model: 'gpt-realtime-2025-08-28', pricing: { input: 4, output: 16 } },
      { name: 'chat', provider: 'up' },
      { name: 'claude', provider: 'claude' },
    ],
    server,
  });
  config.tenants = [{ name: 'team', ...(tenantLimits ? { limits: tenantLimits } : {}) }];
  config.keys = [
    { name: 'k', tenant: 'team', sha256: sha256(KEY) },
    { name: 'narrow', tenant: 'team', sha256: sha256(NARROW), models: ['chat'] },
  ];
  if (rateLimits) config.rate_limits = rateLimits;
  const gw = await startTahua({ t, config });
  const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY, maxRetries: 0 });
  // The SDK's session, trusting the test CA.
  const session = (model) => new OpenAIRealtimeWS({ model, options: { ca: readFileSync(ca.caFile) } }, client);
  return { gw, upstream, client, session };
}

// The next event of `type` from an SDK session.
const next = (rt, type) => new Promise((resolve) => rt.once(type, resolve));
const opened = (ws) => new Promise((resolve, reject) => {
  ws.once('open', resolve);
  ws.once('unexpected-response', (req, res) => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, res })));
  ws.once('error', reject);
});
const closed = (ws) => new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
const wsUrl = (gw, model) => `${gw.url.replace('http', 'ws')}/v1/realtime?model=${model}`;

describe('realtime', () => {
  it('the SDK\'s session through tahua: routed by model, the provider\'s key, events both ways, usage of every response.done', async (t) => {
    const { gw, upstream, session } = await start(t, { tls: true });
    const rt = session('voice');
    const created = await next(rt, 'session.created');
    assert.equal(created.session.model, 'gpt-realtime-2025-08-28', 'the public name rewritten');
    const up = upstream.realtime.sessions.at(-1);
    assert.equal(up.headers.authorization, 'Bearer sk-test-provider-key');
    assert.ok(!JSON.stringify(up.headers).includes(KEY), 'the client\'s key never reaches the provider');
    rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'be brief' } });
    assert.equal((await next(rt, 'session.updated')).session.instructions, 'be brief');
    for (let i = 0; i < 2; ++i) {
      rt.send({ type: 'response.create' });
      const done = await next(rt, 'response.done');
      assert.equal(done.response.usage.total_tokens, 150);
    }
    assert.deepEqual(up.received.map((e) => e.type), ['session.update', 'response.create', 'response.create']);
    const closing = closed(rt.socket);
    rt.close();
    await closing;
    assert.equal((await up.closed.promise).code, 1000, 'the client\'s close reaches the provider');
    const [log] = await gw.waitForAccessLog((l) => l.path === '/v1/realtime');
    assert.equal(log.status, 101);
    assert.equal(log.model, 'voice');
    assert.equal(log.prompt_tokens, 200);
    assert.equal(log.completion_tokens, 100);
    assert.ok(Math.abs(log.cost_usd - (200 * 4 + 100 * 16) / 1e6) < 1e-12);
  });

  it('a browser\'s way: the key as a subprotocol, "realtime" chosen', async (t) => {
    const { gw, upstream } = await start(t);
    const ws = new WebSocket(wsUrl(gw, 'voice'), ['realtime', `openai-insecure-api-key.${KEY}`]);
    const first = new Promise((resolve) => ws.once('message', (m) => resolve(JSON.parse(m.toString()))));
    await opened(ws);
    assert.equal(ws.protocol, 'realtime');
    assert.equal((await first).type, 'session.created');
    assert.ok(!String(upstream.realtime.sessions.at(-1).headers['sec-websocket-protocol'] ?? '').includes(KEY));
    const metrics = async () => (await fetch(`${gw.url}/metrics`)).text();
    assert.match(await metrics(), /^tahua_realtime_sessions 1$/m, 'a live session');
    ws.close();
    await eventually(async () => /^tahua_realtime_sessions 0$/m.test(await metrics()), { what: 'the ended session no longer live' });
    assert.match(await metrics(), /^tahua_realtime_sessions_total 1$/m);
  });

  it('Azure OpenAI: the deployment\'s realtime path with its api-version and api-key', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [{ name: 'az', type: 'azure-openai', base_url: `${upstream.origin()}/openai`, api_version: '2025-04-01-preview', api_key: 'az-key' }],
      models: [{ name: 'voice', provider: 'az', upstream_model: 'gpt-realtime-eu' }],
    });
    const gw = await startTahua({ t, config });
    const ws = new WebSocket(wsUrl(gw, 'voice'));
    const first = new Promise((resolve) => ws.once('message', (m) => resolve(JSON.parse(m.toString()))));
    await opened(ws);
    assert.equal((await first).session.model, 'gpt-realtime-eu');
    const up = upstream.realtime.sessions.at(-1);
    assert.equal(up.url, '/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-realtime-eu');
    assert.equal(up.headers['api-key'], 'az-key');
    ws.close();
  });

  it('refusals are HTTP answers before any upgrade: a bad key, a model the key may not use, a provider without realtime, no upgrade, the provider saying no', async (t) => {
    const { gw, upstream } = await start(t);
    const status = async (url, headers) => {
      const ws = new WebSocket(url, { headers });
      const e = await opened(ws).then(() => ({ status: 101 }), (err) => err);
      ws.terminate();
      return e.status;
    };
    assert.equal(await status(wsUrl(gw, 'voice'), { authorization: 'Bearer tk-wrong' }), 401);
    assert.equal(await status(wsUrl(gw, 'voice'), { authorization: `Bearer ${NARROW}` }), 403);
    assert.equal(await status(wsUrl(gw, 'nope'), { authorization: `Bearer ${KEY}` }), 404);
    assert.equal(await status(wsUrl(gw, 'claude'), { authorization: `Bearer ${KEY}` }), 400);
    const plain = await fetch(`${gw.url}/v1/realtime?model=voice`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(plain.status, 400);
    assert.match((await plain.json()).error.message, /takes a WebSocket upgrade/);
    upstream.realtime.refuse = 403;
    assert.equal(await status(wsUrl(gw, 'voice'), { authorization: `Bearer ${KEY}` }), 502);
    assert.equal(upstream.realtime.sessions.length, 0);
  });

  it('a session over its token budget gets the protocol\'s error event, then a close', async (t) => {
    const { gw, upstream, session } = await start(t, {
      tls: true,
      tenantLimits: { tokens_per_minute: 400 },
      rateLimits: { default_max_tokens: 20, end_streams_over_budget: true },
    });
    const rt = session('voice');
    await next(rt, 'session.created');
    const errors = [];
    rt.on('error', (e) => errors.push(e));
    const ended = closed(rt.socket);
    rt.send({ type: 'response.create' });
    await next(rt, 'response.done'); // 150 tokens: within
    rt.send({ type: 'response.create' });
    await next(rt, 'response.done'); // 300: within
    rt.send({ type: 'response.create' });
    const { code, reason } = await ended; // 450: past what the limit allowed
    assert.equal(code, 1008);
    assert.equal(reason, 'over budget');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].error.code, 'rate_limit_exceeded');
    assert.match(errors[0].error.message, /passed the \d+ tokens the tenant limit tokens_per_minute still allowed/);
    await upstream.realtime.sessions.at(-1).closed.promise;
    const [log] = await gw.waitForAccessLog((l) => l.path === '/v1/realtime');
    assert.equal(log.total_tokens, 450);
  });

  it('an idle session is closed with a reason; a drain closes a live one with "going away"', async (t) => {
    const { gw } = await start(t, { server: { realtime: { idle_timeout: '300ms' } } });
    const idle = new WebSocket(wsUrl(gw, 'voice'), { headers: { authorization: `Bearer ${KEY}` } });
    const idleClosed = closed(idle);
    await opened(idle);
    assert.deepEqual(await idleClosed, { code: 1001, reason: 'The session was idle too long.' });
    // The drain on a gateway of its own, with the default idle timeout: here, a slow
    // machine could let the 300 ms pass between the open and the signal.
    const { gw: draining } = await start(t);
    const live = new WebSocket(wsUrl(draining, 'voice'), { headers: { authorization: `Bearer ${KEY}` } });
    const liveClosed = closed(live);
    await opened(live);
    draining.signal('SIGTERM');
    assert.deepEqual(await liveClosed, { code: 1001, reason: 'The gateway is shutting down.' });
  });
});
