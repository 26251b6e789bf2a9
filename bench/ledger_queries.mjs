// The spend ledger's queries at size (docs/ledger.md, docs/benchmarks.md#ledger-queries):
// a PostgreSQL 15 server (tests/integration/lib/postgres.mjs) holding ROWS records
// (default 10 million) and a SQLite file holding SQLITE_ROWS (default 1 million), made
// by SQL (generate_series, a recursive CTE: seconds, not hours of requests), spread over
// 90 days, 50 tenants, 500 keys, 10 models; then the real binary's GET /admin/v1/usage
// timed: one tenant's spend by day for a month, the whole fleet's by model and day for
// a month (and the request log's first page), RUNS times each, and PostgreSQL's EXPLAIN.
// The rows are loaded into a version-1 ledger (the rollups' objects dropped after
// `tahua --migrate`), then `tahua --migrate` is timed bringing it to version 2: the
// rollups' backfill at size. PostgreSQL's questions are also asked in Asia/Kolkata, a zone
// half an hour off UTC, which the rows answer: the same work as before the rollups.
//   node bench/ledger_queries.mjs            (TAHUA_BIN=build/tahua; ROWS=10000000 SQLITE_ROWS=1000000 RUNS=5)
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startPostgres } from '../tests/integration/lib/postgres.mjs';
import { gatewayConfig, writeConfig, TAHUA_BIN } from '../tests/integration/lib/tahua.mjs';
import { adminSection, startWithAdmin, TOKEN } from '../tests/integration/lib/admin.mjs';
import { makeTempDir } from '../tests/integration/lib/util.mjs';

const ROWS = Number(process.env.ROWS ?? 10_000_000);
const SQLITE_ROWS = Number(process.env.SQLITE_ROWS ?? 1_000_000);
const RUNS = Number(process.env.RUNS ?? 5);
const DAYS = 90;
const END = '2026-12-01T00:00:00Z';  // the rows span the 90 days before it
const MONTH = 'from=2026-11-01&to=2026-12-01';

const log = (...a) => console.log(...a);
const seconds = (t0) => ((performance.now() - t0) / 1000).toFixed(1);

// A node:test-like `t` for the helpers: cleanups run at exit.
const cleanups = [];
const t = { after: (f) => cleanups.push(f) };

function config(sink) {
  const c = gatewayConfig({ providers: [{ name: 'mock', type: 'mock' }], models: [{ name: 'm', provider: 'mock' }] });
  c.usage = { spill_dir: join(makeTempDir('tahua-lq-'), 'spill'), sinks: [{ ...sink, query_max_range: '400d' }] };
  c.admin = adminSection({});
  return c;
}

async function timeQueries(url, name) {
  // The API's own deadline is 10 s; the client waits longer, to see the 503 if it comes.
  const admin = async (method, path) => {
    const r = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}` }, signal: AbortSignal.timeout(60_000) });
    const text = await r.text();
    return { status: r.status, text, json: JSON.parse(text) };
  };
  const queries = [
    ['one tenant by day, a month', `/admin/v1/usage?${MONTH}&tenant=tenant-7&group_by=day`],
    ['the fleet by model and day, a month', `/admin/v1/usage?${MONTH}&group_by=model,day`],
    ['the fleet by model and day, to now (a part hour from the rows)', `/admin/v1/usage?from=2026-11-01&to=2026-11-30T17:42:10Z&group_by=model,day`],
    ...(name.startsWith('postgres') ? [
      ['one tenant by day, a month, Asia/Kolkata (rows)', `/admin/v1/usage?${MONTH}&tenant=tenant-7&group_by=day&tz=Asia/Kolkata`],
      ['the fleet by model and day, a month, Asia/Kolkata (rows)', `/admin/v1/usage?${MONTH}&group_by=model,day&tz=Asia/Kolkata`],
    ] : []),
    ['request log, first page of 50', `/admin/v1/requests?${MONTH}`],
    ['request log, one tenant, page 50 of 50', null],
  ];
  const out = [];
  for (const [label, path0] of queries) {
    let path = path0;
    if (!path) {  // walk 49 pages of one tenant, then time the 50th
      let cursor = null;
      for (let i = 0; i < 49; i++) {
        const r = await admin('GET', `/admin/v1/requests?${MONTH}&tenant=tenant-7${cursor ? `&cursor=${cursor}` : ''}`);
        cursor = r.json.next_cursor;
      }
      path = `/admin/v1/requests?${MONTH}&tenant=tenant-7&cursor=${cursor}`;
    }
    const times = [];
    let groups = 0;
    let status = '';
    let source = '';
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const r = await admin('GET', path);
      times.push(performance.now() - t0);
      if (r.status !== 200) status = `${r.status} ${r.json?.error?.code}`;
      else {
        groups = (r.json.groups ?? r.json.requests).length;
        source = r.json.percentiles ?? 'rows';
      }
    }
    const first = times[0];
    times.sort((a, b) => a - b);
    out.push({ ledger: name, query: label, source, rows_out: groups, first_ms: Math.round(first), min_ms: Math.round(times[0]),
      median_ms: Math.round(times[times.length >> 1]), failed: status });
    log(JSON.stringify(out.at(-1)));
  }
  console.table(out);
  return out;
}

// The records' columns that the queries read, the rest left null (as a record without them).
const pgInsert = (n) => `INSERT INTO tahua_usage_records (record_id, request_id, ts, end_ts, tenant, key, model, requested_model, stream, status,
  end_reason, prompt_tokens, completion_tokens, cached_tokens, total_tokens, cost_usd, duration_ms, ttft_ms, cache, cache_tokens_saved, trace_id)
SELECT gen_random_uuid(), 'req-' || g, ts, ts + interval '1 second', 'tenant-' || (g % 50), 'key-' || (g % 500), 'model-' || (g % 10), 'model-' || (g % 10),
  g % 3 = 0, CASE WHEN g % 100 = 0 THEN 502 ELSE 200 END, CASE WHEN g % 100 = 0 THEN 'upstream_error' ELSE 'done' END,
  800 + g % 1000, 100 + g % 300, 0, 900 + g % 1000 + g % 300, ((800 + g % 1000) * 15 + (100 + g % 300) * 60)::numeric / 100000000,
  200 + (g * 7919) % 3000, CASE WHEN g % 3 = 0 THEN 50 + (g * 104729) % 900 END, CASE WHEN g % 20 = 0 THEN 'hit' END,
  CASE WHEN g % 20 = 0 THEN 1000 END, md5(g::text)
FROM generate_series(1::bigint, ${n}) g, LATERAL (SELECT timestamptz '${END}' - interval '${DAYS} days' + (g::float8 / ${n}) * interval '${DAYS} days' AS ts) x`;

async function postgres() {
  const pg = await startPostgres({ t });
  pg.sql('ALTER SYSTEM SET shared_buffers = \'512MB\'', 'postgres');
  pg.sql('ALTER SYSTEM SET work_mem = \'64MB\'', 'postgres');
  await pg.stop();
  await pg.start();
  const sink = { name: 'pg', type: 'postgres', dsn: pg.dsn(), password_env: 'TAHUA_BENCH_PG_PASSWORD', timeout: '5s' };
  const file = writeConfig(config(sink));
  const migrate = () => execFileSync(TAHUA_BIN, ['--migrate', '--config', file], { env: { ...process.env, TAHUA_BENCH_PG_PASSWORD: pg.password }, encoding: 'utf8' });
  migrate();
  // Back to version 1: the rows are loaded as a ledger written before the rollups.
  pg.sql(`DROP FUNCTION tahua_usage_hourly_insert, tahua_usage_hourly_delete, tahua_usage_hourly_update, tahua_usage_hourly_truncate CASCADE;
    DROP TABLE tahua_usage_hourly; DELETE FROM tahua_ledger_schema WHERE version = 2`);
  // Loaded without its secondary indexes, which are then made from the migration's own
  // definitions (faster than maintaining five indexes row by row).
  const indexes = pg.sql("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'tahua_usage_records' AND indexname <> 'tahua_usage_records_pkey'");
  for (const [name] of indexes) pg.sql(`DROP INDEX ${name}`);
  let t0 = performance.now();
  const chunk = 1_000_000;
  for (let done = 0; done < ROWS; done += chunk) {
    pg.sql(pgInsert(Math.min(chunk, ROWS - done)).replace("'req-' || g", `'req-' || (g + ${done})`).replace(/\(g::float8 \/ \d+\)/, `((g + ${done})::float8 / ${ROWS})`)
      .replace(/g % /g, `(g + ${done}) % `).replace(/\(g \* /g, `((g + ${done}) * `));
    log(`postgres: ${done + Math.min(chunk, ROWS - done)} rows (${seconds(t0)} s)`);
  }
  for (const [, def] of indexes) pg.sql(def);
  pg.sql('VACUUM ANALYZE tahua_usage_records');
  log(`postgres: ${ROWS} rows, indexes and ANALYZE in ${seconds(t0)} s`);
  t0 = performance.now();
  log(migrate().trim());
  pg.sql('VACUUM ANALYZE tahua_usage_hourly');
  log(`postgres: migrated to version 2 (the rollups' backfill) in ${seconds(t0)} s; ${pg.value('SELECT count(*) FROM tahua_usage_hourly')} rollup rows`);
  log(pg.sql(`SELECT relname, pg_size_pretty(pg_relation_size(oid)) FROM pg_class WHERE relname LIKE 'tahua_usage_%' ORDER BY 1`).map((r) => r.join(': ')).join('\n'));
  const { url } = await startWithAdmin(t, config(sink), { env: { TAHUA_BENCH_PG_PASSWORD: pg.password } });
  const out = await timeQueries(url, `postgres, ${ROWS} rows`);
  for (const where of ["tenant = 'tenant-7' AND", '']) {
    const plan = pg.sql(`EXPLAIN (ANALYZE, BUFFERS) SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD'), count(*), sum(cost_usd),
      percentile_cont(ARRAY[0.5, 0.95]::float8[]) WITHIN GROUP (ORDER BY duration_ms) FROM tahua_usage_records
      WHERE ${where} ts >= '2026-11-01' AND ts < '2026-12-01' GROUP BY 1 ORDER BY 1`);
    log(plan.map((r) => r.join('|')).join('\n'));
  }
  return out;
}

async function sqlite() {
  const dir = makeTempDir('tahua-lq-sqlite-');
  const db = join(dir, 'ledger.db');
  const sink = { name: 'ledger', type: 'sqlite', path: db };
  const file = writeConfig(config(sink));
  execFileSync(TAHUA_BIN, ['--migrate', '--config', file]);
  execFileSync('sqlite3', [db, `DROP TRIGGER tahua_usage_hourly_insert; DROP TRIGGER tahua_usage_hourly_delete; DROP TRIGGER tahua_usage_hourly_update;
    DROP TABLE tahua_usage_hourly; DELETE FROM tahua_ledger_schema WHERE version = 2;`]);
  let t0 = performance.now();
  const n = SQLITE_ROWS;
  const day = 86_400_000;
  const start = Date.parse(END) - DAYS * day;
  execFileSync('sqlite3', [db, `PRAGMA journal_mode=WAL; BEGIN; WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ${n})
INSERT INTO tahua_usage_records (record_id, request_id, ts, tenant, key, model, requested_model, stream, status, end_reason, prompt_tokens,
  completion_tokens, cached_tokens, total_tokens, cost_nano_usd, duration_ms, ttft_ms, cache, cache_tokens_saved)
SELECT printf('%08x-0000-7000-8000-%012x', g / 65536, g), 'req-' || g,
  strftime('%Y-%m-%dT%H:%M:%fZ', (${start} + g * ${DAYS * day} / ${n}) / 1000.0, 'unixepoch'),
  'tenant-' || (g % 50), 'key-' || (g % 500), 'model-' || (g % 10), 'model-' || (g % 10), g % 3 = 0,
  CASE WHEN g % 100 = 0 THEN 502 ELSE 200 END, CASE WHEN g % 100 = 0 THEN 'upstream_error' ELSE 'done' END,
  800 + g % 1000, 100 + g % 300, 0, 900 + g % 1000 + g % 300, ((800 + g % 1000) * 15 + (100 + g % 300) * 60) * 10,
  200 + (g * 7919) % 3000, CASE WHEN g % 3 = 0 THEN 50 + (g * 104729) % 900 END, CASE WHEN g % 20 = 0 THEN 'hit' END,
  CASE WHEN g % 20 = 0 THEN 1000 END FROM s; COMMIT; ANALYZE;`]);
  log(`sqlite: ${n} rows in ${seconds(t0)} s, ${(execFileSync('stat', ['-c', '%s', db], { encoding: 'utf8' }) / 1048576).toFixed(0)} MiB`);
  t0 = performance.now();
  log(execFileSync(TAHUA_BIN, ['--migrate', '--config', file], { encoding: 'utf8' }).trim());
  log(`sqlite: migrated to version 2 (the rollups' backfill) in ${seconds(t0)} s; ${execFileSync('sqlite3', [db, 'SELECT count(*) FROM tahua_usage_hourly'], { encoding: 'utf8' }).trim()} rollup rows`);
  const { url } = await startWithAdmin(t, config(sink));
  const out = await timeQueries(url, `sqlite, ${n} rows`);
  for (const where of ["tenant = 'tenant-7' AND", '']) {
    log(execFileSync('sqlite3', ['-readonly', db, `EXPLAIN QUERY PLAN SELECT substr(ts, 1, 10), count(*), sum(cost_nano_usd), sum(duration_ms) FROM tahua_usage_records
      WHERE ${where} ts >= '2026-11-01' AND ts < '2026-12-01' GROUP BY 1 ORDER BY 1`], { encoding: 'utf8' }));
  }
  return out;
}

try {
  const which = process.argv[2] ?? 'both';
  if (which !== 'postgres') await sqlite();
  if (which !== 'sqlite') await postgres();
} finally {
  for (const f of cleanups.reverse()) await f();
}
process.exit(0);
