// Two regions on loopback (docs/regions.md), the long version of
// tests/integration/regions.test.mjs: each region a Redis and one tahua, linked through
// TCP relays. Measures, with the link's default interval (or INTERVAL):
//   1. how long a key revoked in one region stays usable in the other (TRIALS times);
//   2. a partition of PARTITION_S seconds under steady load (RATE requests/s per region,
//      a monthly token budget of BUDGET): how far over the budget the two regions go, and
//      how long after healing they agree on the use.
//
//   INTERVAL=500ms TRIALS=20 PARTITION_S=30 RATE=20 BUDGET=20000 node bench/regions.mjs
import { createHash } from 'node:crypto';
import { startMockUpstream } from '../tests/integration/lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from '../tests/integration/lib/tahua.mjs';
import { chatBody, post } from '../tests/integration/lib/http.mjs';
import { adminSection, startWithAdmin } from '../tests/integration/lib/admin.mjs';
import { startRedis } from '../tests/integration/lib/redis.mjs';
import { startRelay } from '../tests/integration/lib/tcp_relay.mjs';

const INTERVAL = process.env.INTERVAL ?? '500ms';
const TRIALS = Number(process.env.TRIALS ?? 20);
const PARTITION_S = Number(process.env.PARTITION_S ?? 30);
const RATE = Number(process.env.RATE ?? 20);
const BUDGET = Number(process.env.BUDGET ?? 20000);
const MODEL = 'gpt-test';
const COUNTER = 'tahua:{t:acme}:tenant:tpmo';
const cleanup = [];
const ctx = { after: (fn) => cleanup.push(fn) };

const upstream = await startMockUpstream({ t: ctx });
const redis = { eu: await startRedis({ t: ctx }), us: await startRedis({ t: ctx }) };
const relay = { toUs: await startRelay(redis.us.port, { t: ctx }), toEu: await startRelay(redis.eu.port, { t: ctx }) };
function config(name, peer, peerPort) {
  const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  c.access_log = { enabled: false };
  c.tenants = [{ name: 'acme', limits: { tokens_per_month: BUDGET } }, { name: 'free' }];  // free: the revocation trials
  c.admin = adminSection();
  c.store = { type: 'redis', redis: { url: redis[name].url } };
  c.rate_limits = { default_max_tokens: 8 };
  c.region = { name, peers: [{ name: peer, url: `redis://127.0.0.1:${peerPort}` }], interval: INTERVAL };
  return c;
}
const eu = await startWithAdmin(ctx, config('eu', 'us', relay.toUs.port));
const us = await startWithAdmin(ctx, config('us', 'eu', relay.toEu.port));
const ask = (gw, key) => post(gw.url, '/v1/chat/completions', chatBody(MODEL, { max_tokens: 8 }), { headers: { authorization: `Bearer ${key}` } });
const used = (name) => Number((redis[name].cli('GET', COUNTER) || '0 0').split(' ')[1]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(fn, limitMs = 60_000) {
  const t0 = Date.now();
  while (!(await fn())) {
    if (Date.now() - t0 > limitMs) throw new Error('timed out');
    await sleep(5);
  }
  return Date.now() - t0;
}
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `min ${s[0]} / median ${s[Math.floor(s.length / 2)]} / max ${s.at(-1)} ms`;
};

// 1. Revocation.
const revocation = [];
for (let i = 0; i < TRIALS; i++) {
  const created = await eu.admin('POST', '/admin/v1/keys', { json: { name: `r${i}`, tenant: 'free' } });
  const key = created.json.key;
  await waitFor(async () => (await ask(us.gw, key)).status === 200, 10_000).catch(async (e) => {
    throw new Error(`trial ${i}: ${created.status} ${created.text}; us answers ${(await ask(us.gw, key)).text}`);
  });
  await eu.admin('DELETE', `/admin/v1/keys/r${i}`);
  revocation.push(await waitFor(async () => (await ask(us.gw, key)).status === 401));
}
console.log(`interval ${INTERVAL}: a key revoked in eu stays usable in us for ${stats(revocation)} (${TRIALS} trials)`);

// 2. A partition under load.
const key = (await eu.admin('POST', '/admin/v1/keys', { json: { name: 'load', tenant: 'acme' } })).json.key;
await waitFor(async () => (await ask(us.gw, key)).status === 200);
let running = true;
const counts = { eu: { ok: 0, refused: 0 }, us: { ok: 0, refused: 0 } };
const load = async (name, gw) => {
  while (running) {
    const t0 = Date.now();
    const r = await ask(gw, key);
    counts[name][r.status === 200 ? 'ok' : 'refused'] += 1;
    await sleep(Math.max(0, 1000 / RATE - (Date.now() - t0)));
  }
};
const loads = [load('eu', eu.gw), load('us', us.gw)];
await sleep(2000);
const atCut = used('eu');
relay.toUs.cut();
relay.toEu.cut();
await sleep(PARTITION_S * 1000);
const [aloneEu, aloneUs] = [used('eu'), used('us')];
running = false;
await Promise.all(loads);
relay.toUs.restore();
relay.toEu.restore();
const t0 = Date.now();
await waitFor(async () => used('eu') === used('us') && used('eu') >= Math.max(aloneEu, aloneUs));
const converged = Date.now() - t0;
const total = used('eu');
console.log(`partition ${PARTITION_S} s at ${RATE} req/s per region, budget ${BUDGET} tokens: ${atCut} used at the cut; ` +
  `alone eu ${aloneEu}, us ${aloneUs}; ${total} after healing = ${total > BUDGET ? `${total - BUDGET} over (${((total - BUDGET) / BUDGET * 100).toFixed(1)}%)` : 'within the budget'}; ` +
  `converged ${converged} ms after healing; requests eu ${JSON.stringify(counts.eu)}, us ${JSON.stringify(counts.us)}`);
for (const fn of cleanup.reverse()) await fn();
process.exit(0);
