// The spend ledger (docs/ledger.md): usage records as rows of a SQLite file and of a
// real PostgreSQL 15 server, driven through the real binary with the openai SDK.
// Exactly one row per record whatever the sink went through (a connection killed
// mid-load, a stopped server, a replayed spill), a superseding record kept over its
// original in any order, the cost exact, the schema migrated once under a lock and a
// newer one refused unwritten, retention, a full SQLite database, no password in any
// message.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { startPostgres, havePostgres } from './lib/postgres.mjs';
import { gatewayConfig, openaiProvider, startTahua, writeConfig, TAHUA_BIN } from './lib/tahua.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { eventually, makeTempDir, withTimeout } from './lib/util.mjs';
import { collectData, openStream, send } from './lib/http.mjs';
import { setTimeout as delay } from 'node:timers/promises';

const MODEL = 'gpt-ledger';
const KEY_A = 'tk-ledger-a-0123456789abcdef';
const KEY_B = 'tk-ledger-b-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

const readLines = (file) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
const sqlite = (db, sql) => execFileSync('sqlite3', ['-readonly', db, sql], { encoding: 'utf8' }).trim();
/** A SQLite ledger's rows summed per hour, tenant, model and route, and its rollups: equal. */
const sqliteRowSums = (db) => sqlite(db, `SELECT substr(ts, 1, 13) || ':00:00.000Z', coalesce(tenant, ''), coalesce(model, ''), coalesce(route_name, ''),
  count(*), sum(coalesce(status, 0) >= 400), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cost_nano_usd), 0)
  FROM tahua_usage_records GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`);
const sqliteRollups = (db) => sqlite(db, `SELECT hour, tenant, model, route_name, requests, errors, prompt_tokens, completion_tokens, cost_nano_usd
  FROM tahua_usage_hourly WHERE requests <> 0 ORDER BY 1, 2, 3, 4`);

/** A gateway whose usage records go to a JSON-lines file (the reference) and `sinks`. */
const TENANT_TOKEN = 'tenant-b-admin-token-0123456789';

async function start(t, { sinks, usage = {}, env = {}, dir = makeTempDir('tahua-ledger-'), pricing = { input: 0.15, output: 0.6 }, admin = false }) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [{ name: MODEL, provider: 'up', pricing }],
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b', limits: { requests_per_minute: 1 } }];
  config.keys = [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
  ];
  config.usage = {
    spill_dir: join(dir, 'spill'),
    retry_backoff: '50ms',
    sinks: [{ name: 'file', type: 'file', path: join(dir, 'usage.jsonl') }, ...sinks],
    ...usage,
  };
  let gw;
  let adminCall;
  if (admin) {
    config.admin = adminSection({ tenant_tokens: [{ name: 'b-admin', tenant: 'team-b', sha256: sha256(TENANT_TOKEN) }] });
    ({ gw, admin: adminCall } = await startWithAdmin(t, config, { env }));
  } else {
    gw = await startTahua({ t, config, env });
  }
  const client = (key) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  return { gw, upstream, dir, file: join(dir, 'usage.jsonl'), spill: join(dir, 'spill'), a: client(KEY_A), b: client(KEY_B), admin: adminCall };
}

const ask = (client, stream = false) => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream });

/** `n` requests, some streamed; resolves with how many were sent. */
async function traffic(a, n, { concurrency = 1 } = {}) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const r = await ask(a, i % 3 === 0);
      if (i % 3 === 0) for await (const _ of r) { /* drain the stream */ }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return n;
}

describe('ledger: sqlite', () => {
  it('one row per record, cost in exact nano-dollars, WAL; a 429 is a row too', async (t) => {
    const dir = makeTempDir('tahua-ledger-');
    const db = join(dir, 'ledger.db');
    const { a, b, file } = await start(t, { dir, sinks: [{ name: 'ledger', type: 'sqlite', path: db }] });
    let sent = await traffic(a, 6);
    await ask(b);
    await assert.rejects(ask(b), (e) => e.status === 429);
    sent += 2;
    const records = await eventually(() => readLines(file).length === sent && readLines(file), { what: `${sent} records in the file` });
    await eventually(() => sqlite(db, 'SELECT count(*) FROM tahua_usage_records') === String(sent), { what: `${sent} rows`, timeout: 5000 });
    const rows = sqlite(db, "SELECT record_id, tenant, key, model, status, prompt_tokens, completion_tokens, total_tokens, stream, cost_nano_usd, ts FROM tahua_usage_records ORDER BY record_id")
      .split('\n').map((l) => l.split('|'));
    const byId = new Map(records.map((r) => [r.record_id, r]));
    for (const [id, tenant, key, model, status, prompt, completion, total, stream, nanos, ts] of rows) {
      const r = byId.get(id);
      assert.ok(r, `row ${id} is a record of the file`);
      assert.deepEqual([tenant, key, model, Number(status), Number(prompt), Number(completion), Number(total), Number(stream) === 1, ts],
        [r.tenant, r.key, r.model ?? '', r.status, r.prompt_tokens, r.completion_tokens, r.total_tokens, r.stream, r.ts]);
      if (r.cost_usd === null) assert.equal(nanos, '');
      else assert.equal(Number(nanos), Math.round(r.cost_usd * 1e9), `cost of ${id}`);
    }
    assert.ok(records.some((r) => r.status === 429) && rows.some((r) => r[4] === '429'));
    assert.ok(rows.some((r) => Number(r[9]) > 0 && Number(r[9]) % 1 === 0), 'a priced row');
    assert.equal(sqlite(db, 'PRAGMA journal_mode'), 'wal');
    assert.equal(sqlite(db, 'SELECT max(version) FROM tahua_ledger_schema'), '2');
    assert.deepEqual(sqliteRollups(db), sqliteRowSums(db), 'the rollups are the rows summed per hour');
  });

  it('a full database: logged once as an error, counted, spilled; the gateway answers on', async (t) => {
    const dir = makeTempDir('tahua-ledger-');
    const db = join(dir, 'ledger.db');
    const { gw, a, spill } = await start(t, { dir, sinks: [{ name: 'ledger', type: 'sqlite', path: db, max_bytes: 163840 }] });
    // The schema takes 30 pages (the rollups' triggers); each request's row, index entries and
    // rollup some hundreds of bytes: 40 pages fill up.
    for (let round = 0; round < 8; round++) {
      await traffic(a, 25, { concurrency: 4 });
      if (sum(await scrape(gw.url), 'tahua_usage_sink_failures_total', { sink: 'ledger' }) > 0) break;
    }
    const m = await eventually(async () => {
      const s = await scrape(gw.url);
      return sum(s, 'tahua_usage_sink_up', { sink: 'ledger' }) === 0 && s;
    }, { what: 'the ledger sink seen down' });
    assert.ok(sum(m, 'tahua_usage_sink_failures_total', { sink: 'ledger' }) >= 1);
    await traffic(a, 5);  // still answered
    await eventually(() => existsSync(join(spill, 'ledger.spill')) && readFileSync(join(spill, 'ledger.spill'), 'utf8').length > 0, { what: 'records spilled' });
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_sink_failures_total', { sink: 'ledger' }) >= 2, { what: 'a retry failed too', timeout: 5000 });
    const full = gw.stderr.json().filter((l) => l.msg === 'ledger database full; records spill until there is room');
    assert.equal(full.length, 1, 'said once');
    assert.equal(full[0].level, 'error');
    assert.match(full[0].error, /full/);
  });
});

/** What GET /admin/v1/usage?group_by=tenant,model must say, from the file sink's records. */
function expectedGroups(records) {
  const groups = new Map();
  for (const r of records) {
    const k = `${r.tenant}|${r.model}`;
    const g = groups.get(k) ?? { tenant: r.tenant, model: r.model, requests: 0, errors: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, nanos: 0 };
    g.requests += 1;
    g.errors += r.status >= 400 ? 1 : 0;
    g.input_tokens += r.prompt_tokens;
    g.output_tokens += r.completion_tokens;
    g.cached_tokens += r.cached_tokens;
    g.nanos += Math.round((r.cost_usd ?? 0) * 1e9);
    groups.set(k, g);
  }
  return [...groups.values()].sort((x, y) => `${x.tenant}|${x.model}`.localeCompare(`${y.tenant}|${y.model}`));
}

async function checkUsageEndpoint(admin, file, sent) {
  const today = new Date().toISOString().slice(0, 10);
  const records = await eventually(() => readLines(file).length === sent && readLines(file), { what: 'the records in the file' });
  const r = await admin('GET', `/admin/v1/usage?from=${today}&group_by=tenant,model`);
  assert.equal(r.status, 200, r.text);
  const want = expectedGroups(records);
  assert.deepEqual(r.json.group_by, ['tenant', 'model']);
  assert.equal(r.json.truncated, false);
  // The sums; the percentiles and cache fields are checked in ledger_queries.test.mjs.
  const sums = ({ cache_hits, cache_tokens_saved, latency_p50_ms, latency_p95_ms, ttft_p50_ms, ttft_p95_ms, ...g }) => g;
  assert.deepEqual(r.json.groups.map((g) => ({ ...sums(g), cost_usd: Math.round(g.cost_usd * 1e9) })),
    want.map(({ nanos, ...g }) => ({ ...g, cost_usd: nanos })));
  for (const g of r.json.groups) assert.ok(g.latency_p50_ms <= g.latency_p95_ms, JSON.stringify(g));
  // By day, filtered by key: one group, team-a's.
  const byDay = await admin('GET', `/admin/v1/usage?from=${today}&group_by=day&key=a-main`);
  assert.equal(byDay.status, 200, byDay.text);
  assert.deepEqual(byDay.json.groups.map((g) => [g.day, g.requests]), [[today, records.filter((x) => x.key === 'a-main').length]]);
  // A tenant's token sees its tenant only.
  const mine = await admin('GET', `/admin/v1/usage?from=${today}&group_by=tenant`, { token: TENANT_TOKEN });
  assert.equal(mine.status, 200, mine.text);
  assert.deepEqual(mine.json.groups.map((g) => g.tenant), ['team-b']);
  const theirs = await admin('GET', `/admin/v1/usage?from=${today}&tenant=team-a`, { token: TENANT_TOKEN });
  assert.equal(theirs.status, 403);
  assert.match(theirs.json.error.message, /^tenant: /);
  // Bad parameters: 400 naming the parameter.
  for (const [query, name] of [['from=yesterday', 'from'], [`from=${today}&group_by=colour`, 'group_by'], [`from=${today}&to=2000-01-01`, 'to'],
    [`from=${today}&limit=3`, 'limit'], ['', 'from']]) {
    const bad = await admin('GET', `/admin/v1/usage?${query}`);
    assert.equal(bad.status, 400, query);
    assert.equal(bad.json.error.code, 'invalid_parameter');
    assert.ok(bad.json.error.message.startsWith(`${name}: `), `${query}: ${bad.json.error.message}`);
  }
}

describe('ledger: the usage endpoint', () => {
  it('sums per group from SQLite; a tenant token sees its own tenant; bad parameters are named', async (t) => {
    const dir = makeTempDir('tahua-ledger-');
    const db = join(dir, 'ledger.db');
    const { a, b, admin, file } = await start(t, { dir, admin: true, sinks: [{ name: 'ledger', type: 'sqlite', path: db }] });
    let sent = await traffic(a, 5);
    await ask(b);
    await assert.rejects(ask(b), (e) => e.status === 429);
    sent += 2;
    await eventually(() => sqlite(db, 'SELECT count(*) FROM tahua_usage_records') === String(sent), { what: `${sent} rows` });
    await checkUsageEndpoint(admin, file, sent);
  });

  it('without a ledger: 404 naming the field to set', async (t) => {
    const { admin } = await start(t, { admin: true, sinks: [] });
    const r = await admin('GET', '/admin/v1/usage?from=2026-01-01');
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'ledger_not_configured');
    assert.match(r.json.error.message, /usage\.sinks\[\]\.type/);
  });
});

describe('ledger: postgres', { skip: !havePostgres && 'PostgreSQL 15 is not installed (scripts/bootstrap.sh --test)' }, () => {
  let pg;
  before(async () => {
    pg = await startPostgres();
  });
  after(() => pg?.stop());
  // One database per test: each starts empty.
  let dbs = 0;
  const freshDb = () => {
    const name = `ledger_${process.pid}_${dbs++}`;
    pg.sql(`CREATE DATABASE ${name} OWNER ${pg.role}`, 'postgres');
    return name;
  };
  const pgSink = (db, extra = {}) => ({ name: 'pg', type: 'postgres', dsn: pg.dsn(db), password_env: 'TAHUA_IT_PG_PASSWORD', timeout: '2s', ...extra });
  const pgEnv = () => ({ TAHUA_IT_PG_PASSWORD: pg.password });
  const count = (db) => Number(pg.value('SELECT count(*) FROM tahua_usage_records', db));
  /** The rollups equal the rows summed per hour, tenant, model and route (exactly: numeric cost). */
  const checkRollups = (db) => {
    const rows = pg.sql(`SELECT date_trunc('hour', ts AT TIME ZONE 'UTC'), coalesce(tenant, ''), coalesce(model, ''), coalesce(route_name, ''), count(*),
      count(*) FILTER (WHERE status >= 400), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cost_usd), 0)
      FROM tahua_usage_records GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`, db);
    const rollups = pg.sql(`SELECT hour AT TIME ZONE 'UTC', tenant, model, route_name, requests, errors, prompt_tokens, completion_tokens, cost_usd
      FROM tahua_usage_hourly WHERE requests <> 0 ORDER BY 1, 2, 3, 4`, db);
    assert.deepEqual(rollups, rows, 'the rollups are the rows summed per hour');
    const histogram = (m) => Array.from({ length: 90 }, (_, b) => `coalesce(${m}_b${String(b).padStart(2, '0')}, 0)`).join(' + ');
    assert.equal(pg.value(`SELECT coalesce(sum(${histogram('duration')}), 0) FROM tahua_usage_hourly`, db),
      pg.value('SELECT count(duration_ms) FROM tahua_usage_records', db), 'each duration in the histogram once');
    assert.equal(pg.value(`SELECT coalesce(sum(${histogram('ttft')}), 0) FROM tahua_usage_hourly`, db),
      pg.value('SELECT count(ttft_ms) FILTER (WHERE stream) FROM tahua_usage_records', db), 'each stream\'s TTFT once');
  };

  it('rows equal the records; cost as the exact numeric; migrated at start with its indexes', async (t) => {
    const db = freshDb();
    const { a, file } = await start(t, { sinks: [pgSink(db)], env: pgEnv() });
    const sent = await traffic(a, 9);
    const records = await eventually(() => readLines(file).length === sent && readLines(file), { what: 'the records in the file' });
    await eventually(() => count(db) === sent, { what: `${sent} rows`, timeout: 5000 });
    const rows = pg.sql('SELECT record_id, cost_usd::text, tenant, key, total_tokens, to_char(ts AT TIME ZONE \'UTC\', \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\') FROM tahua_usage_records', db);
    const byId = new Map(records.map((r) => [r.record_id, r]));
    for (const [id, cost, tenant, key, total, ts] of rows) {
      const r = byId.get(id);
      assert.ok(r, id);
      assert.equal(Number(cost), r.cost_usd, `numeric ${cost} is the record's ${r.cost_usd}`);
      assert.deepEqual([tenant, key, Number(total), ts], [r.tenant, r.key, r.total_tokens, r.ts]);
    }
    // The sum is exact decimal arithmetic (no float drift): 0.15 and 0.6 per million tokens.
    const expected = records.reduce((s, r) => s + BigInt(r.prompt_tokens) * 15n + BigInt(r.completion_tokens) * 60n, 0n);
    assert.equal(pg.value('SELECT (sum(cost_usd) * 100000000)::bigint FROM tahua_usage_records', db), expected.toString());
    assert.equal(pg.value('SELECT max(version) FROM tahua_ledger_schema', db), '2');
    checkRollups(db);
    const indexes = pg.sql("SELECT indexname FROM pg_indexes WHERE tablename = 'tahua_usage_records' ORDER BY 1", db).map((r) => r[0]);
    assert.deepEqual(indexes, ['tahua_usage_records_key_ts', 'tahua_usage_records_model_ts', 'tahua_usage_records_pkey',
      'tahua_usage_records_supersedes', 'tahua_usage_records_tenant_ts', 'tahua_usage_records_ts']);
  });

  it('GET /admin/v1/usage sums per group from PostgreSQL', async (t) => {
    const db = freshDb();
    const { a, b, admin, file } = await start(t, { admin: true, sinks: [pgSink(db)], env: pgEnv() });
    let sent = await traffic(a, 4);
    await ask(b);
    await assert.rejects(ask(b), (e) => e.status === 429);
    sent += 2;
    await eventually(() => count(db) === sent, { what: `${sent} rows` });
    await checkUsageEndpoint(admin, file, sent);
  });

  it('connections killed mid-load: every record exactly once', async (t) => {
    const db = freshDb();
    const { gw, a } = await start(t, { sinks: [pgSink(db, { batch: 4 })], env: pgEnv() });
    let killing = true;
    let kills = 0;
    const killer = (async () => {
      while (killing) {
        const rows = await pg.sqlAsync(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'tahua' AND datname = '${db}'`, db);
        kills += Number(rows[0][0]);
        await delay(25);
      }
    })();
    let sent;
    try {
      sent = await traffic(a, 80, { concurrency: 8 });
      await eventually(() => kills >= 2, { what: 'connections killed', timeout: 5000 });
    } finally {
      killing = false;
      await killer;
    }
    await eventually(() => count(db) >= sent, { what: `${sent} rows`, timeout: 10000 });
    assert.equal(count(db), sent, 'no row twice');
    assert.equal(Number(pg.value('SELECT count(DISTINCT request_id) FROM tahua_usage_records', db)), sent, 'one row per request');
    checkRollups(db);  // a batch replayed after a killed connection counted once in the rollups too
    const m = await scrape(gw.url);
    assert.ok(sum(m, 'tahua_usage_sink_failures_total', { sink: 'pg' }) >= 1, 'a delivery failed on a killed connection');
    assert.equal(sum(m, 'tahua_usage_records_dropped_total'), 0);
  });

  it('a server down at start and stopped again: records spill, then arrive once; the schema is made when it answers', async (t) => {
    const db = freshDb();
    await pg.stop();
    t.after(() => pg.ping() || pg.start());
    const { gw, a, spill } = await start(t, { sinks: [pgSink(db)], env: pgEnv() });
    assert.ok(gw.stderr.json().some((l) => l.msg === 'ledger database not reachable at start; its records spill until it is'));
    let sent = await traffic(a, 4);  // answered while the database is down
    await eventually(() => existsSync(join(spill, 'pg.spill')) && readLines(join(spill, 'pg.spill')).length === sent, { what: 'records spilled' });
    await pg.start();
    await eventually(() => count(db) === sent, { what: 'the spill replayed', timeout: 8000 });
    assert.equal(pg.value('SELECT max(version) FROM tahua_ledger_schema', db), '2');
    await pg.stop();
    sent += await traffic(a, 3);
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_sink_up', { sink: 'pg' }) === 0, { what: 'the sink seen down' });
    await pg.start();
    await eventually(() => count(db) === sent, { what: 'the second spill replayed', timeout: 8000 });
    const m = await eventually(async () => {
      const s = await scrape(gw.url);
      return sum(s, 'tahua_usage_sink_up', { sink: 'pg' }) === 1 && s;
    }, { what: 'the sink up again' });
    assert.equal(sum(m, 'tahua_usage_spill_bytes', { sink: 'pg' }), 0);
    assert.equal(Number(pg.value('SELECT count(DISTINCT request_id) FROM tahua_usage_records', db)), sent);
    checkRollups(db);
  });

  it('a database that stops answering: statements time out, records spill, requests are answered; each record once', async (t) => {
    const db = freshDb();
    const { gw, a, spill } = await start(t, { sinks: [pgSink(db, { timeout: '1s' })], env: pgEnv() });
    let sent = await traffic(a, 2);
    await eventually(() => count(db) === sent, { what: 'the first rows' });
    const lock = await pg.holdLock('tahua_usage_records', db);
    let released = false;
    t.after(() => released || lock.release());
    sent += await traffic(a, 5);  // answered while the sink's insert waits on the lock
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_sink_failures_total', { sink: 'pg' }) >= 1, { what: 'the insert timed out', timeout: 5000 });
    await eventually(() => existsSync(join(spill, 'pg.spill')) && readLines(join(spill, 'pg.spill')).length >= 1, { what: 'records spilled' });
    assert.match(gw.output(), /timed out waiting for the server \(1000 ms\)|canceling statement due to statement timeout/);
    // The timed-out statement may still run once the lock goes (the server had it): the
    // replay then inserts nothing twice.
    await lock.release();
    released = true;
    await eventually(() => count(db) === sent, { what: 'every record', timeout: 8000 });
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_spill_bytes', { sink: 'pg' }) === 0, { what: 'the spill emptied', timeout: 5000 });
    assert.equal(count(db), sent);
  });

  /** The request ids of the rows, sorted. */
  const requestIds = (db) => pg.sql('SELECT request_id FROM tahua_usage_records', db).map((r) => r[0]).sort();
  /** A chat call with team-a's key under the caller's own request id (the record's request_id). */
  const callAs = (gw, id, { stream = false } = {}) => send(gw.url, '/v1/chat/completions',
    { method: 'POST', json: { model: MODEL, stream, messages: [{ role: 'user', content: 'hi' }] }, headers: { authorization: `Bearer ${KEY_A}`, 'x-request-id': id } });
  /** A stream the mock upstream holds after its first event: in flight until released (or cut). */
  const heldStream = (gw, upstream, id) => {
    const exchange = upstream.next({ mode: 'hold' });
    return openStream(gw.url, { model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { authorization: `Bearer ${KEY_A}`, 'x-request-id': id } }).then((s) => ({ ...s, exchange }));
  };

  it('SIGTERM mid-traffic: the streams in flight end in the drain, and every request\'s row is in the database when the process has exited', async (t) => {
    const db = freshDb();
    const { gw, upstream } = await start(t, { sinks: [pgSink(db, { batch: 4 })], env: pgEnv() });
    const sent = [];
    // Answered before the signal: four clients, five requests each, streamed and not.
    await Promise.all([0, 1, 2, 3].map(async (c) => {
      for (let i = 0; i < 5; i += 1) {
        const id = `term-${c}-${i}`;
        sent.push(id);
        const r = await callAs(gw, id, { stream: i % 2 === 0 });
        assert.equal(r.status, 200);
        await r.text();
      }
    }));
    // In flight when the signal comes: three streams the upstream holds.
    const streams = await Promise.all([0, 1, 2].map((i) => {
      sent.push(`term-held-${i}`);
      return heldStream(gw, upstream, `term-held-${i}`);
    }));
    gw.signal('SIGTERM');
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'draining'), 5000, 'the drain');
    for (const s of streams) s.exchange.release();
    for (const s of streams) assert.equal((await collectData(s.events)).at(-1), '[DONE]', 'a stream in flight finished in the drain');
    const { code, signal } = await withTimeout(gw.exited, 20_000, 'the exit after SIGTERM');
    assert.deepEqual([code, signal], [0, null]);
    // The process is gone: what is not in the database now never will be.
    assert.deepEqual(requestIds(db), [...sent].sort(), 'a row for every request sent, in flight ones included');
    assert.equal(Number(pg.value('SELECT count(DISTINCT record_id) FROM tahua_usage_records', db)), sent.length, 'none twice');
    checkRollups(db);
  });

  it('SIGKILL mid-traffic and mid-replay, restarted on the same spill_dir: a row for every answered request, once; none for the cut ones', async (t) => {
    const db = freshDb();
    const dir = makeTempDir('tahua-ledger-');
    const spillFile = join(dir, 'spill', 'pg.spill');
    // A long timeout: the statement that waits below is never given up by the gateway itself.
    const sink = pgSink(db, { batch: 4, timeout: '30s' });
    const first = await start(t, { dir, sinks: [sink], env: pgEnv() });
    // The schema is there (migrated at start). A trigger makes the insert of one record
    // (request id kill-hold) wait for an advisory lock this test holds.
    pg.sql(`CREATE FUNCTION tahua_test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.request_id = 'kill-hold' THEN PERFORM pg_advisory_xact_lock(4242); END IF; RETURN NEW; END $$;
      CREATE TRIGGER tahua_test_hold BEFORE INSERT ON tahua_usage_records FOR EACH ROW EXECUTE FUNCTION tahua_test_hold()`, db);
    const lock = await pg.holdAdvisoryLock(4242, db);
    let released = false;
    t.after(() => released || lock.release());
    // The database refuses connections (the gateway's open one is ended): records spill.
    pg.sql(`ALTER DATABASE ${db} ALLOW_CONNECTIONS false`, 'postgres');
    t.after(() => pg.sql(`ALTER DATABASE ${db} ALLOW_CONNECTIONS true`, 'postgres'));
    pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db}' AND application_name = 'tahua'`, 'postgres');
    const answered = [];
    for (let i = 0; i < 16; i += 1) {
      const id = i === 9 ? 'kill-hold' : `kill-${String(i).padStart(2, '0')}`;
      const r = await callAs(first.gw, id, { stream: i % 3 === 0 });
      assert.equal(r.status, 200);
      await r.text();
      answered.push(id);
    }
    // Every answered request's record is in the spill (written and fdatasynced) before anything else happens.
    const spilled = await eventually(() => {
      const lines = readLines(spillFile);
      return lines.length === answered.length && lines.map((l) => l.request_id);
    }, { what: 'the answered requests\' records spilled', timeout: 8000 });
    assert.deepEqual([...spilled].sort(), [...answered].sort());
    // In flight: two streams the upstream holds.
    const cut = await Promise.all(['kill-cut-0', 'kill-cut-1'].map((id) => heldStream(first.gw, first.upstream, id)));
    // Connections are accepted again: the spill is replayed, four records a statement, until
    // the statement holding kill-hold waits for the lock; the ones before it are in.
    pg.sql(`ALTER DATABASE ${db} ALLOW_CONNECTIONS true`, 'postgres');
    await eventually(() => pg.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", 'postgres') === '1',
      { what: 'the replay waiting for the lock', timeout: 20_000 });
    const before = 4 * Math.floor(spilled.indexOf('kill-hold') / 4);
    assert.deepEqual(requestIds(db), spilled.slice(0, before).sort(), 'the statements before the waiting one went through');

    // Killed: mid-replay (a statement waiting on the server), two requests in flight.
    assert.equal((await first.gw.kill()).signal, 'SIGKILL');
    for (const s of cut) {
      const end = await collectData(s.events).then((data) => data.at(-1), () => 'cut');
      assert.notEqual(end, '[DONE]', 'a request in flight got no answer');
    }
    // The waiting statement may still complete on the server once the lock goes (its client is gone).
    await lock.release();
    released = true;

    // Restarted on the same spill_dir: the spill is replayed from its start; what the killed
    // run inserted already is inserted nothing twice.
    const second = await start(t, { dir, sinks: [sink], env: pgEnv() });
    assert.ok(second.gw.stderr.json().some((l) => l.msg === 'usage sink has records spilled by an earlier run; replaying' && l.sink === 'pg'));
    await eventually(async () => sum(await scrape(second.gw.url), 'tahua_usage_spill_bytes', { sink: 'pg' }) === 0, { what: 'the spill replayed', timeout: 10_000 });
    assert.deepEqual(requestIds(db), [...answered].sort(), 'a row for every answered request, none for the cut ones');
    assert.equal(Number(pg.value('SELECT count(DISTINCT record_id) FROM tahua_usage_records', db)), answered.length, 'none twice');
    checkRollups(db);
    assert.equal(sum(await scrape(second.gw.url), 'tahua_usage_records_dropped_total', { reason: 'spill_full' }), 0);
  });

  it('a superseding record wins whatever the order its original arrives in', async (t) => {
    const db = freshDb();
    const dir = makeTempDir('tahua-ledger-');
    const id = (n) => `0193a1b2-c3d4-7e5f-8a9b-${String(n).padStart(12, '0')}`;
    const rec = (n, extra = {}) => JSON.stringify({ record_id: id(n), request_id: `req-${n}`, ts: '2026-12-05T10:00:00.000Z', tenant: 'team-a',
      model: MODEL, status: 200, prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, cost_usd: 0.0000045, quality: 'pending', ...extra });
    // A spill left by an earlier run, replayed at start two records per statement: a
    // verdict (2, superseding 1) a statement before its original, an original (3) a
    // statement before its verdict (4), and a verdict and its original in one (8, 7).
    mkdirSync(join(dir, 'spill'), { recursive: true });
    // Record 5 holds a character PostgreSQL's text cannot: refused by the server, left out,
    // never a batch that fails for ever.
    writeFileSync(join(dir, 'spill', 'pg.spill'), [rec(2, { supersedes: id(1), quality: 'ok' }), rec(5, { path: 'a\u0000b' }), rec(1), rec(3),
      rec(4, { supersedes: id(3), quality: 'low' }), rec(6), rec(8, { supersedes: id(7), quality: 'ok' }), rec(7), ''].join('\n'));
    const { gw } = await start(t, { dir, sinks: [pgSink(db, { batch: 2 })], env: pgEnv() });
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_spill_bytes', { sink: 'pg' }) === 0, { what: 'the spill replayed' });
    assert.deepEqual(pg.sql('SELECT record_id, quality, cost_usd::text FROM tahua_usage_records ORDER BY record_id', db),
      [[id(2), 'ok', '0.0000045'], [id(4), 'low', '0.0000045'], [id(6), 'pending', '0.0000045'], [id(8), 'ok', '0.0000045']]);
    const skipped = await eventually(() => gw.stderr.json().find((l) => l.msg === 'usage lines that are not records left out of the ledger'), { what: 'the refused record logged' });
    assert.equal(skipped.lines, 1);
    assert.match(skipped.reason, /refused by the server: .*unsupported Unicode escape sequence/);
    // The superseded originals counted out of the rollups, whatever the order they came in.
    checkRollups(db);
    assert.equal(pg.value('SELECT sum(requests) FROM tahua_usage_hourly', db), '4');
  });

  it('tahua --migrate: three at once against an empty database migrate it once; a newer schema is refused, unwritten', async (t) => {
    const db = freshDb();
    const file = writeConfig({
      ...gatewayConfig({ providers: [{ name: 'mock', type: 'mock' }], models: [{ name: 'm', provider: 'mock' }] }),
      usage: { spill_dir: join(makeTempDir(), 'spill'), sinks: [pgSink(db)] },
    });
    const migrate = () => new Promise((resolve) => {
      const child = spawn(TAHUA_BIN, ['--migrate', '--config', file], { env: { ...process.env, ...pgEnv() } });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => { out += d; });
      child.stderr.on('data', (d) => { err += d; });
      child.on('exit', (code) => resolve({ code, out, err }));
    });
    const runs = await Promise.all([migrate(), migrate(), migrate()]);
    for (const r of runs) assert.equal(r.code, 0, r.err);
    assert.equal(runs.filter((r) => /pg \(postgres\): schema migrated from version 0 to 2/.test(r.out)).length, 1, runs.map((r) => r.out).join(''));
    assert.equal(runs.filter((r) => /schema at version 2, nothing to do/.test(r.out)).length, 2);
    assert.equal(pg.value('SELECT count(*) FROM tahua_ledger_schema', db), '2');

    pg.sql("INSERT INTO tahua_ledger_schema (version, tahua) VALUES (3, 'tahua from the future')", db);
    const refused = await migrate();
    assert.equal(refused.code, 1);
    assert.match(refused.err, /schema is at version 3, newer than this tahua's \(2\); refusing to write/);
    await assert.rejects(start(t, { sinks: [pgSink(db)], env: pgEnv() }), /newer than this tahua's \(2\)/);
    assert.equal(count(db), 0, 'nothing written');
    assert.equal(pg.value('SELECT max(version) FROM tahua_ledger_schema', db), '3');
  });

  it('two gateways starting together against one empty database: migrated once, both write', async (t) => {
    const db = freshDb();
    const [one, two] = await Promise.all([start(t, { sinks: [pgSink(db)], env: pgEnv() }), start(t, { sinks: [pgSink(db)], env: pgEnv() })]);
    const migrated = [one, two].flatMap(({ gw }) => gw.stderr.json().filter((l) => l.msg === 'ledger schema migrated'));
    assert.equal(migrated.length, 1, 'one of them migrated, the other found it done');
    assert.equal(pg.value('SELECT count(*) FROM tahua_ledger_schema', db), '2');
    // The second found the version table there ("already exists" NOTICE): kept out of the JSON log.
    for (const { gw } of [one, two]) assert.ok(!gw.output().includes('NOTICE'), gw.output());
    const sent = (await traffic(one.a, 3)) + (await traffic(two.a, 2));
    await eventually(() => count(db) === sent, { what: 'both replicas\' rows' });
  });

  it('retention deletes rows past their age in batches, newer rows stay', async (t) => {
    const db = freshDb();
    // The schema as a start makes it, then rows from 500 days ago and from last week.
    const file = writeConfig({
      ...gatewayConfig({ providers: [{ name: 'mock', type: 'mock' }], models: [{ name: 'm', provider: 'mock' }] }),
      usage: { spill_dir: join(makeTempDir(), 'spill'), sinks: [pgSink(db)] },
    });
    execFileSync(TAHUA_BIN, ['--migrate', '--config', file], { env: { ...process.env, ...pgEnv() } });
    pg.sql("INSERT INTO tahua_usage_records (record_id, request_id, ts) SELECT gen_random_uuid(), 'old-' || g, now() - interval '500 days' FROM generate_series(1, 6500) g", db);
    pg.sql("INSERT INTO tahua_usage_records (record_id, request_id, ts) SELECT gen_random_uuid(), 'new-' || g, now() - interval '7 days' FROM generate_series(1, 3) g", db);
    const { gw } = await start(t, { sinks: [pgSink(db, { retention: '400d' })], env: pgEnv() });
    await eventually(() => count(db) === 3, { what: 'the old rows deleted', timeout: 8000 });
    assert.equal(pg.value("SELECT count(*) FROM tahua_usage_records WHERE request_id LIKE 'new-%'", db), '3');
    const passes = await eventually(() => {
      const lines = gw.stderr.json().filter((l) => l.msg === 'ledger rows past retention deleted');
      return lines.reduce((s, l) => s + l.rows, 0) === 6500 && lines;
    }, { what: 'the passes logged' });
    assert.deepEqual(passes.map((l) => l.rows), [5000, 1500], 'at most 5,000 rows a pass');
    // The old rows' share of the rollups went with them (the delete trigger), and their hours.
    checkRollups(db);
    await eventually(() => pg.value("SELECT count(*) FROM tahua_usage_hourly WHERE hour < now() - interval '400 days'", db) === '0',
      { what: 'the emptied hours pruned' });
  });

  it('a failing connect says why and never the password', async (t) => {
    const db = freshDb();
    const secret = 'Wr0ng-pass-Qx81Zt';
    const dsnEnv = { TAHUA_IT_PG_DSN: pg.uri({ password: secret, db }) };
    const { gw, a, spill } = await start(t, { sinks: [{ name: 'pg', type: 'postgres', dsn_env: 'TAHUA_IT_PG_DSN', timeout: '2s' }], env: dsnEnv });
    await traffic(a, 2);
    await eventually(() => existsSync(join(spill, 'pg.spill')) && readLines(join(spill, 'pg.spill')).length === 2, { what: 'records spilled' });
    await eventually(async () => sum(await scrape(gw.url), 'tahua_usage_sink_failures_total', { sink: 'pg' }) >= 2, { what: 'a retry failed too' });
    assert.match(gw.output(), /password authentication failed for user/);
    assert.ok(!gw.output().includes(secret), 'no password in the log');
    const file = writeConfig({
      ...gatewayConfig({ providers: [{ name: 'mock', type: 'mock' }], models: [{ name: 'm', provider: 'mock' }] }),
      usage: { spill_dir: join(makeTempDir(), 'spill'), sinks: [{ name: 'pg', type: 'postgres', dsn_env: 'TAHUA_IT_PG_DSN' }] },
    });
    let failed;
    try {
      execFileSync(TAHUA_BIN, ['--migrate', '--config', file], { env: { ...process.env, ...dsnEnv }, encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      failed = e;
    }
    assert.equal(failed?.status, 1);
    assert.match(failed.stderr, /password authentication failed/);
    assert.ok(!failed.stderr.includes(secret) && !failed.stdout.includes(secret));
  });
});
