// Secrets never reach a log line, a span or a usage record: the client's Authorization,
// x-api-key and api-key headers (valid keys and invalid ones), the provider's key, the
// admin token (right and wrong), whatever happens to the request.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { startCollector } from './lib/collector.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { adminSection, startWithAdmin, TOKEN } from './lib/admin.mjs';
import { chatBody, post } from './lib/http.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

const MODEL = 'gpt-test';
const CLIENT_KEY = 'tk-redact-client-9f8e7d6c5b4a';
const WRONG_KEY = 'tk-redact-wrong-1a2b3c4d5e6f';
const PROVIDER_KEY = 'sk-redact-provider-0a9b8c7d6e5f';
const WRONG_ADMIN = 'wrong-admin-token-5f4e3d2c1b0a';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

describe('redaction', () => {
  it('no log line, span or usage record holds a key or token', async (t) => {
    const upstream = await startMockUpstream({ t });
    const collector = await startCollector({ t });
    const dir = makeTempDir('tahua-redact-');
    const config = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl(), { api_key: PROVIDER_KEY })],
      models: [{ name: MODEL, provider: 'up' }],
    });
    config.tenants = [{ name: 'team' }];
    config.keys = [{ name: 'k', tenant: 'team', sha256: sha256(CLIENT_KEY) }];
    config.admin = adminSection();
    config.tracing = { endpoint: `${collector.url}/v1/traces`, flush_interval: '50ms' };
    config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ type: 'file', path: join(dir, 'usage.jsonl') }] };
    const { gw, admin } = await startWithAdmin(t, config);
    const url = gw.url;
    let requests = 0;
    for (const headers of [
      { authorization: `Bearer ${CLIENT_KEY}` },
      { 'x-api-key': CLIENT_KEY },
      { 'api-key': CLIENT_KEY },
      { authorization: `Bearer ${WRONG_KEY}` },
      { 'x-api-key': WRONG_KEY, authorization: `Basic ${Buffer.from(`u:${WRONG_KEY}`).toString('base64')}` },
    ]) {
      await post(url, '/v1/chat/completions', chatBody(MODEL), { headers });
      requests += 1;
    }
    // Upstream failures, the provider key in an upstream's answer, a stream.
    upstream.next({ mode: 'error', status: 500, body: { error: { message: `bad key ${PROVIDER_KEY}` } } });
    await post(url, '/v1/chat/completions', chatBody(MODEL), { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    upstream.next({ mode: 'garbage' });
    await post(url, '/v1/chat/completions', chatBody(MODEL), { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    await post(url, '/v1/chat/completions', chatBody(MODEL, { stream: true }), { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    requests += 3;
    // The admin API, with the right and a wrong token.
    assert.equal((await admin('GET', '/admin/v1/config')).status, 200);
    assert.equal((await admin('GET', '/admin/v1/config', { token: WRONG_ADMIN })).status, 401);
    assert.equal((await admin('PUT', '/admin/v1/config', { body: `admin: {token: "${WRONG_ADMIN}"}` })).status, 400);
    // Every request logged (access log on stdout), its record and spans written.
    await gw.waitForAccessLog((l) => l.path === '/v1/chat/completions', { count: requests });
    await eventually(() => readFileSync(join(dir, 'usage.jsonl'), 'utf8').split('\n').filter(Boolean).length >= 6,
      { what: 'the usage records (401s have none)' });
    await collector.waitFor((c) => c.spans().length >= 2 * 6, 'the spans');
    assert.equal(await gw.stop('SIGTERM'), 0);
    const everything = [
      ...gw.stdout.lines, ...gw.stderr.lines,
      readFileSync(join(dir, 'usage.jsonl'), 'utf8'),
      JSON.stringify(collector.bodies),
    ].join('\n');
    assert.ok(everything.length > 1000, 'there is something to search');
    for (const secret of [CLIENT_KEY, WRONG_KEY, PROVIDER_KEY, TOKEN, WRONG_ADMIN, Buffer.from(`u:${WRONG_KEY}`).toString('base64')])
      assert.ok(!everything.includes(secret), `${secret} leaked`);
    // The provider got its own key, never the client's.
    assert.ok(upstream.requests.every((r) => r.headers.authorization === `Bearer ${PROVIDER_KEY}` && !JSON.stringify(r.headers).includes(CLIENT_KEY)));
  });
});
