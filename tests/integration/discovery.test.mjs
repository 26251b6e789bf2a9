// Upstream discovery from DNS (README "Discovering upstreams"), against a real DNS
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

const endpoints = async (admin) =>
  (await admin('GET', '/admin/v1/deployments')).json.models[0].deployments.filter((d) => d.source === 'dns');
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
    assert.ok(eps.every((d) => d.dns === 'pool.test' && d.node === d.address && d.throttle === 1));
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
    held.release();
    assert.equal((await collectData(events)).at(-1), '[DONE]', 'the stream on the removed endpoint finished');
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
