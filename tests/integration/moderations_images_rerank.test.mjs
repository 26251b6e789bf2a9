// The JSON endpoints beyond chat (issue 25, first part): /v1/moderations,
// /v1/images/generations and /v1/rerank go through the same chain as chat — the
// gateway's keys, model access, routing, limits, usage and cost — to providers that serve
// them (openai-compatible ones here), with the model's public name rewritten; a provider
// that does not serve one answers a clear 400 naming it. Each call is the one a user of
// the official `openai` SDK writes (rerank has no SDK method: a plain POST, as the
// Cohere/Jina/vLLM clients send it).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { post } from './lib/http.mjs';

const KEY = 'tk-endpoints-0123456789abcdef';
const NARROW = 'tk-endpoints-narrow-0123456789';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

async function start(t, extra = {}) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl()), { name: 'claude', type: 'anthropic', base_url: 'http://127.0.0.1:1', api_key: 'x' }],
    models: [
      { name: 'moderation', provider: 'up', upstream_model: 'omni-moderation-latest' },
      { name: 'painter', provider: 'up', upstream_model: 'dall-e-3', pricing: { per_image: 0.04 } },
      { name: 'painter-tokens', provider: 'up', upstream_model: 'gpt-image-1', pricing: { input: 5, output: 40 } },
      { name: 'reranker', provider: 'up', upstream_model: 'jina-reranker-v2', pricing: { input: 0.02, output: 0 } },
      { name: 'claude', provider: 'claude', upstream_model: 'claude-sonnet-4' },
    ],
  });
  config.tenants = [{ name: 'team', limits: { usd_per_day: 0.1 } }];
  config.keys = [
    { name: 'k', tenant: 'team', sha256: sha256(KEY) },
    { name: 'narrow', tenant: 'team', sha256: sha256(NARROW), models: ['moderation'] },
  ];
  Object.assign(config, extra);
  const gw = await startTahua({ t, config });
  const client = (key = KEY) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  return { gw, upstream, client };
}

const lastRecord = (gw, path) => gw.accessLog().filter((l) => l.path === path).at(-1);

describe('moderations, images and rerank', () => {
  it('moderations.create through the chain: key, model access, the upstream name, usage in the access log', async (t) => {
    const { gw, upstream, client } = await start(t);
    const r = await client().moderations.create({ model: 'moderation', input: ['a plan to attack', 'a cake recipe'] });
    assert.deepEqual(r.results.map((x) => x.flagged), [true, false]);
    assert.equal(upstream.requests.at(-1).path, '/v1/moderations');
    assert.equal(upstream.requests.at(-1).json.model, 'omni-moderation-latest', 'the public name rewritten');
    assert.ok(!('authorization' in upstream.requests.at(-1).headers) || !upstream.requests.at(-1).headers.authorization.includes(KEY),
      'the caller\'s key is never forwarded');
    const log = await gw.waitForAccessLog((l) => l.path === '/v1/moderations');
    assert.equal(log[0].status, 200);
    assert.equal(log[0].model, 'moderation');
    // A key limited to other models cannot use one it was not given.
    await assert.rejects(client(NARROW).images.generate({ model: 'painter', prompt: 'a cat' }), (e) => e.status === 403);
    await assert.rejects(client('tk-wrong').moderations.create({ model: 'moderation', input: 'x' }), (e) => e.status === 401);
  });

  it('images.generate: n images priced per image, counted against the tenant\'s budget; token-priced models by their usage', async (t) => {
    const { gw, upstream, client } = await start(t);
    const r = await client().images.generate({ model: 'painter', prompt: 'a lighthouse at dawn', n: 2 });
    assert.equal(r.data.length, 2);
    assert.equal(upstream.requests.at(-1).path, '/v1/images/generations');
    assert.equal(upstream.requests.at(-1).json.model, 'dall-e-3');
    await gw.waitForAccessLog((l) => l.path === '/v1/images/generations');
    const rec = lastRecord(gw, '/v1/images/generations');
    assert.ok(Math.abs(rec.cost_usd - 0.08) < 1e-9, `2 images at 0.04: ${rec.cost_usd}`);
    // The budget is 0.10 a day: 0.08 spent, a request for 1 more image (0.04) is refused.
    await assert.rejects(client().images.generate({ model: 'painter', prompt: 'again', n: 1 }), (e) => e.status === 429);
    const tokens = await client().moderations.create({ model: 'moderation', input: 'still allowed: no price' });
    assert.equal(tokens.results.length, 1);
  });

  it('gpt-image models are priced by their token usage', async (t) => {
    const { gw, client } = await start(t, { tenants: [{ name: 'team' }] });
    const r = await client().images.generate({ model: 'painter-tokens', prompt: 'a fox', size: '1024x1024' });
    assert.equal(r.data.length, 1);
    assert.equal(r.usage.output_tokens, 272);
    await gw.waitForAccessLog((l) => l.path === '/v1/images/generations');
    const rec = lastRecord(gw, '/v1/images/generations');
    assert.equal(rec.prompt_tokens, 9);
    assert.equal(rec.completion_tokens, 272);
    assert.ok(Math.abs(rec.cost_usd - (9 * 5 + 272 * 40) / 1e6) < 1e-12, `cost ${rec.cost_usd}`);
  });

  it('rerank: a plain POST in the Jina/vLLM shape, its total tokens billed as input', async (t) => {
    const { gw, upstream } = await start(t, { tenants: [{ name: 'team' }] });
    const r = await post(gw.url, '/v1/rerank', { model: 'reranker', query: 'capital of France', documents: ['Paris', 'Berlin', 'Rome'], top_n: 2 },
      { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results.map((x) => x.index), [0, 1]);
    assert.equal(upstream.requests.at(-1).path, '/v1/rerank');
    assert.equal(upstream.requests.at(-1).json.model, 'jina-reranker-v2');
    await gw.waitForAccessLog((l) => l.path === '/v1/rerank');
    const rec = lastRecord(gw, '/v1/rerank');
    assert.equal(rec.prompt_tokens, 20);
    assert.ok(Math.abs(rec.cost_usd - 20 * 0.02 / 1e6) < 1e-15, `cost ${rec.cost_usd}`);
  });

  it('a provider that does not serve the endpoint answers 400 naming it', async (t) => {
    const { client } = await start(t, { tenants: [{ name: 'team' }] });
    await assert.rejects(client().moderations.create({ model: 'claude', input: 'x' }), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /\/v1\/moderations endpoint is not supported by provider type 'anthropic'/);
      return true;
    });
    await assert.rejects(client().images.generate({ model: 'claude', prompt: 'x' }), (e) => e.status === 400 && /'anthropic'/.test(e.message));
  });

  it('a plugin runs on the paths it supports and not on the others', async (t) => {
    const deny = (id, path) => ({
      id, supports: { paths: [path] },
      source: `local p = {}\nfunction p.on_request(req) req:deny(403, "${id} says no.", "${id.replace('-', '_')}") end\nreturn p\n`,
    });
    const { client } = await start(t, { tenants: [{ name: 'team' }], plugins: [deny('chat-only', '/v1/chat/completions'), deny('no-images', '/v1/images/generations')] });
    // chat's plugin does not run on moderations (Endpoint values past the first eight once aliased onto them).
    const ok = await client().moderations.create({ model: 'moderation', input: 'fine' });
    assert.equal(ok.results.length, 1);
    await assert.rejects(client().images.generate({ model: 'painter', prompt: 'x' }), (e) => e.status === 403 && e.code === 'no_images');
  });

  it('the built-in mock models refuse them clearly', async (t) => {
    const gw = await startTahua({ t }); // the built-in default config: mock models
    const r = await post(gw.url, '/v1/moderations', { model: 'mock-gpt', input: 'x' });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /\/v1\/moderations endpoint is not supported by provider type 'mock'/);
  });
});
