// Callers who sign in with their company's identity provider: the auth-chain link
// {type: jwt} (docs/tenants-and-limits.md, "Signing in with your identity provider"),
// against a local OIDC issuer (lib/oidc_issuer.mjs: discovery + JWKS, RSA, P-256 and
// Ed25519 keys made by node:crypto), the real binary, and the official `openai` SDK with
// the JWT as its API key: accepted tokens name tenant and subject in usage records,
// per-subject limits, models from a claim, key rotation, refusals naming their reason,
// and a JWKS outage that neither blocks known keys nor hangs a new one.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua, REPO_ROOT } from './lib/tahua.mjs';
import { chatBody, post } from './lib/http.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { forgedTokens, makeKey, signToken, startIssuer } from './lib/oidc_issuer.mjs';

const MODEL = 'gpt-test';
const OTHER = 'gpt-other';
const API_KEY = 'tk-jwt-suite-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const now = () => Math.floor(Date.now() / 1000);

// One key of each algorithm, made once for the file (RSA generation is the slow part).
const RSA = makeKey('RS256', 'rsa-1');
const EC = makeKey('ES256', 'ec-1');
const ED = makeKey('EdDSA', 'ed-1');

function claimsFor(issuer, extra = {}) {
  return { iss: issuer.issuer, aud: 'tahua', sub: 'alice@example.com', org: 'engineering', iat: now(), exp: now() + 600, ...extra };
}

async function start(t, { issuerKeys = [RSA, EC, ED], jwt = {}, tenants } = {}) {
  const issuer = await startIssuer({ t, keys: issuerKeys });
  const upstream = await startMockUpstream({ t });
  const dir = makeTempDir('tahua-jwt-');
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [{ name: MODEL, provider: 'up' }, { name: OTHER, provider: 'up' }],
  });
  config.tenants = tenants ?? [
    { name: 'eng', subject_limits: { requests_per_minute: 2 }, subjects: { 'build-bot': { requests_per_minute: 1000 } } },
    { name: 'research', models: [MODEL] },
  ];
  config.keys = [{ name: 'ci', tenant: 'eng', sha256: sha256(API_KEY) }];
  config.auth = {
    jwt_issuers: [{
      name: 'corp', issuer: issuer.issuer, audience: 'tahua', tenant_claim: 'org',
      tenants: { engineering: 'eng', research: 'research' }, models_claim: 'llm_models',
      min_refresh_interval: '0s', deadline: '400ms', fetch_timeout: '2s', ...jwt,
    }],
    chains: [{ name: 'all', links: ['jwt', 'api_key'] }],
  };
  config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ name: 'file', type: 'file', path: join(dir, 'usage.jsonl') }] };
  const gw = await startTahua({ config, t });
  // The first JWKS fetch happens at start, off the request path: wait for it.
  if (issuer.jwksRequests === 0) await issuer.nextJwksRequest();
  const file = join(dir, 'usage.jsonl');
  const records = (n) =>
    eventually(() => {
      const r = existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
      return r.length >= n && r;
    }, { what: `${n} usage records`, timeout: 5000 });
  return { gw, issuer, upstream, records };
}

const sdk = (gw, token) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: token, maxRetries: 0 });
const ask = (gw, token, model = MODEL) => sdk(gw, token).chat.completions.create(chatBody(model));

// The 401 a token gets, through the SDK: its error code and message.
async function refusal(gw, token) {
  let caught;
  await assert.rejects(ask(gw, token), (e) => {
    caught = e;
    return e instanceof OpenAI.AuthenticationError;
  });
  return caught;
}

describe('jwt sign-in', () => {
  it('accepts RS256, ES256 and EdDSA tokens through the SDK; usage records name tenant and subject', async (t) => {
    const { gw, issuer, upstream, records } = await start(t);
    for (const [key, sub] of [[RSA, 'alice@example.com'], [EC, 'bob@example.com'], [ED, 'build-bot']]) {
      const answer = await ask(gw, signToken(key, claimsFor(issuer, { sub })));
      assert.ok(answer.choices[0].message.content, key.alg);
    }
    // research's token: its tenant's model list applies.
    const researcher = signToken(EC, claimsFor(issuer, { sub: 'rita', org: 'research' }));
    await assert.rejects(ask(gw, researcher, OTHER), (e) => e instanceof OpenAI.PermissionDeniedError && e.code === 'model_not_allowed');
    // A gateway key still works (the next link), and the upstream never saw a token.
    assert.ok((await ask(gw, API_KEY)).choices.length);
    for (const r of upstream.requests) assert.ok(!JSON.stringify(r.headers).includes('eyJ'), 'no token forwarded');

    const all = await records(5);
    assert.equal(all.length, 5, 'one record per request');
    const bySubject = Object.fromEntries(all.filter((r) => r.subject).map((r) => [r.subject, r]));
    assert.equal(bySubject['alice@example.com'].tenant, 'eng');
    assert.equal(bySubject['alice@example.com'].issuer, 'corp');
    assert.equal(bySubject['alice@example.com'].key, null);
    assert.equal(bySubject['bob@example.com'].tenant, 'eng');
    assert.equal(bySubject['build-bot'].status, 200);
    assert.equal(bySubject.rita.tenant, 'research');
    assert.equal(bySubject.rita.status, 403);
    const keyed = all.find((r) => r.key === 'ci');
    assert.equal(keyed.subject, null);
    assert.equal(keyed.issuer, null);
  });

  it('applies per-subject limits: the tenant default per person, a listed subject its own', async (t) => {
    const { gw, issuer } = await start(t);
    const alice = signToken(RSA, claimsFor(issuer, { sub: 'alice@example.com' }));
    const bob = signToken(ED, claimsFor(issuer, { sub: 'bob@example.com' }));
    const bot = signToken(EC, claimsFor(issuer, { sub: 'build-bot' }));
    for (let i = 0; i < 2; i++) assert.ok(await ask(gw, alice));
    await assert.rejects(ask(gw, alice), (e) => e instanceof OpenAI.RateLimitError && e.code === 'rate_limit_exceeded');
    // Another token of the same person counts against the same limit.
    const alice2 = signToken(EC, claimsFor(issuer, { sub: 'alice@example.com', jti: 'second' }));
    await assert.rejects(ask(gw, alice2), (e) => e instanceof OpenAI.RateLimitError);
    // Bob has his own two; the bot its own thousand.
    for (let i = 0; i < 2; i++) assert.ok(await ask(gw, bob));
    for (let i = 0; i < 4; i++) assert.ok(await ask(gw, bot));
    // Per-person figures never become metric labels; the subject limit is its own scope.
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    assert.ok(!metrics.includes('alice@example.com') && !metrics.includes('build-bot'), 'no subject in metrics');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_rate_limited_total', { scope: 'subject', limit: 'requests_per_minute' }), 2);
    // Four tokens verified (alice's two, bob's, the bot's); every later request a cache hit.
    assert.equal(sum(m, 'tahua_jwt_tokens_total', { issuer: 'corp', result: 'verified' }), 4);
    assert.equal(sum(m, 'tahua_jwt_tokens_total', { issuer: 'corp', result: 'cached' }), 6);
  });

  it('models from a claim: only those, within the tenant', async (t) => {
    const { gw, issuer } = await start(t);
    const token = signToken(ED, claimsFor(issuer, { llm_models: [MODEL], sub: 'carol' }));
    assert.ok(await ask(gw, token));
    await assert.rejects(ask(gw, token, OTHER), (e) => e instanceof OpenAI.PermissionDeniedError && e.code === 'model_not_allowed');
    const listed = await sdk(gw, token).models.list();
    assert.deepEqual(listed.data.map((m) => m.id), [MODEL]);
  });

  it('refuses expired, not-yet-valid, wrong-audience, forged and tampered tokens with 401 naming the reason, never echoing them', async (t) => {
    const { gw, issuer, upstream } = await start(t, { jwt: { clock_skew: '5s' } });
    const forged = forgedTokens(RSA, claimsFor(issuer));
    const good = signToken(RSA, claimsFor(issuer));
    const [head, body] = good.split('.');
    const tampered = `${head}.${Buffer.from(JSON.stringify(claimsFor(issuer, { sub: 'mallory' }))).toString('base64url')}.${good.split('.')[2]}`;
    const cases = [
      [signToken(EC, claimsFor(issuer, { exp: now() - 60 })), 'expired'],
      [signToken(EC, claimsFor(issuer, { nbf: now() + 600 })), 'not_yet_valid'],
      [signToken(ED, claimsFor(issuer, { aud: 'another-app' })), 'wrong_audience'],
      [forged.none, 'unsupported_alg'],
      [forged.hs256, 'unsupported_alg'],
      [tampered, 'bad_signature'],
      [signToken(RSA, claimsFor(issuer, { exp: undefined })), 'missing_claim'],
      [signToken(RSA, claimsFor(issuer, { org: 'marketing' })), 'no_tenant'],
      [`${head}.${body}!.x`, 'malformed'],
    ];
    const tokens = cases.map(([token]) => token);
    for (const [token, reason] of cases) {
      const e = await refusal(gw, token);
      assert.equal(e.status, 401);
      assert.equal(e.code, 'invalid_api_key');
      assert.match(e.message, new RegExp(`\\(${reason}\\)`), `${reason}: ${e.message}`);
      assert.ok(!e.message.includes(token.slice(0, 20)), 'the token is not echoed');
    }
    // The Anthropic SDK (x-api-key) gets its own error shape, with the reason.
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: cases[0][0], maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }), (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
      assert.match(e.message, /\(expired\)/);
      return true;
    });
    // Another issuer's token is not ours: the next link (the key check) refuses it.
    const stranger = signToken(RSA, claimsFor(issuer, { iss: 'https://elsewhere.example' }));
    const e = await refusal(gw, stranger);
    assert.match(e.message, /Invalid API key\./);
    assert.doesNotMatch(e.message, /token/);
    assert.equal(upstream.requests.length, 0, 'nothing reached the upstream');
    // Nothing the gateway printed holds any of the tokens.
    for (const token of [...tokens, stranger]) assert.ok(!gw.output().includes(token.split('.')[1]), 'no token in the logs');
    // Each refusal is counted by issuer and reason (the malformed one has no issuer).
    const m = await scrape(gw.url);
    for (const reason of ['expired', 'not_yet_valid', 'wrong_audience', 'bad_signature', 'missing_claim', 'no_tenant'])
      assert.equal(sum(m, 'tahua_jwt_tokens_total', { issuer: 'corp', result: reason }), reason === 'expired' ? 2 : 1, reason);
    assert.equal(sum(m, 'tahua_jwt_tokens_total', { issuer: 'corp', result: 'unsupported_alg' }), 2);
    assert.equal(sum(m, 'tahua_jwt_tokens_total', { issuer: '-', result: 'malformed' }), 1);
    assert.equal(sum(m, 'tahua_auth_failures_total', { code: 'invalid_api_key' }), cases.length + 2);
  });

  it('follows a key rotation: a new kid is fetched; a key the issuer dropped stops working', async (t) => {
    const { gw, issuer } = await start(t, { issuerKeys: [RSA] });
    const old = signToken(RSA, claimsFor(issuer, { sub: 'dave' }));
    assert.ok(await ask(gw, old));
    const next = makeKey('ES256', 'ec-2026');
    issuer.setKeys([next]);
    const before = issuer.jwksRequests;
    assert.ok(await ask(gw, signToken(next, claimsFor(issuer, { sub: 'erin' }))), 'the new kid is fetched and accepted');
    assert.ok(issuer.jwksRequests > before, 'the unknown kid made tahua refetch the keys');
    // The old token was verified and cached, but its key is gone: refused.
    const e = await refusal(gw, old);
    assert.match(e.message, /\(unknown_key\)/);
  });

  // (The timeout is a safety net for a hang, not a measurement.)
  it('while the JWKS hangs or is down: tokens of a cached key keep working, a new kid is refused at the deadline, not hung', { timeout: 20_000 }, async (t) => {
    const { gw, issuer } = await start(t, { issuerKeys: [RSA, ED] });
    const cached = signToken(RSA, claimsFor(issuer, { sub: 'build-bot' }));  // its own (large) limit
    assert.ok(await ask(gw, cached));
    const unknown = makeKey('ES256', 'ec-new');
    // 'down' first: its refresh ends at once (503); a hung one stays in flight until fetch_timeout.
    for (const mode of ['down', 'hang']) {
      issuer.mode(mode);
      // A fresh token (never verified) of a known key needs no fetch.
      assert.ok(await ask(gw, signToken(ED, claimsFor(issuer, { sub: `grace-${mode}` }))), mode);
      assert.ok(await ask(gw, cached), mode);
      // A new kid asks the issuer once and gets 401 when the refresh fails or the deadline passes.
      const asked = issuer.nextJwksRequest();
      const e = await refusal(gw, signToken(unknown, claimsFor(issuer, { sub: `heidi-${mode}` })));
      await asked;
      assert.match(e.message, /\(unknown_key\)/, mode);
      // And the known keys are still there afterwards.
      assert.ok(await ask(gw, signToken(RSA, claimsFor(issuer, { sub: `ivan-${mode}` }))), mode);
    }
  });

  it('runs the JWT sign-in example of docs/tenants-and-limits.md', async (t) => {
    const issuer = await startIssuer({ t, keys: [EC] });
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'tenants-and-limits.md'), 'utf8');
    const blocks = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
    const example = blocks.find((b) => b.startsWith('# JWT sign-in example'));
    assert.ok(example, 'the guide has the JWT sign-in example');
    const config = example.replaceAll('https://login.example.com', issuer.issuer).replace('port: 8080', 'port: 0');
    const gw = await startTahua({ config, t, listenerCount: 1 });
    if (issuer.jwksRequests === 0) await issuer.nextJwksRequest();
    const claims = { iss: issuer.issuer, aud: 'tahua', sub: 'u-1', email: 'judy@example.com', department: 'eng', exp: now() + 600 };
    const token = signToken(EC, claims);
    const r = await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: { authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    // engineering's per-person default: 2 a minute.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: { authorization: `Bearer ${token}` } })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: { authorization: `Bearer ${token}` } })).status, 429);
    const researcher = signToken(EC, { ...claims, email: 'kim@example.com', department: 'research', llm_models: ['mock-gpt', 'mock-large'] });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-large'), { headers: { authorization: `Bearer ${researcher}` } })).status, 403);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock-gpt'), { headers: { authorization: 'Bearer tk-ci-example-key' } })).status, 200);
  });
});
