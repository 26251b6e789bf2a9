// The Redis state store on a 3-master Redis Cluster (real redis-server processes on
// loopback ports): counters go to their slot's master, limits hold across replicas for
// tenants on different masters, a request whose counters span two slots is refunded in
// the slot that charged when the other refuses, a slot migrated mid-run is followed
// (ASK while it moves, MOVED after), records and revocations travel through the
// cluster, and every master's persistence is checked at start.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startRedisCluster } from './lib/redis.mjs';
import { eventually } from './lib/util.mjs';

const MODEL = 'gpt-test';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });
const keyOf = (tenant) => `tk-${tenant}-0123456789abcdef`;

// Tenant names whose counters (hash tag {t:name}) land on distinct masters, one each.
function tenantsOnEveryMaster(cluster) {
  const picked = new Map();
  for (let i = 0; picked.size < cluster.nodes.length && i < 1000; i += 1) {
    const name = `team${i}`;
    const owner = cluster.masterOf(`{t:${name}}`);
    if (!picked.has(owner)) picked.set(owner, name);
  }
  return [...picked.values()];
}

function config(upstream, cluster, tenants, { limits = {}, admin = false, rateLimits } = {}) {
  const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  c.access_log = { enabled: false };
  c.tenants = tenants.map((name) => ({ name, limits }));
  c.keys = tenants.map((name) => ({ name: `${name}-key`, tenant: name, sha256: sha256(keyOf(name)) }));
  c.store = {
    type: 'redis',
    redis: { url: cluster.url, cluster: { nodes: cluster.addresses }, command_timeout: '500ms', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' },
  };
  if (admin) c.admin = adminSection();
  if (rateLimits) c.rate_limits = rateLimits;
  return c;
}

const ask = (gw, tenant) => post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(keyOf(tenant)) });
// A window counter is one string "a b c t": c requests in the current window.
const windowCount = (node, key) => Number((node.cli('GET', key) || '0 0 0 -').split(' ')[2]);

// A test that counts one minute's window must not straddle two: its requests would be
// split between the previous and the current window (the count read, and what the
// sliding estimate lets through, would change). Starts it at least `need` ms before the
// next minute (Redis' clock is this machine's).
async function clearOfMinuteBoundary(need = 15_000) {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < need) await new Promise((resolve) => setTimeout(resolve, left + 50));
}

describe('redis store on a Redis Cluster', () => {
  it('two replicas enforce each tenant\'s limit, the counters on the tenant\'s own master', async (t) => {
    const upstream = await startMockUpstream({ t });
    const cluster = await startRedisCluster({ t });
    const tenants = tenantsOnEveryMaster(cluster);
    assert.equal(tenants.length, 3);
    const c = config(upstream, cluster, tenants, { limits: { requests_per_minute: 30 } });
    const gws = [await startTahua({ t, config: c }), await startTahua({ t, config: c })];
    await clearOfMinuteBoundary();
    // 40 requests per tenant, half through each replica, 5 at a time.
    const statuses = Object.fromEntries(tenants.map((x) => [x, []]));
    await Promise.all(tenants.flatMap((tenant) => gws.map(async (gw) => {
      for (let batch = 0; batch < 4; batch += 1) {
        const rs = await Promise.all(Array.from({ length: 5 }, () => ask(gw, tenant)));
        statuses[tenant].push(...rs.map((r) => r.status));
      }
    })));
    for (const tenant of tenants) {
      assert.equal(statuses[tenant].filter((s) => s === 200).length, 30, `${tenant}: 30 of 40 admitted`);
      assert.equal(statuses[tenant].filter((s) => s === 429).length, 10);
      const key = `tahua:{t:${tenant}}:tenant:rpm`;
      assert.equal(windowCount(cluster.masterOf(key), key), 30, `${tenant}'s counter on its master`);
    }
    assert.equal(upstream.requests.length, 90);
    for (const gw of gws) assert.equal(sum(await scrape(gw.url), 'tahua_store_local_decisions_total'), 0, 'every decision was shared');
  });

  it('a request whose counters span two slots: when the model\'s refuses, the tenant\'s charge is refunded', async (t) => {
    const upstream = await startMockUpstream({ t });
    const cluster = await startRedisCluster({ t });
    const modelMaster = cluster.masterOf(`{m:${MODEL}}`);
    const tenant = tenantsOnEveryMaster(cluster).find((name) => cluster.masterOf(`{t:${name}}`) !== modelMaster);
    const gw = await startTahua({
      t,
      config: config(upstream, cluster, [tenant], { limits: { requests_per_minute: 100 }, rateLimits: { models: { [MODEL]: { requests_per_minute: 3 } } } }),
    });
    await clearOfMinuteBoundary();
    const statuses = [];
    for (let i = 0; i < 6; i += 1) statuses.push((await ask(gw, tenant)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 429]);
    const tenantKey = `tahua:{t:${tenant}}:tenant:rpm`;
    const modelKey = `tahua:{m:${MODEL}}:model:rpm`;
    assert.equal(windowCount(modelMaster, modelKey), 3);
    // The three refused requests were charged on the tenant's master, then refunded.
    await eventually(() => windowCount(cluster.masterOf(tenantKey), tenantKey) === 3, { what: 'the tenant counter back at 3' });
    const refused = await ask(gw, tenant);
    assert.equal(refused.status, 429);
    assert.match(refused.json.error.message, /model/);
    assert.equal(sum(await scrape(gw.url), 'tahua_store_local_decisions_total'), 0);
  });

  it('follows a slot migrated mid-run: ASK while its keys move, MOVED once it has', async (t) => {
    const upstream = await startMockUpstream({ t });
    const cluster = await startRedisCluster({ t });
    const [tenant] = tenantsOnEveryMaster(cluster);
    const gw = await startTahua({ t, config: config(upstream, cluster, [tenant], { limits: { requests_per_minute: 10 } }) });
    await clearOfMinuteBoundary();
    const key = `tahua:{t:${tenant}}:tenant:rpm`;
    const slot = cluster.slotOf(key);
    const from = cluster.masterOf(key);
    const to = cluster.nodes.find((n) => n !== from);
    for (let i = 0; i < 2; i += 1) assert.equal((await ask(gw, tenant)).status, 200);
    assert.equal(windowCount(from, key), 2);

    // Migration under way, its keys already moved: the source answers ASK.
    to.cli('cluster', 'setslot', slot, 'importing', cluster.nodeId(from));
    from.cli('cluster', 'setslot', slot, 'migrating', cluster.nodeId(to));
    const keys = from.cli('cluster', 'getkeysinslot', slot, 100).split('\n').filter(Boolean);
    assert.ok(keys.includes(key));
    from.cli('migrate', '127.0.0.1', to.port, '', 0, 5000, 'keys', ...keys);
    assert.equal((await ask(gw, tenant)).status, 200);

    // Migration done: the slot is the other node's, and the source answers MOVED.
    for (const n of cluster.nodes) n.cli('cluster', 'setslot', slot, 'node', cluster.nodeId(to));
    assert.equal(windowCount(to, key), 3, 'the request during the migration counted on the importing node (after ASKING)');
    const after = [];
    for (let i = 0; i < 9; i += 1) after.push((await ask(gw, tenant)).status);
    assert.deepEqual(after, [200, 200, 200, 200, 200, 200, 200, 429, 429], 'the limit of 10 still holds');
    assert.equal(windowCount(to, key), 10);
    assert.equal(from.cli('cluster', 'countkeysinslot', slot), '0', 'nothing left on the source');
    assert.equal(sum(await scrape(gw.url), 'tahua_store_local_decisions_total'), 0, 'no decision fell back');
  });

  it('a key created and revoked through one replica works, then is refused, on the other', async (t) => {
    const upstream = await startMockUpstream({ t });
    const cluster = await startRedisCluster({ t });
    const tenants = tenantsOnEveryMaster(cluster);
    const one = await startWithAdmin(t, config(upstream, cluster, tenants, { admin: true }));
    const two = await startWithAdmin(t, config(upstream, cluster, tenants, { admin: true }));
    const created = await one.admin('POST', '/admin/v1/keys', { json: { name: 'roaming', tenant: tenants[1] } });
    assert.equal(created.status, 201, created.text);
    const secret = created.json.key;
    const call = () => post(two.gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(secret) });
    await eventually(async () => (await call()).status === 200, { what: 'the new key accepted by the other replica' });
    assert.equal((await one.admin('DELETE', '/admin/v1/keys/roaming')).status, 200);
    await eventually(async () => (await call()).status === 401, { what: 'the revoked key refused by the other replica' });
  });

  it('refuses to start when any master evicts, naming it', async (t) => {
    const upstream = await startMockUpstream({ t });
    const cluster = await startRedisCluster({ t });
    const lax = cluster.nodes[2];
    lax.cli('config', 'set', 'maxmemory-policy', 'allkeys-lru');
    const err = await startTahua({ t, config: config(upstream, cluster, ['team']) }).catch((e) => e);
    assert.ok(err instanceof Error, 'tahua did not start');
    assert.match(err.message, new RegExp(`Redis at 127\\.0\\.0\\.1:${lax.port} has maxmemory-policy allkeys-lru`));
  });
});
