// The spend ledger's queries (docs/ledger.md#the-usage-endpoint, #the-request-log):
// GET /admin/v1/usage's latency percentiles, cache savings and time zones, the request
// log GET /admin/v1/requests (keyset pages, one record), CSV with its formula cells
// neutralised, a tenant token's scope and the 400s naming their parameter, against a
// real SQLite file and a real PostgreSQL 15 server, traffic sent with the openai SDK.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { startPostgres, havePostgres } from './lib/postgres.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

const MODEL = 'gpt-ledger';
const KEY_A = 'tk-ledgerq-a-0123456789abcdef';
const KEY_B = 'tk-ledgerq-b-0123456789abcdef';
const TENANT_TOKEN = 'tenant-b-admin-token-0123456789';
const FORMULA = "=cmd|' /C calc'!A0";
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
/** A percentile from the rollups' histogram against the exact one: within 0.5 ms + (2^(1/8) - 1) of it (docs/ledger.md). */
const withinBound = (estimate, exact) => Math.abs(estimate - exact) <= 0.5 + (2 ** (1 / 8) - 1) * exact + 1e-3;

/** RFC 4180: rows of cells (quoted cells may hold commas, quotes and line breaks). */
function parseCsv(text) {
  const rows = [];
  let row = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') quoted = false; else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(cell); cell = ''; } else if (c === '\r' && text[i + 1] === '\n') { row.push(cell); rows.push(row); row = []; cell = ''; i++; } else cell += c;
  }
  assert.equal(cell, '', 'the CSV ends with CRLF');
  const [header, ...body] = rows;
  for (const r of body) assert.equal(r.length, header.length, `a row of ${header.length} cells: ${r}`);
  return body.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i]])));
}

async function start(t, { sink, env = {} }) {
  const upstream = await startMockUpstream({ t });
  const dir = makeTempDir('tahua-ledgerq-');
  const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up', pricing: { input: 0.15, output: 0.6 } }] });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b' }];
  config.keys = [{ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) }, { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) }];
  config.usage = { spill_dir: join(dir, 'spill'), retry_backoff: '50ms',
    sinks: sink ? [{ ...sink, query_max_range: '30d' }] : [{ name: 'file', type: 'file', path: join(dir, 'u.jsonl') }] };
  config.admin = adminSection({ tenant_tokens: [{ name: 'b-admin', tenant: 'team-b', sha256: sha256(TENANT_TOKEN) }] });
  const { gw, admin } = await startWithAdmin(t, config, { env });
  const client = (key) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  return { admin, a: client(KEY_A), b: client(KEY_B) };
}

/** team-a: 6 requests, every other one streamed; team-b: 2. Resolves with how many. */
async function traffic(a, b) {
  for (let i = 0; i < 6; i++) {
    const r = await a.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `hi ${i}` }], stream: i % 2 === 0 });
    if (i % 2 === 0) for await (const _ of r) { /* drain */ }
  }
  for (let i = 0; i < 2; i++) await b.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
  return 8;
}

/**
 * Everything the endpoints must do, on a ledger holding `sent` records of the traffic
 * plus one row of the tenant FORMULA; `ids()` lists the ledger's record ids.
 */
async function checkQueries(admin, { sent, ids, dialect }) {
  const today = new Date().toISOString().slice(0, 10);
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
  // Groups with percentiles (p50 <= p95), TTFT for team-a's streams, cache savings.
  const usage = await admin('GET', `/admin/v1/usage?from=${today}&to=${tomorrow}&group_by=tenant,model`);
  assert.equal(usage.status, 200, usage.text);
  const byTenant = Object.fromEntries(usage.json.groups.map((g) => [g.tenant, g]));
  assert.deepEqual(Object.keys(byTenant).sort(), [FORMULA, 'team-a', 'team-b'].sort());
  assert.equal(byTenant['team-a'].requests, 6);
  assert.equal(byTenant['team-b'].requests, 2);
  for (const tenant of ['team-a', 'team-b']) {
    const g = byTenant[tenant];
    assert.ok(g.latency_p50_ms > 0 && g.latency_p50_ms <= g.latency_p95_ms, `${tenant}: ${JSON.stringify(g)}`);
    assert.equal(g.cache_hits, 0);
    assert.equal(g.cache_tokens_saved, 0);
  }
  assert.ok(byTenant['team-a'].ttft_p50_ms > 0 && byTenant['team-a'].ttft_p50_ms <= byTenant['team-a'].ttft_p95_ms, 'TTFT of the streams');
  assert.equal(byTenant['team-b'].ttft_p50_ms, null, 'no stream, no TTFT');
  // The inserted row (latency 100 ms, a cache hit), read from the rollups: its bucket's value.
  assert.equal(usage.json.percentiles, 'histogram');
  assert.deepEqual([byTenant[FORMULA].cache_hits, byTenant[FORMULA].cache_tokens_saved], [1, 42]);
  assert.ok(withinBound(byTenant[FORMULA].latency_p50_ms, 100), `${byTenant[FORMULA].latency_p50_ms} for 100`);

  // The rollups against the rows: naming the key makes the rows answer (exact percentiles);
  // the sums are equal, the percentiles within the stated bound (0.5 ms + 9.05 %).
  for (const [tenant, key] of [['team-a', 'a-main'], ['team-b', 'b-main']]) {
    const range = `from=${today}&to=${tomorrow}&tenant=${tenant}`;
    const rolled = await admin('GET', `/admin/v1/usage?${range}&group_by=model,day`);
    const exact = await admin('GET', `/admin/v1/usage?${range}&key=${key}&group_by=model,day`);
    assert.equal(rolled.status, 200, rolled.text);
    assert.equal(exact.status, 200, exact.text);
    assert.deepEqual([rolled.json.percentiles, exact.json.percentiles], ['histogram', 'exact']);
    const pct = ['latency_p50_ms', 'latency_p95_ms', 'ttft_p50_ms', 'ttft_p95_ms'];
    const sums = (g) => Object.fromEntries(Object.entries(g).filter(([k]) => !pct.includes(k)));
    assert.deepEqual(rolled.json.groups.map(sums), exact.json.groups.map(sums), `${tenant}: the same sums`);
    for (const [i, g] of rolled.json.groups.entries()) {
      for (const p of pct) {
        const want = exact.json.groups[i][p];
        if (want === null) assert.equal(g[p], null, `${tenant} ${p}`);
        else assert.ok(withinBound(g[p], want), `${tenant} ${p}: ${g[p]} from the rollups, ${want} exact`);
      }
    }
  }

  // The request log: pages of 3 return every row once, newest first.
  const seen = [];
  let cursor = null;
  let pages = 0;
  do {
    const page = await admin('GET', `/admin/v1/requests?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    assert.equal(page.status, 200, page.text);
    assert.ok(page.json.requests.length <= 3);
    seen.push(...page.json.requests);
    cursor = page.json.next_cursor;
    assert.ok(++pages <= 10, 'pagination ends');
  } while (cursor);
  assert.equal(seen.length, sent + 1);
  assert.deepEqual(seen.map((r) => r.record_id).sort(), ids().sort(), 'every record once');
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i - 1].ts >= seen[i].ts, 'newest first');
  const row = seen.find((r) => r.tenant === 'team-a' && r.stream);
  assert.deepEqual([row.model, row.requested_model, row.status, row.end_reason, typeof row.latency_ms, typeof row.ttft_ms, typeof row.cost_usd],
    [MODEL, MODEL, 200, 'done', 'number', 'number', 'number']);
  assert.ok(!('prompt' in row) && !JSON.stringify(seen).includes('hi 0'), 'never the prompt text');
  // One record.
  const one = await admin('GET', `/admin/v1/requests/${row.record_id}`);
  assert.equal(one.status, 200, one.text);
  assert.deepEqual(one.json, row);
  const none = await admin('GET', '/admin/v1/requests/0193a1b2-c3d4-7e5f-8a9b-000000000000');
  assert.equal(none.status, 404);
  // Filters.
  const errors = await admin('GET', '/admin/v1/requests?status=5xx');
  assert.deepEqual(errors.json.requests.map((r) => r.tenant), [FORMULA]);
  const streamsOfA = await admin('GET', '/admin/v1/requests?tenant=team-a&end_reason=done&model=' + MODEL);
  assert.equal(streamsOfA.json.requests.length, 6);

  // CSV: parses, the formula cell neutralised, on both endpoints.
  const csvUsage = await admin('GET', `/admin/v1/usage?from=${today}&to=${tomorrow}&group_by=tenant`, { headers: { accept: 'text/csv' } });
  assert.equal(csvUsage.status, 200, csvUsage.text);
  assert.match(csvUsage.headers['content-type'], /^text\/csv/);
  const usageRows = parseCsv(csvUsage.text);
  assert.deepEqual(usageRows.map((r) => r.tenant).sort(), [`'${FORMULA}`, 'team-a', 'team-b'].sort());
  assert.ok(!usageRows.some((r) => /^[=+\-@]/.test(r.tenant)), 'no cell begins a formula');
  const csvLog = await admin('GET', '/admin/v1/requests?limit=1000', { headers: { accept: 'text/csv' } });
  assert.equal(csvLog.status, 200, csvLog.text);
  const logRows = parseCsv(csvLog.text);
  assert.equal(logRows.length, sent + 1);
  assert.equal(logRows.find((r) => r.tenant.includes('calc')).tenant, `'${FORMULA}`);
  assert.equal(logRows.find((r) => r.record_id === row.record_id).ttft_ms, String(row.ttft_ms));
  // Paged CSV: the next cursor in a header.
  const csvPage = await admin('GET', '/admin/v1/requests?limit=2', { headers: { accept: 'text/csv' } });
  assert.equal(parseCsv(csvPage.text).length, 2);
  assert.ok(csvPage.headers['x-next-cursor'], 'X-Next-Cursor');

  // A tenant's token: its tenant only.
  const mine = await admin('GET', '/admin/v1/requests?limit=1000', { token: TENANT_TOKEN });
  assert.equal(mine.status, 200, mine.text);
  assert.deepEqual([...new Set(mine.json.requests.map((r) => r.tenant))], ['team-b']);
  assert.equal(mine.json.requests.length, 2);
  const theirs = await admin('GET', '/admin/v1/requests?tenant=team-a', { token: TENANT_TOKEN });
  assert.equal(theirs.status, 403);
  assert.match(theirs.json.error.message, /^tenant: /);
  const theirRecord = await admin('GET', `/admin/v1/requests/${row.record_id}`, { token: TENANT_TOKEN });
  assert.equal(theirRecord.status, 404, 'another tenant\'s record is not there');
  const myUsage = await admin('GET', `/admin/v1/usage?from=${today}&to=${tomorrow}&group_by=tenant`, { token: TENANT_TOKEN, headers: { accept: 'text/csv' } });
  assert.deepEqual(parseCsv(myUsage.text).map((r) => r.tenant), ['team-b']);

  // Bad queries: 400 naming the parameter.
  const bad = [
    ['/admin/v1/usage?from=2026-01-01&group_by=colour', 'group_by'],
    [`/admin/v1/usage?from=${today}T25:00Z`, 'from'],
    ['/admin/v1/usage?from=2000-01-01', 'to'],  // over query_max_range (30d)
    ['/admin/v1/requests?from=2000-01-01', 'to'],
    ['/admin/v1/requests?cursor=not-a-cursor', 'cursor'],
    ['/admin/v1/requests?limit=5000', 'limit'],
    ['/admin/v1/requests?status=teapot', 'status'],
    ['/admin/v1/requests/1%27%20OR%201=1', 'record_id'],
    [`/admin/v1/usage?from=${today}&tz=Europe/Berlin'`, 'tz'],
  ];
  if (dialect === 'postgres') bad.push([`/admin/v1/usage?from=${today}&tz=Mars/Olympus_Mons`, 'tz']);
  else bad.push([`/admin/v1/usage?from=${today}&group_by=day&tz=Europe/Berlin`, 'tz']);
  for (const [path, name] of bad) {
    const r = await admin('GET', path);
    assert.equal(r.status, 400, `${path}: ${r.text}`);
    assert.equal(r.json.error.code, 'invalid_parameter');
    assert.ok(r.json.error.message.startsWith(`${name}: `), `${path}: ${r.json.error.message}`);
  }
}

describe('ledger queries: sqlite', () => {
  it('percentiles, the request log, CSV, a tenant token, 400s', async (t) => {
    const db = join(makeTempDir('tahua-ledgerq-'), 'ledger.db');
    const { admin, a, b } = await start(t, { sink: { name: 'ledger', type: 'sqlite', path: db } });
    const sent = await traffic(a, b);
    const sqlite = (sql, ...flags) => execFileSync('sqlite3', [...flags, db, sql], { encoding: 'utf8' }).trim();
    await eventually(() => sqlite('SELECT count(*) FROM tahua_usage_records', '-readonly') === String(sent), { what: `${sent} rows` });
    const ts = new Date().toISOString();
    sqlite(`INSERT INTO tahua_usage_records (record_id, request_id, ts, tenant, model, status, end_reason, duration_ms, stream, ttft_ms, cache, cache_tokens_saved)
      VALUES ('0193a1b2-c3d4-7e5f-8a9b-0000000000ff', 'req-formula', '${ts}', '${FORMULA.replaceAll("'", "''")}', '${MODEL}', 502, 'upstream_error', 100, 1, 40, 'hit', 42)`);
    await checkQueries(admin, { sent, dialect: 'sqlite', ids: () => sqlite('SELECT record_id FROM tahua_usage_records', '-readonly').split('\n') });
  });

  it('without a ledger: the request log is a 404 naming the field to set', async (t) => {
    const { admin } = await start(t, {});
    for (const path of ['/admin/v1/requests', '/admin/v1/requests/0193a1b2-c3d4-7e5f-8a9b-0000000000ff']) {
      const r = await admin('GET', path);
      assert.equal(r.status, 404);
      assert.equal(r.json.error.code, 'ledger_not_configured');
      assert.match(r.json.error.message, /usage\.sinks\[\]\.type/);
    }
  });
});

describe('ledger queries: postgres', { skip: !havePostgres && 'PostgreSQL 15 is not installed (scripts/bootstrap.sh --test)' }, () => {
  let pg;
  before(async () => {
    pg = await startPostgres();
  });
  after(() => pg?.stop());

  it('percentiles, the request log, CSV, a tenant token, 400s; days in a time zone', async (t) => {
    const { admin, a, b } = await start(t, {
      sink: { name: 'pg', type: 'postgres', dsn: pg.dsn(), password_env: 'TAHUA_IT_PG_PASSWORD', timeout: '2s' },
      env: { TAHUA_IT_PG_PASSWORD: pg.password },
    });
    const sent = await traffic(a, b);
    await eventually(() => pg.value('SELECT count(*) FROM tahua_usage_records') === String(sent), { what: `${sent} rows` });
    pg.sql(`INSERT INTO tahua_usage_records (record_id, request_id, ts, tenant, model, status, end_reason, duration_ms, stream, ttft_ms, cache, cache_tokens_saved)
      VALUES ('0193a1b2-c3d4-7e5f-8a9b-0000000000ff', 'req-formula', now(), '${FORMULA.replaceAll("'", "''")}', '${MODEL}', 502, 'upstream_error', 100, true, 40, 'hit', 42)`);
    await checkQueries(admin, { sent, dialect: 'postgres', ids: () => pg.sql('SELECT record_id FROM tahua_usage_records').map((r) => r[0]) });

    // Days in a zone: rows at 23:30 UTC on Nov 30th are Dec 1st in Berlin (UTC+1), and a
    // date in `from` is Berlin's midnight.
    pg.sql(`INSERT INTO tahua_usage_records (record_id, request_id, ts, tenant, duration_ms) VALUES
      ('0193a1b2-c3d4-7e5f-8a9b-000000000101', 'z1', '2026-11-30T23:30:00Z', 'team-z', 5),
      ('0193a1b2-c3d4-7e5f-8a9b-000000000102', 'z2', '2026-11-30T22:30:00Z', 'team-z', 7)`);
    const utc = await admin('GET', '/admin/v1/usage?from=2026-11-30&to=2026-12-02&tenant=team-z&group_by=day');
    assert.deepEqual(utc.json.groups.map((g) => [g.day, g.requests]), [['2026-11-30', 2]]);
    const berlin = await admin('GET', '/admin/v1/usage?from=2026-11-30&to=2026-12-02&tenant=team-z&group_by=day&tz=Europe/Berlin');
    assert.equal(berlin.status, 200, berlin.text);
    assert.equal(berlin.json.tz, 'Europe/Berlin');
    assert.deepEqual(berlin.json.groups.map((g) => [g.day, g.requests]), [['2026-11-30', 1], ['2026-12-01', 1]]);
    const fromBerlinDec1 = await admin('GET', '/admin/v1/usage?from=2026-12-01&to=2026-12-02&tenant=team-z&tz=Europe/Berlin');
    assert.equal(fromBerlinDec1.json.groups[0].requests, 1, 'from = Berlin midnight (23:00 UTC)');
    assert.equal(berlin.json.percentiles, 'histogram', 'a zone whole hours from UTC: from the rollups');

    // A zone half an hour off UTC (India, +05:30) cuts UTC hours: the rows answer. 18:15 UTC
    // is 23:45 there on Nov 30th, 18:45 UTC is 00:15 on Dec 1st: one UTC hour, two days.
    pg.sql(`INSERT INTO tahua_usage_records (record_id, request_id, ts, tenant, duration_ms) VALUES
      ('0193a1b2-c3d4-7e5f-8a9b-000000000201', 'k1', '2026-11-30T18:15:00Z', 'team-k', 5),
      ('0193a1b2-c3d4-7e5f-8a9b-000000000202', 'k2', '2026-11-30T18:45:00Z', 'team-k', 7)`);
    const kolkata = await admin('GET', '/admin/v1/usage?from=2026-11-30&to=2026-12-02&tenant=team-k&group_by=day&tz=Asia/Kolkata');
    assert.equal(kolkata.status, 200, kolkata.text);
    assert.equal(kolkata.json.percentiles, 'exact');
    assert.deepEqual(kolkata.json.groups.map((g) => [g.day, g.requests, g.latency_p50_ms]), [['2026-11-30', 1, 5], ['2026-12-01', 1, 7]]);
    const kolkataUtc = await admin('GET', '/admin/v1/usage?from=2026-11-30&to=2026-12-02&tenant=team-k&group_by=hour');
    assert.deepEqual([kolkataUtc.json.percentiles, ...kolkataUtc.json.groups.map((g) => [g.hour, g.requests])], ['histogram', ['2026-11-30T18:00Z', 2]]);

    // The read connection is kept open between questions; a server restarted meanwhile
    // leaves it broken: the next question connects again and is answered.
    await pg.stop();
    await pg.start();
    const afterRestart = await admin('GET', '/admin/v1/usage?from=2026-11-30&to=2026-12-02&tenant=team-k&group_by=hour');
    assert.equal(afterRestart.status, 200, afterRestart.text);
    assert.deepEqual(afterRestart.json.groups.map((g) => g.requests), [2]);
  });
});
