// The admin API's tenants and keys (src/admin/tenant_admin.h): a key created there works
// at once and its secret is shown once, revoking it refuses the next request, tenant
// tokens manage only their own tenant, every change is audited without secrets, and
// with store.journal the keys and the quota consumption survive a restart.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { makeTempDir } from './lib/util.mjs';
import { readFileSync } from 'node:fs';
import { REPO_ROOT } from './lib/tahua.mjs';

const MODEL = 'gpt-test';
const TENANT_TOKEN = 'ops-tenant-token-0123456789';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });

async function start(t, { journal, extra = {} } = {}) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
  config.tenants = [{ name: 'ops' }];
  config.admin = adminSection({ tenant_tokens: [{ name: 'ops-admin', tenant: 'ops', sha256: sha256(TENANT_TOKEN) }] });
  if (journal) config.store = { journal };
  Object.assign(config, extra);
  const started = await startWithAdmin(t, config);
  return { ...started, upstream };
}

describe('admin API: tenants and keys', () => {
  it('creates a tenant and a key that works at once, enforces the tenant\'s limits, and revokes it', async (t) => {
    const { gw, admin, upstream } = await start(t);
    const tenant = await admin('POST', '/admin/v1/tenants', { json: { name: 'team-x', limits: { requests_per_minute: 2 } } });
    assert.equal(tenant.status, 201, tenant.text);
    assert.equal(tenant.json.source, 'admin');
    const created = await admin('POST', '/admin/v1/keys', { json: { name: 'x-ci', tenant: 'team-x', metadata: { owner: 'ci' } } });
    assert.equal(created.status, 201, created.text);
    const secret = created.json.key;
    assert.match(secret, /^tk-[0-9a-f]{48}$/);
    assert.equal(created.json.prefix, secret.slice(0, 11));
    assert.equal(created.json.sha256, undefined);

    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: secret, maxRetries: 0 });
    await sdk.chat.completions.create(chatBody(MODEL));
    await sdk.chat.completions.create(chatBody(MODEL));
    await assert.rejects(sdk.chat.completions.create(chatBody(MODEL)), OpenAI.RateLimitError);
    assert.equal(upstream.requests.length, 2);

    // Listing never shows a secret or its hash; the key's view shows its tenant's usage.
    const list = await admin('GET', '/admin/v1/keys?tenant=team-x');
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.keys.map((k) => k.name), ['x-ci']);
    assert.ok(!list.text.includes(secret) && !list.text.includes(sha256(secret)));
    const view = await admin('GET', '/admin/v1/tenants/team-x');
    const rpm = view.json.usage.find((u) => u.limit === 'requests_per_minute');
    assert.deepEqual([rpm.max, rpm.used, rpm.remaining], [2, 2, 0]);

    const revoked = await admin('DELETE', '/admin/v1/keys/x-ci');
    assert.equal(revoked.status, 200);
    const after = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(secret) });
    assert.equal(after.status, 401);
    assert.equal(after.json.error.code, 'invalid_api_key');

    // A tenant with keys cannot be deleted; without, it can.
    await admin('POST', '/admin/v1/keys', { json: { name: 'x-2', tenant: 'team-x' } });
    assert.equal((await admin('DELETE', '/admin/v1/tenants/team-x')).status, 409);
    assert.equal((await admin('DELETE', '/admin/v1/keys/x-2')).status, 200);
    assert.equal((await admin('DELETE', '/admin/v1/tenants/team-x')).status, 200);

    const audit = await admin('GET', '/admin/v1/audit');
    assert.deepEqual(
      audit.json.entries.map((e) => e.action).reverse(), // newest first
      ['tenant.create', 'key.create', 'key.revoke', 'key.create', 'key.revoke', 'tenant.delete'],
    );
    assert.ok(audit.json.entries.every((e) => e.who === 'admin' && e.time));
    assert.ok(!audit.text.includes(secret));
  });

  it('validates what it is sent and leaves the config file\'s tenants to the file', async (t) => {
    const { admin } = await start(t);
    const bad = await admin('POST', '/admin/v1/keys', { json: { name: 'k', tenant: 'ops', models: ['nope'] } });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /models\[0\]: unknown model "nope"/);
    assert.equal((await admin('POST', '/admin/v1/keys', { json: { name: 'k', tenant: 'nobody' } })).status, 400);
    assert.equal((await admin('POST', '/admin/v1/tenants', { json: { name: 'ops' } })).status, 409);
    const patch = await admin('PATCH', '/admin/v1/tenants/ops', { json: { limits: { requests_per_minute: 1 } } });
    assert.equal(patch.status, 409);
    assert.equal(patch.json.error.code, 'declared_in_config');
    assert.equal((await admin('POST', '/admin/v1/keys', { json: { name: 'k', tenant: 'ops', limits: { rpm: 3 } } })).status, 400);
    // What identifies a key cannot be changed by an update (sending it back unchanged is fine).
    const made = await admin('POST', '/admin/v1/keys', { json: { name: 'k2', tenant: 'ops' } });
    assert.equal(made.status, 201);
    const moved = await admin('PATCH', '/admin/v1/keys/k2', { json: { tenant: 'elsewhere' } });
    assert.equal(moved.status, 400);
    assert.match(moved.json.error.message, /tenant: cannot be changed/);
    const same = await admin('PATCH', '/admin/v1/keys/k2', { json: { name: 'k2', tenant: 'ops', limits: { requests_per_minute: 5 } } });
    assert.equal(same.status, 200, same.text);
    assert.equal(same.json.limits.requests_per_minute, 5);
  });

  it('a tenant token manages only its own tenant\'s keys', async (t) => {
    const { gw, admin } = await start(t);
    await admin('POST', '/admin/v1/tenants', { json: { name: 'other' } });
    const mine = await admin('POST', '/admin/v1/keys', { json: { name: 'ops-1', tenant: 'ops' }, token: TENANT_TOKEN });
    assert.equal(mine.status, 201, mine.text);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(mine.json.key) })).status, 200);
    assert.equal((await admin('POST', '/admin/v1/keys', { json: { name: 'o-1', tenant: 'other' }, token: TENANT_TOKEN })).status, 403);
    await admin('POST', '/admin/v1/keys', { json: { name: 'o-2', tenant: 'other' } });
    assert.equal((await admin('DELETE', '/admin/v1/keys/o-2', { token: TENANT_TOKEN })).status, 404, 'another tenant\'s key is not there for it');
    assert.equal((await admin('GET', '/admin/v1/keys?tenant=other', { token: TENANT_TOKEN })).status, 403);
    const tenants = await admin('GET', '/admin/v1/tenants', { token: TENANT_TOKEN });
    assert.deepEqual(tenants.json.tenants.map((x) => x.name), ['ops']);
    assert.equal((await admin('POST', '/admin/v1/tenants', { json: { name: 'z' }, token: TENANT_TOKEN })).status, 403);
    assert.equal((await admin('GET', '/admin/v1/config', { token: TENANT_TOKEN })).status, 403);
    const audit = await admin('GET', '/admin/v1/audit');
    const entry = audit.json.entries.find((e) => e.target === 'ops-1');
    assert.equal(entry.who, 'ops-admin');
    assert.equal(entry.tenant_scope, 'ops');
    // A tenant token reads its tenant's entries: its own (refusals of changes too), none of 'other''s.
    const own = await admin('GET', '/admin/v1/audit', { token: TENANT_TOKEN });
    assert.equal(own.status, 200, own.text);
    assert.ok(own.json.entries.length >= 2 && own.json.entries.every((e) => e.tenant === 'ops'), own.text);
    assert.ok(own.json.entries.some((e) => e.target === 'ops-1' && e.status === 201));
    assert.ok(own.json.entries.some((e) => e.path === '/admin/v1/tenants' && e.status === 403), 'a refused change is audited');
    assert.ok(audit.json.entries.some((e) => e.target === 'o-2') && !own.text.includes('o-2'));
  });

  it('with store.journal, admin-created keys and quota consumption survive a restart', async (t) => {
    const journal = join(makeTempDir(), 'state.journal');
    const first = await start(t, { journal });
    const created = await first.admin('POST', '/admin/v1/keys', {
      json: { name: 'keeper', tenant: 'ops', limits: { tokens_per_day: 100000 } },
    });
    assert.equal(created.status, 201);
    const secret = created.json.key;
    assert.equal((await post(first.gw.url, '/v1/chat/completions', chatBody(MODEL, { max_tokens: 10 }), { headers: bearer(secret) })).status, 200);
    const before = (await first.admin('GET', '/admin/v1/keys/keeper')).json.usage.find((u) => u.limit === 'tokens_per_day');
    assert.ok(before.used > 0);
    await first.gw.stop();

    const second = await start(t, { journal });
    assert.equal((await post(second.gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: bearer(secret) })).status, 200);
    const after = (await second.admin('GET', '/admin/v1/keys/keeper')).json.usage.find((u) => u.limit === 'tokens_per_day');
    assert.ok(after.used > before.used, `consumption carried over: ${before.used} then ${after.used}`);
  });
});

describe('the tenants and limits example of docs/tenants-and-limits.md', () => {
  it('runs as documented: keys work, the admin flow creates, shows and revokes a key', async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'tenants-and-limits.md'), 'utf8');
    const blocks = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
    let example = blocks.find((b) => b.startsWith('# Tenants and limits example'));
    assert.ok(example, 'docs/tenants-and-limits.md has the tenants and limits example');
    example = example
      .replace('port: 8080', 'port: 0')
      .replace('port: 9090', 'port: 0')
      .replace(/journal: tahua-state\.journal/, `journal: ${join(makeTempDir(), 'state.journal')}`);
    const { gw, admin } = await startWithAdmin(t, example, { listenerCount: 1, env: { TAHUA_ADMIN_TOKEN: 'readme-admin-token-0123456789' } });
    const ok = await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: bearer('tk-search-example-key') });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['x-ratelimit-limit-requests'], '100', 'the by-client policy is the tightest');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-large'), { headers: bearer('tk-search-example-key') })).status, 403);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: bearer('tk-research-example-key') })).status, 200);
    const token = 'readme-admin-token-0123456789';
    assert.equal((await admin('POST', '/admin/v1/tenants', { json: { name: 'ads', limits: { requests_per_minute: 120 } }, token })).status, 201);
    const key = await admin('POST', '/admin/v1/keys', { json: { name: 'ads-prod', tenant: 'ads', expires_at: '2027-12-31' }, token });
    assert.equal(key.status, 201);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: bearer(key.json.key) })).status, 200);
    const view = await admin('GET', '/admin/v1/keys/ads-prod', { token });
    assert.equal(view.json.expires_at, '2027-12-31T00:00:00Z');
    assert.equal((await admin('DELETE', '/admin/v1/keys/ads-prod', { token })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: bearer(key.json.key) })).status, 401);
    // The tenant token manages search-team's keys only.
    const mine = await admin('GET', '/admin/v1/keys', { token: 'search-admin-example-token' });
    assert.deepEqual(mine.json.keys.map((k) => k.name), ['search-prod']);
  });
});
