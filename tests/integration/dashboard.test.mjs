// The admin dashboard (GET /admin/dashboard, src/admin/dashboard/dashboard.html) in a real
// browser (Debian's Chromium driven by playwright-core): the page loads without a token and
// asks for one, keeps it in sessionStorage only, and shows the numbers /admin/v1/metrics
// reports, with charts drawn from the polls it made.
//
// TAHUA_DASHBOARD_FROM_FILE=1 serves the page from the source file (a small server in
// front of the admin listener) instead of the copy built into the binary: for working on
// the page without a rebuild. Without it (CI) the binary's own page is tested, and it must
// be the source file's bytes. TAHUA_DASHBOARD_SCREENSHOT=FILE keeps the screenshot.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, REPO_ROOT } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { parseMetrics, sum } from './lib/metrics.mjs';
import { adminSection, startWithAdmin, TOKEN } from './lib/admin.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { toYaml } from './lib/yaml.mjs';

const PAGE_FILE = join(REPO_ROOT, 'src/admin/dashboard/dashboard.html');
const FROM_FILE = process.env.TAHUA_DASHBOARD_FROM_FILE === '1';
const MODEL = 'gpt-dash';
const OTHER = 'gpt-other';
const KEY_A = 'tk-dash-team-a-0123456789';
const KEY_B = 'tk-dash-team-b-0123456789';
const TOKEN_KEY = 'tahua.admin-token'; // the page's sessionStorage entry
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });
// Every browser wait is bounded by these; the page polls every 2 s.
const UI_TIMEOUT_MS = 8000;
const CHART_TIMEOUT_MS = 12_000;

const BROWSER_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** A gateway with two tenants (team-b: 2 requests a minute), per-tenant metrics and an admin listener. */
async function start(t) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    server: { tenant_metrics: true },
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [
      { name: MODEL, provider: 'up', pricing: { input: 10, output: 30 } },
      { name: OTHER, provider: 'up' },
    ],
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b', limits: { requests_per_minute: 2 } }];
  config.keys = [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
  ];
  config.admin = adminSection();
  const started = await startWithAdmin(t, config);
  const origin = FROM_FILE ? await serveFromFile(t, started.url) : started.url;
  return { ...started, upstream, config, origin };
}

/** The page from the source file at /admin/dashboard; everything else proxied to the admin listener. */
async function serveFromFile(t, adminUrl) {
  const server = http.createServer((req, res) => {
    if (req.url === '/admin/dashboard') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(readFileSync(PAGE_FILE));
      return;
    }
    const upstream = http.request(`${adminUrl}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    upstream.on('error', (err) => res.destroy(err));
    req.pipe(upstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${server.address().port}`;
}

async function scrape(admin) {
  const r = await admin('GET', '/admin/v1/metrics');
  assert.equal(r.status, 200, r.text);
  return parseMetrics(r.text);
}

const sel = (id) => `[data-testid="${id}"]`;

/** The raw number behind a data-testid (its data-value), or null without one. */
async function valueOf(page, id) {
  const v = await page.getAttribute(sel(id), 'data-value', { timeout: UI_TIMEOUT_MS });
  return v === null || v === '' ? null : Number(v);
}

/** Waits (bounded) until `fn(page-side arg)` holds in the page. */
function until(page, fn, arg, timeout = UI_TIMEOUT_MS) {
  return page.waitForFunction(fn, arg, { timeout, polling: 100 });
}

/** Waits until the element's data-value is `expected` (a number). */
function untilValue(page, id, expected, timeout = UI_TIMEOUT_MS) {
  return until(page, ([s, v]) => document.querySelector(s)?.dataset.value === v, [sel(id), String(expected)], timeout);
}

async function openDashboard(browser, t, origin, token = TOKEN) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  const requests = [];
  page.on('request', (r) => requests.push({ url: r.url(), authorization: r.headers().authorization }));
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  await page.goto(`${origin}/admin/dashboard`);
  await page.getByTestId('token-input').fill(token);
  await page.getByTestId('token-submit').click();
  return { page, requests, errors };
}

describe('admin dashboard', () => {
  let browser;
  before(async () => {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: BROWSER_ARGS, timeout: 15_000 });
  });
  after(() => browser?.close());

  it('serves the page without a token, self-contained; its data calls need the token', async (t) => {
    const { admin } = await start(t);
    const res = await admin('GET', '/admin/dashboard', { token: null });
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'] ?? '', /^text\/html/);
    const source = readFileSync(PAGE_FILE, 'utf8');
    if (!FROM_FILE) assert.ok(res.text === source, 'the binary serves src/admin/dashboard/dashboard.html as it is (rebuild after editing it)');
    for (const html of [res.text, source]) {
      assert.doesNotMatch(html, /https?:\/\//i, 'no absolute URL');
      assert.doesNotMatch(html, /\b(?:src|href|action)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?\/\//i, 'no external src or href');
      assert.doesNotMatch(html, /<script[^>]*\ssrc\s*=|<link[^>]*\shref\s*=\s*(?!["']?data:)|@import|url\(/i, 'no script, style sheet or font from elsewhere');
    }
    assert.ok(Buffer.byteLength(source) < 60 * 1024, `the page is ${Buffer.byteLength(source)} bytes`);
    // A strict CSP: the one inline script and the one <style> by their hashes, computed by
    // the binary from the page it serves; no style attribute, no handler in the markup.
    const csp = res.headers['content-security-policy'] ?? '';
    const hash = (tag) => `'sha256-${createHash('sha256').update(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(res.text)[1]).digest('base64')}'`;
    for (const directive of ["default-src 'none'", `script-src ${hash('script')}`, `style-src ${hash('style')}`, "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"])
      assert.ok(csp.includes(directive), `${directive} in ${csp}`);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*|https?:/);
    assert.equal((res.text.match(/<script/g) ?? []).length, 1);
    assert.doesNotMatch(res.text, /\sstyle=|\son[a-z]+=/i);
    assert.equal(res.headers['referrer-policy'], 'no-referrer');
    assert.equal((await admin('GET', '/admin/v1/metrics', { token: null })).status, 401);
    assert.equal((await admin('GET', '/admin/v1/metrics', { token: 'not-the-admin-token-0000' })).status, 401);
  });

  it('shows what /admin/v1/metrics reports after a scripted mix of requests, and draws the charts', async (t) => {
    const { gw, admin, upstream, config, origin } = await start(t);
    const send = (model, key, extra) => post(gw.url, '/v1/chat/completions', chatBody(model, extra), { headers: bearer(key) });
    // 5 answered, 1 stream, 1 refused by team-b's 2 requests a minute, 1 upstream error.
    for (const [model, key] of [[MODEL, KEY_A], [MODEL, KEY_A], [OTHER, KEY_A], [MODEL, KEY_B], [OTHER, KEY_B]])
      assert.equal((await send(model, key)).status, 200);
    const stream = await send(MODEL, KEY_A, { stream: true });
    assert.equal(stream.status, 200);
    assert.match(stream.text, /data: \[DONE\]/);
    assert.equal((await send(MODEL, KEY_B)).status, 429);
    upstream.next({ mode: 'error', status: 500 });
    assert.ok((await send(OTHER, KEY_A)).status >= 500);
    // A config published through the admin API: generation 2 and an audit entry.
    const put = await admin('PUT', '/admin/v1/config', { body: toYaml(config), headers: { 'content-type': 'application/yaml' } });
    assert.equal(put.status, 200, put.text);

    const { page, requests, errors } = await openDashboard(browser, t, origin);
    const first = await scrape(admin);
    assert.equal(sum(first, 'tahua_requests_total'), 8);
    await untilValue(page, 'total-requests', 8);
    await page.waitForSelector('#dash', { state: 'visible' });
    assert.ok(await page.isHidden(sel('token-form')), 'the form is gone once the token works');

    // More traffic while the page is open: the next poll has deltas for every chart.
    assert.equal((await send(MODEL, KEY_A)).status, 200);
    assert.equal((await send(OTHER, KEY_A)).status, 200);
    const charts = ['request-rate', 'error-rate', 'latency', 'ttft', 'active-streams'];
    await until(page, (ids) => ids.every((id) => Number(document.querySelector(`[data-testid="chart-${id}"]`)?.dataset.points) >= 1),
      charts, CHART_TIMEOUT_MS);

    // Quiet now: once the page shows the latest total, every number must be the scrape's.
    const m = await scrape(admin);
    await untilValue(page, 'total-requests', sum(m, 'tahua_requests_total'));
    assert.equal(await valueOf(page, 'total-requests'), 10);
    for (const model of [MODEL, OTHER]) {
      assert.equal(await valueOf(page, `requests-${model}`), sum(m, 'tahua_requests_total', { model }), `requests of ${model}`);
      for (const type of ['prompt', 'completion'])
        assert.equal(await valueOf(page, `tokens-${model}-${type}`), sum(m, 'tahua_tokens_total', { model, type }), `${type} tokens of ${model}`);
      assert.equal(await valueOf(page, `cost-${model}`), sum(m, 'tahua_cost_usd_total', { model }), `cost of ${model}`);
    }
    assert.ok((await valueOf(page, `tokens-${MODEL}-prompt`)) > 0);
    assert.ok((await valueOf(page, `cost-${MODEL}`)) > 0, 'the priced model has a cost');
    assert.equal(await valueOf(page, 'rate-limited-total'), sum(m, 'tahua_rate_limited_total'));
    assert.equal(await valueOf(page, 'rate-limited-total'), 1);
    assert.equal(await valueOf(page, 'rate-limited-tenant-requests_per_minute'), 1);
    assert.equal(await valueOf(page, 'active-streams'), 0);
    assert.equal(await valueOf(page, 'active-streams'), sum(m, 'tahua_active_streams'));
    assert.equal(await valueOf(page, 'generation'), sum(m, 'tahua_config_generation'));
    assert.equal(await valueOf(page, 'generation'), 2);
    for (const tenant of ['team-a', 'team-b'])
      assert.equal(await valueOf(page, `tenant-requests-${tenant}`), sum(m, 'tahua_tenant_requests_total', { tenant }), `requests of ${tenant}`);
    assert.equal(await valueOf(page, 'tenant-limited-team-b'), 1);
    // team-b's quota as the admin API's tenant view reports it (a sliding window: it may
    // move between two reads, so the two are compared until they agree).
    const quotaId = 'quota-team-b-tenant-requests_per_minute';
    await eventually(async () => {
      const quota = (await admin('GET', '/admin/v1/tenants/team-b')).json.usage.find((u) => u.limit === 'requests_per_minute');
      return quota.max === 2 && (await valueOf(page, quotaId)) === quota.used;
    }, { timeout: UI_TIMEOUT_MS, interval: 200, what: `${quotaId} as the admin API reports it` });
    assert.equal(await page.getAttribute(sel(quotaId), 'data-max'), '2');
    // The memory store: no Redis series, and the page says so.
    assert.equal(m.samples.some((s) => s.name === 'tahua_store_up'), false);
    assert.equal(await valueOf(page, 'store-up'), null);
    assert.equal((await page.textContent(sel('store-up'))).trim(), 'n/a');
    assert.equal((await page.textContent(sel(`deployment-state-${MODEL}-up`))).trim(), 'active');
    assert.equal(await valueOf(page, 'config-publishes'), 1);
    for (const id of charts) assert.ok(Number(await page.getAttribute(sel(`chart-${id}`), 'data-points')) >= 1, `chart ${id} drew points`);
    assert.equal(typeof (await valueOf(page, 'request-rate')), 'number', 'a request rate (from the last interval)');

    // Nothing but the admin listener was asked for, and never with the token in a URL.
    const host = new URL(origin).host;
    assert.deepEqual(requests.filter((r) => !r.url.startsWith('data:') && new URL(r.url).host !== host), [], 'no request elsewhere');
    assert.ok(requests.every((r) => !r.url.includes(TOKEN)));
    assert.ok(requests.filter((r) => r.url.includes('/admin/v1/')).every((r) => r.authorization === `Bearer ${TOKEN}`));
    assert.deepEqual(errors, [], 'no script error or failed load in the page');

    const shot = join(makeTempDir(), 'dashboard.png');
    await page.screenshot({ path: shot, fullPage: true, timeout: UI_TIMEOUT_MS });
    assert.ok(statSync(shot).size > 10_000, `screenshot of ${statSync(shot).size} bytes`);
    if (process.env.TAHUA_DASHBOARD_SCREENSHOT) copyFileSync(shot, process.env.TAHUA_DASHBOARD_SCREENSHOT);
  });

  it('keeps the token in sessionStorage, never in a URL; a wrong token shows an error and the form', async (t) => {
    const { origin } = await start(t);
    const { page, requests } = await openDashboard(browser, t, origin);
    await until(page, () => document.getElementById('status')?.dataset.updated);
    assert.equal(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), TOKEN);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');
    assert.equal(await page.evaluate(() => document.cookie), '');
    assert.ok(!page.url().includes(TOKEN) && !page.url().includes('?'), page.url());
    assert.ok(requests.every((r) => !r.url.includes(TOKEN)));

    // A reload keeps the session's token: no form, the data again.
    await page.reload();
    await until(page, () => document.getElementById('status')?.dataset.updated);
    assert.ok(await page.isHidden(sel('token-form')));
    // Forgetting it brings the form back.
    await page.getByTestId('logout').click();
    await page.getByTestId('token-form').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);

    // A wrong token: the message, the form again, and nothing kept.
    const wrong = await openDashboard(browser, t, origin, 'not-the-admin-token-0000');
    const message = wrong.page.getByTestId('auth-error');
    await message.waitFor({ state: 'visible' });
    assert.match(await message.textContent(), /401/);
    assert.ok(await wrong.page.isVisible(sel('token-form')));
    assert.ok(await wrong.page.isHidden('#dash'));
    assert.equal(await wrong.page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);
    assert.ok(!wrong.page.url().includes('not-the-admin-token'));
  });
});
