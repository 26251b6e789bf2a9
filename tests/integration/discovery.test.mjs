// Upstream discovery from DNS (docs/routing.md "Discovering upstreams"), against a real DNS
// server (dnsmasq on a loopback port) whose records name 127.0.0.2-127.0.0.5, each a mock
// upstream on the same port: endpoints appear and disappear as the records change,
// traffic spreads over them, a removed endpoint's stream in flight finishes, a failed
// resolution keeps the last endpoints, SRV records give ports, and a new endpoint's
// weight ramps up (slow start).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { chatBody, collectData, openStream, post } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startDnsmasq } from './lib/dns.mjs';
import { startRedis } from './lib/redis.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { closedPort, eventually } from './lib/util.mjs';

const MODEL = 'llm';
const ADDRS = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'];

// One mock upstream on each address, all on one port (A records carry no port).
async function upstreams(t) {
  for (let tries = 0; ; tries += 1) {
    const port = await closedPort();
    const started = [];
    try {
      for (const host of ADDRS) started.push(await startMockUpstream({ t, host, port }));
      return { port, byIp: Object.fromEntries(ADDRS.map((ip, i) => [ip, started[i]])) };
    } catch (err) {
      for (const m of started) await m.close();
      if (tries > 5) throw err;
    }
  }
}

function config(port, dns, deployment) {
  const c = gatewayConfig({
    // The name is resolved only by discovery: the system's resolver does not know it.
    providers: [openaiProvider('up', `http://pool.test:${port}/v1`)],
    models: [{ name: MODEL, balancing: 'round_robin', deployments: [{ id: 'pool', provider: 'up', ...deployment }] }],
  });
  c.access_log = { enabled: true, path: '-' };
  c.discovery = { resolvers: [dns.address], timeout: '300ms' };
  c.admin = adminSection();
  return c;
}

const listed = async (admin) => (await admin('GET', '/admin/v1/deployments')).json.models[0].deployments;
const endpoints = async (admin) => (await listed(admin)).filter((d) => d.source === 'dns' && d.state !== 'draining');
const addresses = async (admin) => (await endpoints(admin)).map((d) => d.address).sort();
const served = (byIp) => Object.fromEntries(Object.entries(byIp).map(([ip, m]) => [ip, m.requests.length]));

describe('upstream discovery from DNS', () => {
  it('endpoints follow the records; traffic spreads over them; each endpoint is its own deployment', async (t) => {
    const { port, byIp } = await upstreams(t);
    const dns = await startDnsmasq({ t, hosts: { 'pool.test': ['127.0.0.2', '127.0.0.3'] } });
    const { gw, admin } = await startWithAdmin(t, config(port, dns, { dns: { name: 'pool.test', min_ttl: '100ms', max_ttl: '200ms' } }));
    await eventually(async () => (await addresses(admin)).join() === `127.0.0.2:${port},127.0.0.3:${port}`, { what: 'two endpoints from DNS' });
    const eps = await endpoints(admin);
    assert.deepEqual(eps.map((d) => d.id).sort(), [`pool@127.0.0.2:${port}`, `pool@127.0.0.3:${port}`]);
    assert.ok(eps.every((d) => d.dns === 'pool.test' && d.node === d.address && d.throttle === 1 && d.state === 'active'));
    for (let i = 0; i < 20; i += 1) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    assert.deepEqual(served(byIp), { '127.0.0.2': 10, '127.0.0.3': 10, '127.0.0.4': 0, '127.0.0.5': 0 });
    const lines = await gw.waitForAccessLog((l) => l.path === '/v1/chat/completions', { count: 20 });
    assert.deepEqual([...new Set(lines.map((l) => l.upstream_address))].sort(), [`127.0.0.2:${port}`, `127.0.0.3:${port}`],
      'the access log names the endpoint');
    assert.ok(lines.every((l) => l.deployment === `pool@${l.upstream_address}`));

    await dns.set({ 'pool.test': ['127.0.0.3', '127.0.0.4', '127.0.0.5'] });
    await eventually(async () => (await addresses(admin)).join() === ['127.0.0.3', '127.0.0.4', '127.0.0.5'].map((ip) => `${ip}:${port}`).join(),
      { what: 'three endpoints after the change' });
    for (let i = 0; i < 30; i += 1) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    assert.deepEqual(served(byIp), { '127.0.0.2': 10, '127.0.0.3': 20, '127.0.0.4': 10, '127.0.0.5': 10 });
    const metrics = await scrape(gw.url);
    assert.equal(sum(metrics, 'tahua_discovery_endpoints', { model: MODEL, deployment: 'pool' }), 3);
    for (const ip of ['127.0.0.3', '127.0.0.4', '127.0.0.5'])
      assert.equal(sum(metrics, 'tahua_deployment_state', { model: MODEL, deployment: `pool@${ip}:${port}`, source: 'dns', state: 'active' }), 1);
    assert.equal(sum(metrics, 'tahua_deployment_state', { deployment: `pool@127.0.0.2:${port}` }), 0, 'the removed endpoint is gone');
    assert.ok(sum(metrics, 'tahua_discovery_resolutions_total') >= 2);
  });

  it('a removed endpoint\'s stream in flight finishes; new requests go to the others', async (t) => {
    const { port, byIp } = await upstreams(t);
    const dns = await startDnsmasq({ t, hosts: { 'pool.test': ['127.0.0.2'] } });
    const { gw, admin } = await startWithAdmin(t, config(port, dns, { dns: { name: 'pool.test', min_ttl: '100ms', max_ttl: '200ms' } }));
    await eventually(async () => (await addresses(admin)).join() === `127.0.0.2:${port}`, { what: 'the endpoint from DNS' });
    const held = byIp['127.0.0.2'].next({ mode: 'hold' });
    const { events } = await openStream(gw.url, chatBody(MODEL, { stream: true }));
    await dns.set({ 'pool.test': ['127.0.0.4'] });
    await eventually(async () => (await addresses(admin)).join() === `127.0.0.4:${port}`, { what: 'the endpoint replaced' });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    assert.equal(byIp['127.0.0.4'].requests.length, 1, 'new requests go to the new endpoint');
    const gone = `pool@127.0.0.2:${port}`;
    assert.deepEqual((await listed(admin)).find((d) => d.id === gone), { id: gone, source: 'dns', state: 'draining', address: `127.0.0.2:${port}` });
    assert.equal(sum(await scrape(gw.url), 'tahua_deployment_state', { deployment: gone, state: 'draining' }), 1);
    held.release();
    assert.equal((await collectData(events)).at(-1), '[DONE]', 'the stream on the removed endpoint finished');
    await eventually(async () => !(await listed(admin)).some((d) => d.id === gone), { what: 'the drained endpoint no longer listed' });
  });

  it('a failed resolution keeps the last endpoints; an SRV record gives each endpoint its port', async (t) => {
    const { port, byIp } = await upstreams(t);
    const dns = await startDnsmasq({
      t,
      hosts: { 'a.pool.test': ['127.0.0.2'], 'b.pool.test': ['127.0.0.5'] },
      srv: [{ name: '_http._tcp.pool.test', target: 'a.pool.test', port }, { name: '_http._tcp.pool.test', target: 'b.pool.test', port }],
    });
    const { gw, admin } = await startWithAdmin(t, config(port, dns, { dns: { name: '_http._tcp.pool.test', type: 'SRV', min_ttl: '100ms', max_ttl: '200ms' } }));
    await eventually(async () => (await addresses(admin)).join() === `127.0.0.2:${port},127.0.0.5:${port}`, { what: 'endpoints from SRV' });
    await dns.stop();
    await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg === 'dns discovery: resolution failed; keeping the last endpoints'),
      5000, 'the failure logged');
    await eventually(async () => sum(await scrape(gw.url), 'tahua_discovery_failures_total') >= 2, { what: 'failures counted' });
    assert.deepEqual(await addresses(admin), [`127.0.0.2:${port}`, `127.0.0.5:${port}`]);
    for (let i = 0; i < 4; i += 1) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    assert.equal(served(byIp)['127.0.0.2'], 2);
    assert.equal(served(byIp)['127.0.0.5'], 2);
  });

  it('a new endpoint joins with a slow start: its weight ramps up to the configured one', async (t) => {
    const { port } = await upstreams(t);
    const dns = await startDnsmasq({ t, hosts: { 'pool.test': ['127.0.0.2'] } });
    const { admin } = await startWithAdmin(t, config(port, dns, { weight: 100, dns: { name: 'pool.test', min_ttl: '100ms', max_ttl: '200ms', slow_start: '3s' } }));
    await eventually(async () => (await endpoints(admin)).length === 1, { what: 'the first endpoint' });
    await eventually(async () => (await endpoints(admin))[0].weight === 100, { timeout: 6000, what: 'the first endpoint at full weight' });
    await dns.set({ 'pool.test': ['127.0.0.2', '127.0.0.3'] });
    let ramping;
    await eventually(async () => {
      ramping = (await endpoints(admin)).find((d) => d.address === `127.0.0.3:${port}`);
      return ramping;
    }, { what: 'the new endpoint' });
    assert.ok(ramping.weight >= 10 && ramping.weight < 100, `joins below its weight: ${ramping.weight}`);
    await eventually(async () => (await endpoints(admin)).find((d) => d.address === `127.0.0.3:${port}`).weight === 100,
      { timeout: 6000, what: 'the new endpoint at full weight' });
  });
});

describe('registered endpoints', () => {
  it('an endpoint registered through one replica is routed to by every replica until its TTL passes', async (t) => {
    const base = await startMockUpstream({ t });
    const pod = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const c = gatewayConfig({
      providers: [openaiProvider('up', base.baseUrl())],
      models: [{ name: MODEL, canary: { version: 'canary', percent: 100 }, deployments: [{ id: 'base', provider: 'up', upstream_model: 'base-model' }] }],
    });
    c.admin = adminSection();
    c.store = { type: 'redis', redis: { url: redis.url, heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } };
    const one = await startWithAdmin(t, c);
    const two = await startWithAdmin(t, c);
    const registered = async (admin) => (await admin('GET', '/admin/v1/deployments')).json.models[0].deployments.filter((d) => d.source === 'registration');
    const served = async (gw) => {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
      assert.equal(r.status, 200);
      return r.json.model;
    };
    assert.equal(await served(two.gw), 'base-model', 'before: the configured deployment');

    const put = await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/pod-1`, {
      json: { address: `127.0.0.1:${pod.port}`, upstream_model: 'pod-model', version: 'canary', labels: { zone: 'a' }, ttl: '2s' },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.shared, true);
    await eventually(async () => (await registered(two.admin)).length === 1, { what: 'the registration seen by the other replica' });
    const [d] = await registered(two.admin);
    assert.equal(d.id, 'pod-1');
    assert.equal(d.address, `127.0.0.1:${pod.port}`);
    assert.equal(d.version, 'canary');
    assert.deepEqual(d.labels, { zone: 'a' });
    // The canary version comes from the registration: every request goes to the pod.
    for (let i = 0; i < 5; i += 1) assert.equal(await served(two.gw), 'pod-model');
    assert.equal(pod.requests.length, 5);
    const listed = (await one.admin('GET', '/admin/v1/endpoints')).json.endpoints;
    assert.equal(listed.length, 1);
    assert.ok(listed[0].expires_in_ms > 0 && listed[0].expires_in_ms <= 2000);

    // Not renewed: gone from both replicas once its TTL has passed.
    for (const r of [one, two]) await eventually(async () => (await registered(r.admin)).length === 0, { timeout: 5000, what: 'the registration expired' });
    assert.equal(await served(two.gw), 'base-model');

    // Deregistered through the other replica: gone from both.
    assert.equal((await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/pod-1`, { json: { address: `127.0.0.1:${pod.port}`, version: 'canary' } })).status, 200);
    await eventually(async () => (await registered(two.admin)).length === 1, { what: 'registered again' });
    assert.equal((await two.admin('DELETE', `/admin/v1/endpoints/${MODEL}/pod-1`)).status, 200);
    await eventually(async () => (await registered(one.admin)).length === 0, { what: 'deregistered on the first replica' });
    // Bad registrations are refused with the reason.
    const bad = await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/pod-2`, { json: { address: 'no-port' } });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /address must be host:port/);
    assert.equal((await one.admin('PUT', '/admin/v1/endpoints/nope/pod-2', { json: { address: '127.0.0.1:1' } })).status, 400);
    assert.equal((await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/base`, { json: { address: '127.0.0.1:1' } })).status, 409);
  });

  it('one replica at a time sweeps expired registrations and hour-old node reports from the store', async (t) => {
    const base = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const c = gatewayConfig({ providers: [openaiProvider('up', base.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
    c.admin = adminSection();
    c.store = { type: 'redis', redis: { url: redis.url, heartbeat: '100ms', replica_ttl: '1s', resync: '1s', sweep: '1s' } };
    const one = await startWithAdmin(t, c);
    const two = await startWithAdmin(t, c);
    assert.equal((await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/short`, { json: { address: '127.0.0.1:9', ttl: '1s' } })).status, 200);
    assert.equal((await one.admin('PUT', `/admin/v1/endpoints/${MODEL}/long`, { json: { address: '127.0.0.1:9', ttl: '1h' } })).status, 200);
    const hourAgo = Date.now() - 3_700_000;
    redis.cli('HSET', 'tahua:records:nodes', 'old-node', JSON.stringify({ state: 'HEALTHY', reported_ms: hourAgo }),
      'fresh-node', JSON.stringify({ state: 'HEALTHY', reported_ms: Date.now() }));
    await eventually(() => redis.cli('HEXISTS', 'tahua:records:endpoints', `${MODEL}/short`) === '0' &&
      redis.cli('HEXISTS', 'tahua:records:nodes', 'old-node') === '0', { timeout: 6000, what: 'the expired and stale records swept' });
    assert.equal(redis.cli('HEXISTS', 'tahua:records:endpoints', `${MODEL}/long`), '1');
    assert.equal(redis.cli('HEXISTS', 'tahua:records:nodes', 'fresh-node'), '1');
    // The sweeper logs after its deletes: the line may reach us after Redis shows them.
    const swept = () => [one, two].map(({ gw }) => gw.stderr.json().filter((l) => l.msg?.startsWith('store sweep')).length);
    await eventually(() => swept()[0] + swept()[1] >= 1, { timeout: 3000, what: `a replica's sweep log line (${swept()})` });
  });
});
