// Tenants, API keys and limits (docs/tenants-and-limits.md), against the real
// binary with the official SDKs: 401/403 in each API's shape before any upstream call,
// request and token limits with their headers, calibration from a stream's real usage,
// quotas, and the answers SDKs must not retry.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { chatBody, chatText, collectData, expectFinalErrorEvent, openStream, post, send, toResult } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { closedPort } from './lib/util.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';

const MODEL = 'gpt-test';
const OTHER = 'gpt-other';
const KEY_A = 'tk-team-a-0123456789abcdef';
const KEY_B = 'tk-team-b-0123456789abcdef';
const KEY_OLD = 'tk-expired-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

async function start(t, { tenants, keys, rate_limits, auth, routes, models, server } = {}) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    server,
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: models ?? [{ name: MODEL, provider: 'up' }, { name: OTHER, provider: 'up' }],
  });
  config.tenants = tenants ?? [{ name: 'team-a' }, { name: 'team-b', models: [MODEL] }];
  config.keys = keys ?? [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A), prefix: 'tk-team-a' },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
    { name: 'a-old', tenant: 'team-a', sha256: sha256(KEY_OLD), expires_at: '2020-01-01T00:00:00Z' },
  ];
  if (rate_limits) config.rate_limits = rate_limits;
  if (auth) config.auth = auth;
  if (routes) config.routes = routes;
  const gw = await startTahua({ config, t });
  return { gw, upstream };
}

const bearer = (key) => ({ authorization: `Bearer ${key}` });

describe('tenants and keys', () => {
  it('refuses a missing, unknown or expired key with 401 in the OpenAI shape, before any upstream call', async (t) => {
    const { gw, upstream } = await start(t);
    for (const [headers, code] of [
      [{}, 'missing_api_key'],
      [bearer('tk-wrong'), 'invalid_api_key'],
      [{ 'x-api-key': 'tk-wrong' }, 'invalid_api_key'],
      [bearer(KEY_OLD), 'invalid_api_key'],
    ]) {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers });
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.equal(r.json.error.code, code);
      assert.ok(!JSON.stringify(r.json).includes('tk-'), 'the answer never echoes a key');
    }
    // Every API path, the model list included.
    assert.equal((await toResult(await send(gw.url, '/v1/models'))).status, 401);
    assert.equal(upstream.requests.length, 0, 'nothing reached the upstream');

    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'tk-wrong', maxRetries: 0 });
    await assert.rejects(sdk.chat.completions.create(chatBody(MODEL)), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError);
      assert.equal(e.code, 'invalid_api_key');
      return true;
    });
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_auth_failures_total', { code: 'invalid_api_key' }), 4);
    assert.equal(sum(m, 'tahua_auth_failures_total', { code: 'missing_api_key' }), 2);
  });

  it('answers the Anthropic SDK with authentication_error, for x-api-key and Bearer alike', async (t) => {
    const { gw, upstream } = await start(t);
    for (const options of [{ apiKey: 'tk-wrong' }, { authToken: 'tk-wrong', apiKey: null }]) {
      const sdk = new Anthropic({ baseURL: gw.url, maxRetries: 0, ...options });
      await assert.rejects(sdk.messages.create({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }), (e) => {
        assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
        assert.equal(e.error.type, 'error');
        assert.equal(e.error.error.type, 'authentication_error');
        return true;
      });
    }
    assert.equal(upstream.requests.length, 0);
  });

  it('lets a valid key through, never forwards it, and limits a key to its models with 403', async (t) => {
    const { gw, upstream } = await start(t);
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY_B, maxRetries: 0 });
    const ok = await sdk.chat.completions.create(chatBody(MODEL));
    const line = await gw.stdout.waitUntil(() => gw.stdout.json().find((l) => l.path === '/v1/chat/completions' && l.status === 200), 3000, 'the access log line');
    assert.equal(line.tenant, 'team-b');
    assert.equal(line.key, 'b-main');
    assert.ok(ok.choices[0].message.content.length > 0);
    assert.equal(upstream.requests.length, 1);
    assert.equal(upstream.requests[0].headers.authorization, 'Bearer sk-test-provider-key', 'the provider key, not the client one');
    assert.ok(!JSON.stringify(upstream.requests[0].headers).includes(KEY_B));

    await assert.rejects(sdk.chat.completions.create(chatBody(OTHER)), (e) => {
      assert.ok(e instanceof OpenAI.PermissionDeniedError, String(e));
      assert.equal(e.code, 'model_not_allowed');
      return true;
    });
    assert.equal(upstream.requests.length, 1, 'the refused model was never called');
    // Team a has no model list: both models.
    const a = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY_A, maxRetries: 0 });
    await a.chat.completions.create(chatBody(OTHER));
    // The model list shows each caller what it may use.
    const ids = async (client) => { const out = []; for await (const m of client.models.list()) out.push(m.id); return out.sort(); };
    assert.deepEqual(await ids(sdk), [MODEL]);
    assert.deepEqual(await ids(a), [OTHER, MODEL].sort());
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: KEY_B, maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: OTHER, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }), (e) => {
      assert.ok(e instanceof Anthropic.PermissionDeniedError, String(e));
      assert.equal(e.error.error.type, 'permission_error');
      return true;
    });
  });

  it('counts per tenant in /metrics only when server.tenant_metrics is on', async (t) => {
    const { gw } = await start(t, { server: { tenant_metrics: true } });
    await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
    await post(gw.url, '/v1/chat/completions', chatBody(OTHER), { headers: bearer(KEY_B) });
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_tenant_requests_total', { tenant: 'team-a', status: '200' }), 1);
    assert.equal(sum(m, 'tahua_tenant_requests_total', { tenant: 'team-b', status: '403' }), 1);
    assert.ok(sum(m, 'tahua_tenant_tokens_total', { tenant: 'team-a', type: 'completion' }) > 0);
    const { gw: plain } = await start(t);
    await post(plain.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
    assert.equal(sum(await scrape(plain.url), 'tahua_tenant_requests_total'), 0, 'off by default');
  });

  it('says at start that authentication is off when no tenants or keys are declared', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
    const gw = await startTahua({ config, t });
    assert.ok(gw.stderr.lines.some((l) => l.includes('authentication is off')), 'a startup warning');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
  });
});

describe('tenants in routing and bulkheads', () => {
  it('routes match on the caller\'s tenant and key', async (t) => {
    const { gw, upstream } = await start(t, {
      routes: [
        { name: 'a-auto', match: { model: 'auto', tenant: 'team-a' }, target: OTHER },
        { name: 'b-auto', match: { model: 'auto', key: ['b-main'] }, target: MODEL },
      ],
    });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('auto'), { headers: bearer(KEY_A) })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('auto'), { headers: bearer(KEY_B) })).status, 200);
    assert.deepEqual(upstream.requests.map((r) => r.json.model), [OTHER, MODEL]);
  });

  it('a canary can be sticky by tenant, with an allow-list of tenants', async (t) => {
    const { gw } = await start(t, {
      server: { deployment_header: true },
      tenants: [{ name: 'team-a' }, { name: 'team-b' }],
      models: [{
        name: MODEL,
        deployments: [{ id: 'stable', provider: 'up', version: 'v1' }, { id: 'next', provider: 'up', version: 'v2' }],
        canary: { version: 'v2', percent: 0, sticky_by: 'tenant', allow: ['team-a'] },
      }],
    });
    for (let i = 0; i < 4; i += 1) {
      const a = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
      const b = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) });
      assert.equal(a.headers['x-tahua-version'], 'v2', 'team-a is on the allow-list');
      assert.equal(b.headers['x-tahua-version'], 'v1', 'team-b gets the 0% canary never');
    }
  });

  it('a tenant\'s concurrency cap refuses its second stream while another tenant streams on', async (t) => {
    const { gw, upstream } = await start(t, {
      tenants: [{ name: 'team-a', limits: { max_concurrent_streams: 1 } }, { name: 'team-b', models: [MODEL] }],
    });
    const held = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    const over = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    assert.equal(over.status, 429);
    assert.equal(over.json.error.code, 'concurrency_limit_exceeded');
    assert.match(over.json.error.message, /tenant 'team-a'/);
    const other = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream: true }), { headers: bearer(KEY_B) });
    assert.equal(other.status, 200);
    held.release();
    assert.equal((await collectData(events)).at(-1), '[DONE]');
    assert.equal(sum(await scrape(gw.url), 'tahua_bulkhead_rejections_total', { scope: 'tenant:team-a' }), 1);
  });
});

describe('rate limits', () => {
  it('a tenant over its requests per minute gets 429 with Retry-After and x-ratelimit headers', async (t) => {
    const { gw, upstream } = await start(t, { tenants: [{ name: 'team-a', limits: { requests_per_minute: 3 } }, { name: 'team-b' }] });
    const seen = [];
    for (let i = 0; i < 3; i += 1) {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-ratelimit-limit-requests'], '3');
      seen.push(r.headers['x-ratelimit-remaining-requests']);
      assert.match(r.headers['x-ratelimit-reset-requests'], /^\d+(\.\d+)?(ms|s)$|^\d+m\d+s$/);
    }
    assert.deepEqual(seen, ['2', '1', '0']);
    const over = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
    assert.equal(over.status, 429);
    assert.equal(over.json.error.code, 'rate_limit_exceeded');
    assert.equal(over.json.error.type, 'rate_limit_error');
    assert.match(over.json.error.message, /requests per minute \(tenant limit\): Limit 3, Remaining 0, Requested 1/);
    assert.ok(Number(over.headers['retry-after']) >= 1);
    assert.equal(over.headers['x-ratelimit-remaining-requests'], '0');
    assert.equal(upstream.requests.length, 3, 'the refused request never reached the upstream');
    // Another tenant is not affected.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) })).status, 200);
    // The Anthropic SDK sees its own shape.
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: KEY_A, maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }), (e) => {
      assert.ok(e instanceof Anthropic.RateLimitError, String(e));
      assert.equal(e.error.error.type, 'rate_limit_error');
      return true;
    });
    assert.equal(sum(await scrape(gw.url), 'tahua_rate_limited_total', { scope: 'tenant', limit: 'requests_per_minute' }), 2);
  });

  it('reserves a stream\'s estimate and calibrates the token bucket from its real usage', async (t) => {
    const LIMIT = 100_000;
    const { gw } = await start(t, { rate_limits: { models: { [MODEL]: { tokens_per_minute: LIMIT } } } });
    const body = chatBody(MODEL, { stream: true, max_tokens: 20_000 });
    const estimate = (b) => Math.ceil(JSON.stringify(b).length / 4) + b.max_tokens;
    const { res, events } = await openStream(gw.url, body, { headers: bearer(KEY_A) });
    const first = Number(res.headers.get('x-ratelimit-remaining-tokens'));
    assert.equal(res.headers.get('x-ratelimit-limit-tokens'), String(LIMIT));
    assert.equal(first, LIMIT - estimate(body), 'the whole estimate is reserved at admission');
    const data = await collectData(events);
    assert.equal(data.at(-1), '[DONE]');
    // The client did not ask for usage; the gateway did, and the real count is what the
    // bucket keeps: the next request sees the 20,000-token reservation refunded.
    const next = chatBody(MODEL, { max_tokens: 10 });
    const r = await post(gw.url, '/v1/chat/completions', next, { headers: bearer(KEY_A) });
    const remaining = Number(r.headers['x-ratelimit-remaining-tokens']);
    assert.ok(remaining > first + 19_000, `refunded: ${remaining} after ${first}`);
    assert.ok(remaining <= LIMIT - estimate(next), 'the stream\'s real usage is still charged');
  });

  it('with end_streams_over_budget, a stream whose output passes what its token limit allowed ends with an error event', async (t) => {
    const { gw, upstream } = await start(t, {
      tenants: [{ name: 'team-a', limits: { tokens_per_minute: 400 } }, { name: 'team-b', models: [MODEL] }],
      rate_limits: { default_max_tokens: 20, end_streams_over_budget: true },
    });
    upstream.next({ pieces: Array.from({ length: 1000 }, () => ' word'), paced: true });
    const { res, events, first } = await openStream(gw.url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    // What the bucket had left after the reservation, plus the 20 completion tokens reserved.
    const allowance = Number(res.headers.get('x-ratelimit-remaining-tokens')) + 20;
    const data = [first.data, ...(await collectData(events))];
    const err = expectFinalErrorEvent(data, ['rate_limit_exceeded']);
    assert.equal(err.message, `The stream was ended: its output passed the ${allowance} tokens the tenant limit tokens_per_minute still allowed.`);
    const words = chatText(data.slice(0, -1)).split('word').length - 1;
    assert.ok(words >= allowance - 2 && words < 1000, `${words} words streamed for an allowance of ${allowance}`);
    assert.equal(sum(await scrape(gw.url), 'tahua_streams_ended_over_budget_total'), 1);

    // Without it, a stream runs to its end (the bucket goes into debt and is calibrated).
    const open = await start(t, { tenants: [{ name: 'team-a', limits: { tokens_per_minute: 400 } }, { name: 'team-b' }], rate_limits: { default_max_tokens: 20 } });
    open.upstream.next({ pieces: Array.from({ length: 1000 }, () => ' word'), paced: true });
    const whole = await openStream(open.gw.url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    const all = [whole.first.data, ...(await collectData(whole.events))];
    assert.equal(all.at(-1), '[DONE]');
    assert.equal(chatText(all).split('word').length - 1, 1000);

    // Per policy: only the streams its limits apply to.
    const byPolicy = await start(t, {
      rate_limits: { default_max_tokens: 20, policies: [{ name: 'capped', match: { tenant: 'team-a' }, per: 'tenant', tokens_per_minute: 400, end_streams_over_budget: true }] },
    });
    byPolicy.upstream.next({ pieces: Array.from({ length: 1000 }, () => ' word'), paced: true });
    const capped = await openStream(byPolicy.gw.url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_A) });
    const cut = expectFinalErrorEvent([capped.first.data, ...(await collectData(capped.events))], ['rate_limit_exceeded']);
    assert.match(cut.message, /the policy limit tokens_per_minute still allowed/);
    byPolicy.upstream.next({ pieces: Array.from({ length: 1000 }, () => ' word'), paced: true });
    const other = await openStream(byPolicy.gw.url, chatBody(MODEL, { stream: true }), { headers: bearer(KEY_B) });
    assert.equal((await collectData(other.events)).at(-1), '[DONE]', 'team-b is not under the policy');
  });

  it('a request that falls back to another model is admitted against that model\'s limits', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl()), openaiProvider('down', `http://127.0.0.1:${await closedPort()}/v1`)],
      models: [{ name: MODEL, provider: 'down', fallbacks: [OTHER] }, { name: OTHER, provider: 'up' }],
    });
    config.tenants = [{ name: 'team-a' }];
    config.keys = [{ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) }];
    config.rate_limits = { models: { [MODEL]: { requests_per_minute: 100 }, [OTHER]: { requests_per_minute: 2 } } };
    const gw = await startTahua({ t, config });
    const answers = [];
    for (let i = 0; i < 3; i += 1) answers.push(await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) }));
    assert.deepEqual(answers.map((r) => r.status), [200, 200, 429]);
    assert.equal(answers[0].headers['x-tahua-model'], OTHER);
    assert.equal(answers[0].headers['x-ratelimit-remaining-requests'], '1', 'the headers show the fallback\'s tighter limit');
    assert.match(answers[2].json.error.message, /model/);
    assert.equal(upstream.requests.length, 2, 'the fallback model\'s limit held');
    assert.equal(sum(await scrape(gw.url), 'tahua_rate_limited_total', { scope: 'model', limit: 'requests_per_minute' }), 1);
  });

  it('the balancer reads the provider\'s rate-limit headers, not the caller\'s limits that replace them', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
    config.tenants = [{ name: 'team-a', limits: { requests_per_minute: 10 } }, { name: 'team-b' }];
    config.keys = [{ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) }, { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) }];
    config.admin = adminSection();
    const { gw, admin } = await startWithAdmin(t, config);
    const throttle = async () => (await admin('GET', '/admin/v1/deployments')).json.models[0].deployments[0].throttle;
    let last;
    for (let i = 0; i < 10; i += 1) last = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_A) });
    assert.equal(last.headers['x-ratelimit-remaining-requests'], '0', 'team-a used up its own limit');
    assert.equal(await throttle(), 1, 'a caller out of its own limit does not throttle the deployment');
    // The provider says its own limit is nearly used (2 of 100 left): that throttles it,
    // and a caller with limits of its own sees those, not the provider's.
    upstream.next({ headers: { 'x-ratelimit-limit-requests': '100', 'x-ratelimit-remaining-requests': '2' } });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(KEY_B) })).status, 200);
    assert.equal(await throttle(), 0.2);
  });

  it('refuses a request larger than the whole bucket for good: no Retry-After, and SDKs do not retry it', async (t) => {
    const { gw, upstream } = await start(t, { rate_limits: { models: { [MODEL]: { tokens_per_minute: 1000 } } } });
    const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { max_tokens: 5000 }), { headers: bearer(KEY_A) });
    assert.equal(r.status, 429);
    assert.equal(r.json.error.code, 'request_exceeds_limit');
    assert.match(r.json.error.message, /Limit 1000, Requested \d+/);
    assert.equal(r.headers['retry-after'], undefined);
    assert.equal(r.headers['x-should-retry'], 'false');
    // The SDK would retry a 429 twice; x-should-retry stops it at one request.
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY_A, maxRetries: 2 });
    await assert.rejects(sdk.chat.completions.create(chatBody(MODEL, { max_tokens: 5000 })), OpenAI.RateLimitError);
    assert.equal(sum(await scrape(gw.url), 'tahua_rate_limited_total', { scope: 'model', limit: 'tokens_per_minute' }), 2);
    assert.equal(upstream.requests.length, 0);
  });

  it('a rate-limit policy has rules per client type, a rollout, and counts per key', async (t) => {
    const { gw } = await start(t, {
      rate_limits: {
        policies: [{
          name: 'by-client',
          match: { model: MODEL },
          per: 'key',
          requests_per_minute: 2,
          rules: [
            { client_type: 'mobile', requests_per_minute: 4 },
            { client_type: 'web', requests_per_minute: 10, rollout: { percent: 0 } },
          ],
        }],
      },
    });
    const go = async (key, type) => (await post(gw.url, '/v1/chat/completions', chatBody(MODEL), {
      headers: { ...bearer(key), ...(type ? { 'x-client-type': type } : {}) },
    }));
    const statuses = async (key, type, n) => {
      const out = [];
      for (let i = 0; i < n; i += 1) out.push((await go(key, type)).status);
      return out;
    };
    assert.deepEqual(await statuses(KEY_A, null, 3), [200, 200, 429], 'the default: 2 per minute');
    assert.deepEqual(await statuses(KEY_A, 'mobile', 5), [200, 200, 200, 200, 429], 'the mobile rule: 4, counted apart');
    // The web rule is rolled out to 0%: web clients get the default, already used up.
    const web = await go(KEY_A, 'web');
    assert.equal(web.status, 429);
    assert.match(web.json.error.message, /requests per minute \(policy limit\): Limit 2/);
    assert.deepEqual(await statuses(KEY_B, null, 2), [200, 200], 'per key: b has its own count');
    assert.equal(sum(await scrape(gw.url), 'tahua_rate_limited_total', { scope: 'policy', limit: 'requests_per_minute' }), 3);
  });

  it('a per-key daily token quota answers insufficient_quota once used up', async (t) => {
    const { gw } = await start(t, {
      keys: [{ name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A), limits: { tokens_per_day: 3000 } }],
    });
    const body = chatBody(MODEL, { max_tokens: 2900 });
    let refused = null;
    for (let i = 0; i < 50 && !refused; i += 1) {
      const r = await post(gw.url, '/v1/chat/completions', body, { headers: bearer(KEY_A) });
      if (r.status !== 200) refused = r;
    }
    // Each reserves ~2,900 and is calibrated down to its real (small) usage, so a few
    // pass; the quota refuses once a reservation no longer fits in what is left.
    assert.ok(refused, 'the quota refused');
    assert.equal(refused.status, 429);
    assert.equal(refused.json.error.code, 'insufficient_quota');
    assert.equal(refused.json.error.type, 'insufficient_quota');
    assert.match(refused.json.error.message, /tokens per day \(key limit\)/);
    assert.equal(refused.headers['x-should-retry'], 'false');
    assert.ok(Number(refused.headers['retry-after']) <= 86_400);
  });
});
