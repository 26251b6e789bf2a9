// The admin API on its own listener: token auth, the config view (no secrets), config
// publication, the deployments view, canary overrides, node status reports steering
// gpu_aware models, and drain.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { chatBody, chatText, collectData, openStream, post, request } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { toYaml } from './lib/yaml.mjs';
import { eventually, tryConnect, withTimeout } from './lib/util.mjs';
import { TOKEN, adminSection, startWithAdmin } from './lib/admin.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { startRedis } from './lib/redis.mjs';

const PROVIDER_SECRET = 'sk-live-SECRET-must-never-leak-4242';


/** A config with the admin API; `models`/`providers` default to two mock deployments. */
function adminConfig({ providers, models, server = {}, admin = adminSection() } = {}) {
  const config = gatewayConfig({
    server: { deployment_header: true, ...server },
    providers: providers ?? [{ name: 'mock', type: 'mock' }],
    models: models ?? [
      {
        name: 'chat',
        balancing: 'round_robin',
        deployments: [
          { id: 'a', provider: 'mock', upstream_model: 'chat-a' },
          { id: 'b', provider: 'mock', upstream_model: 'chat-b' },
        ],
      },
    ],
  });
  config.admin = admin;
  return config;
}

function assertAdminError(res, status, code) {
  assert.equal(res.status, status, `status; body ${res.text}`);
  assert.match(res.headers['content-type'] ?? '', /^application\/json/);
  assert.equal(res.json?.error?.code, code, res.text);
  assert.equal(typeof res.json.error.message, 'string');
  return res.json.error;
}

/** Sends `n` chat requests (8 at a time); returns `{ deploymentId: count }`. */
async function spread(gw, model, n) {
  const counts = {};
  let next = 0;
  const body = JSON.stringify(chatBody(model));
  const one = async () => {
    for (;;) {
      if (next++ >= n) return;
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      assert.equal(res.status, 200, text);
      const id = res.headers.get('x-tahua-deployment');
      counts[id] = (counts[id] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: 8 }, one));
  return counts;
}

const modelView = (res, name) => {
  assert.equal(res.status, 200, res.text);
  const m = res.json.models.find((x) => x.name === name);
  assert.ok(m, `model ${name} in the view`);
  return m;
};
const deploymentsById = (m) => Object.fromEntries(m.deployments.map((d) => [d.id, d]));

describe('admin API: authentication and listener separation', () => {
  it('a HEAD on the admin listener gets no body, so the next answer on the connection is read right', async (t) => {
    const { port } = await startWithAdmin(t, adminConfig());
    const client = await RawClient.connect(port);
    t.after(() => client.destroy());
    await client.write(rawRequest('HEAD', '/admin/v1/config') + rawRequest('GET', '/healthz'));
    const end = await client.waitFor(() => {
      const i = client.buf.indexOf('\r\n\r\n');
      return i >= 0 && i;
    });
    assert.match(client.buf.subarray(0, end).toString(), /^HTTP\/1\.1 \d{3} /);
    client.buf = client.buf.subarray(end + 4);
    const next = await client.readResponse();
    assert.equal(next.status, 200);
    assert.equal(JSON.parse(next.body).status, 'ok');
  });

  it('answers 401 without a token or with a wrong one, 200 with the right one', async (t) => {
    const { admin } = await startWithAdmin(t, adminConfig());
    assertAdminError(await admin('GET', '/admin/v1/config', { token: null }), 401, 'unauthorized');
    assertAdminError(await admin('GET', '/admin/v1/config', { token: 'wrong-token-wrong-token-123' }), 401, 'unauthorized');
    assertAdminError(await admin('GET', '/admin/v1/config', { token: `${TOKEN}x` }), 401, 'unauthorized');
    assertAdminError(await admin('GET', '/admin/v1/config', { token: TOKEN.slice(0, -1) }), 401, 'unauthorized');
    assertAdminError(await admin('GET', '/admin/v1/config', { token: '' }), 401, 'unauthorized');
    assertAdminError(
      await admin('GET', '/admin/v1/config', { token: null, headers: { authorization: `Basic ${TOKEN}` } }),
      401,
      'unauthorized',
    );
    assertAdminError(await admin('GET', '/admin/v1/config', { token: null, headers: { 'x-api-key': TOKEN } }), 401, 'unauthorized');
    // Every endpoint, even an unknown one, and every method is behind the token.
    for (const [method, path] of [
      ['GET', '/admin/v1/deployments'],
      ['GET', '/admin/v1/nodes'],
      ['PUT', '/admin/v1/config'],
      ['PUT', '/admin/v1/models/chat/canary'],
      ['PUT', '/admin/v1/nodes/n1/status'],
      ['DELETE', '/admin/v1/nodes/n1/status'],
      ['POST', '/admin/v1/drain'],
      ['GET', '/admin/v1/no-such-thing'],
    ])
      assertAdminError(
        await admin(method, path, { token: null, body: method === 'GET' ? undefined : '{"percent": 1, "state": "HEALTHY"}' }),
        401,
        'unauthorized',
      );

    const ok = await admin('GET', '/admin/v1/config');
    assert.equal(ok.status, 200, ok.text);
    assertAdminError(await admin('GET', '/admin/v1/no-such-thing'), 404, 'unknown_url');
  });

  it('the public listener answers 404 for /admin/..., even with the token', async (t) => {
    const { gw, admin } = await startWithAdmin(t, adminConfig());
    const auth = { authorization: `Bearer ${TOKEN}` };
    for (const [method, path] of [
      ['GET', '/admin/v1/config'],
      ['GET', '/admin/v1/deployments'],
      ['PUT', '/admin/v1/models/chat/canary'],
      ['POST', '/admin/v1/drain'],
    ]) {
      const res = await request(gw.url, path, { method, headers: auth, json: method === 'GET' ? undefined : { percent: 1 } });
      assert.equal(res.status, 404, `${method} ${path} on the public listener: ${res.status} ${res.text}`);
    }
    assert.ok(gw.running, 'the public POST /admin/v1/drain did not drain');
    // And the admin listener serves no model traffic.
    const chat = await admin('POST', '/v1/chat/completions', { json: chatBody('chat') });
    assert.equal(chat.status, 404, `${chat.status} ${chat.text}`);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('chat'))).status, 200);
  });

  it('takes the token from token_env', async (t) => {
    const config = adminConfig({ admin: { listen: { address: '127.0.0.1', port: 0 }, token_env: 'TAHUA_IT_ADMIN_TOKEN' } });
    const envToken = 'token-from-the-environment-42';
    const { admin } = await startWithAdmin(t, config, { env: { TAHUA_IT_ADMIN_TOKEN: envToken } });
    assert.equal((await admin('GET', '/admin/v1/config', { token: envToken })).status, 200);
    assertAdminError(await admin('GET', '/admin/v1/config'), 401, 'unauthorized');
  });
});

describe('admin API: config', () => {
  const providers = (upstreamUrl) => [
    { name: 'mock', type: 'mock' },
    openaiProvider('real', upstreamUrl, { api_key: PROVIDER_SECRET }),
  ];

  it('GET /admin/v1/config: generation, source, providers, models and no secrets', async (t) => {
    const config = adminConfig({
      providers: providers('http://127.0.0.1:9/v1'),
      models: [
        {
          name: 'chat',
          balancing: 'weighted_random',
          canary: { percent: 5, sticky_header: 'x-user-id', allow: ['alice'] },
          deployments: [
            { id: 'a', provider: 'mock', upstream_model: 'chat-a', weight: 70, labels: { region: 'eu' }, node: 'gpu-1' },
            { id: 'c', provider: 'real', upstream_model: 'chat-c', version: 'canary' },
          ],
        },
        { name: 'old-form', provider: 'real', upstream_model: 'up-model' },
      ],
    });
    const { admin } = await startWithAdmin(t, config);
    const res = await admin('GET', '/admin/v1/config');
    assert.equal(res.status, 200, res.text);
    assert.match(res.headers['content-type'] ?? '', /^application\/json/);
    const view = res.json;
    assert.equal(view.generation, 1);
    assert.match(view.source, /tahua\.yaml$/);
    const byName = Object.fromEntries(view.providers.map((p) => [p.name, p]));
    assert.deepEqual(byName.real, { name: 'real', type: 'openai', usable: true, base_url: 'http://127.0.0.1:9/v1' });
    assert.equal(byName.mock.type, 'mock');
    assert.equal(byName.mock.usable, true);
    const chat = view.models.find((m) => m.name === 'chat');
    assert.equal(chat.balancing, 'weighted_random');
    assert.deepEqual(chat.canary, { enabled: true, version: 'canary', percent: 5, sticky_header: 'x-user-id', allow: ['alice'] });
    assert.deepEqual(
      chat.deployments.map((d) => [d.id, d.provider, d.upstream_model, d.weight, d.version, d.node]),
      [
        ['a', 'mock', 'chat-a', 70, 'stable', 'gpu-1'],
        ['c', 'real', 'chat-c', 100, 'canary', 'c'],
      ],
    );
    assert.deepEqual(chat.deployments[0].labels, { region: 'eu' });
    const old = view.models.find((m) => m.name === 'old-form');
    assert.deepEqual(old.canary, { enabled: false });
    assert.equal(old.deployments.length, 1);
    assert.equal(old.deployments[0].id, 'real', 'the old form is one deployment named after its provider');
    // No secret anywhere in the views.
    for (const path of ['/admin/v1/config', '/admin/v1/deployments', '/admin/v1/nodes']) {
      const text = (await admin('GET', path)).text;
      assert.ok(!text.includes(PROVIDER_SECRET), `${path} leaks the provider api_key`);
      assert.ok(!text.includes(TOKEN), `${path} leaks the admin token`);
      assert.doesNotMatch(text, /api_key|"token"/, `${path} names a secret field`);
    }
  });

  it('PUT /admin/v1/config publishes a valid config and rejects an invalid one (old config keeps serving)', async (t) => {
    const base = adminConfig();
    const { gw, admin } = await startWithAdmin(t, base);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('added'))).status, 404);

    // Valid: a model added.
    const next = adminConfig({
      models: [...base.models, { name: 'added', provider: 'mock', upstream_model: 'added-up' }],
    });
    const put = await admin('PUT', '/admin/v1/config', { body: toYaml(next), headers: { 'content-type': 'application/yaml' } });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.generation, 2);
    const reloaded = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg === 'config reloaded' && l.trigger === 'admin'),
      5000,
      'the admin reload log',
    );
    assert.equal(reloaded.generation, 2);
    const added = await post(gw.url, '/v1/chat/completions', chatBody('added'));
    assert.equal(added.status, 200, added.text);
    assert.equal(added.json.model, 'added-up');
    const view = await admin('GET', '/admin/v1/config');
    assert.equal(view.json.generation, 2);
    assert.ok(view.json.models.some((m) => m.name === 'added'));
    assert.equal((await admin('GET', '/admin/v1/deployments')).json.generation, 2);

    // Invalid: an unknown field, at a known line and column.
    const lines = toYaml(next).split('\n');
    const at = lines.findIndex((l) => l === '  - name: "added"');
    assert.ok(at > 0);
    lines.splice(at + 1, 0, '    provder: "mock"');
    const errorsBefore = sum(await scrape(gw.url), 'tahua_config_reloads_total', { result: 'error' });
    const bad = await admin('PUT', '/admin/v1/config', { body: lines.join('\n') });
    const error = assertAdminError(bad, 400, 'invalid_config');
    const modelIndex = next.models.length - 1;
    assert.match(
      error.message,
      new RegExp(`:${at + 2}:5: models\\[${modelIndex}\\]\\.provder: unknown field`),
      `the message names line ${at + 2} and the field: ${error.message}`,
    );
    // A YAML syntax error names its position too.
    const syntax = assertAdminError(await admin('PUT', '/admin/v1/config', { body: 'models: [\n  {name: x\n' }), 400, 'invalid_config');
    assert.match(syntax.message, /:\d+:\d+: /, syntax.message);
    // A semantically wrong value.
    const wrongRef = toYaml(next).replace('provider: "mock"\n    upstream_model: "added-up"', 'provider: "nope"\n    upstream_model: "added-up"');
    assert.notEqual(wrongRef, toYaml(next));
    const refError = assertAdminError(await admin('PUT', '/admin/v1/config', { body: wrongRef }), 400, 'invalid_config');
    assert.match(refError.message, /models\[\d+\]\.provider: unknown provider "nope"/, refError.message);

    // Nothing changed: generation 2 still serves the added model.
    assert.equal((await admin('GET', '/admin/v1/config')).json.generation, 2);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('added'))).status, 200);
    await eventually(
      async () => sum(await scrape(gw.url), 'tahua_config_reloads_total', { result: 'error' }) === errorsBefore + 3,
      { timeout: 3000, what: 'three rejected configs counted' },
    );
    assert.ok(
      gw.stderr.json().some((l) => l.level === 'error' && /rejected/.test(l.msg ?? '') && /provder/.test(l.error ?? '')),
      'the rejection is logged with the error',
    );
    assertAdminError(await admin('POST', '/admin/v1/config', { body: toYaml(next) }), 405, 'method_not_allowed');
  });
});

describe('admin API: token rotation', () => {
  it('a config published with a new token makes the new token the only valid one', async (t) => {
    const { gw, admin } = await startWithAdmin(t, adminConfig());
    const rotated = 'rotated-admin-token-abcdef0123456789';
    const next = adminConfig({ admin: adminSection({ token: rotated }) });
    const put = await admin('PUT', '/admin/v1/config', { body: toYaml(next) });
    assert.equal(put.status, 200, put.text);
    assertAdminError(await admin('GET', '/admin/v1/config'), 401, 'unauthorized');
    const res = await admin('GET', '/admin/v1/config', { token: rotated });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.generation, 2);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('chat'))).status, 200);
  });
});

describe('admin API: deployments view and canary overrides', () => {
  it('GET /admin/v1/deployments reflects traffic (requests, outstanding, failures)', async (t) => {
    const config = adminConfig({
      providers: [
        { name: 'mock', type: 'mock' },
        { name: 'slow', type: 'mock', mock: { completion_tokens: 8, chunk_delay: '100ms' } },
      ],
      models: [
        {
          name: 'chat',
          balancing: 'round_robin',
          deployments: [
            { id: 'a', provider: 'mock', upstream_model: 'chat-a' },
            { id: 'b', provider: 'mock', upstream_model: 'chat-b' },
          ],
        },
        { name: 'slowmodel', provider: 'slow' },
      ],
    });
    const { gw, admin } = await startWithAdmin(t, config);
    const initial = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'chat'));
    for (const d of Object.values(initial)) {
      assert.equal(d.requests, 0);
      assert.equal(d.outstanding, 0);
      assert.equal(d.failures, 0);
      assert.equal(d.ejected, false);
      assert.equal(d.throttled, false);
      assert.equal(d.node_status, null);
    }

    assert.deepEqual(await spread(gw, 'chat', 10), { a: 5, b: 5 });
    const after = await eventually(
      async () => {
        const m = modelView(await admin('GET', '/admin/v1/deployments'), 'chat');
        const ds = deploymentsById(m);
        return ds.a.requests === 5 && ds.b.requests === 5 && m;
      },
      { timeout: 3000, what: 'requests counters of 5 and 5' },
    );
    assert.equal(after.balancing, 'round_robin');
    assert.deepEqual(after.canary, { enabled: false });
    for (const d of after.deployments) {
      assert.equal(d.outstanding, 0);
      assert.equal(d.failures, 0);
      assert.equal(typeof d.latency_ewma_ms, 'number');
      assert.ok(d.latency_ewma_ms >= 0 && d.latency_ewma_ms < 5000, `latency_ewma_ms ${d.latency_ewma_ms}`);
    }

    // A stream in flight is outstanding until it ends.
    const { events } = await openStream(gw.url, chatBody('slowmodel', { stream: true }));
    const during = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'slowmodel'));
    assert.equal(during.slow.outstanding, 1, JSON.stringify(during.slow));
    const rest = await withTimeout(collectData(events), 5000, 'the stream to end');
    assert.equal(rest.at(-1), '[DONE]');
    await eventually(
      async () => {
        const ds = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'slowmodel'));
        return ds.slow.outstanding === 0 && ds.slow.requests === 1;
      },
      { timeout: 3000, what: 'outstanding back to 0 and one request counted' },
    );
  });

  it('PUT /admin/v1/models/{name}/canary validates and changes the split', async (t) => {
    const config = adminConfig({
      models: [
        {
          name: 'chat',
          canary: { percent: 0 },
          deployments: [
            { id: 's', provider: 'mock', upstream_model: 'chat-s' },
            { id: 'c', provider: 'mock', upstream_model: 'chat-c', version: 'canary' },
          ],
        },
        { name: 'plain', provider: 'mock' },
      ],
    });
    const { gw, admin } = await startWithAdmin(t, config);
    const path = '/admin/v1/models/chat/canary';
    assertAdminError(await admin('PUT', '/admin/v1/models/nope/canary', { json: { percent: 10 } }), 404, 'model_not_found');
    assertAdminError(await admin('PUT', '/admin/v1/models/plain/canary', { json: { percent: 10 } }), 400, 'no_canary');
    for (const body of [
      { percent: 101 },
      { percent: -1 },
      { percent: '50' },
      { percent: null },
      { percent: true },
      {},
      [50],
      50,
    ])
      assert.equal((await admin('PUT', path, { json: body })).status, 400, `body ${JSON.stringify(body)} rejected`);
    assert.equal((await admin('PUT', path, { body: '{"percent": 5' })).status, 400, 'invalid JSON rejected');
    assert.equal((await admin('PUT', path, { body: '' })).status, 400, 'empty body rejected');
    assertAdminError(await admin('GET', path), 405, 'method_not_allowed');
    // None of that changed anything.
    assert.equal(modelView(await admin('GET', '/admin/v1/deployments'), 'chat').canary.percent, 0);
    assert.deepEqual(await spread(gw, 'chat', 100), { s: 100 });

    const ok = await admin('PUT', path, { json: { percent: 100 } });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.percent, 100);
    assert.equal(ok.json.generation, 2);
    // Audited (refused attempts are not changes, so only this one).
    const audit = (await admin('GET', '/admin/v1/audit')).json.entries;
    assert.deepEqual(audit.map((e) => [e.action, e.target, e.who]), [['canary.set', 'chat', 'admin']]);
    assert.equal(modelView(await admin('GET', '/admin/v1/deployments'), 'chat').canary.percent, 100);
    assert.deepEqual(await spread(gw, 'chat', 100), { c: 100 });

    const half = await admin('PUT', path, { json: { percent: 50 } });
    assert.equal(half.status, 200, half.text);
    const counts = await spread(gw, 'chat', 600);
    // Five binomial sigmas (2.04 points each over 600 draws): a fair split never fails by chance.
    assert.ok(Math.abs(counts.c / 6 - 50) <= 10.5, `canary share at 50%: ${JSON.stringify(counts)}`);
    assert.ok(gw.stderr.json().some((l) => l.msg === 'canary weight changed' && l.model === 'chat' && l.percent === 50));
    // The boundaries are accepted.
    assert.equal((await admin('PUT', path, { json: { percent: 0 } })).status, 200);
    assert.deepEqual(await spread(gw, 'chat', 50), { s: 50 });
    assert.equal((await admin('PUT', path, { json: { percent: 0.5 } })).status, 200);
  });
});

// --- node status and gpu_aware -----------------------------------------------------

const gpuDeployments = (prefix, nodes) =>
  nodes.map((node, i) => ({ id: `${prefix}${i + 1}`, provider: 'mock', upstream_model: `${prefix}-up-${i + 1}`, node }));

describe('admin API: node status and gpu_aware routing', () => {
  it('a report written through one replica steers the split on every replica sharing the store', async (t) => {
    const redis = await startRedis({ t });
    const config = adminConfig({ models: [{ name: 'gpu', balancing: 'gpu_aware', deployments: gpuDeployments('d', ['n1', 'n2', 'n3']) }] });
    config.store = { type: 'redis', redis: { url: redis.url, heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } };
    const one = await startWithAdmin(t, config);
    const two = await startWithAdmin(t, config);
    for (const [node, status] of [['n1', { state: 'OVERLOADED', gpu_util: 0.99 }], ['n2', { state: 'UNHEALTHY' }]]) {
      const res = await one.admin('PUT', `/admin/v1/nodes/${node}/status`, { json: status });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json.shared, true, 'written to the shared store');
    }
    assert.equal(redis.cli('HEXISTS', 'tahua:records:nodes', 'n1'), '1');
    await eventually(async () => Object.keys((await two.admin('GET', '/admin/v1/nodes')).json.nodes).sort().join() === 'n1,n2',
      { what: 'the reports seen by the other replica' });
    const seen = (await two.admin('GET', '/admin/v1/nodes')).json.nodes;
    assert.equal(seen.n1.state, 'OVERLOADED');
    assert.equal(seen.n1.gpu_util, 0.99);
    assert.ok(seen.n1.age_ms >= 0 && seen.n1.age_ms < 15000, `its age carried over: ${seen.n1.age_ms} ms`);
    assert.deepEqual(await spread(two.gw, 'gpu', 60), { d3: 60 }, 'the other replica sends everything to the healthy node');

    // Forgotten through the other replica: forgotten on both, and n2 gets traffic again.
    assert.equal((await two.admin('DELETE', '/admin/v1/nodes/n2/status')).status, 200);
    await eventually(async () => !('n2' in (await one.admin('GET', '/admin/v1/nodes')).json.nodes), { what: 'n2 forgotten by the first replica' });
    assert.equal(redis.cli('HEXISTS', 'tahua:records:nodes', 'n2'), '0');
    const after = await spread(one.gw, 'gpu', 300);
    assert.deepEqual(Object.keys(after).sort(), ['d2', 'd3'], JSON.stringify(after));
  });

  it('OVERLOADED / UNHEALTHY / high-score nodes get no traffic; recovered nodes get it back', async (t) => {
    const config = adminConfig({
      models: [{ name: 'gpu', balancing: 'gpu_aware', deployments: gpuDeployments('d', ['n1', 'n2', 'n3']) }],
    });
    const { gw, admin } = await startWithAdmin(t, config);
    const report = async (node, status) => {
      const res = await admin('PUT', `/admin/v1/nodes/${node}/status`, { json: status });
      assert.equal(res.status, 200, res.text);
      return res.json;
    };
    // Nothing reported: every deployment gets traffic.
    const unreported = await spread(gw, 'gpu', 300);
    assert.deepEqual(Object.keys(unreported).sort(), ['d1', 'd2', 'd3'], JSON.stringify(unreported));

    const r1 = await report('n1', { state: 'OVERLOADED', gpu_util: 0.99, gpu_memory: 0.95, active_connections: 40, queued_requests: 12, avg_latency_ms: 900 });
    assert.equal(r1.status.state, 'OVERLOADED');
    await report('n2', { state: 'UNHEALTHY' });
    assert.deepEqual(await spread(gw, 'gpu', 300), { d3: 300 }, 'all traffic to the only healthy node');

    const nodes = await admin('GET', '/admin/v1/nodes');
    assert.equal(nodes.status, 200, nodes.text);
    assert.deepEqual(Object.keys(nodes.json.nodes).sort(), ['n1', 'n2']);
    assert.equal(nodes.json.nodes.n1.state, 'OVERLOADED');
    assert.equal(nodes.json.nodes.n1.gpu_util, 0.99);
    assert.equal(nodes.json.nodes.n1.queued_requests, 12);
    assert.equal(nodes.json.nodes.n2.state, 'UNHEALTHY');
    assert.ok(nodes.json.nodes.n2.age_ms >= 0);
    const view = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'gpu'));
    assert.equal(view.d1.node_status.state, 'OVERLOADED');
    assert.equal(view.d1.node_status.eligible, false);
    assert.equal(view.d2.node_status.state, 'UNHEALTHY');
    assert.equal(view.d2.node_status.eligible, false);
    assert.equal(view.d3.node_status, null);

    // n1 recovers: it gets traffic again (n2 still none).
    await report('n1', { state: 'HEALTHY', gpu_util: 0.1, gpu_memory: 0.2 });
    const recovered = await spread(gw, 'gpu', 300);
    assert.ok(recovered.d1 > 0, `n1 gets traffic again: ${JSON.stringify(recovered)}`);
    assert.equal(recovered.d2, undefined, `n2 (UNHEALTHY) still none: ${JSON.stringify(recovered)}`);
    const view2 = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'gpu'));
    assert.equal(view2.d1.node_status.eligible, true);
    assert.ok(Math.abs(view2.d1.node_status.score - (0.1 * 40 + 0.2 * 30)) < 1e-9, `score ${view2.d1.node_status.score}`);

    // HEALTHY but scoring above eject_score (90): no traffic either.
    await report('n1', { state: 'HEALTHY', gpu_util: 1, gpu_memory: 1, active_connections: 100, queued_requests: 100 });
    assert.deepEqual(await spread(gw, 'gpu', 200), { d3: 200 }, 'a node over eject_score gets nothing');
    const view3 = deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'gpu'));
    assert.equal(view3.d1.node_status.eligible, false);
    assert.ok(view3.d1.node_status.score > 90);

    // A deleted report counts as none: n2 is back.
    const del = await admin('DELETE', '/admin/v1/nodes/n2/status');
    assert.equal(del.status, 200, del.text);
    const afterDelete = await spread(gw, 'gpu', 300);
    assert.ok(afterDelete.d2 > 0, `n2 gets traffic after its report was deleted: ${JSON.stringify(afterDelete)}`);
    assert.deepEqual(Object.keys((await admin('GET', '/admin/v1/nodes')).json.nodes), ['n1']);

    // When every node is out, traffic still flows (to all of them).
    await report('n1', { state: 'UNHEALTHY' });
    await report('n2', { state: 'OVERLOADED' });
    await report('n3', { state: 'UNHEALTHY' });
    const allOut = await spread(gw, 'gpu', 300);
    assert.deepEqual(Object.keys(allOut).sort(), ['d1', 'd2', 'd3'], `all out: still served by all ${JSON.stringify(allOut)}`);
  });

  it('a report older than gpu.status_ttl is ignored', async (t) => {
    const config = adminConfig({
      models: [
        { name: 'ttl', balancing: 'gpu_aware', gpu: { status_ttl: '1s' }, deployments: gpuDeployments('e', ['m1', 'm2', 'm3']) },
      ],
    });
    const { gw, admin } = await startWithAdmin(t, config);
    const res = await admin('PUT', '/admin/v1/nodes/m1/status', { json: { state: 'UNHEALTHY' } });
    assert.equal(res.status, 200, res.text);
    const reportedAt = Date.now();
    const fresh = await spread(gw, 'ttl', 150);
    assert.ok(Date.now() - reportedAt < 900, 'the fresh-report check ran inside the TTL (else it is void)');
    assert.equal(fresh.e1, undefined, `no traffic to m1 while its report is fresh: ${JSON.stringify(fresh)}`);
    assert.equal(deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'ttl')).e1.node_status.state, 'UNHEALTHY');

    await eventually(
      async () => deploymentsById(modelView(await admin('GET', '/admin/v1/deployments'), 'ttl')).e1.node_status === null,
      { timeout: 4000, interval: 100, what: 'the m1 report to expire in the deployments view' },
    );
    const expiredAt = Date.now();
    assert.ok(expiredAt - reportedAt >= 900, `expired after ${expiredAt - reportedAt}ms, status_ttl 1s`);
    const later = await spread(gw, 'ttl', 150);
    assert.ok(later.e1 > 0, `m1 gets traffic once its report expired: ${JSON.stringify(later)}`);
  });

  it('rejects bad status bodies with 400 and keeps the table unchanged', async (t) => {
    const { admin } = await startWithAdmin(t, adminConfig());
    const path = '/admin/v1/nodes/n1/status';
    const bodies = [
      {},
      { state: 'BROKEN' },
      { state: 'healthy' },
      { state: 3 },
      { state: 'HEALTHY', gpu_util: 1.5 },
      { state: 'HEALTHY', gpu_util: -0.1 },
      { state: 'HEALTHY', gpu_memory: 2 },
      { state: 'HEALTHY', gpu_util: '0.5' },
      { state: 'HEALTHY', active_connections: -1 },
      { state: 'HEALTHY', queued_requests: -5 },
      { state: 'HEALTHY', avg_latency_ms: -1 },
      { state: 'HEALTHY', avg_latency_ms: 'fast' },
      [{ state: 'HEALTHY' }],
      'HEALTHY',
    ];
    for (const body of bodies) {
      const res = await admin('PUT', path, { json: body });
      assert.equal(res.status, 400, `${JSON.stringify(body)} -> ${res.status} ${res.text}`);
      assert.equal(typeof res.json?.error?.message, 'string');
    }
    assert.equal((await admin('PUT', path, { body: '{"state": "HEALTHY"' })).status, 400, 'invalid JSON');
    assert.equal((await admin('PUT', path, { body: '' })).status, 400, 'empty body');
    assert.equal((await admin('PUT', '/admin/v1/nodes/bad%20id/status', { json: { state: 'HEALTHY' } })).status, 400, 'bad node id');
    assert.equal((await admin('PUT', `/admin/v1/nodes/${'x'.repeat(129)}/status`, { json: { state: 'HEALTHY' } })).status, 400, 'node id too long');
    assertAdminError(await admin('POST', path, { json: { state: 'HEALTHY' } }), 405, 'method_not_allowed');
    assert.deepEqual((await admin('GET', '/admin/v1/nodes')).json, { nodes: {} }, 'no rejected report was stored');

    // The edges of the ranges are accepted.
    const edge = await admin('PUT', path, {
      json: { state: 'DEGRADED', gpu_util: 1, gpu_memory: 0, active_connections: 0, queued_requests: 0, avg_latency_ms: 0 },
    });
    assert.equal(edge.status, 200, edge.text);
    assert.equal((await admin('GET', '/admin/v1/nodes')).json.nodes.n1.state, 'DEGRADED');
  });
});

describe('admin API: drain', () => {
  it('POST /admin/v1/drain drains like SIGTERM: the in-flight stream finishes, exit code 0', async (t) => {
    const config = adminConfig({
      providers: [{ name: 'slow', type: 'mock', mock: { completion_tokens: 8, chunk_delay: '250ms' } }],
      models: [{ name: 'slowmodel', provider: 'slow' }],
      server: { drain_timeout: '10s' },
    });
    const { gw, admin } = await startWithAdmin(t, config);
    assertAdminError(await admin('GET', '/admin/v1/drain'), 405, 'method_not_allowed');
    assert.ok(gw.running);
    const { events, first } = await openStream(gw.url, chatBody('slowmodel', { stream: true }));
    const res = await admin('POST', '/admin/v1/drain');
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.draining, true);
    // Draining: new connections are refused while the stream (about 2.5 s) goes on.
    await eventually(async () => (await tryConnect(gw.port)) === 'ECONNREFUSED', {
      timeout: 2000,
      what: 'the public listener to refuse new connections',
    });
    assert.ok(gw.running, 'still running while the stream is in flight');
    const rest = await withTimeout(collectData(events), 5000, 'the in-flight stream to finish');
    assert.equal(rest.at(-1), '[DONE]');
    assert.equal(chatText([first.data, ...rest]).length > 0, true);
    assert.ok(!rest.some((d) => d !== '[DONE]' && JSON.parse(d).error), 'no error event in the drained stream');
    const { code, signal } = await withTimeout(gw.exited, 5000, 'tahua to exit after the drain');
    assert.equal(signal, null, `exited by itself, not by ${signal}`);
    assert.equal(code, 0);
  });
});
