// Resources kept in the state store (/admin/v1/resources, or written straight into
// Redis): a ModelRoute or RateLimitPolicy put through the admin API is in force at once,
// survives a restart with store.journal, and with Redis reaches every replica; an
// invalid one is refused with the field named (or, written into Redis by hand, skipped
// and logged while the others apply); the config file wins over the store.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, REPO_ROOT } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startRedis } from './lib/redis.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

const KEY = 'tk-resources-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

function config(upstream, { store, routes } = {}) {
  const c = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [{ name: 'small', provider: 'up', upstream_model: 'up-small' }, { name: 'large', provider: 'up', upstream_model: 'up-large' }],
  });
  c.access_log = { enabled: false };
  c.tenants = [{ name: 'team' }];
  c.keys = [{ name: 'k', tenant: 'team', sha256: sha256(KEY) }];
  c.admin = adminSection();
  if (store) c.store = store;
  if (routes) c.routes = routes;
  return c;
}

const ask = (gw, model) => post(gw.url, '/v1/chat/completions', chatBody(model), { headers: { authorization: `Bearer ${KEY}` } });
// Which upstream model a request for `model` reached (null: not served).
async function servedAs(gw, upstream, model) {
  const r = await ask(gw, model);
  return r.status === 200 ? upstream.requests.at(-1).json.model : null;
}

describe('resources in the state store', () => {
  it('a ModelRoute and a RateLimitPolicy put through the admin API apply at once, and survive a restart', async (t) => {
    const upstream = await startMockUpstream({ t });
    const journal = join(makeTempDir(), 'state.journal');
    const c = config(upstream, { store: { journal } });
    const { gw, admin } = await startWithAdmin(t, c);
    assert.equal(await servedAs(gw, upstream, 'auto'), null, 'no route for "auto" yet');

    const put = await admin('PUT', '/admin/v1/resources/ModelRoute/auto', { json: { match: { model: 'auto' }, target: 'large' } });
    assert.equal(put.status, 200, put.text);
    assert.equal(await servedAs(gw, upstream, 'auto'), 'up-large');

    const policy = await admin('PUT', '/admin/v1/resources/RateLimitPolicy/small-cap',
      { json: { match: { model: 'small' }, per: 'all', requests_per_minute: 2 } });
    assert.equal(policy.status, 200, policy.text);
    assert.deepEqual([(await ask(gw, 'small')).status, (await ask(gw, 'small')).status, (await ask(gw, 'small')).status], [200, 200, 429]);

    const list = await admin('GET', '/admin/v1/resources');
    assert.deepEqual(list.json.resources.map((r) => [r.kind, r.name, r.state]).sort(),
      [['ModelRoute', 'auto', 'applied'], ['RateLimitPolicy', 'small-cap', 'applied']]);
    const audit = await admin('GET', '/admin/v1/audit');
    assert.ok(audit.json.entries.some((e) => e.action === 'resource.put' && e.target === 'ModelRoute/auto'), audit.text);

    // A restart reads them back from the journal before the first request.
    await gw.stop();
    const again = await startWithAdmin(t, c);
    assert.equal(await servedAs(again.gw, upstream, 'auto'), 'up-large');
    assert.equal((await again.admin('DELETE', '/admin/v1/resources/ModelRoute/auto')).status, 200);
    assert.equal(await servedAs(again.gw, upstream, 'auto'), null, 'deleted: "auto" is unknown again');
    assert.equal((await again.admin('DELETE', '/admin/v1/resources/ModelRoute/auto')).status, 404);
  });

  it('refuses an invalid resource with the field named, and one the config file declares', async (t) => {
    const upstream = await startMockUpstream({ t });
    const { gw, admin } = await startWithAdmin(t, config(upstream, { routes: [{ name: 'fixed', match: { model: 'auto' }, target: 'small' }] }));
    const bad = await admin('PUT', '/admin/v1/resources/ModelRoute/broken', { json: { match: { model: 'x' }, target: 'nope' } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_resource');
    assert.match(bad.json.error.message, /ModelRoute\/broken\.spec\.target: unknown model "nope"/);
    const typo = await admin('PUT', '/admin/v1/resources/RateLimitPolicy/p', { json: { requests_per_minut: 5 } });
    assert.equal(typo.status, 400);
    assert.match(typo.json.error.message, /RateLimitPolicy\/p\.spec.*requests_per_minut/);
    assert.equal((await admin('PUT', '/admin/v1/resources/Gadget/x', { json: {} })).status, 404);
    assert.equal((await admin('PUT', '/admin/v1/resources/ModelRoute/bad%20name', { json: {} })).status, 400);
    assert.equal((await admin('PUT', '/admin/v1/resources/ModelRoute/x', { body: 'not json' })).status, 400);
    const shadow = await admin('PUT', '/admin/v1/resources/ModelRoute/fixed', { json: { match: { model: 'auto' }, target: 'large' } });
    assert.equal(shadow.status, 409);
    assert.equal(shadow.json.error.code, 'declared_in_config');
    assert.equal((await admin('GET', '/admin/v1/resources')).json.resources.length, 0, 'nothing was stored');
    assert.equal(await servedAs(gw, upstream, 'auto'), 'up-small');
  });

  it('with Redis: a resource put through one replica reaches the other; one written into Redis by hand applies, an invalid one is skipped and logged, the file wins', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const store = { type: 'redis', redis: { url: redis.url, heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } };
    const routes = [{ name: 'fixed', match: { model: 'pinned' }, target: 'small' }];
    const one = await startWithAdmin(t, config(upstream, { store, routes }));
    const two = await startWithAdmin(t, config(upstream, { store, routes }));

    assert.equal((await one.admin('PUT', '/admin/v1/resources/ModelRoute/auto', { json: { match: { model: 'auto' }, target: 'large' } })).status, 200);
    await eventually(async () => (await servedAs(two.gw, upstream, 'auto')) === 'up-large', { what: 'the route in force on the other replica' });

    // The redis-cli lines of docs/deploying.md, run as written (its model names mapped to this config's).
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'deploying.md'), 'utf8');
    assert.ok(guide.includes('## Resources from the state store'), 'docs/deploying.md has the section');
    const section = guide.slice(guide.indexOf('## Resources from the state store'));
    const lines = section.slice(section.indexOf('```sh'), section.indexOf('```', section.indexOf('```sh') + 5))
      .split('\n').filter((l) => l.startsWith('redis-cli '));
    assert.equal(lines.length, 2, 'docs/deploying.md shows HSET and PUBLISH');
    for (const line of lines) {
      const args = line.replace('gpt-4o-mini', 'small').slice('redis-cli '.length).match(/'[^']*'|\S+/g).map((a) => a.replace(/^'|'$/g, ''));
      execFileSync('redis-cli', ['-p', String(redis.port), ...args]);
    }
    for (const { gw } of [one, two])
      await eventually(async () => (await servedAs(gw, upstream, 'auto-cheap')) === 'up-small', { what: 'the guide\'s route in force' });

    // By hand again: a valid one, an invalid one, and one the file declares.
    redis.cli('HSET', 'tahua:records:resources',
      'ModelRoute/cheap', JSON.stringify({ match: { model: 'cheap' }, target: 'small' }),
      'ModelRoute/typo', JSON.stringify({ match: { model: 'typo' }, target: 'no-such-model' }),
      'ModelRoute/fixed', JSON.stringify({ match: { model: 'pinned' }, target: 'large' }));
    redis.cli('PUBLISH', 'tahua:changes', 'resources');
    for (const { gw } of [one, two]) {
      await eventually(async () => (await servedAs(gw, upstream, 'cheap')) === 'up-small', { what: 'the hand-written route in force' });
      assert.equal(await servedAs(gw, upstream, 'auto'), 'up-large', 'the others still apply');
      assert.equal(await servedAs(gw, upstream, 'pinned'), 'up-small', 'the file\'s route wins');
      await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg === 'a resource from the store is invalid and not applied' &&
        l.resource === 'ModelRoute/typo' && /unknown model "no-such-model"/.test(l.error)), 3000, 'the invalid resource logged');
      await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg?.includes('ModelRoute/fixed is not applied: the config file declares')),
        3000, 'the shadowed resource logged');
    }
    const states = Object.fromEntries((await two.admin('GET', '/admin/v1/resources')).json.resources.map((r) => [r.name, r.state]));
    assert.deepEqual(states, { auto: 'applied', 'auto-cheap': 'applied', cheap: 'applied', typo: 'invalid', fixed: 'shadowed' });
  });
});
