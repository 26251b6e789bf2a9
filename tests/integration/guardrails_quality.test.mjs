// The guardrails' answer-quality check: the prompt's last user message and the answer are
// embedded by one of the gateway's own models (here an OpenAI-compatible embedder whose
// vectors are scripted by keyword), and an answer whose cosine similarity is below the
// threshold is flagged or, for a non-streamed answer, refused and retried once on the
// model's fallback. Streams are never delayed: their verdict reaches the usage record,
// or a second record when it comes more than 2 s after the request ended.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv from 'ajv';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { REPO_ROOT, gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { expectError, request } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { startAnthropicMock } from './lib/vendor_mocks.mjs';
import { toYaml } from './lib/yaml.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const QUESTION = 'What is the capital of France?';
const ON_TOPIC = ['Paris is ', 'the capital ', 'of France.'];
const OFF_TOPIC = ['Knead the dough, ', 'then bake ', 'the bread.'];

const schema = JSON.parse(readFileSync(join(REPO_ROOT, 'docs', 'usage-record.schema.json'), 'utf8'));
const ajv = new Ajv({ allErrors: true });
ajv.addFormat('date-time', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
const validate = ajv.compile(schema);

// Vectors by keyword: a France answer is close to the question (cosine ~0.71), a bread
// answer nearly orthogonal to it (~0.003).
function vectorOf(text) {
  return [/France/.test(text) ? 1 : 0, /Paris/.test(text) ? 1 : 0, /bread/.test(text) ? 1 : 0, 0.05];
}

async function startEmbedder() {
  const calls = [];
  const state = { delayMs: 0, failing: false };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      const parsed = JSON.parse(body);
      calls.push(parsed);
      if (state.delayMs) await new Promise((resolve) => setTimeout(resolve, state.delayMs));
      if (state.failing) {
        res.writeHead(500, { 'content-type': 'application/json' });
        return res.end('{"error":{"message":"down","type":"server_error"}}');
      }
      const inputs = Array.isArray(parsed.input) ? parsed.input : [parsed.input];
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        object: 'list',
        data: inputs.map((text, index) => ({ object: 'embedding', index, embedding: vectorOf(text) })),
        model: parsed.model,
        usage: { prompt_tokens: 9, total_tokens: 9 },
      }));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}/v1`, calls, state, close: () => new Promise((r) => server.close(r)) };
}

let gw, upstream, anthropic, embedder, usageFile;
before(async () => {
  upstream = await startMockUpstream();
  anthropic = await startAnthropicMock();
  embedder = await startEmbedder();
  const dir = makeTempDir('tahua-quality-');
  usageFile = join(dir, 'usage.jsonl');
  const config = gatewayConfig({
    providers: [
      openaiProvider('up', upstream.baseUrl()),
      openaiProvider('emb', embedder.url),
      { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-test', timeouts: TIMEOUTS },
    ],
    models: [
      { name: 'gpt-flag', provider: 'up', pricing: { input: 1, output: 2 } },
      { name: 'gpt-strict', provider: 'up', fallbacks: ['claude-strict'], pricing: { input: 1, output: 2 } },
      { name: 'claude-strict', provider: 'anth', upstream_model: 'claude-upstream', pricing: { input: 3, output: 4 } },
      { name: 'gpt-alone', provider: 'up' },
      { name: 'gpt-twice', provider: 'up', fallbacks: ['gpt-backup'] },
      { name: 'gpt-backup', provider: 'up' },
      { name: 'gpt-unsampled', provider: 'up' },
      { name: 'embedder', provider: 'emb', upstream_model: 'text-embedding-3-small' },
    ],
  });
  config.guardrails = {
    policies: [
      { name: 'answers', match: { model: ['gpt-flag'] }, rules: [{ name: 'on-topic', quality: { embedding_model: 'embedder', threshold: 0.35, timeout: '5s' }, action: 'flag' }] },
      { name: 'strict', match: { model: ['gpt-strict', 'gpt-alone', 'gpt-twice'] }, rules: [{ name: 'on-topic', quality: { embedding_model: 'embedder' }, action: 'block' }] },
      { name: 'backup-only', match: { model: ['gpt-backup'] }, rules: [{ name: 'dough', literals: ['dough'], action: 'redact', mask: '[X]', inspect: ['output'] }] },
      { name: 'rare', match: { model: ['gpt-unsampled'] }, rules: [{ name: 'on-topic', quality: { embedding_model: 'embedder', sample: 0 }, action: 'block' }] },
    ],
  };
  config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ name: 'file', type: 'file', path: usageFile }] };
  gw = await startTahua({ config });
});
after(async () => {
  gw?.kill();
  await upstream?.close();
  await anthropic?.close?.();
  await embedder?.close();
});

const records = () => (existsSync(usageFile) ? readFileSync(usageFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
async function recordsOf(requestId, count = 1) {
  let found = [];
  await eventually(() => (found = records().filter((r) => r.request_id === requestId)).length >= count, { what: `${count} record(s) of ${requestId}` });
  for (const r of found) assert.ok(validate(r), `${JSON.stringify(r)}: ${ajv.errorsText(validate.errors)}`);
  return found;
}
const chat = (model, extra = {}) => ({ model, messages: [{ role: 'user', content: QUESTION }], ...extra });

describe('answer quality: flag', () => {
  it('a non-streamed answer waits for its verdict: x-tahua-quality, the guardrails header, a metric, the usage record', async () => {
    upstream.next({ pieces: ON_TOPIC });
    const good = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-flag') });
    assert.equal(good.status, 200, good.text);
    assert.match(good.headers['x-tahua-quality'], /^ok; similarity=0\.7\d{3}$/);
    assert.equal(good.headers['x-tahua-guardrails'], undefined);
    const call = embedder.calls.at(-1);
    assert.deepEqual(call, { model: 'text-embedding-3-small', encoding_format: 'base64', input: [QUESTION, ON_TOPIC.join('')] },
      'the prompt and the answer, in one call (float32s asked for in base64; this embedder answers numbers, read as well)');

    upstream.next({ pieces: OFF_TOPIC });
    const bad = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-flag') });
    assert.equal(bad.status, 200, bad.text);
    assert.equal(bad.json.choices[0].message.content, OFF_TOPIC.join(''), 'flagged, not changed');
    assert.match(bad.headers['x-tahua-quality'], /^low; similarity=0\.00\d{2}$/);
    assert.equal(bad.headers['x-tahua-guardrails'], 'answers/on-topic:flag');

    const [rGood] = await recordsOf(good.headers['x-request-id']);
    assert.equal(rGood.quality, 'ok');
    assert.ok(rGood.quality_similarity > 0.7 && rGood.quality_similarity < 0.72, String(rGood.quality_similarity));
    const [rBad] = await recordsOf(bad.headers['x-request-id']);
    assert.equal(rBad.quality, 'low');
    assert.ok(rBad.quality_similarity < 0.01);
    assert.equal(rBad.guardrails, 'answers/on-topic:flag');

    const m = await scrape(gw.url);
    assert.ok(sum(m, 'tahua_guardrail_quality_checks_total', { policy: 'answers', rule: 'on-topic', verdict: 'ok' }) >= 1);
    assert.ok(sum(m, 'tahua_guardrail_quality_checks_total', { policy: 'answers', rule: 'on-topic', verdict: 'low' }) >= 1);
    assert.ok(sum(m, 'tahua_guardrail_actions_total', { policy: 'answers', rule: 'on-topic', action: 'flag', stage: 'output' }) >= 1);
  });

  it('a stream is not held back; its verdict reaches the usage record (OpenAI and Anthropic shapes)', async () => {
    upstream.next({ pieces: OFF_TOPIC });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data: stream, response } = await openai.chat.completions.create(chat('gpt-flag', { stream: true })).withResponse();
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, OFF_TOPIC.join(''));
    const [r] = await recordsOf(response.headers.get('x-request-id'));
    assert.equal(r.quality, 'low');
    assert.equal(r.stream, true);
    assert.equal(embedder.calls.at(-1).input[1], OFF_TOPIC.join(''), 'the text the client got');

    // Anthropic inbound, translated to the OpenAI-type upstream and back.
    upstream.next({ pieces: ON_TOPIC });
    const claude = new Anthropic({ baseURL: gw.url, apiKey: 'unused', maxRetries: 0 });
    const { data: events, response: res2 } = await claude.messages
      .create({ model: 'gpt-flag', max_tokens: 50, stream: true, messages: [{ role: 'user', content: QUESTION }] })
      .withResponse();
    let said = '';
    for await (const ev of events) if (ev.type === 'content_block_delta') said += ev.delta.text;
    assert.equal(said, ON_TOPIC.join(''));
    const [r2] = await recordsOf(res2.headers.get('x-request-id'));
    assert.equal(r2.quality, 'ok');
  });

  it('a verdict later than 2 s: the record goes out "pending", and a second record supersedes it', async () => {
    embedder.state.delayMs = 2600;
    try {
      upstream.next({ pieces: OFF_TOPIC });
      const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-flag', { stream: true }) });
      assert.equal(res.status, 200);
      assert.match(res.text, /data: \[DONE\]/);
      const id = res.headers['x-request-id'];
      const [first, second] = await recordsOf(id, 2);
      assert.equal(first.quality, 'pending');
      assert.equal(first.quality_similarity, null);
      assert.equal(first.supersedes, undefined);
      assert.equal(second.quality, 'low');
      assert.equal(second.supersedes, first.record_id);
      assert.notEqual(second.record_id, first.record_id);
      assert.equal(second.total_tokens, first.total_tokens, 'the same call, billed once when the later record replaces the first');
    } finally {
      embedder.state.delayMs = 0;
    }
  });

  it('no embeddings: the answer passes, unchecked (metric and record)', async () => {
    embedder.state.failing = true;
    try {
      upstream.next({ pieces: OFF_TOPIC });
      const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-strict') });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['x-tahua-quality'], 'unchecked');
      const [r] = await recordsOf(res.headers['x-request-id']);
      assert.equal(r.quality, 'unchecked');
      assert.equal(r.quality_similarity, null);
      const m = await scrape(gw.url);
      assert.ok(sum(m, 'tahua_guardrail_quality_checks_total', { policy: 'strict', rule: 'on-topic', verdict: 'unchecked' }) >= 1);
    } finally {
      embedder.state.failing = false;
    }
  });

  it('sample: 0 checks nothing', async () => {
    const calls = embedder.calls.length;
    upstream.next({ pieces: OFF_TOPIC });
    const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-unsampled') });
    assert.equal(res.status, 200);
    assert.equal(res.headers['x-tahua-quality'], undefined);
    assert.equal(embedder.calls.length, calls);
  });
});

describe('answer quality: block', () => {
  it('an off-topic answer is refused and the fallback model answers; both calls have their usage record', async () => {
    upstream.next({ pieces: OFF_TOPIC });
    const before = anthropic.requests.length;
    const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-strict') });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-tahua-model'], 'claude-strict');
    assert.match(res.json.choices[0].message.content, /France/, "the fallback's answer (it echoes the question)");
    assert.match(res.headers['x-tahua-quality'], /^ok; /);
    assert.equal(anthropic.requests.length, before + 1);
    const [refused, answered] = (await recordsOf(res.headers['x-request-id'], 2)).sort((a, b) => a.end_ts.localeCompare(b.end_ts) || (a.model === 'gpt-strict' ? -1 : 1));
    assert.equal(refused.model, 'gpt-strict');
    assert.equal(refused.end_reason, 'low_quality');
    assert.equal(refused.error, 'response_quality_low');
    assert.equal(refused.quality, 'low');
    assert.ok(refused.total_tokens > 0, 'the refused call is billed');
    assert.ok(refused.cost_usd > 0);
    assert.equal(answered.model, 'claude-strict');
    assert.equal(answered.status, 200);
    assert.equal(answered.quality, 'ok');
    assert.equal(answered.fallback, 'model');
    assert.equal(answered.attempts, 2);
    assert.ok(answered.total_tokens > 0);
    assert.notEqual(refused.record_id, answered.record_id);
  });

  it('no better answer: 502 response_quality_low in both API shapes, and the SDKs are told not to retry', async () => {
    // The OpenAI SDK retries 5xx by default: x-should-retry: false stops it (one upstream call).
    upstream.next({ pieces: OFF_TOPIC });
    const calls = upstream.requests.length;
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused' });
    await assert.rejects(openai.chat.completions.create(chat('gpt-alone')), (err) => {
      assert.equal(err.status, 502);
      assert.equal(err.code, 'response_quality_low');
      assert.match(err.message, /strict\/on-topic/);
      assert.equal(err.headers.get('x-should-retry'), 'false');
      return true;
    });
    assert.equal(upstream.requests.length, calls + 1);

    upstream.next({ pieces: OFF_TOPIC });
    const res = await request(gw.url, '/v1/messages', {
      method: 'POST',
      json: { model: 'gpt-alone', max_tokens: 50, messages: [{ role: 'user', content: QUESTION }] },
    });
    assert.equal(res.status, 502);
    assert.equal(res.json.type, 'error');
    assert.equal(res.json.error.type, 'api_error');
    assert.match(res.json.error.message, /similarity 0\.00\d+, below 0\.35/);
    assert.equal(res.headers['x-tahua-quality'], 'low; similarity=0.0025');
    const [r] = await recordsOf(res.headers['x-request-id']);
    assert.equal(r.error, 'response_quality_low');
    assert.equal(r.status, 502);
    assert.ok(r.total_tokens > 0, 'the refused answer was produced: billed');
  });

  it('a fallback answer that is off-topic too is refused: the retry happens once', async () => {
    upstream.next({ pieces: OFF_TOPIC });
    upstream.next({ pieces: OFF_TOPIC });
    upstream.next({ pieces: ON_TOPIC }); // never asked for: one retry only
    const calls = upstream.requests.length;
    const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-twice') });
    expectError(res, 502, 'response_quality_low');
    assert.equal(res.headers['x-should-retry'], 'false');
    assert.deepEqual(upstream.requests.slice(calls).map((r) => r.json.model), ['gpt-twice', 'gpt-backup']);
    const recs = await recordsOf(res.headers['x-request-id'], 2);
    assert.deepEqual(recs.map((r) => [r.model, r.error, r.quality]).sort(), [
      ['gpt-backup', 'response_quality_low', 'low'],
      ['gpt-twice', 'response_quality_low', 'low'],
    ]);
    upstream.queue.length = 0; // the unused script
  });
});

describe("answer quality: the guide's example (docs/guardrails.md)", () => {
  it('loads and does what it says: checked against the embedding model, refused answers retried once on the fallback', async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'guardrails.md'), 'utf8');
    assert.ok(guide.includes('**Answer quality.**'), 'the guide has answer quality');
    const section = guide.slice(guide.indexOf('**Answer quality.**'));
    const block = /```yaml\n([\s\S]*?)```/.exec(section)[1];
    assert.match(block, /quality: \{embedding_model: text-embedding-3-small, threshold: 0\.35/);
    const up = await startMockUpstream({ t });
    const anth = await startAnthropicMock({ t });
    const base = gatewayConfig({
      providers: [
        openaiProvider('openai', up.baseUrl()),
        { name: 'anthropic', type: 'anthropic', base_url: anth.baseUrl(), api_key: 'sk-ant-test', timeouts: TIMEOUTS },
      ],
      models: [],
    });
    delete base.models;
    const start = async (yaml) => {
      const file = join(makeTempDir('tahua-quality-readme-'), 'gateway.yaml');
      writeFileSync(file, `${toYaml(base)}\n${yaml}`);
      return startTahua({ t, args: ['--config', file] });
    };
    // The mock's embeddings of any two texts are close (cosine 0.99): on topic.
    const gw1 = await start(block);
    const ok = await request(gw1.url, '/v1/chat/completions', { method: 'POST', json: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: QUESTION }] } });
    assert.equal(ok.status, 200, ok.text);
    assert.match(ok.headers['x-tahua-quality'], /^ok; similarity=0\.99\d\d$/);
    const emb = up.requests.find((r) => r.path.endsWith('/embeddings'));
    assert.deepEqual(emb.json, { model: 'text-embedding-3-small', encoding_format: 'base64', input: [QUESTION, 'Hello from the mock upstream.'] });
    gw1.kill();
    // Over a threshold nothing meets, both answers are refused: the fallback is asked once.
    const gw2 = await start(block.replace('threshold: 0.35', 'threshold: 0.9999'));
    const before = anth.requests.length;
    const refused = await request(gw2.url, '/v1/chat/completions', { method: 'POST', json: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: QUESTION }] } });
    expectError(refused, 502, 'response_quality_low');
    assert.equal(anth.requests.length, before + 1);
  });
});

describe('guardrails on a fallback model', () => {
  it("the fallback model's own policies check its answer", async () => {
    upstream.next({ mode: 'error', status: 503 });
    upstream.next({ pieces: ON_TOPIC.concat([' Knead the dough.']) });
    const res = await request(gw.url, '/v1/chat/completions', { method: 'POST', json: chat('gpt-twice') });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-tahua-model'], 'gpt-backup');
    assert.equal(res.json.choices[0].message.content, 'Paris is the capital of France. Knead the [X].');
    assert.match(res.headers['x-tahua-guardrails'], /backup-only\/dough:redact/);
  });
});
