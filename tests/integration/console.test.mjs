// The web console (GET /admin/console, src/admin/console/) in a real browser (Debian's
// Chromium driven by playwright-core) against the real binary with a SQLite spend ledger
// and a mock upstream: sign in, create a tenant and issue a key in the page, call the
// gateway with that key through the openai SDK, see its cost in Spend, revoke it in the
// page and see the SDK refused; a tenant admin sees its tenant only; data is text, never
// markup; the page's CSP and the admin API's Origin check.
//
// TAHUA_CONSOLE_SCREENSHOTS=1 writes the screenshots into docs/images/ (1280 and 390
// pixels wide); without it they go to a temporary directory.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, REPO_ROOT } from './lib/tahua.mjs';
import { adminSection, startWithAdmin, TOKEN } from './lib/admin.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { startCollector } from './lib/collector.mjs';
import { chatBody, post } from './lib/http.mjs';

const PAGE_FILE = join(REPO_ROOT, 'src/admin/console/console.html');
const SCRIPT_FILE = join(REPO_ROOT, 'src/admin/console/console.js');
const MODEL = 'gpt-console';
const KEY_A = 'tk-console-team-a-0123456789';
const KEY_B = 'tk-console-team-b-0123456789';
const TENANT_TOKEN = 'team-b-admin-token-0123456789';
const TOKEN_KEY = 'tahua.console-token'; // the page's sessionStorage entry
const XSS = '<img src=x onerror=alert(1)>';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const UI_TIMEOUT_MS = 8000;
const BROWSER_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const sel = (id) => `[data-testid="${id}"]`;

/**
 * A gateway with a priced model, team-a and team-b (team-b has a tenant admin token), a
 * SQLite ledger and a JSON-lines file of the same records; `configure(config)` changes
 * the config before the start.
 */
async function start(t, { configure } = {}) {
  const upstream = await startMockUpstream({ t });
  const dir = makeTempDir('tahua-console-');
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [
      { name: MODEL, provider: 'up', pricing: { input: 10, output: 30 } },
      {
        name: 'gpt-canary',
        canary: { version: 'v2', percent: 10 },
        deployments: [
          { id: 'stable', provider: 'up', upstream_model: 'gpt-stable', version: 'v1' },
          { id: 'next', provider: 'up', upstream_model: 'gpt-next', version: 'v2' },
        ],
      },
    ],
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b', limits: { requests_per_minute: 100 } }];
  config.keys = [{ name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) }];
  config.usage = {
    spill_dir: join(dir, 'spill'),
    sinks: [{ name: 'file', type: 'file', path: join(dir, 'usage.jsonl') }, { name: 'ledger', type: 'sqlite', path: join(dir, 'ledger.db') }],
  };
  config.admin = adminSection({ tenant_tokens: [{ name: 'b-admin', tenant: 'team-b', sha256: sha256(TENANT_TOKEN) }] });
  configure?.(config);
  const started = await startWithAdmin(t, config);
  const client = (key) => new OpenAI({ baseURL: `${started.gw.url}/v1`, apiKey: key, maxRetries: 0 });
  const records = () => readFileSync(join(dir, 'usage.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { ...started, upstream, client, records };
}

/** A raw admin call with any headers (Origin included, which fetch would not send as given). */
function rawAdmin(url, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text, json: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    if (body !== undefined) {
      req.setHeader('content-type', 'application/json');
      req.end(JSON.stringify(body));
    } else req.end();
  });
}

/** Waits (bounded) until `fn(arg)` holds in the page. */
const until = (page, fn, arg, timeout = UI_TIMEOUT_MS) => page.waitForFunction(fn, arg, { timeout, polling: 100 });

async function openConsole(browser, t, url, token = TOKEN, width = 1280) {
  const context = await browser.newContext({ viewport: { width, height: 900 }, acceptDownloads: true });
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  const requests = [];
  page.on('request', (r) => requests.push({ url: r.url(), authorization: r.headers().authorization }));
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // A CSP violation is a console error; an API answer of 4xx the page expects and shows
  // (a tenant token's 403 probe, a refused name) is a "Failed to load resource" one.
  const failedLoads = [];
  page.on('console', (m) => m.type() === 'error' && (/^Failed to load resource/.test(m.text()) ? failedLoads : errors).push(m.text()));
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  await page.goto(`${url}/admin/console`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByTestId('signin-submit').click();
  return { page, requests, errors, dialogs, failedLoads };
}

async function screenshot(page, name) {
  const file = process.env.TAHUA_CONSOLE_SCREENSHOTS === '1' ? join(REPO_ROOT, 'docs/images', name) : join(makeTempDir(), name);
  await page.screenshot({ path: file, fullPage: true, timeout: UI_TIMEOUT_MS });
  assert.ok(statSync(file).size > 10_000, `screenshot of ${statSync(file).size} bytes`);
}

describe('web console', () => {
  let browser;
  before(async () => {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: BROWSER_ARGS, timeout: 15_000 });
  });
  after(() => browser?.close());

  it('serves the page and its script as built, with a strict CSP, no-store and nosniff; nothing from elsewhere', async (t) => {
    const { admin } = await start(t);
    const page = await admin('GET', '/admin/console', { token: null });
    assert.equal(page.status, 200);
    assert.match(page.headers['content-type'], /^text\/html/);
    assert.ok(page.text === readFileSync(PAGE_FILE, 'utf8'), 'the binary serves console.html as it is (rebuild after editing it)');
    const script = await admin('GET', '/admin/console.js', { token: null });
    assert.equal(script.status, 200);
    assert.match(script.headers['content-type'], /^text\/javascript/);
    assert.ok(script.text === readFileSync(SCRIPT_FILE, 'utf8'), 'the binary serves console.js as it is');
    for (const r of [page, script]) {
      const csp = r.headers['content-security-policy'] ?? '';
      for (const directive of ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"])
        assert.ok(csp.includes(directive), `${directive} in ${csp}`);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*|https?:/);
      assert.equal(r.headers['cache-control'], 'no-store');
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
    }
    // The one <style> is allowed by its hash, computed by the binary from the page it serves.
    const style = /<style>([\s\S]*?)<\/style>/.exec(page.text)[1];
    const hash = createHash('sha256').update(style).digest('base64');
    assert.ok(page.headers['content-security-policy'].includes(`style-src 'sha256-${hash}'`));
    // No inline script, no style attribute (the CSP would refuse both), nothing loaded from elsewhere.
    assert.doesNotMatch(page.text, /<script(?![^>]*\ssrc="\/admin\/console\.js")/);
    assert.doesNotMatch(page.text, /\sstyle=|\son[a-z]+=/i);
    assert.doesNotMatch(page.text, /https?:\/\//);
    assert.deepEqual([...new Set(script.text.match(/https?:\/\/[^'"`\s]+/g))], ['http://www.w3.org/2000/svg'], 'the SVG namespace is the script\'s only URL');
    assert.doesNotMatch(script.text, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    assert.doesNotMatch(script.text, /localStorage|document\.cookie/);
    // The admin API's answers are not kept by caches either (a new key's secret is in one).
    const tenants = await admin('GET', '/admin/v1/tenants');
    assert.equal(tenants.headers['cache-control'], 'no-store');
    assert.equal((await admin('POST', '/admin/console', { token: null })).status, 405);
  });

  it('refuses a change from a foreign Origin (403); same origin or none is allowed; reads are not affected', async (t) => {
    const { url } = await start(t);
    const host = new URL(url).host;
    for (const origin of ['http://evil.example', 'null', `http://${host}.evil.example`, `https://evil.example:${new URL(url).port}`]) {
      const r = await rawAdmin(url, 'POST', '/admin/v1/tenants', { headers: { origin }, body: { name: 'from-elsewhere' } });
      assert.equal(r.status, 403, `${origin}: ${r.text}`);
      assert.equal(r.json.error.code, 'foreign_origin');
    }
    for (const method of ['PATCH', 'DELETE']) {
      const r = await rawAdmin(url, method, '/admin/v1/tenants/team-a', { headers: { origin: 'http://evil.example' }, body: method === 'PATCH' ? {} : undefined });
      assert.equal(r.status, 403, `${method}: ${r.text}`);
    }
    assert.equal((await rawAdmin(url, 'GET', '/admin/v1/tenants/from-elsewhere')).status, 404, 'nothing was created');
    assert.equal((await rawAdmin(url, 'GET', '/admin/v1/tenants', { headers: { origin: 'http://evil.example' } })).status, 200);
    const same = await rawAdmin(url, 'POST', '/admin/v1/tenants', { headers: { origin: `http://${host}` }, body: { name: 'same-origin' } });
    assert.equal(same.status, 201, same.text);
    const none = await rawAdmin(url, 'POST', '/admin/v1/tenants', { body: { name: 'no-origin' } });
    assert.equal(none.status, 201, none.text);
  });

  it('creates a tenant and a key, shows the key\'s spend as the ledger records it, revokes the key', async (t) => {
    const { url, admin, client, records } = await start(t);
    const { page, requests, errors, dialogs, failedLoads } = await openConsole(browser, t, url);
    await page.getByTestId('view-tenants').waitFor();
    assert.equal(await page.getByTestId('who').getAttribute('data-role'), 'admin');
    assert.ok(await page.isHidden(sel('signin-form')));

    // A tenant, through the form.
    await page.getByTestId('tenant-name').fill('team-ui');
    await page.getByTestId('tenant-limit-usd_per_month').fill('5');
    await page.getByTestId('tenant-submit').click();
    await page.getByTestId('tenant-row-team-ui').waitFor();
    const created = await admin('GET', '/admin/v1/tenants/team-ui');
    assert.equal(created.status, 200);
    assert.equal(created.json.limits.usd_per_month, 5);

    // A key for it (its name starts with '-': a spreadsheet would read it as a formula).
    await page.getByTestId('tenant-keys-team-ui').click();
    await until(page, () => document.querySelector('[data-testid="keys-tenant"]').textContent === 'team-ui');
    await page.getByTestId('key-name').fill('-ui-key');
    await page.getByTestId('key-limit-requests_per_minute').fill('50');
    await page.getByTestId('key-submit').click();
    await page.getByTestId('secret-box').waitFor();
    const secret = (await page.getByTestId('secret-value').textContent()).trim();
    assert.match(secret, /^tk-[0-9a-f]{16,}$/);
    await page.getByTestId('key-row--ui-key').waitFor();
    const key = await admin('GET', '/admin/v1/keys/-ui-key');
    assert.equal(key.json.tenant, 'team-ui');
    assert.equal(key.json.limits.requests_per_minute, 50);
    assert.ok(!JSON.stringify(key.json).includes(secret), 'the API never shows the secret again');

    // The SDK with that key; its record's cost is what Spend shows for the tenant.
    const answer = await client(secret).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.ok(answer.choices[0].message.content.length > 0);
    await page.getByTestId('nav-spend').click();
    assert.equal(await page.getByTestId('secret-value').textContent(), '', 'the secret left the page with the view');
    const record = await eventually(() => records().find((r) => r.key === '-ui-key'), { timeout: 5000, what: 'the usage record' });
    assert.ok(record.cost_usd > 0, 'a priced request costs something');
    await eventually(async () => {
      await page.getByTestId('spend-submit').click();
      const v = await page.getByTestId('spend-cost-team-ui').getAttribute('data-value', { timeout: 1000 }).catch(() => null);
      return v !== null && Math.abs(Number(v) - record.cost_usd) < 1e-9;
    }, { timeout: 10_000, interval: 250, what: 'team-ui\'s spend in the page, as recorded' });
    assert.equal(Number(await page.getByTestId('spend-chart').getAttribute('data-bars')), 1, 'one day, one bar');
    assert.match(await page.getByTestId('spend-range').textContent(), /UTC/);

    // CSV per key: the '-' key name made inert.
    await page.getByTestId('spend-by').selectOption('key');
    await page.getByTestId('spend-submit').click();
    await page.getByTestId('spend-row--ui-key').waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('spend-csv').click()]);
    const csv = readFileSync(await download.path(), 'utf8');
    // Built in the page (the API has no CSV) or the API's own: the '-' key name made inert either way.
    if ((await page.getByTestId('spend-csv').getAttribute('data-source')) === 'page') assert.match(csv.split('\r\n')[0], /^"day","key","requests"/);
    assert.match(csv.split(/\r?\n/)[0], /key/);
    assert.match(csv, /(^|,)"?'-ui-key"?(,|$)/m);
    assert.ok(!/(^|,)"?-ui-key/m.test(csv), 'no cell starts with -');
    await screenshot(page, 'console-spend.png');

    // The tenants view: this month's spend and the quota's use.
    await page.getByTestId('nav-tenants').click();
    await until(page, ([c]) => Math.abs(Number(document.querySelector('[data-testid="tenant-spend-team-ui"]')?.dataset.value) - c) < 1e-9, [record.cost_usd]);
    await page.getByTestId('quota-team-ui-usd_per_month').waitFor();
    await screenshot(page, 'console-tenants.png');

    // Edit the key's limits, then revoke it through the page's confirmation dialog.
    await page.getByTestId('tenant-keys-team-ui').click();
    await page.getByTestId('key-edit--ui-key').click();
    await page.getByTestId('key-limit-requests_per_minute').fill('');
    await page.getByTestId('key-limit-tokens_per_minute').fill('9000');
    await page.getByTestId('key-submit').click();
    await eventually(async () => (await admin('GET', '/admin/v1/keys/-ui-key')).json.limits.tokens_per_minute === 9000, { timeout: UI_TIMEOUT_MS, what: 'the edited limits' });
    assert.equal((await admin('GET', '/admin/v1/keys/-ui-key')).json.limits.requests_per_minute, undefined, 'an emptied limit is removed');
    // The server has the change before the page has its answer: wait for the page to be
    // done with it (its form reset, the keys listed again) before editing once more, or
    // the reset could clear the form being filled and the Edit clicked could be the old
    // row's (under load it was: the budget never arrived).
    await until(page, () => !document.querySelector('#key-form').dataset.editing &&
      document.querySelector('[data-testid="key-row--ui-key"]')?.textContent.includes('tokens_per_minute: 9,000'));
    // A monthly budget below what the key has spent: its next request is refused (what it
    // may cost at most does not fit: 429 naming the key's budget).
    const budget = record.cost_usd / 2;
    await page.getByTestId('key-edit--ui-key').click();
    await page.getByTestId('key-limit-usd_per_month').fill(String(budget));
    await page.getByTestId('key-submit').click();
    await eventually(async () => (await admin('GET', '/admin/v1/keys/-ui-key')).json.limits.usd_per_month === budget, { timeout: UI_TIMEOUT_MS, what: 'the key\'s budget' });
    await assert.rejects(client(secret).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e.status === 429 && /usd per month \(key limit\)/.test(e.error?.message), 'refused by the key\'s budget');
    await page.getByTestId('key-revoke--ui-key').click();
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('key-row--ui-key').waitFor({ state: 'detached' });
    await assert.rejects(client(secret).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }), (e) => e.status === 401);

    // The token: in sessionStorage only, never in a URL; every API call carries it.
    assert.equal(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), TOKEN);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    assert.equal(await page.evaluate(() => document.cookie), '');
    assert.ok(requests.every((r) => !r.url.includes(TOKEN) && !r.url.includes(secret)));
    assert.ok(requests.filter((r) => r.url.includes('/admin/v1/')).every((r) => r.authorization === `Bearer ${TOKEN}`));
    assert.deepEqual(requests.filter((r) => !r.url.startsWith('blob:') && new URL(r.url).host !== new URL(url).host), [], 'nothing from elsewhere');
    assert.deepEqual(errors, [], 'no script error and no CSP violation');
    assert.deepEqual(failedLoads, [], 'no failed load (no favicon asked for either)');
    assert.deepEqual(dialogs, []);
  });

  it('an edit begun while the previous change is on its way is not cleared by that change\'s answer', async (t) => {
    const { url, admin } = await start(t);
    assert.equal((await admin('POST', '/admin/v1/keys', { json: { name: 'race-key', tenant: 'team-a' } })).status, 201);
    const { page, errors } = await openConsole(browser, t, url);
    await page.getByTestId('tenant-keys-team-a').click();
    await page.getByTestId('key-edit-race-key').click();
    await page.getByTestId('key-limit-requests_per_minute').fill('10');
    // The change is held on its way (the server gets it only when released).
    let release;
    const held = new Promise((resolve) => (release = resolve));
    let sent;
    const arrived = new Promise((resolve) => (sent = resolve));
    await page.route('**/admin/v1/keys/race-key', async (route) => {
      if (route.request().method() !== 'PATCH') return route.continue();
      sent();
      await held;
      await route.continue();
    });
    await page.getByTestId('key-submit').click();
    await arrived;
    // Meanwhile the operator begins the next edit.
    await page.getByTestId('key-edit-race-key').click();
    await page.getByTestId('key-limit-tokens_per_minute').fill('77');
    release();
    await until(page, () => /^Key race-key changed\./.test(document.querySelector('#status')?.textContent ?? ''));
    await eventually(async () => (await admin('GET', '/admin/v1/keys/race-key')).json.limits.requests_per_minute === 10, { timeout: UI_TIMEOUT_MS, what: 'the first change' });
    await page.getByTestId('key-row-race-key').waitFor();
    assert.equal(await page.getByTestId('key-form').evaluate((f) => f.dataset.editing), 'race-key', 'still editing');
    assert.equal(await page.getByTestId('key-limit-tokens_per_minute').inputValue(), '77', 'what was typed is kept');
    assert.deepEqual(errors, []);
  });

  it('renders data as text: markup in a key\'s metadata is shown, never run', async (t) => {
    const { url, admin } = await start(t);
    const made = await admin('POST', '/admin/v1/keys', { json: { name: 'xss-key', tenant: 'team-a', metadata: { owner: XSS } } });
    assert.equal(made.status, 201, made.text);
    // The API refuses markup in a tenant's name; the page shows its answer as text.
    assert.equal((await admin('POST', '/admin/v1/tenants', { json: { name: XSS } })).status, 400);
    const { page, errors, dialogs } = await openConsole(browser, t, url);
    await page.getByTestId('tenant-keys-team-a').click();
    const cell = page.getByTestId('key-metadata-xss-key');
    await cell.waitFor();
    assert.equal(await cell.textContent(), `owner=${XSS}`);
    assert.equal(await page.locator('img').count(), 0, 'no img element was made');
    await page.getByTestId('tenant-name').evaluate((input) => input.removeAttribute('pattern')); // past the form's own check
    await page.getByTestId('tenant-name').fill(XSS);
    await page.getByTestId('tenant-submit').click();
    await until(page, () => /^400: name/.test(document.querySelector('#tenant-form [data-error]').textContent));
    assert.equal(await page.locator('img').count(), 0);
    assert.deepEqual(dialogs, [], 'no script ran');
    assert.deepEqual(errors, []);
  });

  it('a tenant admin sees and changes its own tenant only, in the page and through the API', async (t) => {
    const { url, admin } = await start(t);
    const { page, errors } = await openConsole(browser, t, url, TENANT_TOKEN, 390);
    await page.getByTestId('tenant-row-team-b').waitFor();
    assert.equal(await page.getByTestId('who').getAttribute('data-role'), 'tenant');
    assert.equal(await page.locator(sel('tenant-row-team-a')).count(), 0);
    assert.ok(await page.isHidden(sel('tenant-form')), 'no tenant creation');
    assert.ok(await page.isHidden(sel('nav-models')), 'no models view');
    await page.getByTestId('key-row-b-main').waitFor();
    // It issues a key of its own tenant.
    await page.getByTestId('key-name').fill('b-from-console');
    await page.getByTestId('key-submit').click();
    await page.getByTestId('secret-box').waitFor();
    assert.equal((await admin('GET', '/admin/v1/keys/b-from-console')).json.tenant, 'team-b');
    // Spend is its own tenant's (an empty ledger: nothing recorded).
    await page.getByTestId('nav-spend').click();
    await page.getByTestId('spend-total-cost').waitFor();
    await screenshot(page, 'console-tenant-admin-390.png');
    // The API behind it refuses the rest.
    const asTenant = (method, path, json) => admin(method, path, { token: TENANT_TOKEN, json });
    assert.deepEqual((await asTenant('GET', '/admin/v1/tenants')).json.tenants.map((x) => x.name), ['team-b']);
    assert.equal((await asTenant('GET', '/admin/v1/tenants/team-a')).status, 404);
    assert.equal((await asTenant('GET', '/admin/v1/keys?tenant=team-a')).status, 403);
    assert.equal((await asTenant('GET', `/admin/v1/usage?from=2026-01-01&tenant=team-a`)).status, 403);
    assert.equal((await asTenant('POST', '/admin/v1/tenants', { name: 'mine' })).status, 403);
    assert.equal((await asTenant('POST', '/admin/v1/keys', { name: 'into-a', tenant: 'team-a' })).status, 403);
    assert.deepEqual(errors, []);
  });

  it('a wrong token: the form again with the 401, nothing kept; the form works from the keyboard', async (t) => {
    const { url } = await start(t);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    t.after(() => context.close());
    const page = await context.newPage();
    page.setDefaultTimeout(UI_TIMEOUT_MS);
    await page.goto(`${url}/admin/console`);
    await until(page, () => document.activeElement?.id === 'token'); // focused on load
    await page.keyboard.type('not-the-admin-token-0000');
    await page.keyboard.press('Enter');
    await until(page, () => /401/.test(document.querySelector('[data-testid="signin-error"]').textContent));
    assert.ok(await page.isVisible(sel('signin-form')));
    assert.ok(await page.isHidden(sel('view-tenants')));
    assert.equal(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);
    // The right one, typed and sent from the keyboard too; then a reload keeps the tab's session.
    await page.getByLabel('Admin token').focus();
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await page.getByTestId('view-tenants').waitFor();
    await page.reload();
    await page.getByTestId('tenant-row-team-a').waitFor();
    assert.ok(await page.isHidden(sel('signin-form')));
    await page.getByTestId('signout').click();
    await page.getByTestId('signin-form').waitFor();
    assert.equal(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY), null);
  });

  it('requests: filtered by tenant, key, model, status, end reason and time; one request\'s details (ids, trace, attempts, verdicts)', async (t) => {
    const collector = await startCollector({ t });
    const { url, admin, gw, upstream } = await start(t, {
      configure: (config) => {
        config.keys.push({ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) });
        config.providers[0].retry = { attempts: 2, backoff: '10ms' };
        config.tracing = { endpoint: `${collector.url}/v1/traces`, flush_interval: '50ms' };
        config.guardrails = {
          policies: [{ name: 'words', rules: [{ name: 'flagged', literals: ['banana'], action: 'flag' }, { name: 'blocked', literals: ['forbidden'], action: 'block' }] }],
        };
      },
    });
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const ask = (key, id, body, headers = {}) => post(gw.url, '/v1/chat/completions', body, { headers: { authorization: `Bearer ${key}`, 'x-request-id': id, ...headers } });
    // Five requests, one at a time (so their times differ): two tenants and keys, two models,
    // a guardrail's flag and block, a retried upstream call.
    assert.equal((await ask(KEY_A, 'console-flagged', chatBody(MODEL, { content: 'a banana, please' }), { traceparent: `00-${traceId}-00f067aa0ba902b7-01` })).status, 200);
    assert.equal((await ask(KEY_A, 'console-canary', chatBody('gpt-canary'))).status, 200);
    upstream.next({ mode: 'error', status: 503 });
    assert.equal((await ask(KEY_B, 'console-retried', chatBody(MODEL))).status, 200);
    assert.equal((await ask(KEY_B, 'console-blocked', chatBody(MODEL, { content: 'something forbidden' }))).status, 400);
    assert.equal((await ask(KEY_B, 'console-b-canary', chatBody('gpt-canary'))).status, 200);
    const from = new Date(Date.now() - 7 * 86400e3).toISOString().slice(0, 10);
    const all = await eventually(async () => {
      const r = await admin('GET', `/admin/v1/requests?from=${from}`);
      return r.status === 200 && r.json.requests.length === 5 && r.json.requests;
    }, { timeout: 10_000, what: 'the five requests in the ledger' });
    const byRequest = Object.fromEntries(all.map((r) => [r.request_id, r]));
    assert.equal(byRequest['console-flagged'].guardrails, 'words/flagged:flag');
    assert.equal(byRequest['console-retried'].attempts, 2);
    assert.equal(byRequest['console-blocked'].status, 400);

    const { page, errors } = await openConsole(browser, t, url);
    await page.getByTestId('view-tenants').waitFor();
    await page.getByTestId('nav-requests').click();
    const shownIds = () => page.$$eval('#requests-body tr[data-testid^="request-row-"]', (rows) => rows.map((r) => r.dataset.testid.slice('request-row-'.length)).sort());
    // A datetime-local value as Chromium writes it (no ".000", no ":00" seconds), from a UTC time.
    const localValue = (ts) => ts.replace(/Z$/, '').replace(/\.000$/, '').replace(/^(.{16}):00$/, '$1');
    /** The form with only `fields` set, submitted: the page asks the API with them and shows what it answers. */
    async function filterBy(fields, expected, what) {
      assert.ok(expected.length > 0 && expected.length < all.length, `${what}: a filter that leaves some rows out (${expected.length} of ${all.length})`);
      for (const id of ['requests-to', 'requests-tenant', 'requests-key', 'requests-model', 'requests-status']) await page.getByTestId(id).fill('');
      await page.getByTestId('requests-end-reason').selectOption('');
      await page.getByTestId('requests-from').fill(`${from}T00:00`);
      for (const [id, v] of Object.entries(fields)) {
        if (id === 'requests-end-reason') await page.getByTestId(id).selectOption(v);
        else await page.getByTestId(id).fill(v);
      }
      const [answer] = await Promise.all([
        page.waitForResponse((r) => r.url().includes('/admin/v1/requests?')),
        page.getByTestId('requests-submit').click(),
      ]);
      assert.equal(answer.status(), 200, `${what}: ${await answer.text()}`);
      const want = expected.map((r) => r.record_id).sort();
      await until(page, (ids) => JSON.stringify([...document.querySelectorAll('#requests-body tr[data-testid^="request-row-"]')]
        .map((r) => r.dataset.testid.slice('request-row-'.length)).sort()) === JSON.stringify(ids), want).catch(() => {});
      assert.deepEqual(await shownIds(), want, what);
      return new URL(answer.url()).searchParams;
    }
    // Unfiltered (a week back): all five.
    await page.getByTestId('requests-from').fill(`${from}T00:00`);
    await page.getByTestId('requests-submit').click();
    await until(page, () => document.querySelectorAll('#requests-body tr[data-testid^="request-row-"]').length === 5);
    const pick = (pred) => all.filter(pred);
    assert.equal((await filterBy({ 'requests-tenant': 'team-b' }, pick((r) => r.tenant === 'team-b'), 'tenant')).get('tenant'), 'team-b');
    assert.equal((await filterBy({ 'requests-key': 'a-main' }, pick((r) => r.key === 'a-main'), 'key')).get('key'), 'a-main');
    assert.equal((await filterBy({ 'requests-model': 'gpt-canary' }, pick((r) => r.model === 'gpt-canary'), 'model')).get('model'), 'gpt-canary');
    assert.equal((await filterBy({ 'requests-status': '4xx' }, pick((r) => r.status >= 400 && r.status < 500), 'status')).get('status'), '4xx');
    const blockedEnd = byRequest['console-blocked'].end_reason;
    assert.equal((await filterBy({ 'requests-end-reason': blockedEnd }, pick((r) => r.end_reason === blockedEnd), 'end reason')).get('end_reason'), blockedEnd);
    // Time: from the second request (inclusive) to the fourth (exclusive), to the millisecond.
    const times = all.map((r) => r.ts).sort();
    const window = await filterBy({ 'requests-from': localValue(times[1]), 'requests-to': localValue(times[3]) },
      pick((r) => r.ts >= times[1] && r.ts < times[3]), 'time');
    assert.deepEqual([window.get('from'), window.get('to')], [times[1], times[3]], 'the times sent as UTC, to the millisecond');
    // Together: team-b's 2xx on gpt-canary.
    await filterBy({ 'requests-tenant': 'team-b', 'requests-model': 'gpt-canary', 'requests-status': '200' },
      pick((r) => r.tenant === 'team-b' && r.model === 'gpt-canary' && r.status === 200), 'tenant, model and status');
    // A bad filter: the API's 400, shown as it says.
    await page.getByTestId('requests-status').fill('abc');
    await page.getByTestId('requests-submit').click();
    await until(page, () => /^Could not load requests: 400: status: expected an HTTP status/.test(document.querySelector('[data-testid="status"]').textContent));

    // One request's details, from /admin/v1/requests/{record_id}.
    await filterBy({ 'requests-key': 'a-main' }, pick((r) => r.key === 'a-main'), 'key, again');
    const flagged = byRequest['console-flagged'];
    await page.getByTestId(`request-open-${flagged.record_id}`).click();
    await page.getByTestId('request-detail').waitFor();
    const detail = async (field) => (await page.getByTestId(`request-detail-${field}`).textContent()).trim();
    await until(page, (id) => document.querySelector('[data-testid="request-detail"]')?.dataset.recordId === id, flagged.record_id);
    assert.equal(await detail('record_id'), flagged.record_id);
    assert.equal(await detail('request_id'), 'console-flagged');
    assert.equal(await detail('trace_id'), traceId, 'the caller\'s trace');
    assert.equal(await detail('attempts'), '1');
    assert.equal(await detail('guardrails'), 'words/flagged:flag');
    assert.equal(await detail('tenant'), 'team-a');
    assert.equal(await detail('key'), 'a-main');
    assert.equal(await detail('status'), '200');
    assert.equal(await detail('guardrails_unchecked'), '\u2013');
    // The retried one (team-b's): two attempts, no verdict; the blocked one: its verdict.
    await filterBy({ 'requests-tenant': 'team-b' }, pick((r) => r.tenant === 'team-b'), 'tenant, again');
    assert.ok(await page.getByTestId('request-detail').isHidden(), 'a new page of the log closes the details');
    await page.getByTestId(`request-open-${byRequest['console-retried'].record_id}`).click();
    await until(page, (id) => document.querySelector('[data-testid="request-detail"]')?.dataset.recordId === id, byRequest['console-retried'].record_id);
    assert.equal(await detail('request_id'), 'console-retried');
    assert.equal(await detail('attempts'), '2');
    assert.equal(await detail('guardrails'), '\u2013');
    await page.getByTestId(`request-open-${byRequest['console-blocked'].record_id}`).click();
    await until(page, (id) => document.querySelector('[data-testid="request-detail"]')?.dataset.recordId === id, byRequest['console-blocked'].record_id);
    assert.equal(await detail('guardrails'), 'words/blocked:block');
    assert.equal(await detail('end_reason'), blockedEnd);
    await screenshot(page, 'console-requests.png');
    await page.getByTestId('request-detail-close').click();
    assert.ok(await page.getByTestId('request-detail').isHidden());
    assert.deepEqual(errors, []);
  });

  it('models: deployments with their state; the canary share changed after a confirmation', async (t) => {
    const { url, admin } = await start(t);
    const { page, errors } = await openConsole(browser, t, url);
    await page.getByTestId('view-tenants').waitFor();
    await page.getByTestId('nav-models').click();
    await page.getByTestId('deployment-state-gpt-canary-next').waitFor();
    assert.equal((await page.getByTestId('deployment-state-gpt-canary-next').textContent()).trim(), 'active');
    assert.equal(await page.getByTestId('canary-gpt-canary').getAttribute('data-value'), '10');
    // Cancelled: nothing changes.
    await page.getByTestId('canary-change-gpt-canary').click();
    await page.getByTestId('canary-percent').fill('55');
    await page.getByTestId('confirm-cancel').click();
    assert.equal((await admin('GET', '/admin/v1/deployments')).json.models.find((m) => m.name === 'gpt-canary').canary.percent, 10);
    // Confirmed: set.
    await page.getByTestId('canary-change-gpt-canary').click();
    await page.getByTestId('canary-percent').fill('25');
    await page.getByTestId('confirm-ok').click();
    await until(page, () => document.querySelector('[data-testid="canary-gpt-canary"]')?.dataset.value === '25');
    assert.equal((await admin('GET', '/admin/v1/deployments')).json.models.find((m) => m.name === 'gpt-canary').canary.percent, 25);
    assert.deepEqual(errors, []);
  });

  it('models: the self-healing actions, newest first (when, rule, model, deployment, action, reason), as the API lists them', async (t) => {
    // healing.test.mjs's setup: deployments a and c of model m fail every call; the rule
    // ejects each (b, healthy, keeps the model up). restore_after is long: nothing is undone
    // while the test looks, so the page and the API are compared on a settled list.
    const upA = await startMockUpstream({ t });
    upA.defaultBehaviour = { mode: 'error', status: 500 };
    const { url, admin, gw } = await start(t, {
      configure: (config) => {
        config.providers.push(openaiProvider('up-a', upA.baseUrl()));
        // team-a has no limits: team-b's 100 requests a minute would stop the traffic
        // before the rule has seen enough of it when the machine is slow.
        config.keys.push({ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) });
        config.models.push({
          name: 'm',
          outlier: { consecutive_failures: 0 }, // only the rule ejects here
          deployments: [{ id: 'a', provider: 'up-a' }, { id: 'b', provider: 'up' }, { id: 'c', provider: 'up-a' }],
        });
        config.healing = {
          interval: '100ms',
          rules: [{ name: 'eject-failing', model: 'm', deployment: '*', when: { metric: 'error_rate', above: 50, for: '200ms', min_requests: 3 }, action: 'eject', restore_after: '1h' }],
        };
      },
    });
    const healing = async () => (await admin('GET', '/admin/v1/healing')).json;
    const { page, errors } = await openConsole(browser, t, url);
    await page.getByTestId('view-tenants').waitFor();
    await page.getByTestId('nav-models').click();
    await until(page, () => document.querySelector('#healing-body')?.dataset.rows === '0');
    assert.match(await page.getByTestId('healing-note').textContent(), /^1 rule, evaluated every 100 ms; in force now: nothing\./);

    // Traffic without gaps from eight callers: the rule needs min_requests in every
    // 100 ms window for its 200 ms (a thin window starts over), however slow the build.
    let sending = true;
    const callers = Array.from({ length: 8 }, async () => {
      while (sending) await post(gw.url, '/v1/chat/completions', chatBody('m'), { headers: { authorization: `Bearer ${KEY_A}` } });
    });
    let last;
    const settled = await eventually(async () => {
      const h = (last = await healing());
      return h.audit.filter((r) => r.action === 'eject').length === 2 && h;
    }, { timeout: 30_000, interval: 50, what: 'a and c ejected' }).catch((e) => {
      throw new Error(`${e.message}; the healing state last: ${JSON.stringify(last)}`);
    }).finally(() => { sending = false; });
    await Promise.all(callers);
    assert.deepEqual(settled.audit.map((r) => r.deployment).sort(), ['a', 'c']);
    await page.getByTestId('nav-models').click();
    await until(page, () => document.querySelector('#healing-body')?.dataset.rows === '2');
    const shown = await page.$$eval('#healing-body tr', (rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
    assert.deepEqual(shown.map((cells) => cells.slice(0, 6)),
      [...settled.audit].reverse().map((r) => [r.ts, 'eject-failing', 'm', r.deployment, 'eject', 'error_rate over threshold']), 'every action, newest first');
    for (const cells of shown) assert.match(cells[6], /^error_rate: [\d.]+ \(threshold 50\)$/);
    // The ejected deployments say so beside their live state; the healthy one does not.
    for (const d of ['a', 'c']) assert.equal(await page.getByTestId(`deployment-healing-m-${d}`).textContent(), 'ejected by self-healing');
    assert.equal(await page.locator(sel('deployment-healing-m-b')).count(), 0);
    const inForce = settled.targets.filter((x) => x.active).map((x) => `eject-failing on m/${x.deployment}`);
    assert.equal(inForce.length, 2);
    assert.match(await page.getByTestId('healing-note').textContent(), new RegExp(`in force now: ${inForce.join(', ')}\\. This replica's last 2 actions`));
    await screenshot(page, 'console-models.png');
    assert.deepEqual(errors, []);
  });
});
