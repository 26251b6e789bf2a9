// Deployment routing: canary splits (percentage, pin, allow-list, sticky key), weighted
// and round-robin groups, live changes of the canary weight (file, SIGHUP, admin API)
// that leave a stream in flight untouched, and passive outlier ejection.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { gatewayConfig, openaiProvider, startTahua, writeConfig } from './lib/tahua.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { chatBody, chatText, collectData, openStream, post, request } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { toYaml } from './lib/yaml.mjs';
import { closedPort, eventually, withTimeout } from './lib/util.mjs';

const ADMIN_TOKEN = 'routing-admin-token-0123456789';

/**
 * Sends `n` chat requests for `model`, `concurrency` at a time over keep-alive
 * connections. `headers(i)` gives request i's headers. Returns per-request
 * `{ status, deployment, version, model }` in request order.
 */
async function hits(gw, model, n, { headers = () => ({}), query = '', concurrency = 8 } = {}) {
  const out = new Array(n);
  let next = 0;
  const body = JSON.stringify(chatBody(model));
  const one = async () => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      const res = await fetch(`${gw.url}/v1/chat/completions${query}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers(i) },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      let json;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      out[i] = {
        status: res.status,
        deployment: res.headers.get('x-tahua-deployment'),
        version: res.headers.get('x-tahua-version'),
        model: json?.model,
        text,
      };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, one));
  const bad = out.find((r) => r.status !== 200);
  assert.equal(bad, undefined, `every request answered 200; got ${bad?.status} ${bad?.text}`);
  return out;
}

/** `{ key: count }` of `key(result)` over `results`. */
function tally(results, key = (r) => r.deployment) {
  const counts = {};
  for (const r of results) counts[key(r)] = (counts[key(r)] ?? 0) + 1;
  return counts;
}

/** Percentage of `results` for which `pred` holds. */
function share(results, pred) {
  return (100 * results.filter(pred).length) / results.length;
}

/**
 * A random split's share within five standard deviations of the binomial it should
 * follow: a fair draw fails this about once in two million runs, while a wrong split
 * (uniform instead of weighted, a canary ignored) is many sigmas away. Fixed tolerances
 * of ±3 points over a few thousand draws were only 3.3-3.6 sigma and failed CI by chance.
 */
function assertShareOf(results, pred, expected, what) {
  const n = results.length;
  const sigma = 100 * Math.sqrt(((expected / 100) * (1 - expected / 100)) / n);
  assertNear(share(results, pred), expected, 5 * sigma, what);
}

function assertNear(actual, expected, tolerance, what) {
  assert.ok(
    Math.abs(actual - expected) <= tolerance,
    `${what}: ${actual.toFixed(2)}% is not within ±${tolerance.toFixed(2)} of ${expected}%`,
  );
}

const mockProvider = (name = 'mock', mock = {}) => ({ name, type: 'mock', mock });

/** A stable/canary pair (plus optional extra stable deployments) on the mock provider. */
function canaryModel(name, canary, { stable = ['stable'], provider = 'mock', balancing } = {}) {
  return {
    name,
    ...(balancing ? { balancing } : {}),
    ...(canary ? { canary } : {}),
    deployments: [
      ...stable.map((id) => ({ id, provider, upstream_model: `${name}-${id}` })),
      { id: 'canary', provider, upstream_model: `${name}-canary`, version: 'canary' },
    ],
  };
}

describe('canary and balancing distributions', () => {
  let gw;
  before(async () => {
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [mockProvider()],
      models: [
        canaryModel('split', { percent: 10 }, { stable: ['stable-a', 'stable-b'] }),
        canaryModel('zero', { percent: 0 }),
        canaryModel('half', { percent: 50 }),
        canaryModel('sticky', { percent: 20, sticky_header: 'x-user-id', allow: ['alice'] }),
        canaryModel('allow', { percent: 0, sticky_header: 'X-User-Id', allow: ['alice'] }),
        canaryModel('apikey', { percent: 50 }),
        {
          name: 'weighted',
          balancing: 'weighted_random',
          deployments: [
            { id: 'w50', provider: 'mock', upstream_model: 'weighted-50', weight: 50 },
            { id: 'w30', provider: 'mock', upstream_model: 'weighted-30', weight: 30 },
            { id: 'w20', provider: 'mock', upstream_model: 'weighted-20', weight: 20 },
          ],
        },
        {
          name: 'rr',
          balancing: 'round_robin',
          deployments: [
            { id: 'r3', provider: 'mock', upstream_model: 'rr-3', weight: 3 },
            { id: 'r2', provider: 'mock', upstream_model: 'rr-2', weight: 2 },
            { id: 'r1', provider: 'mock', upstream_model: 'rr-1', weight: 1 },
          ],
        },
        { name: 'single', provider: 'mock', upstream_model: 'single-up' },
      ],
    });
    gw = await startTahua({ config });
  });
  after(() => gw?.kill());

  it('a 10% canary without a sticky key gets 10% (within 5 sigma) of 2000 requests', async () => {
    const results = await hits(gw, 'split', 2000);
    const counts = tally(results);
    assert.deepEqual(Object.keys(counts).sort(), ['canary', 'stable-a', 'stable-b'], JSON.stringify(counts));
    assertShareOf(results, (r) => r.deployment === 'canary', 10, 'canary share');
    // The headers and the answer agree: the deployment's upstream_model answered.
    for (const r of results) {
      assert.equal(r.model, `split-${r.deployment}`);
      assert.equal(r.version, r.deployment === 'canary' ? 'canary' : 'stable');
    }
    // The stable 90% is split evenly between the two stable deployments (equal weights).
    assertShareOf(results, (r) => r.deployment === 'stable-a', 45, 'stable-a share');
    const lines = await gw.waitForAccessLog((l) => l.model === 'split', { count: 2000 });
    const routes = tally(lines, (l) => l.route);
    assert.deepEqual(routes, { percent: lines.length }, 'access log route is "percent" without a sticky key');
    assert.ok(
      lines.every((l) => (l.deployment === 'canary') === (l.version === 'canary')),
      'access log deployment and version agree',
    );
  });

  it('a version pin (X-Tahua-Version header or ?modelVersion=) always hits the canary', async () => {
    const byHeader = await hits(gw, 'zero', 50, { headers: () => ({ 'x-tahua-version': 'canary' }) });
    assert.deepEqual(tally(byHeader), { canary: 50 });
    const byQuery = await hits(gw, 'zero', 50, { query: '?modelVersion=canary' });
    assert.deepEqual(tally(byQuery), { canary: 50 });
    const byQuery2 = await hits(gw, 'zero', 20, { query: '?a=1&modelVersion=canary&b=2' });
    assert.deepEqual(tally(byQuery2), { canary: 20 });
    // Pinning "stable" on a 50% canary keeps everything on stable.
    const stablePin = await hits(gw, 'half', 100, { headers: () => ({ 'x-tahua-version': 'stable' }) });
    assert.deepEqual(tally(stablePin), { stable: 100 });
    const pins = await gw.waitForAccessLog((l) => l.model === 'zero' && l.deployment === 'canary', { count: 120 });
    assert.deepEqual(tally(pins, (l) => l.route), { pin: 120 }, 'access log route "pin"');
  });

  it('a pin to a version nobody runs falls back to stable', async () => {
    // On a 50% canary: ignoring the pin would send about half to the canary.
    const results = await hits(gw, 'half', 200, { headers: () => ({ 'x-tahua-version': 'v9-nobody' }) });
    assert.deepEqual(tally(results), { stable: 200 });
    const viaQuery = await hits(gw, 'half', 100, { query: '?modelVersion=v9-nobody' });
    assert.deepEqual(tally(viaQuery), { stable: 100 });
  });

  it('an allow-listed user always hits the canary; others follow the percentage', async () => {
    const alice = await hits(gw, 'allow', 50, { headers: () => ({ 'x-user-id': 'alice' }) });
    assert.deepEqual(tally(alice), { canary: 50 });
    const bob = await hits(gw, 'allow', 50, { headers: () => ({ 'x-user-id': 'bob' }) });
    assert.deepEqual(tally(bob), { stable: 50 }, 'percent 0: a user not on the allow-list never gets the canary');
    // An allow-list entry matches the exact value only.
    const alice2 = await hits(gw, 'allow', 20, { headers: () => ({ 'x-user-id': 'alice2' }) });
    assert.deepEqual(tally(alice2), { stable: 20 });
    const lines = await gw.waitForAccessLog((l) => l.model === 'allow', { count: 120 });
    assert.deepEqual(tally(lines, (l) => l.route), { allow: 50, sticky: 70 }, 'access log routes');
  });

  it('a pin takes precedence over the allow-list', async () => {
    const results = await hits(gw, 'allow', 20, {
      headers: () => ({ 'x-user-id': 'alice', 'x-tahua-version': 'stable' }),
    });
    assert.deepEqual(tally(results), { stable: 20 });
  });

  it('sticky key: a user stays on one side; over 500 users the canary share is near 20% (±5)', async () => {
    for (const user of ['user-1', 'user-2', 'user-3', 'carol', 'dave']) {
      const results = await hits(gw, 'sticky', 50, { headers: () => ({ 'x-user-id': user }) });
      const versions = tally(results, (r) => r.version);
      assert.equal(Object.keys(versions).length, 1, `${user} always on the same side: ${JSON.stringify(versions)}`);
    }
    // 500 fixed ids: a fair hash puts the share within ±5 of 20% with ~99.5% probability
    // (one sigma is 1.8 points), so a fixed set passes or fails for good.
    const users = await hits(gw, 'sticky', 500, { headers: (i) => ({ 'x-user-id': `user-${i}` }) });
    assertNear(share(users, (r) => r.version === 'canary'), 20, 5, 'canary share over 500 distinct users');
    // Asked again, each of them lands on the same side as the first time.
    const again = await hits(gw, 'sticky', 500, { headers: (i) => ({ 'x-user-id': `user-${i}` }) });
    const moved = again.filter((r, i) => r.version !== users[i].version).length;
    assert.equal(moved, 0, `${moved} of 500 users changed sides`);
    const lines = await gw.waitForAccessLog((l) => l.model === 'sticky', { count: 1250 });
    assert.deepEqual(tally(lines, (l) => l.route), { sticky: 1250 }, 'access log route "sticky"');
  });

  it('without sticky_header the API key is the sticky key (Bearer and x-api-key)', async () => {
    for (const key of ['sk-user-aaaa', 'sk-user-bbbb', 'sk-user-cccc', 'sk-user-dddd']) {
      const bearer = await hits(gw, 'apikey', 30, { headers: () => ({ authorization: `Bearer ${key}` }) });
      const viaHeader = await hits(gw, 'apikey', 30, { headers: () => ({ 'x-api-key': key }) });
      const sides = tally([...bearer, ...viaHeader], (r) => r.version);
      assert.equal(Object.keys(sides).length, 1, `key ${key} always on one side: ${JSON.stringify(sides)}`);
    }
    const keys = await hits(gw, 'apikey', 400, { headers: (i) => ({ authorization: `Bearer sk-key-${i}` }) });
    assertNear(share(keys, (r) => r.version === 'canary'), 50, 8, 'canary share over 400 distinct API keys');
  });

  it('canary percent 0 sends no traffic to the canary (random and sticky)', async () => {
    const random = await hits(gw, 'zero', 1000);
    assert.deepEqual(tally(random), { stable: 1000 });
    const sticky = await hits(gw, 'zero', 300, { headers: (i) => ({ authorization: `Bearer sk-zero-${i}` }) });
    assert.deepEqual(tally(sticky), { stable: 300 });
  });

  it('weighted_random 50/30/20 over 3000 requests is within 5 sigma of each weight', async () => {
    const results = await hits(gw, 'weighted', 3000);
    const counts = tally(results);
    assert.deepEqual(Object.keys(counts).sort(), ['w20', 'w30', 'w50']);
    for (const [id, weight] of [['w50', 50], ['w30', 30], ['w20', 20]])
      assertShareOf(results, (r) => r.deployment === id, weight, `${id} share`);
    assert.ok(results.every((r) => r.version === 'stable' && r.model === `weighted-${r.deployment.slice(1)}`));
    const lines = await gw.waitForAccessLog((l) => l.model === 'weighted', { count: 3000 });
    assert.deepEqual(tally(lines, (l) => l.route), { none: 3000 }, 'route "none" without a canary');
  });

  it('round_robin with weights 3/2/1 gives exact shares', async () => {
    const results = await hits(gw, 'rr', 600);
    assert.deepEqual(tally(results), { r3: 300, r2: 200, r1: 100 });
    // Smooth: in every window of 6 consecutive decisions each gets exactly its weight.
    const sequential = await hits(gw, 'rr', 60, { concurrency: 1 });
    for (let w = 0; w < 60; w += 6)
      assert.deepEqual(tally(sequential.slice(w, w + 6)), { r3: 3, r2: 2, r1: 1 }, `window at ${w}`);
  });

  it('a single-deployment model reports route "single" and its provider as the deployment', async () => {
    const results = await hits(gw, 'single', 5, { headers: () => ({ 'x-tahua-version': 'canary' }) });
    assert.deepEqual(tally(results), { mock: 5 });
    assert.ok(results.every((r) => r.version === 'stable' && r.model === 'single-up'));
    const lines = await gw.waitForAccessLog((l) => l.model === 'single', { count: 5 });
    assert.ok(lines.every((l) => l.route === 'single' && l.deployment === 'mock'), JSON.stringify(lines[0]));
  });
});

// --- live changes of the canary weight -------------------------------------------

const STREAM_TOKENS = 16;
const slowProvider = mockProvider('slow', { completion_tokens: STREAM_TOKENS, chunk_delay: '100ms' });

function liveConfig(percent, { admin = false } = {}) {
  const config = gatewayConfig({
    server: { deployment_header: true },
    providers: [slowProvider],
    models: [canaryModel('live', { percent }, { provider: 'slow' })],
  });
  if (admin) config.admin = { listen: { address: '127.0.0.1', port: 0 }, token: ADMIN_TOKEN };
  return config;
}

/** Opens a stream on `live`; returns its deployment header and the iterator. */
async function startLiveStream(gw) {
  const { res, events, first } = await openStream(gw.url, chatBody('live', { stream: true }));
  return { deployment: res.headers.get('x-tahua-deployment'), version: res.headers.get('x-tahua-version'), events, first };
}

/** Reads the rest of a stream started by `startLiveStream` and checks it is whole. */
async function assertStreamUntouched(stream, expectedText) {
  const rest = await withTimeout(collectData(stream.events), 10_000, 'the in-flight stream to finish');
  const all = [stream.first.data, ...rest];
  assert.equal(all.at(-1), '[DONE]', 'the stream ends with [DONE]');
  assert.equal(all.filter((d) => d === '[DONE]').length, 1);
  const chunks = all.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
  assert.ok(chunks.every((c) => !c.error), 'no error event');
  const contentChunks = chunks.filter((c) => c.choices?.[0]?.delta?.content);
  assert.equal(contentChunks.length, STREAM_TOKENS, 'every content chunk arrived');
  assert.equal(chatText(all), expectedText, 'the whole text arrived');
  // Every chunk came from the deployment named in the header at its start.
  assert.ok(
    chunks.every((c) => c.model === `live-${stream.deployment}`),
    `all chunks from ${stream.deployment}: ${[...new Set(chunks.map((c) => c.model))]}`,
  );
  return rest;
}

async function fullText(gw) {
  const r = await post(gw.url, '/v1/chat/completions', chatBody('live'), { headers: { 'x-tahua-version': 'stable' } });
  assert.equal(r.status, 200);
  return r.json.choices[0].message.content;
}

const reloadLogs = (gw, trigger) =>
  gw.stderr.json().filter((l) => l.msg === 'config reloaded' && (trigger === undefined || l.trigger === trigger));

describe('changing the canary weight without a restart', () => {
  it('by rewriting the config file; an invalid file is rejected and the old config keeps serving', async (t) => {
    const file = writeConfig(liveConfig(0));
    const gw = await startTahua({ t, args: ['--config', file] });
    const text = await fullText(gw);
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { stable: 100 });

    const stream = await startLiveStream(gw);
    assert.equal(stream.deployment, 'stable');
    writeFileSync(file, toYaml(liveConfig(100)));
    const reload = await gw.stderr.waitUntil(() => reloadLogs(gw, 'file')[0], 5000, 'a file-triggered reload');
    assert.equal(reload.generation, 2);
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { canary: 100 }, 'the new split applies at once');
    const rest = await assertStreamUntouched(stream, text);
    assert.ok(rest.length > 1, 'the stream was still in flight when the split changed');

    // An invalid file: rejected with its position, counted, and the 100% split stays.
    const before = await scrape(gw.url);
    const errorsBefore = sum(before, 'tahua_config_reloads_total', { result: 'error' });
    const invalid = toYaml(liveConfig(100)).replace('percent: 100', 'percent: 250');
    assert.match(invalid, /percent: 250/);
    writeFileSync(file, invalid);
    const failed = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg?.startsWith('config reload failed')),
      5000,
      'the reload failure log',
    );
    assert.match(failed.error, /:\d+:\d+: models\[0\]\.canary\.percent: /, failed.error);
    await eventually(
      async () => sum(await scrape(gw.url), 'tahua_config_reloads_total', { result: 'error' }) === errorsBefore + 1,
      { timeout: 3000, what: 'tahua_config_reloads_total{result="error"} to grow by 1' },
    );
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { canary: 100 }, 'the last good config keeps serving');
    assert.equal(reloadLogs(gw).length, 1, 'no second successful reload');
    assert.match((await request(gw.url, '/metrics')).text, /^tahua_config_generation 2$/m);
  });

  it('by SIGHUP', async (t) => {
    const file = writeConfig(liveConfig(0));
    const gw = await startTahua({ t, args: ['--config', file, '--no-watch'] });
    const text = await fullText(gw);
    const stream = await startLiveStream(gw);
    assert.equal(stream.deployment, 'stable');

    writeFileSync(file, toYaml(liveConfig(100)));
    assert.deepEqual(tally(await hits(gw, 'live', 50)), { stable: 50 }, 'no reload before the signal (--no-watch)');
    gw.signal('SIGHUP');
    const reload = await gw.stderr.waitUntil(() => reloadLogs(gw, 'SIGHUP')[0], 5000, 'a SIGHUP reload');
    assert.equal(reload.generation, 2);
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { canary: 100 });

    // A split in between, on the next SIGHUP.
    writeFileSync(file, toYaml(liveConfig(50)));
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => reloadLogs(gw, 'SIGHUP').length === 2, 5000, 'a second SIGHUP reload');
    const half = await hits(gw, 'live', 400);
    assertShareOf(half, (r) => r.deployment === 'canary', 50, 'canary share at 50%');

    const rest = await assertStreamUntouched(stream, text);
    assert.ok(rest.length > 1, 'the stream was still in flight when the split changed');
  });

  it('by the admin API; the override lasts until the next config load', async (t) => {
    const file = writeConfig(liveConfig(0, { admin: true }));
    const gw = await startTahua({ t, args: ['--config', file, '--no-watch'] });
    const { port } = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg === 'admin listening'),
      5000,
      'the admin listener',
    );
    const admin = (method, path, json) =>
      request(`http://127.0.0.1:${port}`, path, { method, json, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const text = await fullText(gw);
    const stream = await startLiveStream(gw);
    assert.equal(stream.deployment, 'stable');

    const put = await admin('PUT', '/admin/v1/models/live/canary', { percent: 100 });
    assert.equal(put.status, 200, put.text);
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { canary: 100 });
    const view = await admin('GET', '/admin/v1/deployments');
    assert.equal(view.json.models.find((m) => m.name === 'live').canary.percent, 100);

    const rest = await assertStreamUntouched(stream, text);
    assert.ok(rest.length > 1, 'the stream was still in flight when the split changed');

    // A config load replaces the admin change: back to the file's 0%.
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => reloadLogs(gw, 'SIGHUP')[0], 5000, 'a SIGHUP reload');
    assert.deepEqual(tally(await hits(gw, 'live', 100)), { stable: 100 });
    const after = await admin('GET', '/admin/v1/deployments');
    assert.equal(after.json.models.find((m) => m.name === 'live').canary.percent, 0);
  });
});

// --- outlier ejection ------------------------------------------------------------

describe('outlier ejection', () => {
  it('ejects a failing deployment for eject_for, then readmits it once healthy', async (t) => {
    const bad = await startMockUpstream({ t });
    const good = await startMockUpstream({ t });
    const config = gatewayConfig({
      server: { deployment_header: true, workers: 1 },
      providers: [openaiProvider('p-bad', bad.baseUrl()), openaiProvider('p-good', good.baseUrl())],
      models: [
        {
          name: 'ejectable',
          balancing: 'round_robin',
          outlier: { consecutive_failures: 3, eject_for: '1s', max_eject_for: '10s' },
          deployments: [
            { id: 'bad', provider: 'p-bad', upstream_model: 'bad-model' },
            { id: 'good', provider: 'p-good', upstream_model: 'good-model' },
          ],
        },
      ],
    });
    config.admin = { listen: { address: '127.0.0.1', port: 0 }, token: ADMIN_TOKEN };
    const gw = await startTahua({ t, config });
    const { port } = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg === 'admin listening'),
      5000,
      'the admin listener',
    );
    const deployments = async () => {
      const r = await request(`http://127.0.0.1:${port}`, '/admin/v1/deployments', {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      assert.equal(r.status, 200, r.text);
      const m = r.json.models.find((x) => x.name === 'ejectable');
      return Object.fromEntries(m.deployments.map((d) => [d.id, d]));
    };
    const send = async () => {
      const r = await post(gw.url, '/v1/chat/completions', chatBody('ejectable'));
      return { status: r.status, deployment: r.headers['x-tahua-deployment'] };
    };

    // The bad upstream answers 500 until switched back.
    const FAILING = 50;
    for (let i = 0; i < FAILING; i += 1) bad.next({ mode: 'error', status: 500 });

    // Round robin alternates, so the third failure of `bad` comes within 6 requests.
    let failures = 0;
    let ejectedAt;
    for (let i = 0; i < 6 && failures < 3; i += 1) {
      const r = await send();
      if (r.deployment === 'bad') {
        assert.equal(r.status, 500);
        failures += 1;
        if (failures === 3) ejectedAt = Date.now();
      } else {
        assert.equal(r.status, 200);
      }
    }
    assert.equal(failures, 3, 'bad was tried three times');
    const view = await deployments();
    assert.equal(view.bad.ejected, true, `bad is ejected: ${JSON.stringify(view.bad)}`);
    assert.equal(view.bad.failures, 3);
    assert.equal(view.good.ejected, false);

    // While ejected, everything goes to the healthy deployment.
    const badRequestsBefore = bad.requests.length;
    for (let i = 0; i < 20; i += 1) assert.deepEqual(await send(), { status: 200, deployment: 'good' });
    assert.ok(Date.now() - ejectedAt < 900, 'the 20 requests ran inside the ejection window (else the check is void)');
    assert.equal(bad.requests.length, badRequestsBefore, 'no request reached the ejected upstream');

    // Healthy again: drop the scripted failures. After the window it gets traffic again.
    bad.queue.length = 0;
    const readmitted = await eventually(
      async () => {
        const r = await send();
        assert.equal(r.status, 200, `a request failed: ${JSON.stringify(r)}`);
        return r.deployment === 'bad' && Date.now();
      },
      { timeout: 5000, interval: 50, what: 'bad to be readmitted' },
    );
    const elapsed = readmitted - ejectedAt;
    assert.ok(elapsed >= 900, `readmitted ${elapsed}ms after the ejection, eject_for 1s`);
    assert.ok(bad.requests.length > badRequestsBefore);
    const afterView = await deployments();
    assert.equal(afterView.bad.ejected, false, JSON.stringify(afterView.bad));
    assert.equal(afterView.bad.failures, 3);
    // Readmitted for good: round robin alternates again.
    const results = [];
    for (let i = 0; i < 10; i += 1) results.push(await send());
    assert.deepEqual(tally(results), { bad: 5, good: 5 });
  });

  it('a repeat ejection lasts twice as long; connect errors count as failures', async (t) => {
    const bad = await startMockUpstream({ t });
    const good = await startMockUpstream({ t });
    for (let i = 0; i < 100; i += 1) bad.next({ mode: 'error', status: 503 });
    const refused = `http://127.0.0.1:${await closedPort()}/v1`;
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [
        openaiProvider('p-bad', bad.baseUrl()),
        openaiProvider('p-good', good.baseUrl()),
        openaiProvider('p-refused', refused, { timeouts: { connect: '1s', first_byte: '5s', idle: '5s', total: '10s' } }),
      ],
      models: [
        {
          name: 'doubling',
          balancing: 'round_robin',
          outlier: { consecutive_failures: 2, eject_for: '500ms', max_eject_for: '10s' },
          deployments: [
            { id: 'bad', provider: 'p-bad' },
            { id: 'good', provider: 'p-good' },
          ],
        },
        {
          name: 'refusing',
          balancing: 'round_robin',
          outlier: { consecutive_failures: 3, eject_for: '30s' },
          deployments: [
            { id: 'down', provider: 'p-refused' },
            { id: 'good', provider: 'p-good' },
          ],
        },
      ],
    });
    config.admin = { listen: { address: '127.0.0.1', port: 0 }, token: ADMIN_TOKEN };
    const gw = await startTahua({ t, config });
    const { port } = await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg === 'admin listening'), 5000, 'admin');
    const send = async (model) => {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(model));
      return { status: r.status, deployment: r.headers['x-tahua-deployment'], at: Date.now() };
    };
    // Sends requests until `bad` has failed `n` more times; returns when the last one came back.
    const failBad = async (n) => {
      let seen = 0;
      let last;
      for (let i = 0; i < 4 * n && seen < n; i += 1) {
        const r = await send('doubling');
        if (r.deployment === 'bad') {
          assert.equal(r.status, 503);
          seen += 1;
          last = r.at;
        }
      }
      assert.equal(seen, n, `bad failed ${n} times`);
      return last;
    };
    const untilBadTried = () =>
      eventually(
        async () => {
          const r = await send('doubling');
          return r.deployment === 'bad' && r;
        },
        { timeout: 5000, interval: 20, what: 'bad to be tried again' },
      );

    const firstEjection = await failBad(2);
    const back1 = await untilBadTried();
    assert.equal(back1.status, 503);
    const gap1 = back1.at - firstEjection;
    assert.ok(gap1 >= 450, `first ejection lasted ${gap1}ms, eject_for 500ms`);
    // Still failing: one more failure ejects it again, now for 1s.
    const secondEjection = await failBad(1);
    const back2 = await untilBadTried();
    const gap2 = back2.at - secondEjection;
    assert.ok(gap2 >= 950, `the repeat ejection lasted ${gap2}ms; expected about 1000ms (2 x eject_for)`);
    assert.ok(gap2 < 2500, `the repeat ejection lasted ${gap2}ms; expected about 1000ms`);

    // A deployment whose upstream refuses connections: three connect errors eject it.
    const outcomes = [];
    for (let i = 0; i < 6; i += 1) outcomes.push(await send('refusing'));
    // The failed ones are told apart by status (a gateway-made 502 names no deployment).
    assert.deepEqual(tally(outcomes, (r) => r.status), { 200: 3, 502: 3 }, JSON.stringify(outcomes));
    const downLines = await gw.waitForAccessLog((l) => l.model === 'refusing' && l.status === 502, { count: 3 });
    assert.ok(downLines.every((l) => l.deployment === 'down' && l.error === 'upstream_unreachable'), JSON.stringify(downLines[0]));
    const view = await request(`http://127.0.0.1:${port}`, '/admin/v1/deployments', {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const d = view.json.models.find((m) => m.name === 'refusing').deployments.find((x) => x.id === 'down');
    assert.equal(d.ejected, true, JSON.stringify(d));
    assert.equal(d.failures, 3);
    for (let i = 0; i < 10; i += 1) assert.deepEqual((({ status, deployment }) => ({ status, deployment }))(await send('refusing')), { status: 200, deployment: 'good' });
  });

  it('an ejected canary gets no traffic while the stable deployments are healthy', async (t) => {
    const bad = await startMockUpstream({ t });
    const good = await startMockUpstream({ t });
    for (let i = 0; i < 200; i += 1) bad.next({ mode: 'error', status: 500 });
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [openaiProvider('p-bad', bad.baseUrl()), openaiProvider('p-good', good.baseUrl())],
      models: [
        {
          name: 'canaried',
          canary: { percent: 50 },
          outlier: { consecutive_failures: 3, eject_for: '30s' },
          deployments: [
            { id: 'stable', provider: 'p-good' },
            { id: 'canary', provider: 'p-bad', version: 'canary' },
          ],
        },
      ],
    });
    config.admin = { listen: { address: '127.0.0.1', port: 0 }, token: ADMIN_TOKEN };
    const gw = await startTahua({ t, config });
    const { port } = await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg === 'admin listening'), 5000, 'admin');
    const send = async () => {
      const r = await post(gw.url, '/v1/chat/completions', chatBody('canaried'));
      return { status: r.status, deployment: r.headers['x-tahua-deployment'] };
    };
    // Until the canary has failed three times (about 6 requests at 50%; bounded).
    let canaryFailures = 0;
    for (let i = 0; i < 200 && canaryFailures < 3; i += 1) {
      const r = await send();
      if (r.deployment === 'canary') canaryFailures += 1;
    }
    assert.equal(canaryFailures, 3);
    const view = await request(`http://127.0.0.1:${port}`, '/admin/v1/deployments', {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const canary = view.json.models[0].deployments.find((d) => d.id === 'canary');
    assert.equal(canary.ejected, true, JSON.stringify(canary));

    // Ejected: its 50% share must go to the healthy stable deployment, not to the failing canary.
    const results = [];
    for (let i = 0; i < 40; i += 1) results.push(await send());
    const counts = tally(results, (r) => `${r.deployment}:${r.status}`);
    assert.deepEqual(counts, { 'stable:200': 40 }, `traffic while the canary is ejected: ${JSON.stringify(counts)}`);
  });

  it('does not eject when every deployment fails (traffic keeps flowing to all)', async (t) => {
    const a = await startMockUpstream({ t });
    const b = await startMockUpstream({ t });
    for (let i = 0; i < 40; i += 1) {
      a.next({ mode: 'error', status: 502 });
      b.next({ mode: 'error', status: 503 });
    }
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [openaiProvider('pa', a.baseUrl()), openaiProvider('pb', b.baseUrl())],
      models: [
        {
          name: 'allbad',
          balancing: 'round_robin',
          outlier: { consecutive_failures: 2, eject_for: '30s' },
          deployments: [
            { id: 'a', provider: 'pa' },
            { id: 'b', provider: 'pb' },
          ],
        },
      ],
    });
    const gw = await startTahua({ t, config });
    const seen = [];
    for (let i = 0; i < 20; i += 1) {
      const r = await post(gw.url, '/v1/chat/completions', chatBody('allbad'));
      assert.ok(r.status >= 500, `status ${r.status}`);
      seen.push({ deployment: r.headers['x-tahua-deployment'] });
    }
    const counts = tally(seen);
    assert.ok(counts.a > 0 && counts.b > 0, `both still tried: ${JSON.stringify(counts)}`);
    assert.equal(a.requests.length + b.requests.length, 20, 'every request reached an upstream');
  });
});
