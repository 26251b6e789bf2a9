// Stored responses: the Responses API's state for the answers tahua translates. A
// conversation continued with previous_response_id or item_reference (what the Vercel AI
// SDK sends by default) works for an Anthropic-type and an OpenAI-type upstream, through
// the official SDKs; GET / DELETE / input_items answer as OpenAI's do; one tenant never
// sees another's responses; store:false keeps nothing; the byte bound evicts the oldest;
// and through Redis a second replica continues a conversation the first one started,
// after the first one drained.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, gatewayConfig, startTahua } from './lib/tahua.mjs';
import { request } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { startRedis } from './lib/redis.mjs';
import { startRespRelay } from './lib/resp_relay.mjs';
import { eventually } from './lib/util.mjs';
import { RESPONSES_WEATHER_TOOL, TOOL_ARGS, VENDOR_NAMES, replyText, startAnthropicMock, startOpenAIChatMock } from './lib/vendor_mocks.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const KEY_A = 'tk-team-a-0123456789abcdef';
const KEY_B = 'tk-team-b-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const bearer = (key) => ({ authorization: `Bearer ${key}` });
const CLAUDE = 'claude-via-responses';
const GPT = 'gpt-responses';

const WEATHER_TOOL = RESPONSES_WEATHER_TOOL;

async function start(t, { responses, store, workers } = {}) {
  const anthropic = await startAnthropicMock({ t });
  const openai = await startOpenAIChatMock({ t });
  const config = gatewayConfig({
    providers: [
      { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-test', timeouts: TIMEOUTS },
      // Serves /v1/responses itself (listed): passed through, its state its own.
      { name: 'oai', type: 'openai', base_url: openai.baseUrl(), api_key: 'sk-test', timeouts: TIMEOUTS, apis: ['chat', 'responses'] },
    ],
    models: [
      { name: CLAUDE, provider: 'anth', upstream_model: 'claude-upstream' },
      { name: GPT, provider: 'oai', upstream_model: 'gpt-upstream' },
    ],
    server: workers ? { workers } : {},
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b' }];
  config.keys = [
    { name: 'a-main', tenant: 'team-a', sha256: sha256(KEY_A) },
    { name: 'b-main', tenant: 'team-b', sha256: sha256(KEY_B) },
  ];
  if (responses) config.responses = responses;
  if (store) config.store = store;
  const gw = await startTahua({ t, config });
  return { gw, anthropic, openai, config };
}

const sdk = (gw, key = KEY_A) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0, timeout: 10_000 });

/** The Anthropic request's messages as [role, text] pairs (text blocks joined; tool blocks named). */
function turns(rec) {
  return rec.body.messages.map((m) => {
    if (typeof m.content === 'string') return [m.role, m.content];
    return [m.role, m.content.map((b) => (b.type === 'text' ? b.text : b.type)).join('|')];
  });
}

describe('stored responses: previous_response_id and item_reference for a translated model', () => {
  it('a three-turn conversation through the openai SDK reaches Anthropic whole, streamed or not', async (t) => {
    const { gw, anthropic } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'My name is Ada', instructions: 'Be brief.' });
    assert.match(r1.id, /^resp_[A-Za-z0-9]{32}$/);
    assert.equal(r1.store, true);
    const reply1 = replyText(VENDOR_NAMES.anthropic, 'My name is Ada');
    assert.equal(r1.output_text, reply1);

    // Turn 2, streamed: the upstream gets turn 1 (without its instructions, as OpenAI does) and turn 2.
    const stream = await client.responses.create({ model: CLAUDE, input: 'What is my name?', previous_response_id: r1.id, stream: true });
    let completed;
    for await (const ev of stream) if (ev.type === 'response.completed') completed = ev.response;
    assert.ok(completed, 'the stream completed');
    assert.equal(completed.previous_response_id, r1.id, 'the answer names the response it continues');
    const reply2 = replyText(VENDOR_NAMES.anthropic, 'What is my name?');
    assert.equal(completed.output[0].content[0].text, reply2);
    assert.deepEqual(turns(anthropic.requests.at(-1)), [['user', 'My name is Ada'], ['assistant', reply1], ['user', 'What is my name?']]);
    assert.equal(anthropic.requests.at(-1).body.system, undefined, 'instructions are not carried over');

    // Turn 3 from the streamed turn 2: the whole conversation, in order.
    const r3 = await client.responses.create({ model: CLAUDE, input: [{ role: 'user', content: 'Thanks' }], previous_response_id: completed.id });
    assert.equal(r3.previous_response_id, completed.id);
    assert.equal(r3.output_text, replyText(VENDOR_NAMES.anthropic, 'Thanks'));
    assert.deepEqual(turns(anthropic.requests.at(-1)), [
      ['user', 'My name is Ada'], ['assistant', reply1], ['user', 'What is my name?'], ['assistant', reply2], ['user', 'Thanks'],
    ]);

    // GET answers the stored object as the client got it, with its previous_response_id.
    const got = await client.responses.retrieve(r3.id);
    assert.equal(got.id, r3.id);
    assert.deepEqual(got.output, r3.output);
    assert.equal(got.previous_response_id, completed.id);
    assert.deepEqual(got.usage, r3.usage);
    // input_items: this request's own input, with ids.
    const items = await client.responses.inputItems.list(r3.id);
    assert.equal(items.data.length, 1);
    assert.equal(items.data[0].type, 'message');
    assert.equal(items.data[0].role, 'user');
    assert.deepEqual(items.data[0].content, [{ type: 'input_text', text: 'Thanks' }]);
    assert.match(items.data[0].id, /^msg_/);

    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_stored_responses_total', { op: 'store', result: 'ok' }), 3);
    assert.equal(sum(m, 'tahua_stored_responses_total', { op: 'expand', result: 'ok' }), 2);
  });

  it('a tool loop: the function_call comes back as an item_reference and reaches Anthropic as tool_use + tool_result', async (t) => {
    const { gw, anthropic } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
    const call = r1.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r1.output));
    assert.deepEqual(JSON.parse(call.arguments), TOOL_ARGS);
    // The echo reflects the request's tools and tool_choice.
    assert.deepEqual(r1.tools, [WEATHER_TOOL]);
    assert.equal(r1.tool_choice, 'auto');
    const r2 = await client.responses.create({
      model: CLAUDE,
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'item_reference', id: call.id },
        { type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' },
      ],
    });
    assert.equal(r2.output_text, replyText(VENDOR_NAMES.anthropic, 'Weather in Paris?'));
    const sent = anthropic.requests.at(-1).body.messages;
    assert.equal(sent.length, 3);
    const use = sent[1].content.find((b) => b.type === 'tool_use');
    assert.equal(use.id, call.call_id);
    assert.deepEqual(use.input, TOOL_ARGS);
    const result = sent[2].content.find((b) => b.type === 'tool_result');
    assert.equal(result.tool_use_id, call.call_id);
  });

  it('the Vercel AI SDK (ai 6, store on by default): a tool loop and a second turn, generateText and streamText', async (t) => {
    const { gw, anthropic } = await start(t);
    const provider = createOpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY_A });
    const weather = tool({
      description: 'Current weather in a city',
      inputSchema: z.object({ location: z.string(), unit: z.enum(['celsius', 'fahrenheit']) }),
      execute: async ({ location }) => ({ location, temperature: 21 }),
    });
    const first = await generateText({
      model: provider.responses(CLAUDE),
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      prompt: 'Weather in Paris?',
    });
    assert.equal(first.steps.length, 2, 'a tool call, then the answer');
    assert.equal(first.text, replyText(VENDOR_NAMES.anthropic, 'Weather in Paris?'));
    // ai 6 sends a function call back whole (by reference only for provider-defined tools).
    const step2 = anthropic.requests.at(-1).body.messages;
    assert.ok(step2.some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === 'tool_use')), JSON.stringify(step2));

    // The second turn of the conversation: the earlier assistant message goes as an
    // item_reference: before stored responses, this was the 400 that broke every second
    // turn. (No tools this turn: the mock would call one again.)
    const second = streamText({
      model: provider.responses(CLAUDE),
      onError: ({ error }) => { throw error; },
      messages: [{ role: 'user', content: 'Weather in Paris?' }, ...first.response.messages, { role: 'user', content: 'And tomorrow?' }],
    });
    let text = '';
    for await (const piece of second.textStream) text += piece;
    assert.equal(text, replyText(VENDOR_NAMES.anthropic, 'And tomorrow?'));
    const sent = turns(anthropic.requests.at(-1));
    assert.deepEqual(sent.map(([role]) => role), ['user', 'assistant', 'user', 'assistant', 'user']);
    assert.equal(sent[3][1], replyText(VENDOR_NAMES.anthropic, 'Weather in Paris?'));
    assert.equal(sum(await scrape(gw.url), 'tahua_stored_responses_total', { op: 'expand', result: 'ok' }), 1);
  });
});

describe('stored responses: an OpenAI-type upstream', () => {
  it('ids tahua issued are expanded before an OpenAI model; OpenAI\'s own ids pass through untouched', async (t) => {
    const { gw, openai } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'My name is Ada' });
    const r2 = await client.responses.create({ model: GPT, input: 'What is my name?', previous_response_id: r1.id });
    assert.match(r2.id, /^resp_mock/, 'OpenAI answered (and keeps this one itself)');
    const sent = openai.requests.at(-1).body;
    assert.equal(sent.previous_response_id, undefined);
    assert.deepEqual(sent.input.map((i) => [i.role, i.content[0]?.text ?? i.content]), [
      ['user', 'My name is Ada'], ['assistant', replyText(VENDOR_NAMES.anthropic, 'My name is Ada')], ['user', 'What is my name?'],
    ]);
    assert.ok(sent.input.every((i) => i.id === undefined), 'no gateway ids are sent to OpenAI');
    // An OpenAI id is OpenAI's: passed through as sent, and not served by tahua.
    await client.responses.create({ model: GPT, input: 'Again', previous_response_id: r2.id });
    assert.equal(openai.requests.at(-1).body.previous_response_id, r2.id);
    const get = await request(gw.url, `/v1/responses/${r2.id}`, { headers: bearer(KEY_A) });
    assert.equal(get.status, 404);
    // ... and a translated model says clearly why it cannot continue it.
    await assert.rejects(client.responses.create({ model: CLAUDE, input: 'x', previous_response_id: r2.id }), (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /was not stored by this gateway/);
      return true;
    });
  });
});

describe('stored responses: a tool loop moving to an OpenAI-type upstream', () => {
  it('a function call from Claude, its output sent with previous_response_id to GPT: OpenAI gets the call and the output', async (t) => {
    const { gw, openai } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
    const call = r1.output.find((o) => o.type === 'function_call');
    assert.ok(call);
    await client.responses.create({
      model: GPT,
      tools: [WEATHER_TOOL],
      previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
    });
    const sent = openai.requests.at(-1).body;
    assert.equal(sent.previous_response_id, undefined);
    assert.deepEqual(sent.input.map((i) => i.type ?? 'message'), ['message', 'function_call', 'function_call_output']);
    assert.equal(sent.input[1].call_id, call.call_id);
    assert.equal(sent.input[1].name, 'get_weather');
    assert.equal(sent.input[1].id, undefined, "no gateway id goes to OpenAI");
    assert.equal(sent.input[2].call_id, call.call_id);
  });
});

describe('stored responses: GET, DELETE, scope, store:false and bounds', () => {
  it('DELETE answers as OpenAI does; the response is gone for GET and for previous_response_id', async (t) => {
    const { gw } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'Hello' });
    const del = await client.responses.delete(r1.id).catch((e) => e);
    assert.ok(!(del instanceof Error), String(del));
    const raw = await request(gw.url, `/v1/responses/${r1.id}`, { method: 'DELETE', headers: bearer(KEY_A) });
    assert.equal(raw.status, 404, 'already deleted');
    assert.equal(raw.json.error.code, 'response_not_found');
    const get = await request(gw.url, `/v1/responses/${r1.id}`, { headers: bearer(KEY_A) });
    assert.equal(get.status, 404);
    assert.equal(get.json.error.message, `Response with id '${r1.id}' not found.`);
    await assert.rejects(client.responses.create({ model: CLAUDE, input: 'x', previous_response_id: r1.id }), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.code, 'previous_response_not_found');
      return true;
    });
    const post = await request(gw.url, `/v1/responses/${r1.id}`, { method: 'POST', headers: bearer(KEY_A), json: {} });
    assert.equal(post.status, 405);
    assert.equal(post.headers.allow, 'GET, DELETE');
  });

  it('one tenant can never read, continue, list or delete another\'s response', async (t) => {
    const { gw, anthropic } = await start(t);
    const a = sdk(gw, KEY_A);
    const b = sdk(gw, KEY_B);
    const r1 = await a.responses.create({ model: CLAUDE, input: 'A secret of team A' });
    const calls = anthropic.requests.length;
    for (const [method, path] of [['GET', `/v1/responses/${r1.id}`], ['GET', `/v1/responses/${r1.id}/input_items`], ['DELETE', `/v1/responses/${r1.id}`]]) {
      const r = await request(gw.url, path, { method, headers: bearer(KEY_B) });
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.ok(!r.text.includes('secret'), 'nothing of it is shown');
    }
    await assert.rejects(b.responses.create({ model: CLAUDE, input: 'x', previous_response_id: r1.id }), (err) => err.status === 400);
    await assert.rejects(b.responses.create({ model: CLAUDE, input: [{ type: 'item_reference', id: r1.output[0].id }] }),
      (err) => err.status === 400 && err.code === 'item_not_found');
    assert.equal(anthropic.requests.length, calls, 'nothing of it reached an upstream');
    // Still there for its owner (B's DELETE did nothing).
    assert.equal((await a.responses.retrieve(r1.id)).id, r1.id);
    // Without a key: 401 before anything is looked up.
    assert.equal((await request(gw.url, `/v1/responses/${r1.id}`)).status, 401);
  });

  it('store: false keeps nothing; responses.store: false keeps nothing for anyone', async (t) => {
    const { gw } = await start(t);
    const client = sdk(gw);
    const r1 = await client.responses.create({ model: CLAUDE, input: 'Hello', store: false });
    assert.equal(r1.store, false);
    assert.equal((await request(gw.url, `/v1/responses/${r1.id}`, { headers: bearer(KEY_A) })).status, 404);

    const off = await start(t, { responses: { store: false } });
    const r2 = await sdk(off.gw).responses.create({ model: CLAUDE, input: 'Hello' });
    assert.equal((await request(off.gw.url, `/v1/responses/${r2.id}`, { headers: bearer(KEY_A) })).status, 404);
  });

  it('over max_bytes_per_tenant the tenant\'s oldest responses go, never another tenant\'s', async (t) => {
    // Each stored response is about 1.3 KB: 4 KiB holds three.
    const { gw } = await start(t, { responses: { max_bytes_per_tenant: 4096 } });
    const a = sdk(gw, KEY_A);
    const b = sdk(gw, KEY_B);
    const fromB = await b.responses.create({ model: CLAUDE, input: 'B keeps this' });
    const ids = [];
    for (let i = 0; i < 6; i += 1) ids.push((await a.responses.create({ model: CLAUDE, input: `turn ${i}` })).id);
    const status = async (id, key) => (await request(gw.url, `/v1/responses/${id}`, { headers: bearer(key) })).status;
    assert.equal(await status(ids[0], KEY_A), 404, 'the oldest went');
    assert.equal(await status(ids[5], KEY_A), 200, 'the newest stays');
    assert.equal(await status(fromB.id, KEY_B), 200, 'another tenant\'s is untouched');
  });

  it("the guide's responses block is a valid config that keeps responses", async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'stored-responses.md'), 'utf8');
    assert.ok(guide.includes('\n## Using it\n'), 'docs/stored-responses.md has its guide');
    const block = /```yaml\n([\s\S]*?)```/.exec(guide.slice(guide.indexOf('\n## Using it\n')))[1];
    // The block's values, as YAML flow text: "  key: value   # comment" lines.
    const responses = {};
    for (const line of block.split('\n').slice(1)) {
      const m = /^\s+(\w+):\s*(\S+)/.exec(line);
      if (m) responses[m[1]] = /^\d+$/.test(m[2]) ? Number(m[2]) : m[2] === 'true' ? true : m[2] === 'false' ? false : m[2];
    }
    assert.deepEqual(Object.keys(responses), ['store', 'ttl', 'max_bytes_per_tenant', 'scope', 'max_turns']);
    const { gw } = await start(t, { responses });
    const r1 = await sdk(gw).responses.create({ model: CLAUDE, input: 'Hello' });
    assert.equal((await sdk(gw).responses.retrieve(r1.id)).id, r1.id);
  });

  it('a response expires after responses.ttl', async (t) => {
    const { gw } = await start(t, { responses: { ttl: '1s' } });
    const r1 = await sdk(gw).responses.create({ model: CLAUDE, input: 'Hello' });
    assert.equal((await request(gw.url, `/v1/responses/${r1.id}`, { headers: bearer(KEY_A) })).status, 200);
    await eventually(async () => (await request(gw.url, `/v1/responses/${r1.id}`, { headers: bearer(KEY_A) })).status === 404,
      { timeout: 5000, what: 'the response to expire' });
  });

  it('bad input_items parameters are a 400 naming the parameter', async (t) => {
    const { gw } = await start(t);
    const r1 = await sdk(gw).responses.create({ model: CLAUDE, input: 'Hello' });
    for (const [q, param] of [['limit=0', 'limit'], ['limit=abc', 'limit'], ['order=up', 'order'], ['after=zzz', 'after']]) {
      const r = await request(gw.url, `/v1/responses/${r1.id}/input_items?${q}`, { headers: bearer(KEY_A) });
      assert.equal(r.status, 400, q);
      assert.match(r.json.error.message, new RegExp(param), q);
    }
    const unknown = await request(gw.url, `/v1/responses/${r1.id}/cancelled`, { headers: bearer(KEY_A) });
    assert.equal(unknown.status, 404);
  });
});

describe('stored responses through Redis', () => {
  it('replica B continues the conversation replica A started, after A drained; Redis away is a clear 503', async (t) => {
    const redis = await startRedis({ t });
    const store = { type: 'redis', redis: { url: redis.url, command_timeout: '200ms', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } };
    const a = await start(t, { store });
    const b = await start(t, { store });
    const r1 = await sdk(a.gw).responses.create({ model: CLAUDE, input: 'My name is Ada' });
    assert.equal(await a.gw.stop('SIGTERM'), 0, 'A drained and exited');
    const r2 = await sdk(b.gw).responses.create({ model: CLAUDE, input: 'What is my name?', previous_response_id: r1.id });
    assert.equal(r2.output_text, replyText(VENDOR_NAMES.anthropic, 'What is my name?'));
    assert.deepEqual(turns(b.anthropic.requests.at(-1)).map(([role]) => role), ['user', 'assistant', 'user']);
    assert.equal((await sdk(b.gw).responses.retrieve(r1.id)).id, r1.id);
    // The byte bound is kept in Redis too (a sorted set per tenant).
    assert.equal(redis.cli('KEYS', 'tahua:vgroup:*').split('\n').filter(Boolean).length, 3, 'order, sizes, bytes of team-a');

    await redis.stop();
    const get = await request(b.gw.url, `/v1/responses/${r1.id}`, { headers: bearer(KEY_A) });
    assert.equal(get.status, 503);
    assert.equal(get.json.error.code, 'store_unavailable');
    assert.equal(get.headers['retry-after'], '1');
    const cont = await request(b.gw.url, '/v1/responses', { method: 'POST', headers: bearer(KEY_A), json: { model: CLAUDE, input: 'x', previous_response_id: r2.id } });
    assert.equal(cont.status, 503);
    assert.equal(cont.json.error.code, 'store_unavailable');
  });
});

describe('stored responses: a conversation continued at once on another replica', () => {
  it('the record is in Redis before the client has the answer (a slow write holds the end, plain and streamed); a failed write lets the answer complete, counted', async (t) => {
    const redis = await startRedis({ t });
    // Replica A reaches Redis through a relay that delays its record's write by a second
    // (well inside the store's command timeout); replica B reads Redis directly.
    const relay = await startRespRelay(redis.port, { t });
    const opts = { command_timeout: '5s', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' };
    const a = await start(t, { store: { type: 'redis', redis: { url: relay.url, ...opts } } });
    const b = await start(t, { store: { type: 'redis', redis: { url: redis.url, ...opts } } });
    const isRecordWrite = (args) => (args[0] === 'EVALSHA' || args[0] === 'EVAL') && (args[3] ?? '').startsWith('tahua:kv:{resp:');

    // A whole answer: its head and body wait for the write.
    relay.delayNext(isRecordWrite, 1000);
    const r1 = await sdk(a.gw).responses.create({ model: CLAUDE, input: 'My name is Ada' });
    const r2 = await sdk(b.gw).responses.create({ model: CLAUDE, input: 'What is my name?', previous_response_id: r1.id });
    assert.equal(r2.previous_response_id, r1.id);
    assert.equal(relay.delays, 1, "the record's write was the command delayed");
    assert.deepEqual(turns(b.anthropic.requests.at(-1)).map(([role]) => role), ['user', 'assistant', 'user']);

    // A stream read to its end: the piece with response.completed waits for the write.
    relay.delayNext(isRecordWrite, 1000);
    const stream = await sdk(a.gw).responses.create({ model: CLAUDE, input: 'My name is Bo', stream: true });
    let r3;
    for await (const ev of stream) if (ev.type === 'response.completed') r3 = ev.response;
    const r4 = await sdk(b.gw).responses.create({ model: CLAUDE, input: 'And my name?', previous_response_id: r3.id });
    assert.equal(r4.previous_response_id, r3.id);
    assert.equal(relay.delays, 2);
    assert.equal(sum(await scrape(a.gw.url), 'tahua_stored_responses_total', { op: 'store', result: 'ok' }), 2);
    // The write's script was loaded with the connection: no NOSCRIPT, no EVAL of its text.
    assert.doesNotMatch(redis.cli('INFO', 'commandstats'), /cmdstat_eval:/);

    // A write whose answer never comes (the connection is cut after Redis ran it): the
    // answer still completes, and the failure is counted.
    relay.cutAfter(isRecordWrite);
    const r5 = await sdk(a.gw).responses.create({ model: CLAUDE, input: 'cut' });
    assert.match(r5.id, /^resp_/);
    assert.equal(relay.cuts, 1);
    assert.equal(sum(await scrape(a.gw.url), 'tahua_stored_responses_total', { op: 'store', result: 'unavailable' }), 1);
  });
});
