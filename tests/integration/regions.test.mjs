// Two regions on loopback (docs/regions.md): each a Redis and two tahua replicas, linked
// through TCP relays that the test cuts (a partition) and restores. What is proven:
// - a key created in one region works in the other; revoked in one, it is refused in the
//   other soon after (the time is printed: docs/regions.md records it);
// - a tenant's monthly token budget counts both regions' use;
// - during a partition every request is answered from its own region (nothing waits on
//   the other), each region spends what it believes is left (the overshoot is printed);
//   after it heals both regions converge on the same use (the time is printed);
// - a record changed in both regions during the partition ends as the later write in both.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startRedis } from './lib/redis.mjs';
import { startRelay } from './lib/tcp_relay.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const MODEL = 'gpt-test';
const BUDGET = 1500; // tokens per month for the tenant, over both regions

function regionConfig(upstream, name, redis, peer, peerPort) {
  const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  c.access_log = { enabled: false };
  c.tenants = [{ name: 'acme', limits: { tokens_per_month: BUDGET } }];
  c.admin = adminSection();
  c.store = { type: 'redis', redis: { url: redis.url } };
  c.rate_limits = { default_max_tokens: 8 };
  c.region = { name, peers: [{ name: peer, url: `redis://127.0.0.1:${peerPort}` }], interval: '100ms', timeout: '300ms' };
  const dir = makeTempDir(`tahua-region-usage-${name}-`);
  c.usage = { spill_dir: join(dir, 'spill'), sinks: [{ type: 'file', path: join(dir, 'usage.jsonl') }] };
  return c;
}

async function startRegions(t) {
  const upstream = await startMockUpstream({ t });
  const redisEu = await startRedis({ t });
  const redisUs = await startRedis({ t });
  const toUs = await startRelay(redisUs.port, { t }); // eu's link -> us's Redis
  const toEu = await startRelay(redisEu.port, { t }); // us's link -> eu's Redis
  const start = async (config) => ({ ...(await startWithAdmin(t, config)), config });
  const eu = [await start(regionConfig(upstream, 'eu', redisEu, 'us', toUs.port)),
    await start(regionConfig(upstream, 'eu', redisEu, 'us', toUs.port))];
  const us = [await start(regionConfig(upstream, 'us', redisUs, 'eu', toEu.port)),
    await start(regionConfig(upstream, 'us', redisUs, 'eu', toEu.port))];
  const partition = () => { toUs.cut(); toEu.cut(); };
  const heal = () => { toUs.restore(); toEu.restore(); };
  return { upstream, redisEu, redisUs, eu, us, partition, heal };
}

const ask = (replica, key) => post(replica.gw.url, '/v1/chat/completions', chatBody(MODEL, { max_tokens: 8 }),
  { headers: { authorization: `Bearer ${key}` } });
// A region's view of the tenant's month: its counter in its Redis ("<period> <used> 0 -"; the
// admin view caps `used` at the limit, and the overshoot is what is measured here).
const COUNTER = 'tahua:{t:acme}:tenant:tpmo';
const used = async (redis) => Number((redis.cli('GET', COUNTER) || '0 0').split(' ')[1]);
const peerUp = async (replica) => sum(await scrape(replica.gw.url), 'tahua_region_peer_up');
const leaders = async (region) => {
  let n = 0;
  for (const r of region) n += sum(await scrape(r.gw.url), 'tahua_region_link_leader');
  return n;
};
const until = (fn, what, timeout = 10_000) => eventually(fn, { timeout, interval: 10, what });

describe('several regions', () => {
  it('replicates keys both ways, revokes across regions, and counts a budget over both', async (t) => {
    const { eu, us, redisEu, redisUs } = await startRegions(t);
    await until(async () => (await leaders(eu)) === 1 && (await leaders(us)) === 1, 'one link leader per region');

    // A key made in eu is usable in us (both replicas).
    const created = await eu[0].admin('POST', '/admin/v1/keys', { json: { name: 'ci', tenant: 'acme' } });
    assert.equal(created.status, 201, created.text);
    const key = created.json.key;
    const t0 = Date.now();
    await until(async () => (await ask(us[0], key)).status === 200 && (await ask(us[1], key)).status === 200, 'the key works in us');
    console.log(`# region: a key created in eu works in us after ${Date.now() - t0} ms`);

    // Use in eu counts in us: both regions see the same month's use.
    for (let i = 0; i < 5; i++) assert.equal((await ask(eu[1], key)).status, 200);
    // Their usage records say which region served them.
    const file = eu[1].config.usage.sinks[0].path;
    const records = await eventually(() => {
      if (!existsSync(file)) return null;
      const lines = readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
      return lines.filter((r) => r.path === '/v1/chat/completions' && r.status === 200).length >= 5 ? lines : null;
    }, { what: 'eu\'s usage records' });
    assert.ok(records.every((r) => r.region === 'eu'), JSON.stringify(records.map((r) => r.region)));
    await until(async () => (await used(redisUs)) === (await used(redisEu)) && (await used(redisEu)) > 0, 'us sees eu\'s use');
    const before = await used(redisUs);
    assert.equal((await ask(us[0], key)).status, 200);
    await until(async () => (await used(redisEu)) === (await used(redisUs)) && (await used(redisUs)) > before, 'eu sees us\'s use');

    // A resource written straight into eu's Redis (past the store) reaches us too.
    redisEu.cli('HSET', 'tahua:records:resources', 'ModelRoute/alias', JSON.stringify({ match: { model: 'alias' }, target: MODEL }));
    redisEu.cli('PUBLISH', 'tahua:changes', 'resources');
    await until(async () => (await post(us[1].gw.url, '/v1/chat/completions', chatBody('alias'),
      { headers: { authorization: `Bearer ${key}` } })).status === 200, 'the hand-written route served in us');

    // Revoked in eu: refused in us soon after.
    const revoked = await eu[0].admin('DELETE', '/admin/v1/keys/ci');
    assert.equal(revoked.status, 200, revoked.text);
    const r0 = Date.now();
    await until(async () => (await ask(us[0], key)).status === 401 && (await ask(us[1], key)).status === 401, 'the key refused in us');
    console.log(`# region: a key revoked in eu is refused in us after ${Date.now() - r0} ms`);
  });

  it('answers from its own region during a partition, overspends at most what was left, and converges after it', async (t) => {
    const { eu, us, redisEu, redisUs, partition, heal } = await startRegions(t);
    await until(async () => (await leaders(eu)) === 1 && (await leaders(us)) === 1, 'one link leader per region');
    const created = await eu[0].admin('POST', '/admin/v1/keys', { json: { name: 'p', tenant: 'acme', metadata: { v: 'first' } } });
    const key = created.json.key;
    await until(async () => (await ask(us[0], key)).status === 200, 'the key works in us');
    for (let i = 0; i < 5; i++) assert.equal((await ask(eu[0], key)).status, 200);
    await until(async () => (await used(redisUs)) === (await used(redisEu)), 'one view of the use');
    const atPartition = await used(redisEu);

    partition();
    await until(async () => (await peerUp(eu[0]) + await peerUp(eu[1])) === 0 && (await peerUp(us[0]) + await peerUp(us[1])) === 0,
      'both links see the partition');
    // Each region spends until its own view of the budget is used up: nothing waits on the other.
    const spend = async (replica) => {
      let n = 0;
      for (; n < 200; n++) {
        const started = Date.now();
        const r = await ask(replica, key);
        assert.ok(Date.now() - started < 1000, 'a request never waits on the other region');
        if (r.status === 429) break;
        assert.equal(r.status, 200, r.text);
      }
      return n;
    };
    const spentEu = await spend(eu[0]);
    const spentUs = await spend(us[0]);
    assert.ok(spentEu > 0 && spentUs > 0, `both regions answered during the partition (${spentEu}, ${spentUs})`);
    // The same key changed in both regions: the later write is us's.
    assert.equal((await eu[0].admin('PATCH', '/admin/v1/keys/p', { json: { metadata: { v: 'eu' } } })).status, 200);
    await new Promise((r) => setTimeout(r, 20)); // two writes apart in time: what last-writer-wins orders
    assert.equal((await us[0].admin('PATCH', '/admin/v1/keys/p', { json: { metadata: { v: 'us' } } })).status, 200);
    const usedEu = await used(redisEu);
    const usedUs = await used(redisUs);

    const h0 = Date.now();
    heal();
    await until(async () => {
      const [a, b] = [await used(redisEu), await used(redisUs)];
      return a === b && a > Math.max(usedEu, usedUs);
    }, 'both regions agree on the use after the partition');
    const converged = Date.now() - h0;
    const total = await used(redisEu);
    // What each region spent alone adds up: the overshoot is the other region's spending.
    assert.equal(total, usedEu + usedUs - atPartition, `the use after healing is both regions' (${usedEu} + ${usedUs} - ${atPartition})`);
    console.log(`# region: partition: budget ${BUDGET}, used ${atPartition} at the cut, ${total} after it healed ` +
      `(over by ${total - BUDGET}, ${((total - BUDGET) / BUDGET * 100).toFixed(0)}%); converged ${converged} ms after healing`);
    assert.equal((await ask(eu[0], key)).status, 429, 'over budget everywhere once healed');
    assert.equal((await ask(us[1], key)).status, 429);
    let last;
    await until(async () => {
      const [a, b] = [await eu[1].admin('GET', '/admin/v1/keys/p'), await us[1].admin('GET', '/admin/v1/keys/p')];
      last = [a.json, b.json];
      return a.json.metadata?.v === 'us' && b.json.metadata?.v === 'us';
    }, 'the later write wins in both regions').catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(last)} eu meta ${redisEu.cli('HGETALL', 'tahua:region:meta:keys')} us meta ${redisUs.cli('HGETALL', 'tahua:region:meta:keys')}`);
    });
  });

  it('refuses a region without a Redis store, or with this region as a peer; the example of docs/deploying.md is valid', async () => {
    const { checkConfig, writeConfig, REPO_ROOT } = await import('./lib/tahua.mjs');
    const { readFileSync } = await import('node:fs');
    const guide = readFileSync(`${REPO_ROOT}/docs/deploying.md`, 'utf8');
    const example = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.startsWith('region:'));
    assert.ok(example, 'docs/deploying.md has the region example');
    const valid = checkConfig(writeConfig('listeners: [{address: 127.0.0.1, port: 0}]\nproviders: [{name: m, type: mock}]\n' +
      'models: [{name: x, provider: m}]\nstore: {type: redis, redis: {url: "redis://127.0.0.1:1"}}\n' + example));
    assert.equal(valid.status, 0, valid.stderr);
    const base = gatewayConfig({ providers: [{ name: 'm', type: 'mock' }], models: [{ name: 'x', provider: 'm' }] });
    const noRedis = writeConfig({ ...base, region: { name: 'eu', peers: [{ name: 'us', url: 'redis://127.0.0.1:1' }] } });
    let r = checkConfig(noRedis);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /region: needs store.type redis/);
    const self = writeConfig({ ...base, store: { type: 'redis', redis: { url: 'redis://127.0.0.1:1' } },
      region: { name: 'eu', peers: [{ name: 'eu', url: 'redis://127.0.0.1:1' }] } });
    r = checkConfig(self);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /region\.peers\[0\]\.name: "eu" is this region or another peer/);
  });
});
