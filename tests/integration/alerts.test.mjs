// Alerting and dashboards as code: deploy/prometheus/alerts.yaml passes promtool's check
// and its unit tests (alerts_test.yaml); every metric the alerts and the Grafana
// dashboard (deploy/grafana/tahua.json) name is one the real gateway exports; and a real
// Prometheus scraping the gateway under traffic runs every panel's query, evaluates every
// alert rule without error, and fires TahuaSelfHealingAction when the gateway ejects a
// failing deployment.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { REPO_ROOT, gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { scrape } from './lib/metrics.mjs';
import { startRedis } from './lib/redis.mjs';
import { closedPort, eventually, makeTempDir, withTimeout } from './lib/util.mjs';

const PROMTOOL = process.env.PROMTOOL || '/usr/bin/promtool';
const PROMETHEUS = process.env.PROMETHEUS || '/usr/bin/prometheus';
const RULES_DIR = join(REPO_ROOT, 'deploy', 'prometheus');
const ALERTS_FILE = join(RULES_DIR, 'alerts.yaml');
const ALERTS_TEST_FILE = join(RULES_DIR, 'alerts_test.yaml');
const DASHBOARD_FILE = join(REPO_ROOT, 'deploy', 'grafana', 'tahua.json');

// ---------------------------------------------------------------------------- helpers

/** The alert names of a rule file (`- alert: Name`). */
function alertNames(text) {
  return [...text.matchAll(/^\s*-\s+alert:\s*(\S+)\s*$/gm)].map((m) => m[1]);
}

/**
 * The `expr` of every rule of a Prometheus rule file, in order. Handles the scalar forms
 * a rule file uses: block scalars (`|`, `>`, with chomping indicators), single- and
 * double-quoted scalars, and plain one-line scalars (a trailing ` # comment` removed).
 * Line folding does not matter: PromQL ignores whitespace.
 */
function ruleExprs(text) {
  const lines = text.split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i += 1) {
    const m = /^(\s*)expr:\s*(.*?)\s*$/.exec(lines[i]);
    if (!m) continue;
    const indent = m[1].length;
    let value = m[2];
    if (/^[|>][-+]?\d*$/.test(value)) {
      const block = [];
      while (i + 1 < lines.length && (lines[i + 1].trim() === '' || lines[i + 1].search(/\S/) > indent)) block.push(lines[++i]);
      value = block.join('\n');
    } else if (value.startsWith("'")) {
      value = value.slice(1, value.lastIndexOf("'")).replace(/''/g, "'");
    } else if (value.startsWith('"')) {
      value = JSON.parse(value.slice(0, value.lastIndexOf('"') + 1));
    } else {
      value = value.replace(/\s+#.*$/, '');
    }
    out.push(value.trim());
  }
  return out;
}

// Words of PromQL that are not metric names: operators, modifiers, aggregations and
// functions (functions are also recognised by the `(` after them).
const PROMQL_WORDS = new Set([
  'and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool',
  'inf', 'nan', 'start', 'end', 'atan2',
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile',
  'abs', 'absent', 'absent_over_time', 'ceil', 'changes', 'clamp', 'clamp_max', 'clamp_min', 'day_of_month',
  'day_of_week', 'day_of_year', 'days_in_month', 'delta', 'deriv', 'exp', 'floor', 'histogram_quantile',
  'holt_winters', 'hour', 'idelta', 'increase', 'irate', 'label_join', 'label_replace', 'ln', 'log2', 'log10',
  'minute', 'month', 'predict_linear', 'rate', 'resets', 'round', 'scalar', 'sgn', 'sort', 'sort_desc', 'sqrt',
  'time', 'timestamp', 'vector', 'year', 'avg_over_time', 'min_over_time', 'max_over_time', 'sum_over_time',
  'count_over_time', 'quantile_over_time', 'stddev_over_time', 'stdvar_over_time', 'last_over_time',
  'present_over_time', 'acos', 'acosh', 'asin', 'asinh', 'atan', 'atanh', 'cos', 'cosh', 'sin', 'sinh', 'tan',
  'tanh', 'deg', 'rad', 'pi',
]);

/**
 * Metric names a PromQL expression selects. Removed first: string literals (label values
 * may hold any character), label matchers `{...}` (label names), ranges and subqueries
 * `[...]`, label lists of by/without/on/ignoring/group_left/group_right, Grafana
 * variables, numbers and durations. What is left that is an identifier, not a PromQL
 * word and not followed by `(` (a function or aggregation) is a metric name.
 */
function metricNames(expr) {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ')
    .replace(/#[^\n]*/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/gi, ' ')
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ')
    .replace(/\b\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|[smhdwy])?\b/gi, ' ')
    .replace(/\b0x[0-9a-f]+\b/gi, ' ');
  const names = new Set();
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const word = m[0];
    if (PROMQL_WORDS.has(word.toLowerCase())) continue;
    if (/^\s*\(/.test(s.slice(m.index + word.length))) continue;
    names.add(word);
  }
  return [...names];
}

/** The dashboard's queries: `{ where, expr }` for every panel target (rows' nested panels too) and annotation. */
function dashboardQueries(dashboard) {
  const out = [];
  const visit = (panels) => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) if (t.expr) out.push({ where: `panel "${p.title}" ${t.refId}`, title: p.title, expr: t.expr });
      visit(p.panels);
    }
  };
  visit(dashboard.panels);
  for (const a of dashboard.annotations?.list ?? []) if (a.expr) out.push({ where: `annotation "${a.name}"`, title: a.name, expr: a.expr });
  return out;
}

/** Grafana's variables in a query replaced as Grafana would with "All" selected. */
function grafanaToPromql(expr) {
  return expr
    .replace(/\$__rate_interval|\$\{__rate_interval\}/g, '1m')
    .replace(/\$__interval|\$\{__interval\}/g, '1s')
    .replace(/\$__range|\$\{__range\}/g, '1m')
    .replace(/\$\{[^}]*\}|\$\w+/g, '.*');
}

function readDashboard() {
  return JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8'));
}

function runPromtool(args) {
  assert.ok(existsSync(PROMTOOL), `promtool not found at ${PROMTOOL} (scripts/bootstrap.sh --test installs the prometheus package)`);
  const r = spawnSync(PROMTOOL, args, { cwd: RULES_DIR, encoding: 'utf8', timeout: 20_000 });
  return { status: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

// ---------------------------------------------------------------------------- files

describe('alert rules and dashboard files', () => {
  it('promtool check rules accepts alerts.yaml', () => {
    const { status, output } = runPromtool(['check', 'rules', 'alerts.yaml']);
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS: 11 rules found/);
  });

  it('promtool test rules passes alerts_test.yaml', () => {
    const { status, output } = runPromtool(['test', 'rules', 'alerts_test.yaml']);
    assert.equal(status, 0, output);
    assert.match(output, /SUCCESS/);
  });

  it('alerts_test.yaml shows every alert firing and not firing', () => {
    const alerts = alertNames(readFileSync(ALERTS_FILE, 'utf8'));
    assert.equal(alerts.length, 11);
    const fires = new Set();
    const silent = new Set();
    const lines = readFileSync(ALERTS_TEST_FILE, 'utf8').split('\n');
    lines.forEach((line, i) => {
      const m = /^\s*alertname:\s*(\S+)\s*$/.exec(line);
      if (!m) return;
      const exp = lines.slice(i + 1).find((l) => /^\s*exp_alerts:/.test(l));
      if (/exp_alerts:\s*\[\]\s*$/.test(exp)) silent.add(m[1]);
      else fires.add(m[1]);
    });
    assert.deepEqual(alerts.filter((a) => !fires.has(a)), [], 'alerts without a firing case');
    assert.deepEqual(alerts.filter((a) => !silent.has(a)), [], 'alerts without a case where they must not fire');
    assert.deepEqual([...fires, ...silent].filter((a) => !alerts.includes(a)), [], 'tests of alerts that do not exist');
  });

  it('every alert has for, a severity and the summary, description and runbook annotations', () => {
    const text = readFileSync(ALERTS_FILE, 'utf8');
    const blocks = text.split(/^(?=[ \t]*-[ \t]+alert:)/m).slice(1);
    assert.equal(blocks.length, 11);
    for (const block of blocks) {
      const name = /alert:\s*(\S+)/.exec(block)[1];
      assert.match(block, /^\s+for:\s*\d+[smh]\b/m, `${name}: for`);
      assert.match(block, /^\s+severity:\s*(critical|warning|info)\s*$/m, `${name}: severity`);
      for (const a of ['summary', 'description', 'runbook']) assert.match(block, new RegExp(`^\\s+${a}:`, 'm'), `${name}: ${a}`);
    }
  });

  it('the dashboard is valid JSON with a Prometheus data source, unique panel ids and a query in every panel', () => {
    const d = readDashboard();
    assert.ok(d.schemaVersion >= 36, `schemaVersion ${d.schemaVersion}`);
    assert.ok(d.templating.list.some((v) => v.type === 'datasource' && v.name === 'DS_PROMETHEUS'), 'the DS_PROMETHEUS variable');
    const panels = d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
    const ids = panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'unique panel ids');
    for (const p of panels.filter((x) => x.type !== 'row')) {
      assert.ok(p.targets?.length > 0, `panel "${p.title}" has targets`);
      assert.equal(p.datasource?.uid, '${DS_PROMETHEUS}', `panel "${p.title}" uses the DS_PROMETHEUS data source`);
      for (const t of p.targets) assert.ok(t.expr && t.refId, `panel "${p.title}" target ${JSON.stringify(t)}`);
    }
  });

  it('finds the metric names in PromQL expressions', () => {
    const cases = [
      ['tahua_active_streams > 8000', ['tahua_active_streams']],
      ['histogram_quantile(0.99, sum by (le, model) (rate(tahua_request_duration_seconds_bucket{model=~"$model", x="}[a]"}[$__rate_interval])))',
        ['tahua_request_duration_seconds_bucket']],
      ['sum(rate(a_total[5m])) by (instance) / on (instance) group_left sum(rate(b_total[5m:1m] offset 1h)) > bool 0.5e3',
        ['a_total', 'b_total']],
      ['changes(process_start_time_seconds[1h]) > 3 unless up == 0', ['process_start_time_seconds', 'up']],
      ['label_replace(x_seconds{instance=~"${instance:regex}"}, "dst", "$1", "src", "(.*)") * 3600', ['x_seconds']],
      ['sum without () (increase(h_total{action!="restore"}[5m])) > 0 or sum without () (h_total > 0 unless h_total offset 5m)', ['h_total']],
      ['topk(10, sum by (tenant) (rate(t_total[1m])) * 60) and ignoring(le) vector(1)', ['t_total']],
    ];
    for (const [expr, names] of cases) assert.deepEqual(metricNames(expr).sort(), names.sort(), expr);
  });
});

// ---------------------------------------------------------------------------- gateway + Prometheus

const MODEL = 'chat';
const KEY_A = 'tk-alerts-team-a-0123456789';
const KEY_B = 'tk-alerts-team-b-0123456789';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });
// The panels whose queries must have data once the gateway has had traffic.
const CORE_PANELS = ['Request rate by model', 'Active streams', 'Tokens per second by model and type'];

/** A real Prometheus on a free loopback port, scraping `targets` every second and evaluating `ruleFiles`. */
async function startPrometheus({ targets, ruleFiles }) {
  assert.ok(existsSync(PROMETHEUS), `prometheus not found at ${PROMETHEUS} (scripts/bootstrap.sh --test installs it)`);
  const dir = makeTempDir('tahua-prometheus-');
  const port = await closedPort();
  const configFile = join(dir, 'prometheus.yml');
  writeFileSync(configFile, [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    '  evaluation_interval: 1s',
    'rule_files:',
    ...ruleFiles.map((f) => `  - ${JSON.stringify(f)}`),
    'scrape_configs:',
    '  - job_name: tahua',
    '    static_configs:',
    `      - targets: [${targets.map((t) => JSON.stringify(t)).join(', ')}]`,
    '',
  ].join('\n'));
  const child = spawn(PROMETHEUS, [
    `--config.file=${configFile}`,
    `--storage.tsdb.path=${join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  const log = [];
  createInterface({ input: child.stderr }).on('line', (line) => log.push(line));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const killAtExit = () => child.kill('SIGKILL');
  process.once('exit', killAtExit);
  const url = `http://127.0.0.1:${port}`;
  const prom = {
    url,
    log,
    async stop() {
      process.off('exit', killAtExit);
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      try {
        await withTimeout(exited, 5000, 'prometheus to exit');
      } catch {
        child.kill('SIGKILL');
        await exited;
      }
    },
    /** GET or POST (form) an API path; resolves with the parsed JSON body and the HTTP status. */
    async api(path, form) {
      const res = await fetch(`${url}${path}`, {
        method: form ? 'POST' : 'GET',
        body: form ? new URLSearchParams(form) : undefined,
        signal: AbortSignal.timeout(5000),
      });
      return { status: res.status, body: await res.json() };
    },
  };
  try {
    await eventually(async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}: ${log.slice(-5).join('\n')}`);
      const res = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(1000) });
      return res.status === 200;
    }, { timeout: 10_000, interval: 100, what: 'prometheus /-/ready' });
  } catch (err) {
    await prom.stop();
    throw err;
  }
  return prom;
}

/** An OTLP/HTTP trace collector that accepts every export (200 `{}`). */
async function startTraceCollector() {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

describe('alerts and dashboard against the real gateway', () => {
  let redis;
  let upGood;
  let upBad;
  let gw;
  let prom;
  let traffic;
  let collector;
  const ruleNames = alertNames(readFileSync(ALERTS_FILE, 'utf8'));
  const ruleExpressions = ruleExprs(readFileSync(ALERTS_FILE, 'utf8'));

  before(async () => {
    redis = await startRedis();
    upGood = await startMockUpstream();
    upBad = await startMockUpstream();
    upBad.defaultBehaviour = { mode: 'error', status: 500 };
    collector = await startTraceCollector();
    const config = gatewayConfig({
      server: { tenant_metrics: true },
      accessLog: { enabled: false },
      providers: [
        openaiProvider('up-good', upGood.baseUrl(), { circuit_breaker: { enabled: true } }),
        openaiProvider('up-bad', upBad.baseUrl()),
      ],
      models: [
        {
          name: MODEL,
          pricing: { input: 1, output: 2 },
          outlier: { consecutive_failures: 0 }, // only the healing rule ejects here
          deployments: [
            { id: 'good', provider: 'up-good' },
            { id: 'bad', provider: 'up-bad' },
          ],
        },
      ],
    });
    config.routes = [{ name: 'auto-default', match: { model: 'auto' }, target: MODEL }];
    config.tenants = [{ name: 'team-a' }, { name: 'team-b', limits: { requests_per_minute: 2 } }];
    config.keys = [
      { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
      { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
    ];
    config.store = { type: 'redis', redis: { url: redis.url, command_timeout: '200ms', heartbeat: '200ms', replica_ttl: '2s' } };
    // Usage records to a file sink and traces to a collector: their exporters' metrics exist.
    const dir = makeTempDir('tahua-alerts-');
    config.usage = { enabled: true, spill_dir: join(dir, 'spill'), sinks: [{ type: 'file', name: 'file', path: join(dir, 'usage.jsonl') }] };
    config.tracing = { enabled: true, endpoint: `http://127.0.0.1:${collector.address().port}/v1/traces`, flush_interval: '100ms' };
    // Deployment "bad" answers every call with a 500: this rule ejects it within moments.
    config.healing = {
      interval: '100ms',
      rules: [
        {
          name: 'eject-failing',
          model: MODEL,
          deployment: '*',
          when: { metric: 'error_rate', above: 50, for: '200ms', min_requests: 3 },
          action: 'eject',
          restore_after: '10m',
        },
      ],
    };
    gw = await startTahua({ config });
    // Prometheus starts now: its first scrape comes ~5 s later (service discovery's
    // first update), while the traffic runs.
    prom = await startPrometheus({ targets: [`127.0.0.1:${gw.port}`], ruleFiles: [ALERTS_FILE] });
    traffic = startTraffic(gw.url);
    await withTimeout(traffic.firstRound, 15_000, 'three rounds of traffic');
  });

  after(async () => {
    await traffic?.stop();
    await prom?.stop();
    await gw?.kill();
    await upGood?.close();
    await upBad?.close();
    collector?.closeAllConnections();
    if (collector) await new Promise((resolve) => collector.close(resolve));
    await redis?.stop();
  });

  /**
   * Requests in rounds until stopped: plain and streamed answers for tenant a, the
   * virtual model through the route, tenant b over its 2 requests a minute (429), a
   * missing key (401). Statuses are not asserted: the point is that every kind of series
   * exists and moves.
   */
  function startTraffic(url) {
    let running = true;
    let rounds = 0;
    let resolveFirst;
    const firstRound = new Promise((resolve) => { resolveFirst = resolve; });
    const send = (model, headers, extra) => post(url, '/v1/chat/completions', chatBody(model, extra), { headers }).catch(() => null);
    const loop = (async () => {
      while (running) {
        await Promise.all([
          send(MODEL, bearer(KEY_A)),
          send(MODEL, bearer(KEY_A), { stream: true, stream_options: { include_usage: true } }),
          send('auto', bearer(KEY_A)),
          send(MODEL, bearer(KEY_B)),
        ]);
        if (rounds % 5 === 0) await send(MODEL, {});
        rounds += 1;
        if (rounds === 3) resolveFirst();
        await delay(50);
      }
      resolveFirst();
    })();
    return {
      firstRound,
      get rounds() {
        return rounds;
      },
      async stop() {
        running = false;
        await withTimeout(loop, 15_000, 'the traffic loop to end');
      },
    };
  }

  const query = async (expr) => prom.api('/api/v1/query', { query: expr });
  const hasData = async (expr) => {
    const { body } = await query(expr);
    return body.status === 'success' && body.data.result.length > 0;
  };

  it('every metric the alerts and the dashboard name is exported by the gateway', async () => {
    const { types } = await scrape(gw.url);
    const exported = (name) => {
      if (types[name]) return true;
      const m = /^(.*)_(bucket|sum|count)$/.exec(name);
      return Boolean(m && (types[m[1]] === 'histogram' || (m[2] !== 'bucket' && types[m[1]] === 'summary')));
    };
    const dashboard = readDashboard();
    const referenced = new Map(); // name -> where
    const note = (name, where) => referenced.set(name, [...(referenced.get(name) ?? []), where]);
    assert.equal(ruleExpressions.length, ruleNames.length, 'one expr per alert');
    ruleExpressions.forEach((expr, i) => metricNames(expr).forEach((n) => note(n, `alert ${ruleNames[i]}`)));
    for (const { where, expr } of dashboardQueries(dashboard)) metricNames(expr).forEach((n) => note(n, where));
    for (const v of dashboard.templating.list) {
      const q = typeof v.query === 'string' ? v.query : v.query?.query;
      const m = /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(q ?? '');
      if (m) note(m[1], `variable $${v.name}`);
    }
    assert.ok(referenced.size >= 40, `${referenced.size} names found`);
    const missing = [...referenced.keys()].filter((n) => !exported(n)).sort();
    assert.deepEqual(
      missing,
      [],
      `not exported by ${gw.url}/metrics:\n${missing.map((n) => `  ${n} (${[...new Set(referenced.get(n))].join('; ')})`).join('\n')}`,
    );
  });

  it('Prometheus scraping the gateway runs every panel query; the core panels have data', async () => {
    try {
      await eventually(() => hasData('tahua_requests_total'), { timeout: 20_000, interval: 250, what: 'tahua_requests_total in Prometheus' });
    } catch (err) {
      const targets = await prom.api('/api/v1/targets').catch((e) => ({ body: String(e) }));
      throw new Error(`${err.message}; targets: ${JSON.stringify(targets.body?.data?.activeTargets?.map((x) => [x.scrapeUrl, x.health, x.lastError]) ?? targets.body)}; prometheus log:\n${prom.log.slice(-5).join('\n')}`);
    }
    const queries = dashboardQueries(readDashboard());
    const core = queries.filter((q) => CORE_PANELS.includes(q.title));
    assert.equal(new Set(core.map((q) => q.title)).size, CORE_PANELS.length, 'the core panels exist');
    // rate() needs two samples in its window: a few more scrapes.
    await eventually(async () => {
      for (const q of core) if (!(await hasData(grafanaToPromql(q.expr)))) return false;
      return true;
    }, { timeout: 10_000, interval: 250, what: `data in the core panels (${CORE_PANELS.join(', ')})` });

    const failures = [];
    const end = Math.floor(Date.now() / 1000);
    for (const q of queries) {
      const expr = grafanaToPromql(q.expr);
      const instant = await query(expr);
      if (instant.body.status !== 'success') failures.push(`${q.where}: ${instant.body.errorType}: ${instant.body.error}\n    ${expr}`);
      const range = await prom.api('/api/v1/query_range', { query: expr, start: String(end - 30), end: String(end), step: '1' });
      if (range.body.status !== 'success') failures.push(`${q.where} (range): ${range.body.errorType}: ${range.body.error}`);
    }
    assert.deepEqual(failures, [], 'queries Prometheus refused');
    for (const q of core) assert.ok(await hasData(grafanaToPromql(q.expr)), `${q.where} has data`);
  });

  it('Prometheus evaluates every alert rule on the gateway\'s series without error', async () => {
    const rules = await eventually(async () => {
      const { body } = await prom.api('/api/v1/rules');
      const list = body.data.groups.flatMap((g) => g.rules);
      return list.length === ruleNames.length && list.every((r) => r.health !== 'unknown') && list;
    }, { timeout: 10_000, interval: 250, what: 'every rule evaluated once' });
    assert.deepEqual(rules.map((r) => r.name), ruleNames);
    const bad = rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.health} ${r.lastError}`);
    assert.deepEqual(bad, [], 'rules that failed to evaluate');
    // The names this file's parser found in each expr are the ones in Prometheus's own
    // parse of it (the YAML and PromQL parsers agree with ours).
    rules.forEach((r, i) => assert.deepEqual(metricNames(r.query).sort(), metricNames(ruleExpressions[i]).sort(), r.name));
  });

  it('TahuaSelfHealingAction fires when the gateway ejects the failing deployment', async () => {
    const alert = await eventually(async () => {
      const { body } = await prom.api('/api/v1/alerts');
      return body.data.alerts.find((a) => a.labels.alertname === 'TahuaSelfHealingAction' && a.state === 'firing');
    }, { timeout: 15_000, interval: 250, what: 'TahuaSelfHealingAction firing' });
    assert.equal(alert.labels.rule, 'eject-failing');
    assert.equal(alert.labels.action, 'eject');
    assert.equal(alert.labels.severity, 'info');
    assert.equal(alert.labels.instance, `127.0.0.1:${gw.port}`);
    assert.equal(alert.annotations.summary, 'tahua: self-healing rule eject-failing took action eject');
    assert.ok(alert.annotations.runbook.includes('/admin/v1/healing'), alert.annotations.runbook);
    assert.ok(traffic.rounds > 0);
  });
});
