// Usage records for billing: exactly one per finished request (401s excepted), to a
// JSON-lines file, a Redis stream and a webhook, valid against
// docs/usage-record.schema.json; tokens equal to what the tenant's quota moved;
// spilled while a sink is down and replayed when it is back; flushed on SIGTERM.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import net from 'node:net';
import { readFileSync, existsSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Ajv from 'ajv';
import { startMockUpstream, MOCK_PROMPT_TOKENS, DEFAULT_PIECES } from './lib/mock_upstream.mjs';
import { startCollector } from './lib/collector.mjs';
import { startRedis } from './lib/redis.mjs';
import { gatewayConfig, openaiProvider, REPO_ROOT } from './lib/tahua.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { chatBody, collectData, expectFinalErrorEvent, openStream, post, request, send, sseEvents } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

const MODEL = 'gpt-test';
const KEY_A = 'tk-usage-a-0123456789abcdef';
const KEY_B = 'tk-usage-b-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });

const schema = JSON.parse(readFileSync(join(REPO_ROOT, 'docs', 'usage-record.schema.json'), 'utf8'));
const ajv = new Ajv({ allErrors: true });
ajv.addFormat('date-time', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
const validate = ajv.compile(schema);
function assertValid(record) {
  assert.ok(validate(record), `${JSON.stringify(record)}: ${ajv.errorsText(validate.errors)}`);
}

const readLines = (file) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
function streamRecords(redis, key = 'tahua:usage') {
  const out = redis.cli('--no-raw', 'XRANGE', key, '-', '+');
  // redis-cli --no-raw prints quoted strings; the record is the value after "record".
  const records = [];
  const lines = out.split('\n');
  for (let i = 0; i < lines.length; i++)
    if (/"record"$/.test(lines[i].trim())) records.push(JSON.parse(JSON.parse(lines[i + 1].trim().replace(/^\d+\)\s*/, ''))));
  return records;
}

async function start(t, { sinks, usage = {}, redis, hook, extra = {} } = {}) {
  const upstream = await startMockUpstream({ t });
  const dir = makeTempDir('tahua-usage-');
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [{ name: MODEL, provider: 'up', pricing: { input: 1, output: 2 } }, { name: 'gpt-other', provider: 'up' }],
  });
  config.tenants = [
    { name: 'team-a', limits: { tokens_per_day: 1000000000, requests_per_minute: 1000 } },
    { name: 'team-b', models: [MODEL], limits: { requests_per_minute: 2 } },
  ];
  config.keys = [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A), prefix: 'tk-usage-a' },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
  ];
  config.admin = adminSection();
  config.usage = {
    spill_dir: join(dir, 'spill'),
    retry_backoff: '50ms',
    gateway_id: 'replica-1',
    sinks: sinks ?? [
      { name: 'file', type: 'file', path: join(dir, 'usage.jsonl') },
      ...(redis ? [{ name: 'redis', type: 'redis_stream', url: redis.url, timeout: '300ms' }] : []),
      ...(hook ? [{ name: 'hook', type: 'webhook', url: `${hook.url}/hook`, batch: 3, timeout: '1s' }] : []),
    ],
    ...usage,
  };
  Object.assign(config, extra);
  const { gw, admin } = await startWithAdmin(t, config);
  return { gw, admin, upstream, dir, file: join(dir, 'usage.jsonl'), spill: join(dir, 'spill') };
}

describe('usage records', () => {
  it('one valid record per request to a file, a Redis stream and a webhook; tokens equal the quota moved', async (t) => {
    const redis = await startRedis({ t });
    const hook = await startCollector({ t });
    const { gw, admin, upstream, file } = await start(t, { redis, hook });
    const url = gw.url;
    let sent = 0;
    const expect = async (p, status) => {
      const r = await p;
      sent += 1;
      assert.equal(r.status, status);
      return r;
    };
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) }), 200);
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) }), 200);
    await expect(post(url, '/v1/chat/completions', chatBody('gpt-other'), { headers: bearer(KEY_B) }), 403);
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) }), 200);
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) }), 200);
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) }), 429);
    // 401s have no tenant: no record. Nor the routing's own refusals (an unknown URL, a
    // wrong method), with or without a key: they called nothing (each had a record before).
    assert.equal((await post(url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer('tk-nobody') })).status, 401);
    assert.equal((await post(url, '/v1/nothing-here', chatBody(MODEL))).status, 404);
    assert.equal((await request(url, '/v1/chat/completions', { headers: bearer(KEY_A) })).status, 405);
    // An idempotent retry: replayed, nothing billed.
    const idem = { ...bearer(KEY_A), 'idempotency-key': 'usage-idem-1' };
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: idem }), 200);
    await expect(post(url, '/v1/chat/completions', chatBody(MODEL), { headers: idem }), 200);
    // A stream the client cuts after the first event, and one the upstream resets.
    const held = upstream.next({ mode: 'hold', holdAt: 2 });
    const abort = new AbortController();
    const cut = await openStream(url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A), signal: abort.signal });
    assert.ok(cut.first);
    for (let i = 0; i < 2; i++) assert.equal((await cut.events.next()).done, false);  // "Hello", " from" received
    abort.abort();
    await held.clientClosed;
    sent += 1;
    const reset = upstream.next({ mode: 'hold' });
    const broken = await openStream(url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    reset.reset();
    for await (const _ of broken.events) { /* to the end: the error event */ }
    sent += 1;
    // And one it resets after the answer's head, before any event: the client has a 200
    // and the error event, nothing of an answer; nothing billed (the quota kept the
    // whole reservation before).
    const headOnly = upstream.next({ mode: 'hold', holdAt: -1 });
    const bare = await send(url, '/v1/chat/completions', { method: 'POST', json: chatBody(MODEL, { stream: true }), headers: bearer(KEY_A) });
    assert.equal(bare.status, 200);
    headOnly.reset();
    const bareData = await collectData(sseEvents(bare));
    assert.equal(expectFinalErrorEvent(bareData, ['upstream_stream_interrupted']).type, 'upstream_error');
    assert.equal(bareData.length, 1, 'nothing but the error event');
    sent += 1;

    const records = await eventually(() => {
      const r = readLines(file);
      return r.length >= sent && r;
    }, { what: `${sent} records in the file`, timeout: 5000 });
    assert.equal(records.length, sent, 'exactly one record per request, none for the 401');
    for (const r of records) assertValid(r);
    assert.equal(new Set(records.map((r) => r.record_id)).size, sent, 'distinct record ids');
    const byStatus = (s) => records.filter((r) => r.status === s);
    assert.equal(byStatus(403).length, 1);
    assert.equal(byStatus(403)[0].end_reason, 'refused');
    assert.equal(byStatus(429).length, 1);
    assert.equal(byStatus(429)[0].error, 'rate_limit_exceeded');
    assert.equal(byStatus(429)[0].tenant, 'team-b');
    assert.equal(byStatus(429)[0].total_tokens, 0);
    const replayed = records.filter((r) => r.replayed);
    assert.equal(replayed.length, 1);
    assert.equal(replayed[0].total_tokens, 0, 'a replay bills nothing');
    const full = records.find((r) => r.status === 200 && !r.stream && !r.replayed && r.tenant === 'team-a');
    assert.equal(full.prompt_tokens, MOCK_PROMPT_TOKENS);
    assert.equal(full.completion_tokens, DEFAULT_PIECES.length);
    assert.equal(full.usage_source, 'upstream');
    assert.equal(full.key, 'a-main');
    assert.equal(full.key_prefix, 'tk-usage-a');
    assert.equal(full.provider, 'up');
    assert.equal(full.gateway, 'replica-1');
    assert.equal(full.cost_usd, (MOCK_PROMPT_TOKENS * 1 + DEFAULT_PIECES.length * 2) / 1e6);
    const gone = byStatus(499);
    assert.equal(gone.length, 1, 'the cut stream');
    assert.equal(gone[0].end_reason, 'client_gone');
    assert.equal(gone[0].usage_source, 'estimate');
    assert.ok(gone[0].completion_tokens >= 1 && gone[0].completion_tokens < DEFAULT_PIECES.length, 'what was delivered');
    const failed = records.find((r) => r.end_reason === 'upstream_error');
    assert.ok(failed, 'the reset stream');
    assert.equal(failed.usage_source, 'estimate');
    const bareRecord = records.find((r) => r.end_reason === 'upstream_error' && r.usage_source === 'none');
    assert.ok(bareRecord, 'the stream reset after its head');
    assert.equal(bareRecord.status, 200);
    assert.equal(bareRecord.total_tokens, 0);

    // The tenant's token quota moved by exactly what its records say.
    const billed = records.filter((r) => r.tenant === 'team-a').reduce((a, r) => a + r.total_tokens, 0);
    const tenant = await admin('GET', '/admin/v1/tenants/team-a');
    const quota = tenant.json.usage.find((u) => u.limit === 'tokens_per_day');
    assert.equal(quota.used, billed, 'record tokens = quota movement');

    // The same records, once each, in the Redis stream and through the webhook.
    const inRedis = await eventually(() => {
      const r = streamRecords(redis);
      return r.length >= sent && r;
    }, { what: 'records in the Redis stream', timeout: 5000 });
    assert.deepEqual(inRedis.map((r) => r.record_id).sort(), records.map((r) => r.record_id).sort());
    const hooked = await hook.waitFor((c) => c.records().length >= sent && c.records(), 'records through the webhook');
    assert.deepEqual(hooked.map((r) => r.record_id).sort(), records.map((r) => r.record_id).sort());
    assert.ok(hook.requests.every((r) => r.path === '/hook'));

    const m = await scrape(url);
    assert.equal(sum(m, 'tahua_usage_records_total'), sent);
    assert.equal(sum(m, 'tahua_usage_sink_delivered_total', { sink: 'redis' }), sent);
    assert.equal(sum(m, 'tahua_usage_sink_up', { sink: 'hook' }), 1);
    assert.equal(sum(m, 'tahua_usage_records_dropped_total'), 0);
  });

  it('spills while Redis is down and replays when it is back; SIGTERM flushes the queue', async (t) => {
    const redis = await startRedis({ t });
    const { gw, spill } = await start(t, { redis });
    const send5 = async () => {
      for (let i = 0; i < 5; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) })).status, 200);
    };
    await send5();
    await eventually(() => streamRecords(redis).length === 5, { what: 'five records in Redis' });
    await redis.stop();
    await send5();
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_sink_up', { sink: 'redis' }) === 0, { what: 'the sink seen down' });
    await eventually(() => existsSync(join(spill, 'redis.spill')) && readFileSync(join(spill, 'redis.spill'), 'utf8').split('\n').filter(Boolean).length === 5,
      { what: 'five records spilled' });
    await redis.start();  // same port and directory: the first five are still there (AOF)
    const all = await eventually(() => {
      const r = streamRecords(redis);
      return r.length >= 10 && r;
    }, { what: 'the spill replayed', timeout: 8000 });
    assert.equal(new Set(all.map((r) => r.record_id)).size, 10);
    const m = await eventually(async () => {
      const s = await scrape(gw.url);
      return sum(s, 'tahua_usage_sink_up', { sink: 'redis' }) === 1 && s;
    }, { what: 'the sink up again' });
    assert.equal(sum(m, 'tahua_usage_spill_bytes', { sink: 'redis' }), 0);
    assert.ok(sum(m, 'tahua_usage_sink_failures_total', { sink: 'redis' }) >= 1);
    // SIGTERM right after requests: every record reaches the sink before exit.
    await send5();
    assert.equal(await gw.stop('SIGTERM'), 0);
    assert.equal(new Set(streamRecords(redis).map((r) => r.record_id)).size, 15);
  });

  it('a hung sink delays only its own records, and what waits for it is bounded: the file has every record while the webhook holds its request', async (t) => {
    // A webhook that takes the connection and the request and never answers: its sink
    // waits out its timeout (30 s). With one thread for every sink, the file got nothing
    // until then. What arrives for it meanwhile waits in its inbox, up to
    // usage.max_queue_records (256 here); past that it goes to its spill (it was dropped
    // before), replayed when the sink catches up.
    const held = new Set();
    const hung = net.createServer((socket) => {
      held.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => held.delete(socket));
    });
    await new Promise((r) => hung.listen(0, '127.0.0.1', r));
    t.after(() => {
      for (const socket of held) socket.destroy();
      if (hung.listening) hung.close();
    });
    const dir = makeTempDir('tahua-usage-hung-');
    const fileRecords = () => readLines(join(dir, 'usage.jsonl'));
    const { gw, spill } = await start(t, {
      usage: { max_queue_records: 256 },
      sinks: [
        { name: 'hook', type: 'webhook', url: `http://127.0.0.1:${hung.address().port}/hook`, timeout: '30s' },
        { name: 'file', type: 'file', path: join(dir, 'usage.jsonl') },
      ],
    });
    const ask = async (n) => {
      let next = 0;
      const one = async () => {
        while (next < n) {
          next += 1;
          assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) })).status, 200);
        }
      };
      await Promise.all(Array.from({ length: 8 }, one));
    };
    await ask(3);
    await eventually(() => held.size > 0, { what: 'the webhook holding a delivery' });
    const got = await eventually(() => fileRecords().length === 3 && fileRecords(), { what: 'the file sink\'s three records' });
    assert.ok(held.size > 0, 'the webhook still holds its delivery');
    got.forEach(assertValid);
    // Two waves more (each below the workers' queue bound, which is the same number): the
    // webhook's inbox holds the first's 200 records, the second finds it full.
    await ask(200);
    await eventually(() => fileRecords().length === 203, { what: 'the file sink\'s 203 records' });
    await ask(200);
    await eventually(() => fileRecords().length === 403, { what: 'the file sink\'s 403 records', timeout: 10000 });
    assert.ok(held.size > 0, 'the webhook still holds its delivery');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_usage_records_dropped_total'), 0, 'nothing dropped');
    assert.ok(sum(m, 'tahua_usage_spill_bytes', { sink: 'hook' }) > 0, 'what its full inbox refused is in its spill');
    assert.equal(sum(m, 'tahua_usage_spill_bytes', { sink: 'file' }), 0);
    assert.ok(gw.stderr.json().some((l) => l.msg.startsWith('usage sink behind') && l.sink === 'hook'), 'said in the log');
    // The webhook goes away (its connection reset, nothing listening): what it held and
    // what waited for it go to its spill too: every record is there.
    const closed = new Promise((r) => hung.close(r));
    for (const socket of held) socket.destroy();
    await closed;
    await eventually(() => readLines(join(spill, 'hook.spill')).length === 403, { what: 'the webhook\'s 403 records spilled' });
    assert.equal(await gw.stop('SIGTERM'), 0);
    const spilled = readLines(join(spill, 'hook.spill'));
    assert.equal(spilled.length, 403);
    assert.equal(new Set(spilled.map((r) => r.record_id)).size, 403, 'each once');
    const ids = new Set(fileRecords().map((r) => r.record_id));
    assert.ok(spilled.every((r) => ids.has(r.record_id)), 'the spilled records are the file\'s');
  });

  it('a sink down at exit keeps its records in the spill file, replayed by the next start', async (t) => {
    const hook = await startCollector({ t });
    hook.failWith(503);
    const first = await start(t, { hook, sinks: undefined });
    for (let i = 0; i < 3; i++) await post(first.gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
    assert.equal(await first.gw.stop('SIGTERM'), 0);
    assert.equal(hook.records().length, 0);
    const spilled = readLines(join(first.spill, 'hook.spill'));
    assert.equal(spilled.length, 3);
    // A new run with the same spill directory delivers them when the webhook answers.
    hook.recover();
    const second = await start(t, { hook, usage: { spill_dir: first.spill } });
    const got = await hook.waitFor((c) => c.records().length >= 3 && c.records(), 'the spilled records replayed', 8000);
    assert.deepEqual(got.map((r) => r.record_id).sort(), spilled.map((r) => r.record_id).sort());
    await eventually(() => readFileSync(join(first.spill, 'hook.spill'), 'utf8') === '', { what: 'the spill emptied' });
    void second;
  });

  it('a spill of 1,500 records replays into the Redis stream whole, each once and in order (XADDs written in several writes of up to 1,024 pieces)', async (t) => {
    const redis = await startRedis({ t });
    const spillDir = join(makeTempDir('tahua-usage-big-'), 'spill');
    mkdirSync(spillDir, { recursive: true });
    // Records as the exporter spills them: a line each, the record_id first. ~1.2 KB each:
    // the replay's 1 MiB chunks hold ~850, so each delivery is over 1,700 pieces.
    const ids = Array.from({ length: 1500 }, (_, i) => `0190c7a2-0000-7000-8000-${String(i).padStart(12, '0')}`);
    const pad = 'x'.repeat(1100);
    writeFileSync(join(spillDir, 'redis.spill'), ids.map((id, i) => JSON.stringify({ record_id: id, request_id: `req-${i}`, note: `${pad}\u0001"${i}"` }) + '\n').join(''));
    const { gw } = await start(t, { redis, sinks: [{ name: 'redis', type: 'redis_stream', url: redis.url, timeout: '2s' }], usage: { spill_dir: spillDir } });
    const got = await eventually(() => {
      const r = streamRecords(redis);
      return r.length >= 1500 && r;
    }, { what: 'the spill replayed', timeout: 15000 });
    assert.equal(got.length, 1500);
    assert.deepEqual(got.map((r) => r.record_id), ids, 'each record once, in the spill\'s order');
    assert.ok(got.every((r, i) => r.request_id === `req-${i}` && r.note === `${pad}\u0001"${i}"`), 'each record whole');
    // The stream entries' record_id field is the record's own.
    const first = redis.cli('--no-raw', 'XRANGE', 'tahua:usage', '-', '+', 'COUNT', '1');
    assert.match(first, new RegExp(`"record_id"\\s*\\n\\s*\\d+\\)\\s*"${ids[0]}"`));
    await eventually(() => readFileSync(join(spillDir, 'redis.spill'), 'utf8') === '', { what: 'the spill emptied' });
    void gw;
  });

  it("the gateway's own fallback answer bills nothing (every upstream failed)", async (t) => {
    const upstream = await startMockUpstream({ t });
    const dir = makeTempDir('tahua-usage-fb-');
    const config = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl())],
      models: [{ name: MODEL, provider: 'up', fallback_on: [500], fallback_response: { message: 'Busy, try later.', status: 200 } }],
    });
    config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ type: 'file', path: join(dir, 'usage.jsonl') }] };
    // Its quota moves as the records say: by nothing (it kept the reservation before).
    config.tenants = [{ name: 'team-a', limits: { tokens_per_day: 1000000 } }];
    config.keys = [{ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) }];
    const { gw, admin } = await startWithAdmin(t, { ...config, admin: adminSection() });
    for (const stream of [false, true]) {
      upstream.next({ mode: 'error', status: 500 });
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream }), { headers: bearer(KEY_A) });
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-tahua-fallback'] !== undefined, true);
    }
    const records = await eventually(() => {
      const l = readLines(join(dir, 'usage.jsonl'));
      return l.length >= 2 && l;
    }, { what: 'two records' });
    for (const r of records) {
      assertValid(r);
      assert.equal(r.fallback, 'response');
      assert.equal(r.total_tokens, 0, JSON.stringify(r));
      assert.equal(r.usage_source, 'none');
    }
    const quota = (await admin('GET', '/admin/v1/tenants/team-a')).json.usage.find((u) => u.limit === 'tokens_per_day');
    assert.equal(quota.used, 0, 'the quota kept no reservation');
  });

  it('reports records an earlier run lost by dying (kill -9) where the state file tells', async (t) => {
    const dir = makeTempDir('tahua-usage-state-');
    mkdirSync(join(dir, 'spill'), { recursive: true });
    writeFileSync(join(dir, 'spill', 'usage.state'), '120 100 running\n');
    const { gw } = await start(t, { usage: { spill_dir: join(dir, 'spill') } });
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_usage_records_dropped_total', { reason: 'crashed' }), 20);
    assert.ok(gw.stderr.json().some((l) => l.level === 'error' && /lost by an unclean exit/.test(l.msg) && l.records === 20));
  });

  it('refuses a usage section without spill_dir or sinks, naming the field', async () => {
    const { checkConfig, writeConfig } = await import('./lib/tahua.mjs');
    const base = gatewayConfig({ providers: [openaiProvider('up', 'http://127.0.0.1:9/v1')], models: [{ name: MODEL, provider: 'up' }] });
    for (const [usage, field] of [
      [{ sinks: [{ type: 'file', path: '/tmp/x' }] }, 'usage.spill_dir'],
      [{ spill_dir: '/tmp/s' }, 'usage.sinks'],
      [{ spill_dir: '/tmp/s', sinks: [{ type: 'kafka' }] }, 'usage.sinks[0].type'],
      [{ spill_dir: '/tmp/s', sinks: [{ type: 'webhook', url: 'ftp://billing.example/hook' }] }, 'usage.sinks[0].url'],
      [{ spill_dir: '/tmp/s', sinks: [{ type: 'redis_stream' }] }, 'usage.sinks[0].url'],
    ]) {
      const r = checkConfig(writeConfig({ ...base, usage }));
      assert.equal(r.status, 1, JSON.stringify(usage));
      assert.match(r.stderr, new RegExp(field.replace(/[[\].]/g, '\\$&')), r.stderr);
    }
  });
});
