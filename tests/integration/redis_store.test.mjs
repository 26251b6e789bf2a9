// The Redis state store (store.type: redis) with a real redis-server: three replicas
// enforce one global limit, token limits calibrate from streamed usage, a key revoked
// through one replica is refused by the others, Redis stopped mid-run turns limiting
// local (never unlimited, never a hang) and shared again when it returns, and a server
// that would lose or evict state is refused at start.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { chatBody, collectData, openStream, post } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startRedis, startSentinel } from './lib/redis.mjs';
import { startRespRelay } from './lib/resp_relay.mjs';
import { eventually } from './lib/util.mjs';

const MODEL = 'gpt-test';
const KEY = 'tk-shared-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });

function config(upstream, redis, { limits = {}, admin = false, rateLimits } = {}) {
  const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  c.access_log = { enabled: false };
  c.tenants = [{ name: 'team', limits }];
  c.keys = [{ name: 'shared', tenant: 'team', sha256: sha256(KEY) }];
  c.store = { type: 'redis', redis: { url: redis.url, command_timeout: '200ms', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } };
  if (admin) c.admin = adminSection();
  if (rateLimits) c.rate_limits = rateLimits;
  return c;
}

async function replicas(t, n, upstream, redis, options) {
  const out = [];
  for (let i = 0; i < n; i += 1) {
    if (options?.admin) out.push((await startWithAdmin(t, config(upstream, redis, options))));
    else out.push({ gw: await startTahua({ t, config: config(upstream, redis, options) }) });
  }
  // Every replica has announced itself: local limits would divide by n.
  await eventually(async () => {
    for (const { gw } of out) if (sum(await scrape(gw.url), 'tahua_store_replicas') !== n) return false;
    return true;
  }, { timeout: 5000, what: `${n} replicas seen alive` });
  return out;
}

describe('redis store', () => {
  it('three replicas sharing one Redis enforce one global limit of 300 requests per minute', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const gws = (await replicas(t, 3, upstream, redis, { limits: { requests_per_minute: 300 } })).map((r) => r.gw);
    // 360 requests, 120 per replica, 12 at a time on each: the limit is the cluster's.
    const statuses = [];
    await Promise.all(gws.map(async (gw) => {
      for (let batch = 0; batch < 10; batch += 1) {
        const rs = await Promise.all(Array.from({ length: 12 }, () => post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })));
        statuses.push(...rs.map((r) => r.status));
      }
    }));
    const ok = statuses.filter((s) => s === 200).length;
    assert.ok(Math.abs(ok - 300) <= 6, `admitted ${ok} of 360 (limit 300, ±2%)`);
    assert.equal(statuses.filter((s) => s === 429).length, 360 - ok);
    assert.equal(upstream.requests.length, ok);
    for (const gw of gws) assert.equal(sum(await scrape(gw.url), 'tahua_store_local_decisions_total'), 0, 'every decision was shared');
  });

  it('a large limit is admitted from leases: far fewer round trips, never over the limit', async (t) => {
    // One window: a run across a minute boundary would see the next window's allowance.
    // A run that crossed one (a slow build on a busy machine) is done again from the
    // start of a minute, against a fresh Redis and replicas; a second crossing fails.
    let run;
    for (let attempt = 0; ; attempt += 1) {
      const intoMinute = Date.now() % 60000;
      if (attempt > 0 || intoMinute > 45000) await new Promise((resolve) => setTimeout(resolve, 60000 - intoMinute + 200));
      const minute = Math.floor(Date.now() / 60000);
      const upstream = await startMockUpstream({ t });
      const redis = await startRedis({ t });
      // 4,096 a minute over 2 replicas of 1 worker: leases of 4096 / (64 x 2 x 1) = 32.
      const gws = (await replicas(t, 2, upstream, redis, { limits: { requests_per_minute: 4096 } })).map((r) => r.gw);
      const statuses = [];
      await Promise.all(gws.flatMap((gw) => Array.from({ length: 16 }, async () => {
        for (let i = 0; i < 138; i += 1) statuses.push((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status);
      })));
      run = { redis, gws, statuses };
      if (Math.floor(Date.now() / 60000) === minute) break;
      assert.equal(attempt, 0, 'the run crossed a minute boundary twice');
      t.diagnostic('the run crossed a minute boundary: again from the start of the next minute');
    }
    const { redis, gws, statuses } = run;
    const ok = statuses.filter((s) => s === 200).length;
    assert.equal(statuses.length, 4416);
    assert.ok(ok <= 4096, `admitted ${ok}: never more than the limit`);
    assert.ok(ok >= 4096 - 2 * 32, `admitted ${ok}: at most one lease per replica left unused`);
    const charged = Number(redis.cli('GET', 'tahua:{t:team}:tenant:rpm').split(' ')[2]);
    assert.ok(charged >= ok && charged <= 4096, `Redis counted ${charged} (admitted ${ok} plus what leases hold)`);
    let leased = 0;
    for (const gw of gws) leased += sum(await scrape(gw.url), 'tahua_store_lease_admissions_total');
    assert.ok(leased >= ok * 0.8, `${leased} of ${ok} admitted from leases`);
    const calls = Number(/cmdstat_evalsha:calls=(\d+)/.exec(redis.cli('INFO', 'commandstats'))[1]);
    assert.ok(calls < ok / 4 + (4416 - ok) + 50, `${calls} admission scripts for ${statuses.length} requests`);
  });

  it('leases in use are renewed ahead of their end: at a steady rate no request waits for Redis', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    // A daily quota (its lease is extendable all day; a window's lease ends with its window).
    const [{ gw }] = await replicas(t, 1, upstream, redis, { limits: { tokens_per_day: 1000000000 } });
    const day = () => Math.floor(Date.now() / 86400000);
    const firstDay = day();
    // 2.6 s of requests one after the other, 25 ms apart: leases last 1 s, so without
    // renewal ahead of time at least two requests would find theirs ended and wait.
    const until = Date.now() + 2600;
    let sent = 0;
    while (Date.now() < until) {
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status, 200);
      sent += 1;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    const m = await scrape(gw.url);
    const decisions = sum(m, 'tahua_rate_limit_decisions_total', { store: 'redis' });
    const leased = sum(m, 'tahua_store_lease_admissions_total');
    assert.equal(decisions, sent);
    assert.ok(sum(m, 'tahua_store_lease_renewals_total') >= 2, 'renewed at least once a second');
    // The first request asks Redis; the others are admitted from leases (one more wait
    // if the run crossed midnight UTC, where a day's quota lease ends).
    assert.ok(decisions - leased <= 1 + (day() - firstDay), `${decisions - leased} of ${sent} requests waited for Redis`);
  });

  it('a burst that finds no lease asks Redis once: the others wait for that grant and are admitted from it', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const relay = await startRespRelay(redis.port, { t });
    const c = config(upstream, relay, { limits: { requests_per_minute: 100000 } });
    c.store.redis.command_timeout = '3s';  // the held grant must not time out
    const gw = await startTahua({ t, config: c });
    const isAdmission = (sha) => sha === relay.shaOf((text) => text.includes('local want = charge and tonumber(ARGV[base + 6])'));
    const charging = (args) => args[0].toUpperCase() === 'EVALSHA' && isAdmission(args[1]) && args[3 + Number(args[2])] !== '0';
    // The first admission (it asks for a lease) reaches Redis a second late: the burst's
    // other requests come meanwhile (a sanitizer build on a busy machine included). Then every charging admission is counted on its way
    // to Redis, the held one included (it passes the relay again when released).
    let admissions = 0;
    relay.delayNext(charging, 1000);
    const counting = setInterval(() => {
      if (relay.delays !== 1) return;
      clearInterval(counting);
      relay.cutAfter((args) => {
        if (charging(args)) admissions += 1;
        return false;
      });
    }, 5);
    t.after(() => clearInterval(counting));
    const rs = await Promise.all(Array.from({ length: 20 }, () => post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })));
    assert.deepEqual(rs.map((r) => r.status), Array(20).fill(200));
    assert.equal(relay.delays, 1, 'the first grant was held');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_store_lease_waits_total'), 19, 'the other 19 waited for it');
    assert.equal(sum(m, 'tahua_store_local_decisions_total'), 0, 'every decision was shared');
    assert.equal(admissions, 1, `${admissions} charging admissions reached Redis for 20 requests`);
    // What Redis counted: the first request and the lease the others were admitted from.
    const counted = Number(redis.cli('GET', 'tahua:{t:team}:tenant:rpm').split(' ')[2]);
    assert.ok(counted >= 20, `Redis counted ${counted}`);
  });

  // An admission script Redis ran whose answer never came back (the connection failed on
  // the way): what it charged is undone, so the quota moves by exactly what was billed.
  // Before, a lost renewal left its whole lease charged as use (one lease chunk, what the
  // accounting soak caught across a Redis restart), and a lost grant that and the request
  // charged twice. The relay runs the picked command and cuts the connection before its
  // answer: the fault every time, not by chance.
  for (const [what, picked] of [
    ['a lease renewal', (costs, wants) => costs.every((c) => c === 0) && wants.some((w) => w > 0)],
    ['a request\'s admission with its lease', (costs, wants) => costs.some((c) => c > 0) && wants.some((w) => w > 0)],
  ]) {
    it(`${what} whose answer is lost is undone in Redis: the quota moves by what was billed`, async (t) => {
      const upstream = await startMockUpstream({ t });
      const redis = await startRedis({ t });
      const relay = await startRespRelay(redis.port, { t });
      const [{ gw }] = await replicas(t, 1, upstream, relay, { limits: { tokens_per_day: 10000000 } });
      const isAdmission = (sha) => sha === relay.shaOf((text) => text.includes('local want = charge and tonumber(ARGV[base + 6])'));
      relay.cutAfter((args) => {
        if (args[0].toUpperCase() !== 'EVALSHA' || !isAdmission(args[1])) return false;
        const argv = args.slice(3 + Number(args[2]));
        if (argv[0] !== '2') return false;  // charging, with a marker
        const costs = [], wants = [];
        for (let i = 1; i + 5 < argv.length; i += 6) {
          costs.push(Number(argv[i + 4]));
          wants.push(Number(argv[i + 5]));
        }
        return picked(costs, wants);
      });
      let billed = 0;
      for (let i = 0; i < 400 && (relay.cuts === 0 || i < 60); i += 1) {
        const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) });
        assert.equal(r.status, 200);
        billed += r.json.usage.total_tokens;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(relay.cuts, 1, `${what} was sent and its answer lost`);
      await eventually(async () => {
        const m = await scrape(gw.url);
        return sum(m, 'tahua_store_admissions_undone_total') >= 1 && sum(m, 'tahua_store_adjustments_pending') === 0;
      }, { timeout: 5000, what: 'the undo delivered' });
      assert.equal(await gw.stop(), 0);
      const used = Number(redis.cli('GET', 'tahua:{t:team}:tenant:tpd').split(' ')[1]);
      assert.equal(used, billed, `the quota moved by ${used}, the answers billed ${billed}`);
    });
  }

  it('a stopping replica returns what its leases hold and sends its calibrations', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    // 10M tokens a day, one replica of one worker: a lease of 10M / 64 = 156,250 tokens.
    const [{ gw }] = await replicas(t, 1, upstream, redis, { limits: { tokens_per_day: 10000000 } });
    const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) });
    assert.equal(r.status, 200);
    const used = () => Number(redis.cli('GET', 'tahua:{t:team}:tenant:tpd').split(' ')[1]);
    assert.ok(used() > 150000, `the lease is charged in Redis: ${used()}`);
    assert.equal(await gw.stop(), 0);
    assert.equal(used(), r.json.usage.total_tokens, 'after the stop, Redis holds exactly the request\'s real usage');
  });

  it('calibrations Redis did not answer in time are sent again as the replica stops, not lost with it', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const [{ gw }] = await replicas(t, 1, upstream, redis, { limits: { tokens_per_day: 10000000 } });
    // Redis takes no write for 1.5 s: the admission times out (200 ms) and is decided
    // locally; what it charged and the undo of what Redis may have charged wait in the
    // replica, which is stopped at once (before, they were lost: the quota moved 0).
    redis.cli('CLIENT', 'PAUSE', 1500, 'WRITE');
    const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) });
    assert.equal(r.status, 200);
    assert.equal(await gw.stop(), 0);
    const used = Number(redis.cli('GET', 'tahua:{t:team}:tenant:tpd').split(' ')[1] ?? 0);
    assert.equal(used, r.json.usage.total_tokens, `the quota holds the request's usage: ${gw.output()}`);
    assert.ok(!gw.stderr.json().some((l) => /not delivered before exit/.test(l.msg)), gw.output());
  });

  it('calibrates the shared token bucket from a stream\'s real usage', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const [{ gw: a }, { gw: b }] = await replicas(t, 2, upstream, redis, { limits: { tokens_per_minute: 100000 } });
    const body = chatBody(MODEL, { stream: true, max_tokens: 30000 });
    const { res, events } = await openStream(a.url, body, { headers: bearer(KEY) });
    const first = Number(res.headers.get('x-ratelimit-remaining-tokens'));
    assert.ok(first <= 100000 - 30000);
    assert.equal((await collectData(events)).at(-1), '[DONE]');
    // The other replica sees the refund: the bucket is Redis's, not a replica's.
    await eventually(async () => {
      const r = await post(b.url, '/v1/chat/completions', chatBody(MODEL, { max_tokens: 10 }), { headers: bearer(KEY) });
      return Number(r.headers['x-ratelimit-remaining-tokens']) > first + 29000;
    }, { what: 'the refund seen through the other replica' });
    // A counter is one string "a b c t"; a bucket's tokens are t.
    const tokens = Number(redis.cli('GET', 'tahua:{t:team}:tenant:tpm').split(' ')[3]);
    assert.ok(tokens > 99000, `the bucket in Redis holds ${tokens}`);
  });

  it('a key created and revoked through one replica works, then is refused, on the others', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const [one, two] = await replicas(t, 2, upstream, redis, { admin: true });
    const created = await one.admin('POST', '/admin/v1/keys', { json: { name: 'roaming', tenant: 'team' } });
    assert.equal(created.status, 201, created.text);
    const secret = created.json.key;
    await eventually(async () => (await post(two.gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(secret) })).status === 200,
      { what: 'the new key accepted by the other replica' });
    assert.equal((await one.admin('DELETE', '/admin/v1/keys/roaming')).status, 200);
    await eventually(async () => (await post(two.gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(secret) })).status === 401,
      { what: 'the revoked key refused by the other replica' });
    assert.equal(redis.cli('HEXISTS', 'tahua:records:keys', 'roaming'), '0');
  });

  it('mirrors a records hash larger than one HSCAN page', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const [one] = await replicas(t, 1, upstream, redis, { admin: true });
    const fields = [];
    for (let i = 0; i < 2500; i += 1) fields.push(`bulk${i}`, JSON.stringify({ name: `bulk${i}` }));
    redis.cli('HSET', 'tahua:records:tenants', ...fields);
    redis.cli('PUBLISH', 'tahua:changes', 'tenants');
    await eventually(async () => (await one.admin('GET', '/admin/v1/tenants')).json.tenants.length === 2501,
      { what: 'all 2,500 stored tenants (three pages) and the file\'s one' });
  });

  it('Redis stopped mid-run: limits turn local (the limit divided by the replicas), nothing hangs; back when it returns', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const [{ gw: a }, { gw: b }] = await replicas(t, 2, upstream, redis, { limits: { requests_per_minute: 10 } });
    assert.equal((await post(a.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status, 200);
    await redis.stop();
    // The first request after the outage finds out (refused connection or timeout).
    const during = [];
    for (let i = 0; i < 8; i += 1) during.push((await post(a.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status);
    // Replica a alone may admit its half of the limit: 5, never the whole 10 (or more).
    assert.deepEqual(during, [200, 200, 200, 200, 200, 429, 429, 429]);
    await a.stderr.waitUntil(() => a.stderr.json().find((l) => l.msg?.startsWith('redis store unavailable')), 3000, 'the fallback log line');
    await eventually(async () => sum(await scrape(a.url), 'tahua_store_up') === 0, { what: 'tahua_store_up 0' });
    assert.ok(sum(await scrape(a.url), 'tahua_store_local_decisions_total') >= 8);
    const unavailable = a.stderr.json().filter((l) => l.msg?.startsWith('redis store unavailable'));
    assert.equal(unavailable.length, 1, 'logged once per change of state');

    await redis.start();
    await eventually(async () => sum(await scrape(a.url), 'tahua_store_up') === 1 && sum(await scrape(b.url), 'tahua_store_up') === 1,
      { timeout: 5000, what: 'both replicas back on Redis' });
    // Shared again: b's requests count in Redis, where a's decisions go too.
    const before = sum(await scrape(b.url), 'tahua_store_local_decisions_total');
    assert.equal((await post(b.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status, 200);
    assert.equal(sum(await scrape(b.url), 'tahua_store_local_decisions_total'), before);
    assert.equal(redis.cli('EXISTS', 'tahua:{t:team}:tenant:rpm'), '1');
  });

  it('refuses a Redis that evicts or persists nothing, naming the setting', async (t) => {
    const upstream = await startMockUpstream({ t });
    for (const [args, pattern] of [
      [['--maxmemory-policy', 'allkeys-lru'], /maxmemory-policy allkeys-lru/],
      [['--appendonly', 'no'], /persists nothing/],
    ]) {
      const redis = await startRedis({ t, args });
      const gw = await startTahua({ t, config: config(upstream, redis) }).catch((e) => e);
      assert.ok(gw instanceof Error, 'tahua did not start');
      assert.match(gw.message, pattern);
    }
  });
});

describe('redis store with Sentinel', () => {
  it('follows a failover: the master named by the sentinel, local limits meanwhile, shared again after', async (t) => {
    const upstream = await startMockUpstream({ t });
    // No 5 s wait before a full sync (Redis 7's repl-diskless-sync-delay).
    const master = await startRedis({ t, args: ['--repl-diskless-sync-delay', '0'] });
    const replica = await startRedis({ t, args: ['--replicaof', '127.0.0.1', String(master.port)] });
    await eventually(() => replica.cli('info', 'replication').includes('master_link_status:up'), { timeout: 5000, what: 'the replica in sync' });
    const sentinel = await startSentinel({ t, masterPort: master.port });
    const c = config(upstream, master, { limits: { tokens_per_day: 1000000000 } });
    c.store.redis.url = 'redis://ignored-with-sentinel:1';
    c.store.redis.sentinel = { addresses: [`127.0.0.1:${sentinel.port}`], master: 'mymaster' };
    const gw = await startTahua({ t, config: c });
    const used = (redis) => Number(redis.cli('GET', 'tahua:{t:team}:tenant:tpd').split(' ')[1] || 0);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) })).status, 200);
    assert.ok(used(master) > 0, 'counted on the master');

    await master.stop();
    await eventually(() => sentinel.master()[1] === String(replica.port), { timeout: 15000, interval: 100, what: 'the sentinel promoting the replica' });
    const before = used(replica);
    // Requests go on throughout (locally while the master is gone), then count on the new master.
    await eventually(async () => {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY) });
      assert.equal(r.status, 200);
      return sum(await scrape(gw.url), 'tahua_store_up') === 1 && used(replica) > before;
    }, { timeout: 10000, interval: 100, what: 'shared limiting on the promoted replica' });
    await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => l.msg === 'redis master (from sentinel)' && l.address.endsWith(`:${replica.port}`)), 3000, 'the new master logged');
  });
});
