// How long a key change made through one replica takes to reach another (issue 12):
// two tahua replicas sharing one Redis (store.type: redis, default resync), the admin API
// of replica A creates a key and revokes it; replica B is polled (a request every
// POLL_MS) until it accepts the new key, then until it refuses the revoked one.
//
//   TAHUA_BIN=build/tahua node bench/revocation.mjs [ROUNDS]     (default 20)
//
// Prints per round the two delays and then p50 / p90 / max. Run on demand, not in CI;
// results in docs/benchmarks.md ("Tenants and limits").
import { startMockUpstream } from '../tests/integration/lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from '../tests/integration/lib/tahua.mjs';
import { adminSection, startWithAdmin } from '../tests/integration/lib/admin.mjs';
import { startRedis } from '../tests/integration/lib/redis.mjs';
import { post, chatBody } from '../tests/integration/lib/http.mjs';

const ROUNDS = Number(process.argv[2] ?? 20);
const POLL_MS = 1;
const MODEL = 'gpt-test';

// A stand-in for node:test's `t`: collects the cleanups and runs them at the end.
const cleanups = [];
const t = { after: (fn) => cleanups.push(fn) };

const upstream = await startMockUpstream({ t });
const redis = await startRedis({ t });
const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
config.access_log = { enabled: false };
config.tenants = [{ name: 'team' }];
config.admin = adminSection();
config.store = { type: 'redis', redis: { url: redis.url } };
const a = await startWithAdmin(t, config);
const b = await startWithAdmin(t, config);

const status = async (gw, key) =>
  (await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: { authorization: `Bearer ${key}` } })).status;
async function until(fn) {
  const start = process.hrtime.bigint();
  for (;;) {
    if (await fn()) return Number(process.hrtime.bigint() - start) / 1e6;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

const created = [];
const revoked = [];
for (let i = 0; i < ROUNDS; i += 1) {
  const name = `k${i}`;
  const made = await a.admin('POST', '/admin/v1/keys', { json: { name, tenant: 'team' } });
  if (made.status !== 201) throw new Error(`create: ${made.status} ${made.text}`);
  created.push(await until(async () => (await status(b.gw, made.json.key)) === 200));
  const gone = await a.admin('DELETE', `/admin/v1/keys/${name}`);
  if (gone.status !== 200) throw new Error(`revoke: ${gone.status}`);
  revoked.push(await until(async () => (await status(b.gw, made.json.key)) === 401));
  console.log(`round ${i + 1}: accepted by the other replica after ${created.at(-1).toFixed(2)} ms, refused after ${revoked.at(-1).toFixed(2)} ms`);
}
const pct = (xs, p) => [...xs].sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
for (const [what, xs] of [['created -> accepted', created], ['revoked -> refused', revoked]])
  console.log(`${what}: p50 ${pct(xs, 50).toFixed(2)} ms, p90 ${pct(xs, 90).toFixed(2)} ms, max ${Math.max(...xs).toFixed(2)} ms (${xs.length} rounds, polled every ${POLL_MS} ms)`);
for (const fn of cleanups.reverse()) await fn();
process.exit(0);
