// The exact response cache: equal requests (key order, whitespace, `stream` aside) hit,
// any answer-changing parameter misses; hits never cross tenants; streams are captured
// as they pass and replayed event by event, or as a whole answer (and back); a cut or
// failed answer is never kept; Cache-Control and x-tahua-cache steer it; a hit is still a
// request for the limits; the usage record and metrics say what was saved; a Redis layer
// is shared by two replicas and its absence is only a miss; purges through the admin API.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { REPO_ROOT, gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { toYaml } from './lib/yaml.mjs';
import { request } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { startRedis } from './lib/redis.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { VENDOR_NAMES, replyText, startAnthropicMock } from './lib/vendor_mocks.mjs';

const GPT = 'gpt-cached';
const CLAUDE = 'claude-cached';
const KEY_A = 'tk-cache-a-0123456789abcdef';
const KEY_B = 'tk-cache-b-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });
const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };

async function start(t, { cache = {}, tenants, store, admin = false, usageFile } = {}) {
  const upstream = await startMockUpstream({ t });
  const anthropic = await startAnthropicMock({ t });
  const config = gatewayConfig({
    providers: [
      openaiProvider('up', upstream.baseUrl()),
      { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-test', timeouts: TIMEOUTS },
    ],
    models: [
      { name: GPT, provider: 'up', pricing: { input: 1, output: 2 } },
      { name: CLAUDE, provider: 'anth', upstream_model: 'claude-upstream' },
      { name: 'gpt-uncached', provider: 'up', cache: { enabled: false } },
      { name: 'gpt-with-fallback', provider: 'up', fallbacks: [CLAUDE] },
    ],
  });
  config.cache = { enabled: true, ...cache };
  config.tenants = tenants ?? [{ name: 'team-a' }, { name: 'team-b' }];
  config.keys = [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
  ];
  if (store) config.store = store;
  if (usageFile) config.usage = { spill_dir: join(makeTempDir('tahua-cache-usage-'), 'spill'), sinks: [{ name: 'file', type: 'file', path: usageFile }] };
  if (admin) {
    config.admin = adminSection();
    const { gw, admin: call } = await startWithAdmin(t, config);
    return { gw, upstream, anthropic, admin: call };
  }
  const gw = await startTahua({ t, config });
  return { gw, upstream, anthropic };
}

const chat = (extra = {}) => ({ model: GPT, temperature: 0, messages: [{ role: 'user', content: 'What is 2+2?' }], ...extra });
const ask = (gw, body, { key = KEY_A, headers = {} } = {}) =>
  request(gw.url, '/v1/chat/completions', { method: 'POST', json: body, headers: { ...bearer(key), ...headers } });

describe('exact response cache', () => {
  it('equal requests hit (key order, whitespace, stream_options, user aside); an answer-changing parameter misses', async (t) => {
    const { gw, upstream } = await start(t);
    const first = await ask(gw, chat());
    assert.equal(first.status, 200);
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    const calls = upstream.requests.length;
    // The same request with its members in another order and other whitespace.
    const raw = '{ "messages" : [ { "content": "What is 2+2?", "role": "user" } ],\n  "temperature": 0.0, "user": "u-9", "model": "gpt-cached" }';
    const second = await request(gw.url, '/v1/chat/completions', { method: 'POST', body: raw, headers: bearer(KEY_A) });
    assert.equal(second.status, 200);
    assert.equal(second.headers['x-tahua-cache'], 'hit');
    assert.equal(second.text, first.text, 'the answer as it was given');
    assert.equal(upstream.requests.length, calls, 'no upstream call');
    for (const changed of [{ seed: 7 }, { max_tokens: 5 }, { top_p: 0.5 }, { messages: [{ role: 'user', content: 'What is 3+3?' }] }, { response_format: { type: 'json_object' } }]) {
      const r = await ask(gw, chat(changed));
      assert.equal(r.headers['x-tahua-cache'], 'miss', JSON.stringify(changed));
    }
    assert.equal(upstream.requests.length, calls + 5);
    // Another model, the same body: its own entry (and this one has no cache).
    const other = await ask(gw, chat({ model: 'gpt-uncached' }));
    assert.equal(other.headers['x-tahua-cache'], undefined);
  });

  it('never across tenants: the same prompt from team-b is a miss, and its own entry then', async (t) => {
    const { gw, upstream } = await start(t);
    await ask(gw, chat());
    const b = await ask(gw, chat(), { key: KEY_B });
    assert.equal(b.headers['x-tahua-cache'], 'miss');
    assert.equal(upstream.requests.length, 2);
    assert.equal((await ask(gw, chat(), { key: KEY_B })).headers['x-tahua-cache'], 'hit');
    assert.equal((await ask(gw, chat())).headers['x-tahua-cache'], 'hit');
    assert.equal(upstream.requests.length, 2);
  });

  it('a stream is replayed event by event; a whole request gets the same content whole, and back', async (t) => {
    const { gw, upstream } = await start(t);
    const first = await ask(gw, chat({ stream: true, stream_options: { include_usage: true } }));
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    assert.match(first.headers['content-type'], /^text\/event-stream/);
    const again = await ask(gw, chat({ stream: true, stream_options: { include_usage: true } }));
    assert.equal(again.headers['x-tahua-cache'], 'hit');
    assert.match(again.headers['content-type'], /^text\/event-stream/);
    assert.deepEqual(again.text.split('\n\n'), first.text.split('\n\n'), 'the same events, in order');
    // Whole, from the stream kept: the same text, finish reason and usage.
    const whole = await ask(gw, chat());
    assert.equal(whole.headers['x-tahua-cache'], 'hit');
    const events = first.text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
    const text = events.map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
    assert.equal(whole.json.choices[0].message.content, text);
    assert.equal(whole.json.choices[0].finish_reason, 'stop');
    assert.deepEqual(whole.json.usage, events.at(-1).usage);
    // A stream without the usage chunk (not asked for): re-encoded, the same text.
    const plain = await ask(gw, chat({ stream: true }));
    assert.equal(plain.headers['x-tahua-cache'], 'hit');
    const plainEvents = plain.text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)));
    assert.equal(plainEvents.map((e) => e.choices?.[0]?.delta?.content ?? '').join(''), text);
    assert.ok(plainEvents.every((e) => !e.usage), 'no usage chunk');
    assert.ok(plain.text.trimEnd().endsWith('data: [DONE]'));
    assert.equal(upstream.requests.length, 1);

    // The official SDK reads a replayed stream like a live one.
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY_A, maxRetries: 0 });
    let sdkText = '';
    for await (const chunk of await client.chat.completions.create(chat({ stream: true }))) sdkText += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(sdkText, text);
  });

  it('Anthropic shape: a translated stream (OpenAI client -> Anthropic) and a native Messages stream replay event by event', async (t) => {
    const { gw, anthropic } = await start(t);
    const body = chat({ model: CLAUDE, stream: true });
    const first = await ask(gw, body);
    const second = await ask(gw, body);
    assert.equal(second.headers['x-tahua-cache'], 'hit');
    assert.equal(second.text, first.text);
    const messages = { model: CLAUDE, max_tokens: 64, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Hi there' }] };
    const post = () => request(gw.url, '/v1/messages', { method: 'POST', json: messages, headers: { 'x-api-key': KEY_A, 'anthropic-version': '2023-06-01' } });
    const m1 = await post();
    const m2 = await post();
    assert.equal(m2.headers['x-tahua-cache'], 'hit');
    assert.deepEqual(m2.text.split('\n\n'), m1.text.split('\n\n'));
    assert.match(m2.text, /event: message_stop/);
    // Whole, from the kept Messages stream.
    const whole = await request(gw.url, '/v1/messages', { method: 'POST', json: { ...messages, stream: false }, headers: { 'x-api-key': KEY_A, 'anthropic-version': '2023-06-01' } });
    assert.equal(whole.headers['x-tahua-cache'], 'hit');
    assert.equal(whole.json.type, 'message');
    assert.equal(whole.json.content[0].text, replyText(VENDOR_NAMES.anthropic, 'Hi there'));
    assert.equal(anthropic.requests.length, 2);
  });

  it('a cut stream and an error are not kept', async (t) => {
    const { gw, upstream } = await start(t);
    const held = upstream.next({ mode: 'hold' });
    const pending = ask(gw, chat({ stream: true }));
    await held.firstEvent;
    held.reset();
    const cut = await pending;
    assert.equal(cut.headers['x-tahua-cache'], 'miss');
    assert.match(cut.text, /upstream_stream_interrupted|error/);
    upstream.next({ mode: 'error', status: 500 });
    const failed = await ask(gw, chat({ stream: true }));
    assert.equal(failed.status, 500);
    const after = await ask(gw, chat({ stream: true }));
    assert.equal(after.headers['x-tahua-cache'], 'miss', 'neither was kept');
    assert.equal((await ask(gw, chat({ stream: true }))).headers['x-tahua-cache'], 'hit');
  });

  it("a fallback model's answer is not kept under the model it stood in for", async (t) => {
    const { gw, upstream, anthropic } = await start(t);
    upstream.next({ mode: 'error', status: 503 });
    const body = chat({ model: 'gpt-with-fallback' });
    const first = await ask(gw, body);
    assert.equal(first.status, 200);
    assert.equal(anthropic.requests.length, 1, 'Claude answered for it');
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    const second = await ask(gw, body);
    assert.equal(second.headers['x-tahua-cache'], 'miss', 'nothing was kept');
    assert.equal((await ask(gw, body)).headers['x-tahua-cache'], 'hit', "the model's own answer was");
  });

  it('Cache-Control: no-store and x-tahua-cache: bypass skip it; no-cache / refresh asks again and keeps the new answer', async (t) => {
    const { gw, upstream } = await start(t);
    const bypass = await ask(gw, chat(), { headers: { 'cache-control': 'no-store' } });
    assert.equal(bypass.headers['x-tahua-cache'], 'bypass');
    assert.equal((await ask(gw, chat(), { headers: { 'x-tahua-cache': 'bypass' } })).headers['x-tahua-cache'], 'bypass');
    assert.equal((await ask(gw, chat())).headers['x-tahua-cache'], 'miss', 'nothing was kept by the bypasses');
    assert.equal(upstream.requests.length, 3);
    const refresh = await ask(gw, chat(), { headers: { 'cache-control': 'no-cache' } });
    assert.equal(refresh.headers['x-tahua-cache'], 'refresh');
    assert.equal(upstream.requests.length, 4, 'asked again');
    assert.equal((await ask(gw, chat(), { headers: { 'x-tahua-cache': 'refresh' } })).headers['x-tahua-cache'], 'refresh');
    assert.equal((await ask(gw, chat())).headers['x-tahua-cache'], 'hit');
    assert.equal(upstream.requests.length, 5);
  });

  it('by default only temperature 0 is kept; cacheable: all keeps every request; n > 1 never', async (t) => {
    const { gw, upstream } = await start(t);
    const warm = chat({ temperature: 0.7 });
    assert.equal((await ask(gw, warm)).headers['x-tahua-cache'], 'bypass');
    assert.equal((await ask(gw, warm)).headers['x-tahua-cache'], 'bypass');
    const noTemp = { model: GPT, messages: [{ role: 'user', content: 'x' }] };
    assert.equal((await ask(gw, noTemp)).headers['x-tahua-cache'], 'bypass', 'absent is the provider default, not 0');
    assert.equal(upstream.requests.length, 3);
    const all = await start(t, { cache: { cacheable: 'all' } });
    await ask(all.gw, warm);
    assert.equal((await ask(all.gw, warm)).headers['x-tahua-cache'], 'hit');
    assert.equal((await ask(all.gw, chat({ n: 2 }))).headers['x-tahua-cache'], 'bypass');
  });

  it('a hit is still a request for the rate limits, counted as zero tokens; the usage record names it and what it saved', async (t) => {
    const usageFile = join(makeTempDir('tahua-cache-'), 'usage.jsonl');
    const { gw, upstream } = await start(t, { tenants: [{ name: 'team-a', limits: { requests_per_minute: 3 } }, { name: 'team-b' }], usageFile });
    const statuses = [];
    for (let i = 0; i < 4; i += 1) statuses.push((await ask(gw, chat())).status);
    assert.deepEqual(statuses, [200, 200, 200, 429], 'hits count as requests');
    assert.equal(upstream.requests.length, 1);
    const records = await eventually(() => {
      let lines = [];
      try { lines = readFileSync(usageFile, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)); } catch { return false; }
      return lines.length >= 4 && lines;
    }, { timeout: 5000, what: 'four usage records' });
    const [miss, hit] = records;
    assert.equal(miss.cache, 'miss');
    assert.equal(miss.cache_tokens_saved, null);
    assert.ok(miss.total_tokens > 0);
    assert.equal(hit.cache, 'hit');
    assert.equal(hit.total_tokens, 0, 'a hit costs no tokens (hit_tokens: zero)');
    assert.equal(hit.cache_tokens_saved, miss.total_tokens);
    assert.equal(hit.cost_usd, 0);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_cache_requests_total', { model: GPT, status: 'hit' }), 2);
    assert.equal(sum(m, 'tahua_cache_requests_total', { model: GPT, status: 'miss' }), 1);
    assert.equal(sum(m, 'tahua_cache_tokens_saved_total', { model: GPT }), 2 * miss.total_tokens);
    assert.ok(sum(m, 'tahua_cache_cost_saved_usd_total', { model: GPT }) > 0);
    const line = (await gw.waitForAccessLog((l) => l.cache === 'hit'))[0];
    assert.equal(line.cache_tokens_saved, miss.total_tokens);
  });

  it('hit_tokens: tokens counts a hit as its answer\'s tokens', async (t) => {
    const { gw } = await start(t, { cache: { hit_tokens: 'tokens' }, tenants: [{ name: 'team-a', limits: { tokens_per_minute: 1000000 } }, { name: 'team-b' }] });
    await ask(gw, chat());
    const hit = await ask(gw, chat());
    assert.equal(hit.headers['x-tahua-cache'], 'hit');
    const line = (await gw.waitForAccessLog((l) => l.cache === 'hit'))[0];
    assert.ok(line.total_tokens > 0, JSON.stringify(line));
  });

  it('stale_if_error: when every upstream fails, an expired entry answers, marked as a fallback', async (t) => {
    const { gw, upstream } = await start(t, { cache: { ttl: '1s', stale_if_error: '1h' } });
    const first = await ask(gw, chat());
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    // The upstream fails from now on (503, a failover status); hits do not ask it.
    for (let i = 0; i < 3; i += 1) upstream.next({ mode: 'error', status: 503 });
    const calls = upstream.requests.length;
    const stale = await eventually(async () => {
      const r = await ask(gw, chat());
      return r.headers['x-tahua-cache'] === 'stale' && r;
    }, { timeout: 5000, what: 'the entry to expire and stand in for the failed upstream' });
    assert.equal(upstream.requests.length, calls + 1, 'the upstream was asked once, and failed');
    assert.equal(stale.status, 200);
    assert.match(stale.headers['x-tahua-fallback'], /503/);
    assert.equal(stale.json.is_fallback, true);
    assert.equal(stale.json.choices[0].message.content, first.json.choices[0].message.content);
    const line = (await gw.waitForAccessLog((l) => l.cache === 'stale'))[0];
    assert.equal(line.fallback, 'cache');
    // A refresh whose upstream fails gets the kept answer too (fresh or not).
    const refreshed = await ask(gw, chat(), { headers: { 'cache-control': 'no-cache' } });
    assert.equal(refreshed.headers['x-tahua-cache'], 'stale');
    assert.equal(refreshed.json.is_fallback, true);
    // Without stale_if_error an expired entry never answers: the upstream's error does.
    const plain = await start(t, { cache: { ttl: '1s' } });
    await ask(plain.gw, chat());
    plain.upstream.next({ mode: 'error', status: 503 });
    plain.upstream.next({ mode: 'error', status: 503 });
    const failed = await eventually(async () => {
      const r = await ask(plain.gw, chat());
      return r.status === 503 && r;
    }, { timeout: 5000, what: 'the expired entry to leave the upstream error alone' });
    assert.equal(failed.headers['x-tahua-cache'], 'miss');
  });

  it('entries expire after their ttl', async (t) => {
    const { gw } = await start(t, { cache: { ttl: '1s' } });
    await ask(gw, chat());
    assert.equal((await ask(gw, chat())).headers['x-tahua-cache'], 'hit');
    await eventually(async () => (await ask(gw, chat())).headers['x-tahua-cache'] === 'miss', { timeout: 5000, what: 'the entry to expire' });
  });

  it('the admin API shows the layer and purges by tenant and by model', async (t) => {
    const { gw, admin, upstream } = await start(t, { admin: true });
    await ask(gw, chat());
    await ask(gw, chat(), { key: KEY_B });
    await ask(gw, chat());
    const stats = await admin('GET', '/admin/v1/cache');
    assert.equal(stats.status, 200);
    assert.equal(stats.json.entries, 2);
    assert.ok(stats.json.bytes > 0);
    assert.equal(stats.json.hits, 1);
    assert.equal(stats.json.misses, 2);
    assert.ok(Math.abs(stats.json.hit_rate - 1 / 3) < 1e-9);
    // Written as a person reads it (Boost.JSON alone writes 3.333333333333333E-1).
    assert.match(stats.text, /"hit_rate":0\.333333333333333\d*[,}]/);
    const purged = await admin('DELETE', '/admin/v1/cache?tenant=team-a');
    assert.equal(purged.json.purged_local, 1);
    assert.equal((await ask(gw, chat())).headers['x-tahua-cache'], 'miss');
    assert.equal((await ask(gw, chat(), { key: KEY_B })).headers['x-tahua-cache'], 'hit', 'team-b kept its entry');
    assert.equal((await admin('DELETE', `/admin/v1/cache?model=${GPT}`)).json.purged_local, 2);
    assert.equal((await ask(gw, chat(), { key: KEY_B })).headers['x-tahua-cache'], 'miss');
    assert.equal(upstream.requests.length, 4);
  });
});

describe('exact response cache through Redis', () => {
  it('two replicas share entries; with Redis away requests are still served (misses)', async (t) => {
    const redis = await startRedis({ t });
    const cache = { redis: { url: redis.url, timeout: '200ms' } };
    const a = await start(t, { cache });
    const b = await start(t, { cache, admin: true });
    const first = await ask(a.gw, chat({ stream: true }));
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    await eventually(() => redis.cli('KEYS', 'tahua:cache:*').length > 0, { what: 'the entry in Redis' });
    const fromB = await ask(b.gw, chat({ stream: true }));
    assert.equal(fromB.headers['x-tahua-cache'], 'hit');
    assert.equal(fromB.text, first.text);
    assert.equal(b.upstream.requests.length, 0, 'replica B never asked its upstream');
    // A purge through B empties the shared layer: A's next request asks its upstream
    // once its own copy (local_ttl) is gone, which a restart of A stands in for here.
    await ask(a.gw, chat(), { key: KEY_B });
    await eventually(() => redis.cli('KEYS', 'tahua:cache:*').split('\n').filter(Boolean).length === 2, { what: 'two entries in Redis' });
    const purged = await b.admin('DELETE', '/admin/v1/cache?tenant=team-a');
    assert.equal(purged.status, 200);
    assert.equal(purged.json.purged_shared, 1, "team-a's entry");
    assert.equal(redis.cli('KEYS', 'tahua:cache:*').split('\n').filter(Boolean).length, 1, "team-b's stays");
    assert.equal((await ask(b.gw, chat(), { key: KEY_B })).headers['x-tahua-cache'], 'hit', 'from Redis, and now B keeps a copy');

    await redis.stop();
    const other = await ask(b.gw, chat({ messages: [{ role: 'user', content: 'Redis is gone' }] }));
    assert.equal(other.status, 200);
    assert.equal(other.headers['x-tahua-cache'], 'miss');
    assert.equal((await ask(b.gw, chat(), { key: KEY_B })).headers['x-tahua-cache'], 'hit', 'its own copy still answers');
    const purgeAway = await b.admin('DELETE', '/admin/v1/cache');
    assert.equal(purgeAway.status, 503, 'a purge that cannot reach the shared layer says so');
    assert.equal(purgeAway.json.error.code, 'cache_unavailable');
  });
});

describe('response cache: the guide (docs/response-cache.md)', () => {
  it("the guide's semantic block loads: a second question is a semantic hit (the mock embeds every text alike), the route skips it", async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'response-cache.md'), 'utf8');
    assert.ok(guide.includes('A model may add a **semantic** layer'), 'the guide has the semantic layer');
    const section = guide.slice(guide.indexOf('A model may add a **semantic** layer'));
    const block = /```yaml\n([\s\S]*?)```/.exec(section)[1];
    assert.match(block, /embedding_model: text-embedding-3-small/);
    const upstream = await startMockUpstream({ t });
    const base = gatewayConfig({ providers: [openaiProvider('openai', upstream.baseUrl())], models: [] });
    delete base.models;
    const file = join(makeTempDir('tahua-semantic-readme-'), 'gateway.yaml');
    writeFileSync(file, `${toYaml(base)}\n${block}`);
    const gw = await startTahua({ t, args: ['--config', file] });
    const body = (content) => ({ model: 'gpt-4o-mini', temperature: 0, messages: [{ role: 'user', content }] });
    const post = (content, headers = {}) => request(gw.url, '/v1/chat/completions', { method: 'POST', json: body(content), headers });
    assert.equal((await post('First question')).headers['x-tahua-cache'], 'miss');
    await eventually(async () => sum(await scrape(gw.url), 'tahua_cache_semantic_entries') === 1, { what: 'the vector kept' });
    assert.equal((await post('Second question', { 'x-exact': '1' })).headers['x-tahua-cache'], 'miss', 'the route skips it');
    const hit = await post('Another question');
    assert.equal(hit.headers['x-tahua-cache'], 'semantic-hit');
    assert.equal(hit.headers['x-tahua-cache-similarity'], '1.0000');
  });

  it("the guide's cache block loads and caches gpt-4o-mini's answers through its Redis", async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'response-cache.md'), 'utf8');
    assert.ok(guide.includes('\n## Using it\n'), 'the page has its guide');
    const section = guide.slice(guide.indexOf('\n## Using it\n'));
    const block = /```yaml\n([\s\S]*?)```/.exec(section)[1];
    assert.match(block, /^cache:/m);
    const redis = await startRedis({ t });
    const upstream = await startMockUpstream({ t });
    const base = gatewayConfig({ providers: [openaiProvider('openai', upstream.baseUrl())], models: [] });
    delete base.models;
    const dir = makeTempDir('tahua-cache-readme-');
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, `${toYaml(base)}\n${block.replace('redis://cache:6379', redis.url)}`);
    const gw = await startTahua({ t, args: ['--config', file] });
    const body = { model: 'gpt-4o-mini', temperature: 0.9, messages: [{ role: 'user', content: 'Hello' }] };
    assert.equal((await request(gw.url, '/v1/chat/completions', { method: 'POST', json: body })).headers['x-tahua-cache'], 'miss');
    assert.equal((await request(gw.url, '/v1/chat/completions', { method: 'POST', json: body })).headers['x-tahua-cache'], 'hit',
      'cacheable: all at the model');
    assert.equal(upstream.requests.length, 1);
    assert.ok(redis.cli('KEYS', 'tahua:cache:*').length > 0, 'kept in the shared layer');
  });
});

// An OpenAI-compatible embeddings server with scripted vectors: known texts get fixed
// vectors (paraphrases close to their original), anything else one from its hash.
async function startEmbedder(t) {
  const { createServer } = await import('node:http');
  const vectors = {
    'What is the capital of France?': [1, 0, 0, 0],
    "What's the capital of France?": [0.99, 0.141, 0, 0], // cosine 0.99 with the first
    'Name the capital city of France': [0.9, 0.436, 0, 0], // cosine 0.90: under 0.95
    'How do I bake bread?': [0, 0, 1, 0],
  };
  const calls = [];
  let failing = false;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const parsed = JSON.parse(body);
      calls.push(parsed);
      if (failing) {
        res.writeHead(500, { 'content-type': 'application/json' });
        return res.end('{"error":{"message":"down","type":"server_error"}}');
      }
      const text = parsed.input;
      const h = createHash('sha256').update(text).digest();
      const v = vectors[text] ?? [h[0] / 255, h[1] / 255, h[2] / 255, 1];
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: v }], model: parsed.model,
        usage: { prompt_tokens: 5, total_tokens: 5 } }));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return { url: `http://127.0.0.1:${server.address().port}/v1`, calls, fail: (on) => { failing = on; } };
}

describe('semantic cache', () => {
  async function startSemantic(t, { cache = {}, admin = false } = {}) {
    const upstream = await startMockUpstream({ t });
    const embedder = await startEmbedder(t);
    const config = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl()), openaiProvider('emb', embedder.url)],
      models: [
        { name: GPT, provider: 'up', cache: { enabled: true, semantic: { enabled: true, embedding_model: 'embedder', threshold: 0.95 }, ...cache } },
        { name: 'embedder', provider: 'emb', upstream_model: 'text-embedding-3-small' },
      ],
    });
    config.routes = [{ name: 'exact-only', match: { headers: { 'x-exact': 'yes' } }, target: GPT, override: true, semantic_cache: false }];
    config.tenants = [{ name: 'team-a' }, { name: 'team-b' }];
    config.keys = [
      { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
      { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
    ];
    if (admin) {
      config.admin = adminSection();
      const { gw, admin: call } = await startWithAdmin(t, config);
      return { gw, upstream, embedder, admin: call };
    }
    const gw = await startTahua({ t, config });
    return { gw, upstream, embedder };
  }
  const q = (content, extra = {}) => chat({ messages: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content }], ...extra });

  it('a paraphrase close enough gets the kept answer; a further one, another topic or another context does not', async (t) => {
    const { gw, upstream, embedder } = await startSemantic(t);
    const first = await ask(gw, q('What is the capital of France?'));
    assert.equal(first.headers['x-tahua-cache'], 'miss');
    assert.equal(embedder.calls.length, 1);
    assert.equal(embedder.calls[0].model, 'text-embedding-3-small');
    assert.equal(embedder.calls[0].input, 'What is the capital of France?');
    // Vectors are added off the worker: the paraphrase is asked once this one is in.
    await eventually(async () => sum(await scrape(gw.url), 'tahua_cache_semantic_entries') === 1, { what: 'the vector kept' });
    const para = await ask(gw, q("What's the capital of France?"));
    assert.equal(para.headers['x-tahua-cache'], 'semantic-hit');
    assert.ok(Math.abs(Number(para.headers['x-tahua-cache-similarity']) - 0.99) < 0.005, para.headers['x-tahua-cache-similarity']);
    assert.equal(para.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(upstream.requests.length, 1, 'answered without the upstream');
    // Under the threshold, another topic, another system prompt: misses.
    assert.equal((await ask(gw, q('Name the capital city of France'))).headers['x-tahua-cache'], 'miss');
    assert.equal((await ask(gw, q('How do I bake bread?'))).headers['x-tahua-cache'], 'miss');
    const otherContext = chat({ messages: [{ role: 'system', content: 'Answer at length.' }, { role: 'user', content: "What's the capital of France?" }] });
    assert.equal((await ask(gw, otherContext)).headers['x-tahua-cache'], 'miss', 'everything but the last user message must match');
    // Never across tenants.
    assert.equal((await ask(gw, q("What's the capital of France?"), { key: KEY_B })).headers['x-tahua-cache'], 'miss');
    assert.equal(upstream.requests.length, 5);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_cache_requests_total', { model: GPT, status: 'semantic-hit' }), 1);
    assert.ok(sum(m, 'tahua_cache_tokens_saved_total', { model: GPT, status: 'semantic-hit' }) > 0);
  });

  it('a semantic neighbour past its ttl stands in when every upstream fails; a purge takes the vectors', async (t) => {
    const { gw, upstream, admin } = await startSemantic(t, { cache: { ttl: '1s', stale_if_error: '1h' }, admin: true });
    const first = await ask(gw, q('What is the capital of France?'));
    await eventually(async () => sum(await scrape(gw.url), 'tahua_cache_semantic_entries') === 1, { what: 'the vector kept' });
    for (let i = 0; i < 3; i += 1) upstream.next({ mode: 'error', status: 503 });
    const stale = await eventually(async () => {
      const r = await ask(gw, q("What's the capital of France?"));
      return r.headers['x-tahua-cache'] === 'stale' && r;
    }, { timeout: 5000, what: 'the neighbour to expire and stand in for the failed upstream' });
    assert.equal(stale.json.is_fallback, true);
    assert.equal(stale.json.choices[0].message.content, first.json.choices[0].message.content);
    const stats = await admin('GET', '/admin/v1/cache');
    assert.equal(stats.json.semantic.entries, 1);
    await admin('DELETE', '/admin/v1/cache?tenant=team-a');
    assert.equal((await admin('GET', '/admin/v1/cache')).json.semantic.entries, 0, "team-a's vectors went with its answers");
  });

  it('a route with semantic_cache: false skips the embedding; an embedder that fails is a miss, the request served', async (t) => {
    const { gw, upstream, embedder } = await startSemantic(t);
    await ask(gw, q('What is the capital of France?'));
    await eventually(async () => sum(await scrape(gw.url), 'tahua_cache_semantic_entries') === 1, { what: 'the vector kept' });
    const calls = embedder.calls.length;
    const exact = await ask(gw, q("What's the capital of France?"), { headers: { 'x-exact': 'yes' } });
    assert.equal(exact.headers['x-tahua-cache'], 'miss');
    assert.equal(embedder.calls.length, calls, 'no embedding asked');
    embedder.fail(true);
    const down = await ask(gw, q('How do I bake bread?'));
    assert.equal(down.status, 200);
    assert.equal(down.headers['x-tahua-cache'], 'miss');
    assert.equal(upstream.requests.length, 3);
    // The exact layer still answers an equal request.
    assert.equal((await ask(gw, q('What is the capital of France?'))).headers['x-tahua-cache'], 'hit');
  });
});
