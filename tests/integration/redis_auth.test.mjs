// Redis passwords from the environment (`password_env`, an ACL `username`) with real
// redis-servers that require them: the store's Redis as an ACL user (limits shared, the
// connections authenticated as that user), the usage stream sinks (the store's
// credentials by default, a sink's own for another server), Sentinel with a password of
// its own, a region peer. The variable unset: a warning naming it, and that Redis is
// never asked (limits per replica), requests still served. A password in the URL beside
// password_env is refused naming the field. The password never appears in the logs, the
// admin API's answers or `--check-config` output.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { checkConfig, gatewayConfig, openaiProvider, startTahua, writeConfig } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startRedis, startSentinel } from './lib/redis.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { toYaml } from './lib/yaml.mjs';

const MODEL = 'gpt-test';
const KEY = 'tk-auth-0123456789abcdef';
const SECRET = 'tahua-user-secret-4b7e19';     // the ACL user's password, only in the environment
const ADMIN_PW = 'redis-default-secret-90ac2f';  // the default user's (requirepass)
const SENTINEL_PW = 'sentinel-secret-63d0e8';
const BILLING_PW = 'billing-secret-d41f77';
const SECRETS = [SECRET, ADMIN_PW, SENTINEL_PW, BILLING_PW];
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const ask = (gw) => post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: { authorization: `Bearer ${KEY}` } });

function config(upstream, store, { limits = { requests_per_minute: 2 } } = {}) {
  const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  c.tenants = [{ name: 'team', limits }];
  c.keys = [{ name: 'k', tenant: 'team', sha256: sha256(KEY) }];
  c.store = { type: 'redis', redis: { heartbeat: '100ms', replica_ttl: '1s', resync: '1s', ...store } };
  c.admin = adminSection();
  return c;
}

/** A redis-server with requirepass and an ACL user `tahua` whose password is SECRET. */
async function redisWithUser(t) {
  const redis = await startRedis({ t, password: ADMIN_PW });
  assert.equal(redis.cli('ACL', 'SETUSER', 'tahua', 'on', `>${SECRET}`, '~*', '&*', '+@all'), 'OK');
  return redis;
}

function assertNoSecret(text, where) {
  for (const s of SECRETS) assert.ok(!text.includes(s), `${where} shows a Redis password`);
}

describe('Redis passwords from the environment', () => {
  it('the store as an ACL user (username, password_env): limits shared, connections authenticated as it; usage sinks with the store\'s or their own credentials', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await redisWithUser(t);
    const billing = await startRedis({ t, password: BILLING_PW });
    const c = config(upstream, { url: redis.url, username: 'tahua', password_env: 'TAHUA_TEST_REDIS_PASSWORD' });
    c.usage = {
      spill_dir: join(makeTempDir('tahua-redis-auth-'), 'spill'),
      sinks: [
        { name: 'store', type: 'redis_stream', timeout: '300ms' },  // the store's Redis and user
        { name: 'billing', type: 'redis_stream', url: billing.url, password_env: 'TAHUA_TEST_BILLING_PASSWORD', timeout: '300ms' },
      ],
    };
    const { gw, admin } = await startWithAdmin(t, c, { env: { TAHUA_TEST_REDIS_PASSWORD: SECRET, TAHUA_TEST_BILLING_PASSWORD: BILLING_PW } });

    // requests_per_minute 2, counted in Redis.
    assert.deepEqual([(await ask(gw)).status, (await ask(gw)).status, (await ask(gw)).status], [200, 200, 429]);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_store_up'), 1, 'the store is up');
    assert.equal(sum(m, 'tahua_store_local_decisions_total'), 0, 'every decision was shared');
    assert.notEqual(redis.cli('--scan', '--pattern', 'tahua:{t:team}:*'), '', 'the tenant\'s counters are in Redis');
    const clients = redis.cli('CLIENT', 'LIST').split('\n').filter((l) => !/ cmd=client\|list /.test(l));
    assert.ok(clients.length > 0 && clients.every((l) => / user=tahua /.test(l)), `tahua's connections log in as tahua:\n${clients.join('\n')}`);
    // Records reach both streams (at least once: the two 200s and the 429).
    await eventually(() => Number(redis.cli('XLEN', 'tahua:usage')) >= 3 && Number(billing.cli('XLEN', 'tahua:usage')) >= 3,
      { timeout: 10000, what: 'the usage records in both streams' });

    // Never shown: not in the logs, not in the admin API's answers.
    for (const path of ['/admin/v1/config', '/admin/v1/metrics', '/admin/v1/nodes', '/admin/v1/tenants']) {
      const r = await admin('GET', path);
      assert.equal(r.status, 200, `${path}: ${r.text}`);
      assertNoSecret(r.text, path);
    }
    // A config with the password both in the url and beside it: refused naming the field, without the password.
    const both = config(upstream, { url: `redis://:${ADMIN_PW}@127.0.0.1:${redis.port}`, password_env: 'TAHUA_TEST_REDIS_PASSWORD' });
    const refused = await admin('PUT', '/admin/v1/config', { body: toYaml(both), headers: { 'content-type': 'application/yaml' } });
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.text, /store\.redis\.password_env: the url has credentials already/);
    assertNoSecret(refused.text, 'the refusal');
    assertNoSecret(gw.output(), 'the log');
  });

  it('a password in the url still works', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await redisWithUser(t);
    const gw = await startTahua({ t, config: config(upstream, { url: `redis://tahua:${SECRET}@127.0.0.1:${redis.port}` }) });
    assert.deepEqual([(await ask(gw)).status, (await ask(gw)).status, (await ask(gw)).status], [200, 200, 429]);
    assert.equal(sum(await scrape(gw.url), 'tahua_store_up'), 1);
    assertNoSecret(gw.output(), 'the log');
  });

  it('the variable unset: a warning naming field and variable, Redis never asked (limits per replica), requests served', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await redisWithUser(t);
    const gw = await startTahua({ t, config: config(upstream, { url: redis.url, username: 'tahua', password_env: 'TAHUA_TEST_REDIS_UNSET' }),
      env: { TAHUA_TEST_REDIS_UNSET: undefined } });
    const warnings = gw.stderr.json().filter((l) => l.level === 'warn').map((l) => l.msg);
    assert.ok(warnings.some((w) => w.startsWith('store.redis.password_env: environment variable TAHUA_TEST_REDIS_UNSET is not set')),
      warnings.join('\n'));
    // The store's first probe gave up without a connection: it says why.
    assert.ok(warnings.some((w) => /does not answer \(the variable its password_env names is not set\); limits are per replica/.test(w)), warnings.join('\n'));
    assert.deepEqual([(await ask(gw)).status, (await ask(gw)).status, (await ask(gw)).status], [200, 200, 429], 'limited, on this replica');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_store_up'), 0);
    assert.ok(sum(m, 'tahua_store_local_decisions_total') >= 3, 'decided locally');
    assert.equal(redis.cli('--scan', '--pattern', 'tahua:*'), '', 'nothing written to Redis');
  });

  it('Sentinel with a password of its own (sentinel.password_env, username), the master with the store\'s', async (t) => {
    const upstream = await startMockUpstream({ t });
    const master = await redisWithUser(t);
    const sentinel = await startSentinel({ t, masterPort: master.port, masterPassword: ADMIN_PW, password: SENTINEL_PW });
    assert.equal(sentinel.cli('ACL', 'SETUSER', 'watcher', 'on', `>${SENTINEL_PW}`, '+@all'), 'OK');
    const c = config(upstream, {
      url: 'redis://ignored-with-sentinel:1', username: 'tahua', password_env: 'TAHUA_TEST_REDIS_PASSWORD',
      sentinel: { addresses: [`127.0.0.1:${sentinel.port}`], master: 'mymaster', username: 'watcher', password_env: 'TAHUA_TEST_SENTINEL_PASSWORD' },
    });
    const gw = await startTahua({ t, config: c, env: { TAHUA_TEST_REDIS_PASSWORD: SECRET, TAHUA_TEST_SENTINEL_PASSWORD: SENTINEL_PW } });
    const named = gw.stderr.json().find((l) => l.msg === 'redis master (from sentinel)');
    assert.equal(named?.address, `127.0.0.1:${master.port}`, 'the sentinel named the master');
    assert.deepEqual([(await ask(gw)).status, (await ask(gw)).status, (await ask(gw)).status], [200, 200, 429]);
    assert.equal(sum(await scrape(gw.url), 'tahua_store_up'), 1);
    assert.notEqual(master.cli('--scan', '--pattern', 'tahua:{t:team}:*'), '', 'counted on the master');
    assertNoSecret(gw.output(), 'the log');
  });

  it('a region peer whose Redis requires a user and password (region.peers[].username, password_env)', async (t) => {
    const upstream = await startMockUpstream({ t });
    const local = await redisWithUser(t);
    const peer = await startRedis({ t, password: ADMIN_PW });
    assert.equal(peer.cli('ACL', 'SETUSER', 'link', 'on', `>${BILLING_PW}`, '~*', '&*', '+@all'), 'OK');
    // A monthly budget: its use is what the link pushes to the peer.
    const c = config(upstream, { url: local.url, username: 'tahua', password_env: 'TAHUA_TEST_REDIS_PASSWORD' }, { limits: { tokens_per_month: 1000000 } });
    c.region = { name: 'eu', peers: [{ name: 'us', url: peer.url, username: 'link', password_env: 'TAHUA_TEST_PEER_PASSWORD' }], interval: '100ms', timeout: '300ms' };
    const gw = await startTahua({ t, config: c, env: { TAHUA_TEST_REDIS_PASSWORD: SECRET, TAHUA_TEST_PEER_PASSWORD: BILLING_PW } });
    assert.equal((await ask(gw)).status, 200);
    await eventually(async () => sum(await scrape(gw.url), 'tahua_region_peer_up') === 1, { timeout: 10000, what: 'the peer region reachable' });
    await eventually(() => peer.cli('--scan', '--pattern', 'tahua:*') !== '', { timeout: 10000, what: 'this region\'s state pushed to the peer' });
    const clients = peer.cli('CLIENT', 'LIST').split('\n').filter((l) => !/ cmd=client\|list /.test(l) && !/ cmd=scan /.test(l));
    assert.ok(clients.length > 0 && clients.every((l) => / user=link /.test(l)), `the link logs in as link:\n${clients.join('\n')}`);
    assertNoSecret(gw.output(), 'the log');
  });

  it('--check-config: both in the url and password_env refused naming file:line:col and field; neither shows a password', () => {
    const upstream = { baseUrl: () => 'http://127.0.0.1:9/v1' };
    const both = writeConfig(config(upstream, { url: `redis://:${ADMIN_PW}@127.0.0.1:6379`, password_env: 'TAHUA_TEST_REDIS_PASSWORD' }));
    const r = checkConfig(both);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /tahua\.yaml:\d+:\d+: store\.redis\.password_env: the url has credentials already/);
    assertNoSecret(r.stdout + r.stderr, '--check-config');

    const unset = writeConfig(config(upstream, { url: 'redis://127.0.0.1:6379', username: 'tahua', password_env: 'TAHUA_TEST_REDIS_UNSET_TOO' }));
    const ok = checkConfig(unset);
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stderr, /warning: store\.redis\.password_env: environment variable TAHUA_TEST_REDIS_UNSET_TOO is not set/);
  });
});
